package domain

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestRegionRecordRoundTrip(t *testing.T) {
	const name = "ns:t,00003,17"
	for _, rg := range []Region{
		{Table: "ns:t", State: RegionOffline},
		{Table: "ns:t", State: RegionOpening, Server: "rs1", StartCode: 1<<40 + 7, ProcID: 99},
		{Table: "ns:t", State: RegionOpen, Server: "rs20", StartCode: 3},
		{Table: "ns:t", State: RegionFailedOpen, Server: "rs2", StartCode: 5, ProcID: 1},
		// A record whose table is not its name's prefix keeps its table.
		{Table: "other:x", State: RegionClosed},
	} {
		b := encodeRegion(name, rg)
		if b[0] == '{' {
			t.Fatalf("%+v encoded as JSON: %s", rg, b)
		}
		got, err := decodeRegion(name, b)
		if err != nil || got != rg {
			t.Errorf("%+v: decoded %+v, %v", rg, got, err)
		}
		if st := regionStateOf(b); st != rg.State {
			t.Errorf("%+v: state %q", rg, st)
		}
		if n := len(b); n >= len(mustJSON(rg))/2 {
			t.Errorf("%+v: %d bytes, JSON %d: not compact", rg, n, len(mustJSON(rg)))
		}
	}
}

// Records written by older versions are JSON, with the table stored.
func TestRegionRecordReadsJSON(t *testing.T) {
	old := []byte(`{"table":"ns:t","state":"OPENING","server":"rs1","start_code":12,"proc_id":4}`)
	kv := map[string][]byte{RegionKey("ns:t,00000,3"): old, RegionKey("ns:t,00001,3"): encodeRegion("ns:t,00001,3", Region{Table: "ns:t", State: RegionOpen, Server: "rs2", StartCode: 8})}
	r := mapReader(kv)
	want := Region{Table: "ns:t", State: RegionOpening, Server: "rs1", StartCode: 12, ProcID: 4}
	if got, ok, err := getRegion(r, "ns:t,00000,3"); err != nil || !ok || got != want {
		t.Fatalf("getRegion of a JSON record: %+v %v %v, want %+v", got, ok, err, want)
	}
	var states []string
	if err := scanRegions(r, func(_ string, rg Region) bool { states = append(states, rg.State+"@"+rg.Server); return true }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(states, []string{"OPENING@rs1", "OPEN@rs2"}) {
		t.Fatalf("scan read %v", states)
	}
	if st := regionStateOf(old); st != RegionOpening {
		t.Fatalf("state of a JSON record: %q", st)
	}
	var shown Region
	if err := json.Unmarshal(ReadableValue(RegionKey("ns:t,00001,3"), kv[RegionKey("ns:t,00001,3")]), &shown); err != nil || shown.Server != "rs2" || shown.StartCode != 8 {
		t.Fatalf("readable value: %+v %v", shown, err)
	}
}

func TestRegionRecordRefusesGarbage(t *testing.T) {
	good := encodeRegion("ns:t,00000,1", Region{Table: "x:y", State: RegionOpen, Server: "rs1", StartCode: 300, ProcID: 300})
	bad := [][]byte{nil, {}, {1}, {1, 3}, {9, 3, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0}, {1, 200, 0, 0, 0, 0}, []byte("{not json")}
	for i := range good[:len(good)-1] {
		bad = append(bad, good[:i])
	}
	for _, v := range bad {
		if rg, err := decodeRegion("ns:t,00000,1", v); err == nil {
			t.Errorf("%v decoded as %+v", v, rg)
		}
	}
}

// A table record of an older version lists its regions; a new one counts
// them, and the names are the creating procedure's.
func TestTableRecordRegionNames(t *testing.T) {
	var old Table
	if err := json.Unmarshal([]byte(`{"state":"ENABLED","regions":["ns:t,00000,5","ns:t,00001,5"],"proc_id":5}`), &old); err != nil {
		t.Fatal(err)
	}
	if got := old.regionNames("ns:t"); !slices.Equal(got, []string{"ns:t,00000,5", "ns:t,00001,5"}) || old.regionTotal() != 2 {
		t.Fatalf("old record: %v (%d)", got, old.regionTotal())
	}
	// Rewritten (a state change), it keeps its list.
	var again Table
	old.State = TableDisabled
	if err := json.Unmarshal(mustJSON(old), &again); err != nil || !slices.Equal(again.regionNames("ns:t"), old.Regions) {
		t.Fatalf("rewritten old record: %+v %v", again, err)
	}
	nt := Table{State: TableCreating, RegionCount: 3, ProcID: 9}
	b := mustJSON(nt)
	var back Table
	if err := json.Unmarshal(b, &back); err != nil || back.regionTotal() != 3 ||
		!slices.Equal(back.regionNames("ns:t"), []string{RegionName("ns:t", 0, 9), RegionName("ns:t", 1, 9), RegionName("ns:t", 2, 9)}) {
		t.Fatalf("new record %s: %+v %v", b, back, err)
	}
	if len(b) > 64 {
		t.Fatalf("new record is %d bytes: %s", len(b), b)
	}
}
