package raftfsm

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/store"
)

// copyTree copies the regular files under src (what the disk holds at this
// instant, page cache included) to a new directory.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if d.Name() == "LOCK" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// newestSegment returns the path of the newest segment of the CURRENT WAL.
func newestSegment(t *testing.T, dir string) string {
	t.Helper()
	cur, err := os.ReadFile(filepath.Join(dir, currentFile))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := filepath.Glob(filepath.Join(dir, string(bytes.TrimSpace(cur)), "pv2-*.log"))
	if len(m) == 0 {
		t.Fatal("no segment")
	}
	return m[len(m)-1]
}

func stepLog(t *testing.T, i uint64) *raft.Log {
	return cmdLog(i, procBatch(t, Write{
		Inserts:   []store.Proc{{ID: i, Data: []byte(fmt.Sprint("p", i))}},
		Updates:   []store.Proc{{ID: max(1, i/2), Data: []byte(fmt.Sprint("u", i))}},
		Mutations: []Mutation{Put(fmt.Sprint("k/", i%4), []byte(fmt.Sprint(i)))},
	}))
}

// The FSM's WAL defaults to SyncOnRoll: applies are written, not synced.
// A power loss then loses the unsynced suffix; the WAL loads as the state
// at its last intact record W', which may be below the newest Raft
// snapshot (taken from memory, so it is ahead of what the WAL synced):
// NeedsSnapshotRestore must then restore it, and restore + replay of the
// log after the snapshot gives the full state. Restore syncs the WAL it
// writes before switching to it.
func TestFSMPowerLossLosesOnlyUnsyncedSuffix(t *testing.T) {
	dir := t.TempDir()
	f, err := NewFSM(Config{Dir: dir, WAL: store.WALConfig{SyncInterval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const synced, snapAt, last = 8, 15, 20
	var logs []*raft.Log
	for i := uint64(1); i <= last; i++ {
		logs = append(logs, stepLog(t, i))
	}
	ref := newTestFSM(t, "") // ref state after each prefix
	refAt := map[uint64]dump{}
	for _, l := range logs {
		checkResps(t, ref.ApplyBatch([]*raft.Log{l}))
		refAt[l.Index] = dumpOf(t, ref)
	}

	var syncedSize int64
	snaps := raft.NewInmemSnapshotStore()
	for _, l := range logs {
		checkResps(t, f.ApplyBatch([]*raft.Log{l}))
		if f.WALIndex() != l.Index {
			t.Fatalf("WALIndex %d after applying %d", f.WALIndex(), l.Index)
		}
		switch l.Index {
		case 1:
			if f.WALDurableIndex() != 0 {
				t.Fatalf("WALDurableIndex %d after one apply: the FSM's WAL should default to SyncOnRoll", f.WALDurableIndex())
			}
		case synced:
			if err := f.SyncWAL(); err != nil {
				t.Fatal(err)
			}
			if f.WALDurableIndex() != synced {
				t.Fatalf("WALDurableIndex %d after SyncWAL, want %d", f.WALDurableIndex(), synced)
			}
			st, _ := os.Stat(newestSegment(t, dir))
			syncedSize = st.Size()
		case snapAt: // raft snapshots the in-memory state, then may compact the log up to it
			sink, err := snaps.Create(raft.SnapshotVersionMax, snapAt, 1, raft.Configuration{}, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			sink.Write(snapshotBytes(t, f))
			sink.Close()
		}
	}
	if d := f.WALDurableIndex(); d != synced {
		t.Fatalf("WALDurableIndex %d, want %d (no sync since)", d, synced)
	}

	// Power loss: the unsynced part of the newest segment is gone; its
	// size was updated, so zeros stand where the lost records were.
	img := copyTree(t, dir)
	seg := newestSegment(t, img)
	data, _ := os.ReadFile(seg)
	clear(data[syncedSize:])
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := NewFSM(Config{Dir: img, WAL: store.WALConfig{SyncInterval: time.Hour}})
	if err != nil {
		t.Fatalf("reopen after power loss: %v", err)
	}
	defer g.Close()
	w := g.LoadedIndex()
	if w != synced {
		t.Fatalf("W' = %d, want %d", w, synced)
	}
	if got := dumpOf(t, g); !got.equal(refAt[w]) {
		t.Fatalf("loaded %v, want the state at %d: %v", got, w, refAt[w])
	}
	need, err := NeedsSnapshotRestore(snaps, w)
	if err != nil || !need {
		t.Fatalf("NeedsSnapshotRestore(W'=%d, snapshot %d) = %v, %v; want true", w, snapAt, need, err)
	}
	if need, _ := NeedsSnapshotRestore(snaps, last); need {
		t.Fatal("NeedsSnapshotRestore with W past the snapshot: want false")
	}
	// What raft does: restore the newest snapshot, replay the log after it.
	list, _ := snaps.List()
	_, rc, err := snaps.Open(list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Restore(rc); err != nil {
		t.Fatal(err)
	}
	if g.WALDurableIndex() != snapAt {
		t.Fatalf("WALDurableIndex %d after Restore, want %d: the restored WAL must be synced before CURRENT names it", g.WALDurableIndex(), snapAt)
	}
	checkResps(t, g.ApplyBatch(logs[snapAt:]))
	if got := dumpOf(t, g); !got.equal(refAt[last]) {
		t.Fatalf("after restore and replay %v, want %v", got, refAt[last])
	}

	// Had the loss kept W' at or past the snapshot, replaying the log after
	// W' (entries up to W' skipped) would do as well.
	img2 := copyTree(t, dir)
	h, err := NewFSM(Config{Dir: img2})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.LoadedIndex() != last {
		t.Fatalf("process crash: W %d, want %d (written records survive)", h.LoadedIndex(), last)
	}
	checkResps(t, h.ApplyBatch(logs))
	if got := dumpOf(t, h); !got.equal(refAt[last]) {
		t.Fatalf("after replay %v, want %v", got, refAt[last])
	}
}

// SyncEveryBatch can still be chosen: every apply is then durable at once.
func TestFSMWALSyncEveryBatch(t *testing.T) {
	f, err := NewFSM(Config{Dir: t.TempDir(), WAL: store.WALConfig{Sync: store.SyncEveryBatch}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	checkResps(t, f.ApplyBatch(sampleLogs(t)))
	if f.WALDurableIndex() != 6 || f.WALIndex() != 6 {
		t.Fatalf("WALDurableIndex %d, WALIndex %d: want 6, 6", f.WALDurableIndex(), f.WALIndex())
	}
}
