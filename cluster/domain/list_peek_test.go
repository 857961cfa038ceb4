package domain

import (
	"encoding/json"
	"testing"
)

// peekRegion reads what a full decode reads, for every shape a region
// record takes: fields omitted, escapes in values, keys' names inside
// values, and bytes that are no record at all.
func TestPeekRegionAgreesWithDecoding(t *testing.T) {
	records := []Region{
		{},
		{Table: "default:t", State: RegionClosed},
		{Table: "default:t", State: RegionOpen, Server: "rs1", StartCode: 1764000000123},
		{Table: "ns:t", State: RegionOpening, Server: "rs1", StartCode: 18446744073709551615, ProcID: 42},
		{Table: "ns:t", State: RegionClosing, Server: `odd"server":"x`, StartCode: 7},
		{Table: "ns:t", State: RegionOpen, Server: `back\slash`, StartCode: 7},
		{Table: "ns:t", State: RegionOpen, Server: "<&>", StartCode: 7},
		{Table: `"state":"OPEN"`, State: RegionFailedOpen},
	}
	for _, rg := range records {
		b, err := json.Marshal(rg)
		if err != nil {
			t.Fatal(err)
		}
		p, err := peekRegion(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if want := (regionPeek{State: rg.State, Server: rg.Server, StartCode: rg.StartCode}); p != want {
			t.Errorf("%s: peeked %+v, want %+v", b, p, want)
		}
	}
	for _, bad := range []string{``, `{`, `{"state":1}`, `{"state":"OPEN","start_code":-1}`, `{"state":"OPEN","start_code":1e3}`, `{"state":"OPEN","server":5}`,
		`{"state":"OPEN","start_code":99999999999999999999}`} {
		if p, err := peekRegion([]byte(bad)); err == nil {
			t.Errorf("%q: peeked %+v, want the decoding error", bad, p)
		}
	}
}

// BenchmarkPeekRegion: what the filters and counts pay per record, the
// binary form against the JSON one older versions wrote.
func BenchmarkPeekRegion(b *testing.B) {
	rg := Region{Table: "default:t00", State: RegionOpen, Server: "x07", StartCode: 1764000000123, ProcID: 3}
	js, _ := json.Marshal(rg)
	bin := encodeRegion("default:t00,00001,3", rg)
	for _, c := range []struct {
		name string
		rec  []byte
	}{{"json", js}, {"binary", bin}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := peekRegion(c.rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
