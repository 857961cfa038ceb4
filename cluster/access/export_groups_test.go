package access

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TestExportGroupsOnceThroughOverflows: groups applied while the
// exporter's queue keeps overflowing (rereads from the state, pages
// cut inside groups) are each exported exactly once, in order.
func TestExportGroupsOnceThroughOverflows(t *testing.T) {
	for seed := int64(1); seed <= 6; seed++ {
		rng := rand.New(rand.NewSource(seed))
		dir := t.TempDir()
		kv := sortedKV{}
		e, err := NewExporter(Export{Path: filepath.Join(dir, "audit.jsonl")}, ExporterConfig{Node: "m1", Clock: clock.NewManual(time.Unix(1_000_000, 0)),
			Scan: kv, Stop: make(chan struct{}), Loops: &sync.WaitGroup{}, Log: hclog.NewNullLogger()})
		if err != nil {
			t.Fatal(err)
		}
		e.observed = true
		e.maxHeld = 300 + rng.Intn(3000)
		var want []string
		n := uint64(1)
		for step := 0; step < 300; step++ {
			var key string
			var v []byte
			if rng.Intn(3) == 0 {
				r := &adminpb.AuditRecord{Id: fmt.Sprintf("1-%d", n), Principal: "p", Method: "M", Code: "OK", Refused: rng.Intn(2) == 0}
				v, _ = proto.Marshal(r)
				key = AuditPrefix + AuditSuffix(1, n)
				if r.Refused {
					key = RefusedPrefix + AuditSuffix(1, n)
				}
				want = append(want, r.Id)
				n++
			} else {
				size := uint64(1 + rng.Intn(300))
				var recs [][]byte
				for i := uint64(0); i < size; i++ {
					b, _ := proto.Marshal(&adminpb.AuditRecord{Id: fmt.Sprintf("1-%d", n+i), Principal: "p", Method: "M", Code: "OK"})
					recs = append(recs, b)
					want = append(want, fmt.Sprintf("1-%d", n+i))
				}
				key = AuditPrefix + AuditGroupSuffix(1, n, n+size-1)
				v = MarshalGroup(recs, 1)
				n += size
			}
			kv[key] = v
			e.onPut(key, v)
			if rng.Intn(4) == 0 {
				if err := e.Export(); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i := 0; i < 1000; i++ {
			if err := e.Export(); err != nil {
				t.Fatal(err)
			}
			e.mu.Lock()
			idle := e.gap == "" && !e.rescan && len(e.held) == 0
			e.mu.Unlock()
			if idle {
				break
			}
		}
		_ = e.Close()
		f, err := os.Open(filepath.Join(dir, "audit.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l ExportLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			got = append(got, l.ID)
		}
		f.Close()
		if !slices.Equal(got, want) {
			seen := map[string]int{}
			for _, g := range got {
				seen[g]++
			}
			var dup, missing []string
			for _, w := range want {
				if seen[w] == 0 {
					missing = append(missing, w)
				} else if seen[w] > 1 {
					dup = append(dup, w)
				}
			}
			t.Fatalf("seed %d: %d lines for %d records; missing %s; twice %s", seed, len(got), len(want), strings.Join(missing[:min(10, len(missing))], ","), strings.Join(dup[:min(10, len(dup))], ","))
		}
	}
}
