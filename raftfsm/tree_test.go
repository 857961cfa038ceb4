package raftfsm

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/store"
)

func TestScanFrom(t *testing.T) {
	f := newTestFSM(t, "")
	var ms []Mutation
	for _, k := range []string{"a", "r/", "r/a", "r/a\x00", "r/ab", "r/b", "r/c", "r0", "s/a"} {
		ms = append(ms, Put(k, []byte("v"+k)))
	}
	checkResps(t, f.ApplyBatch([]*raft.Log{cmdLog(1, procBatch(t, Write{Mutations: ms}))}))
	scan := func(prefix, after string, limit int) string {
		var keys []string
		f.ScanFrom(prefix, after, func(k string, v []byte) bool {
			if string(v) != "v"+k {
				t.Errorf("value of %q = %q", k, v)
			}
			keys = append(keys, k)
			return len(keys) < limit
		})
		return fmt.Sprintf("%q", keys)
	}
	for _, tc := range []struct {
		prefix, after string
		limit         int
		want          string
	}{
		{"r/", "", 100, `["r/" "r/a" "r/a\x00" "r/ab" "r/b" "r/c"]`},
		{"r/", "a", 100, `["r/" "r/a" "r/a\x00" "r/ab" "r/b" "r/c"]`}, // after sorts before the prefix
		{"r/", "r/", 100, `["r/a" "r/a\x00" "r/ab" "r/b" "r/c"]`},
		{"r/", "r/a", 100, `["r/a\x00" "r/ab" "r/b" "r/c"]`},
		{"r/", "r/aa", 100, `["r/ab" "r/b" "r/c"]`}, // after need not exist
		{"r/", "r/a", 2, `["r/a\x00" "r/ab"]`},      // fn stops the walk
		{"r/", "r/c", 100, `[]`},
		{"r/", "s", 100, `[]`}, // after sorts past the prefix
		{"", "r0", 100, `["s/a"]`},
		{"zz", "", 100, `[]`},
	} {
		if got := scan(tc.prefix, tc.after, tc.limit); got != tc.want {
			t.Errorf("ScanFrom(%q, %q) = %s, want %s", tc.prefix, tc.after, got, tc.want)
		}
	}
	// Paging with ScanFrom visits what one Scan does.
	var all, paged []string
	f.Scan("r/", func(k string, _ []byte) bool { all = append(all, k); return true })
	for after := ""; ; {
		var page []string
		f.ScanFrom("r/", after, func(k string, _ []byte) bool { page = append(page, k); return len(page) < 2 })
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1]
	}
	if !slices.Equal(all, paged) {
		t.Errorf("paged %q, Scan %q", paged, all)
	}
}

// modelVersion is what a View at one index must show.
type modelVersion struct {
	view  View
	procs map[uint64]string
	kv    map[string]string
}

// Versions share the nodes they did not change: every view kept while
// thousands of later entries insert, update and delete (splitting and
// merging nodes) must still show exactly its own state, through every read
// method. Random keys and ids, checked against maps.
func TestViewsStayImmutable(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	f := newTestFSM(t, t.TempDir())
	procs, kv := map[uint64]string{}, map[string]string{}
	var versions []modelVersion
	idx := uint64(0)
	for round := range 60 {
		var logs []*raft.Log
		for range 1 + rng.IntN(8) {
			var w Write
			for range rng.IntN(60) {
				id := uint64(1 + rng.IntN(3000))
				k := fmt.Sprintf("k/%04d", rng.IntN(3000))
				v := fmt.Sprintf("%d.%d", round, rng.IntN(1000))
				// Early rounds grow the state; later ones shrink it, so
				// nodes merge as well as split.
				if rng.IntN(60) < 40-round/2 {
					w.Updates = append(w.Updates, store.Proc{ID: id, Data: []byte(v)})
					w.Mutations = append(w.Mutations, Put(k, []byte(v)))
					kv[k] = v
				} else {
					w.Deletes = append(w.Deletes, id)
					w.Mutations = append(w.Mutations, Del(k))
					delete(kv, k)
				}
			}
			// A write's procedure puts apply before its deletes.
			for _, p := range w.Updates {
				procs[p.ID] = string(p.Data)
			}
			for _, id := range w.Deletes {
				delete(procs, id)
			}
			idx++
			logs = append(logs, cmdLog(idx, procBatch(t, w)))
		}
		checkResps(t, f.ApplyBatch(logs))
		versions = append(versions, modelVersion{view: f.View(), procs: maps.Clone(procs), kv: maps.Clone(kv)})
	}
	for i, mv := range versions {
		checkView(t, fmt.Sprintf("version %d", i), mv, rng)
	}
	f.Close()
	checkView(t, "reloaded", modelVersion{view: newTestFSM(t, f.cfg.Dir).View(), procs: procs, kv: kv}, rng)
}

func checkView(t *testing.T, name string, mv modelVersion, rng *rand.Rand) {
	t.Helper()
	v := mv.view
	ids := slices.Sorted(maps.Keys(mv.procs))
	keys := slices.Sorted(maps.Keys(mv.kv))
	if v.NumProcs() != len(ids) || v.NumKeys() != len(keys) {
		t.Fatalf("%s: %d procs %d keys, want %d %d", name, v.NumProcs(), v.NumKeys(), len(ids), len(keys))
	}
	var gotIDs []uint64
	_ = v.Procs(func(p store.Proc) error {
		if string(p.Data) != mv.procs[p.ID] {
			t.Fatalf("%s: proc %d = %q, want %q", name, p.ID, p.Data, mv.procs[p.ID])
		}
		gotIDs = append(gotIDs, p.ID)
		return nil
	})
	if !slices.Equal(gotIDs, ids) {
		t.Fatalf("%s: Procs walked %d ids, want %d", name, len(gotIDs), len(ids))
	}
	var gotKeys []string
	v.Scan("k/", func(k string, val []byte) bool {
		if string(val) != mv.kv[k] {
			t.Fatalf("%s: key %s = %q, want %q", name, k, val, mv.kv[k])
		}
		gotKeys = append(gotKeys, k)
		return true
	})
	if !slices.Equal(gotKeys, keys) {
		t.Fatalf("%s: Scan walked %d keys, want %d", name, len(gotKeys), len(keys))
	}
	for range 50 {
		id := uint64(rng.IntN(3002))
		data, ok := v.Proc(id)
		if want, has := mv.procs[id]; ok != has || string(data) != want {
			t.Fatalf("%s: Proc(%d) = %q %v, want %q %v", name, id, data, ok, want, has)
		}
		wantAfter := slices.DeleteFunc(slices.Clone(ids), func(x uint64) bool { return x <= id })
		var after []uint64
		_ = v.ProcsAfter(id, func(p store.Proc) error { after = append(after, p.ID); return nil })
		if !slices.Equal(after, wantAfter) {
			t.Fatalf("%s: ProcsAfter(%d) walked %d ids, want %d", name, id, len(after), len(wantAfter))
		}
		var before []uint64
		_ = v.ProcsBefore(id, func(p store.Proc) error { before = append(before, p.ID); return nil })
		wantBefore := slices.DeleteFunc(slices.Clone(ids), func(x uint64) bool { return x >= id })
		slices.Reverse(wantBefore)
		if !slices.Equal(before, wantBefore) {
			t.Fatalf("%s: ProcsBefore(%d) walked %d ids, want %d", name, id, len(before), len(wantBefore))
		}

		k := fmt.Sprintf("k/%04d", rng.IntN(3001))
		val, ok := v.Get(k)
		if want, has := mv.kv[k]; ok != has || string(val) != want {
			t.Fatalf("%s: Get(%s) = %q %v, want %q %v", name, k, val, ok, want, has)
		}
		var from []string
		v.ScanFrom("k/", k, func(key string, _ []byte) bool { from = append(from, key); return true })
		wantFrom := slices.DeleteFunc(slices.Clone(keys), func(x string) bool { return x <= k || !strings.HasPrefix(x, "k/") })
		if !slices.Equal(from, wantFrom) {
			t.Fatalf("%s: ScanFrom(%s) walked %d keys, want %d", name, k, len(from), len(wantFrom))
		}
	}
}
