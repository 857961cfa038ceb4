// Run by internal/compat/release_tests.sh inside a release's source tree
// (package store at that commit), not in this one: it checks that the
// release's own WAL loads a segment directory this tree's merges wrote
// (testdata/merged-wal, from store's TestWriteMergedWALFixture: segment ids
// with gaps, merged files of REWRITE images carrying the deletes of images
// an older segment still holds, an id put again after its delete), as a
// node downgraded during a failed rolling upgrade would, and goes on
// writing to it.

package store

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestReleaseLoadsMergedWAL(t *testing.T) {
	src := filepath.Join("testdata", "merged-wal")
	var raw map[string]string
	b, err := os.ReadFile(filepath.Join(src, "want.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]string{}
	for k, v := range raw {
		id, err := strconv.ParseUint(k, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = v
	}
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(src, "segments", "pv2-*.log"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no segments in %s: %v", src, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultWALConfig(dir)
	cfg.NoSync = true
	cfg.SegmentSize = 2 << 10
	load := func(gen string) *WAL {
		w, err := OpenWAL(cfg)
		if err != nil {
			t.Fatalf("%s: open: %v", gen, err)
		}
		got := map[uint64]string{}
		info, err := w.Load(func(p Proc) error { got[p.ID] = string(p.Data); return nil })
		if err != nil {
			t.Fatalf("%s: load: %v", gen, err)
		}
		if len(info.Corruptions) != 0 {
			t.Errorf("%s: the release reports damage: %v", gen, info.Corruptions)
		}
		if !maps.Equal(got, want) {
			for id, v := range want {
				if got[id] != v {
					t.Errorf("%s: id %d is %q, want %q", gen, id, got[id], v)
				}
			}
			for id := range got {
				if _, ok := want[id]; !ok {
					t.Errorf("%s: deleted id %d is back", gen, id)
				}
			}
		}
		return w
	}
	w := load("merged by this tree")
	// The release writes on: its own cleanup over the merged segments.
	for i := range 400 {
		id := uint64(5000 + i%7)
		v := fmt.Sprintf("release-%d", i)
		if err := w.Append(Batch{Updates: []Proc{{ID: id, Data: []byte(v)}}}); err != nil {
			t.Fatal(err)
		}
		want[id] = v
	}
	for id := uint64(11); id <= 20; id++ {
		if err := w.Append(Batch{Deletes: []uint64{id}}); err != nil {
			t.Fatal(err)
		}
		delete(want, id)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := load("written on by the release").Close(); err != nil {
		t.Fatal(err)
	}
}
