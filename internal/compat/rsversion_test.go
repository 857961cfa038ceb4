package compat_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/version"
)

// server010 is 0.1.0's domain.Server, field for field as commit fa4612c
// has it: the only type 0.1.0 reads a server/<id> record into.
type server010 struct {
	Address   string `json:"address"`
	StartCode uint64 `json:"start_code"`
	State     string `json:"state"`
	Dropped   uint64 `json:"dropped_start_code,omitempty"`
}

// TestServerRecordVersionIgnoredBy010: the region server's version and
// max format, which the current leader adds to server/<id> at every
// cluster version, are skipped by 0.1.0. Every 0.1.0 reader of the record
// (decodeServer, getJSON, ListServers' scan, the metrics' state count) is
// a plain json.Unmarshal into server010, which drops names it does not
// know; the test decodes the release's own records, with the new fields
// added, the way those readers do.
func TestServerRecordVersionIgnoredBy010(t *testing.T) {
	eachRelease(t, func(t *testing.T, g *golden) {
		s := readDomain(t, g.version, openFSM(t, g).Scan)
		if len(s.servers) == 0 {
			t.Fatalf("%s: no server records to try", g.version)
		}
		for id, released := range s.servers {
			if released.Version != "" || released.MaxFormat != 0 {
				t.Errorf("%s: server %s read with a version (%q, %d) the release never wrote", g.version, id, released.Version, released.MaxFormat)
			}
			var want server010
			if err := json.Unmarshal(mustMarshal(t, released), &want); err != nil {
				t.Fatal(err)
			}
			current := released
			current.Version, current.MaxFormat = "0.2.0", version.Format2
			rec := mustMarshal(t, current)
			if !strings.Contains(string(rec), `"version":"0.2.0"`) || !strings.Contains(string(rec), `"max_format":2`) {
				t.Fatalf("the current record %s does not carry the version", rec)
			}
			var got server010
			if err := json.Unmarshal(rec, &got); err != nil {
				t.Fatalf("%s: 0.1.0's decoding of the current record %s: %v", g.version, rec, err)
			}
			if got != want {
				t.Errorf("%s: 0.1.0 reads the current record %s as %+v, its own as %+v", g.version, rec, got, want)
			}
			// 0.1.0's expiry writes back what it read (its State changed): the version is gone,
			// and the current code reads the incarnation as unreported.
			var back domain.Server
			if err := json.Unmarshal(mustMarshal(t, got), &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, released) {
				t.Errorf("%s: a record 0.1.0 wrote back reads as %+v, want %+v", g.version, back, released)
			}
		}
	})
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
