package raftfsm

import (
	"bytes"
	"errors"
	"io"
	"os"
	"reflect"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// failingSync returns a store.WALConfig.SyncData that fails with EIO while
// *fail is set, as a device whose fsync fails would.
func failingSync(fail *atomic.Bool) func(*os.File) error {
	return func(*os.File) error {
		if fail.Load() {
			return syscall.EIO
		}
		return nil
	}
}

// A local WAL whose fdatasync fails (in the background, under SyncOnRoll)
// shows in WALErr before any append notices; the FSM keeps applying in
// memory, and a restart loads the WAL as it was last synced or written,
// never more than was applied.
func TestFSMWALSyncFailureIsReported(t *testing.T) {
	dir := t.TempDir()
	var fail atomic.Bool
	f, err := NewFSM(Config{Dir: dir, WAL: store.WALConfig{Sync: store.SyncOnRoll, SyncInterval: 5 * time.Millisecond, SyncData: failingSync(&fail)}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	checkResps(t, f.ApplyBatch([]*raft.Log{stepLog(t, 1)}))
	if err := f.WALErr(); err != nil {
		t.Fatalf("healthy WAL: WALErr %v", err)
	}
	fail.Store(true)
	checkResps(t, f.ApplyBatch([]*raft.Log{stepLog(t, 2)}))
	testwait.For(t, 5*time.Second, "WALErr once the WAL's fdatasync fails", func() bool { return f.WALErr() != nil })
	if err := f.WALErr(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("WALErr = %v, want it to wrap EIO", err)
	}
	// Applying goes on in memory.
	checkResps(t, f.ApplyBatch([]*raft.Log{stepLog(t, 3)}))
	if got := f.AppliedIndex(); got != 3 {
		t.Fatalf("applied index %d, want 3", got)
	}
	if _, ok := f.Proc(3); !ok {
		t.Fatal("proc 3 not applied in memory after the WAL failed")
	}
	if w := f.WALIndex(); w >= 3 {
		t.Fatalf("WAL index %d after the failure: entry 3 cannot be in the failed WAL", w)
	}
}

// A snapshot restore whose new WAL cannot be written (the disk is full or
// failing) restores in memory instead of failing, since raft panics on a
// failed restore; the old WAL stays CURRENT with its older index, so a
// restart restores the snapshot again.
func TestFSMRestoreWithFailingWALRestoresInMemory(t *testing.T) {
	src := newTestFSM(t, t.TempDir())
	checkResps(t, src.ApplyBatch(sampleLogs(t)))
	want := dumpOf(t, src)
	data := snapshotBytes(t, src)

	dir := t.TempDir()
	var fail atomic.Bool
	dst, err := NewFSM(Config{Dir: dir, WAL: store.WALConfig{SyncData: failingSync(&fail)}})
	if err != nil {
		t.Fatal(err)
	}
	checkResps(t, dst.ApplyBatch([]*raft.Log{stepLog(t, 1)}))
	fail.Store(true)
	if err := dst.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatalf("Restore with a failing WAL: %v, want an in-memory restore", err)
	}
	if got := dumpOf(t, dst); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored state differs:\n got %+v\nwant %+v", got, want)
	}
	if err := dst.WALErr(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("WALErr = %v, want the restore's EIO", err)
	}
	dst.Close()

	fail.Store(false)
	again, err := NewFSM(Config{Dir: dir, WAL: store.WALConfig{SyncData: failingSync(&fail)}})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got := again.LoadedIndex(); got != 1 {
		t.Fatalf("reopened FSM loaded index %d, want the old WAL's 1 (the restore was not written)", got)
	}
	need, err := NeedsSnapshotRestore(fakeSnaps{index: src.AppliedIndex()}, again.LoadedIndex())
	if err != nil || !need {
		t.Fatalf("NeedsSnapshotRestore = %v, %v; want true: the snapshot must be restored again", need, err)
	}
}

// fakeSnaps lists one snapshot at index.
type fakeSnaps struct {
	raft.SnapshotStore
	index uint64
}

func (s fakeSnaps) List() ([]*raft.SnapshotMeta, error) {
	return []*raft.SnapshotMeta{{ID: "s", Index: s.index}}, nil
}
