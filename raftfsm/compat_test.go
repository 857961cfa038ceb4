package raftfsm

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// Snapshots and local WALs written before the state moved from radix trees
// to B-trees must still load, and a snapshot of the same state must still
// be the same bytes. testdata/v1 was written by the radix-tree FSM with
// BATON_WRITE_GOLDEN=1 (TestWriteGolden, run at that commit); keep it as is.
// Files written by released binaries themselves, every format of a
// master's data directory, are in internal/compat/testdata.

const goldenDir = "testdata/v1"

// goldenFSM applies the golden history: every kind of change, then 120
// regions with a live procedure each, then a few regions and procedures
// deleted.
func goldenFSM(tb testing.TB, dir string) *FSM {
	tb.Helper()
	f := newTestFSM(tb, dir)
	checkResps(tb, f.ApplyBatch(sampleLogs(tb)))
	regionWorkload(tb, f, 120, true)
	w := Write{Deletes: []uint64{7, 50, 120}}
	for _, i := range []int{0, 33, 119} {
		w.Mutations = append(w.Mutations, Del(regionKey(i)))
	}
	idx := f.AppliedIndex() + 1
	checkResps(tb, f.ApplyBatch([]*raft.Log{cmdLog(idx, procBatch(tb, w))}))
	return f
}

// TestWriteGolden rewrites testdata/v1; it runs only when asked, since the
// point of the files is that they come from older code.
func TestWriteGolden(t *testing.T) {
	if os.Getenv("BATON_WRITE_GOLDEN") == "" {
		t.Skip("set BATON_WRITE_GOLDEN=1 to rewrite " + goldenDir)
	}
	if err := os.RemoveAll(goldenDir); err != nil {
		t.Fatal(err)
	}
	f := goldenFSM(t, filepath.Join(goldenDir, "data"))
	if err := os.WriteFile(filepath.Join(goldenDir, "snapshot.bin"), snapshotBytes(t, f), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestGoldenSnapshotAndWALLoad(t *testing.T) {
	want := dumpOf(t, goldenFSM(t, ""))
	golden, err := os.ReadFile(filepath.Join(goldenDir, "snapshot.bin"))
	if err != nil {
		t.Fatal(err)
	}

	restored := newTestFSM(t, t.TempDir())
	if err := restored.Restore(io.NopCloser(bytes.NewReader(golden))); err != nil {
		t.Fatal(err)
	}
	if got := dumpOf(t, restored); !got.equal(want) {
		t.Fatalf("restored golden snapshot: %v, want %v", got, want)
	}
	if again := snapshotBytes(t, restored); !bytes.Equal(again, golden) {
		t.Fatalf("snapshot of the restored state differs from the golden bytes (%d vs %d bytes)", len(again), len(golden))
	}

	dir := copyTree(t, filepath.Join(goldenDir, "data"))
	loaded := newTestFSM(t, dir)
	if got := dumpOf(t, loaded); !got.equal(want) || loaded.LoadedIndex() != want.index {
		t.Fatalf("golden WAL loaded as %v (W=%d), want %v", got, loaded.LoadedIndex(), want)
	}
	// The key → WAL id mapping survived the load: deleting and updating
	// keys from the loaded WAL must be written under their old ids, so a
	// second load sees the result.
	idx := loaded.AppliedIndex()
	checkResps(t, loaded.ApplyBatch([]*raft.Log{
		cmdLog(idx+1, procBatch(t, Write{Mutations: []Mutation{Del(regionKey(1)), Put(regionKey(2), []byte("x"))}})),
	}))
	want = dumpOf(t, loaded)
	if err := loaded.Close(); err != nil {
		t.Fatal(err)
	}
	if got := dumpOf(t, newTestFSM(t, dir)); !got.equal(want) {
		t.Fatalf("reloaded: %v, want %v", got, want)
	}
}
