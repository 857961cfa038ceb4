package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// fsmDump is a node's replicated state: procedures and domain keys.
func fsmDump(n *Node) (map[uint64]string, map[string]string) {
	v := n.FSM().View()
	procs, kv := map[uint64]string{}, map[string]string{}
	_ = v.Procs(func(p store.Proc) error { procs[p.ID] = string(p.Data); return nil })
	v.Scan("", func(k string, val []byte) bool { kv[k] = string(val); return true })
	return procs, kv
}

// waitSameState waits until node i has applied what the leader has and
// holds the same state.
func (c *testCluster) waitSameState(i, leader int) {
	c.t.Helper()
	testwait.For(c.t, 15*time.Second, fmt.Sprintf("m%d to hold m%d's state", i, leader), func() bool {
		a, b := c.nodes[i].FSM().AppliedIndex(), c.nodes[leader].FSM().AppliedIndex()
		if a != b || a == 0 {
			return false
		}
		p1, k1 := fsmDump(c.nodes[i])
		p2, k2 := fsmDump(c.nodes[leader])
		return reflect.DeepEqual(p1, p2) && reflect.DeepEqual(k1, k2)
	})
}

// snapshots lists the raft snapshots in dataDir, newest first.
func snapshots(t *testing.T, dataDir string) []*raft.SnapshotMeta {
	t.Helper()
	s, err := raft.NewFileSnapshotStore(dataDir, 10, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// snapshotTwice takes two snapshots on node f with procedures in between,
// and returns them, newest first.
func (c *testCluster) snapshotTwice(f int) []*raft.SnapshotMeta {
	c.t.Helper()
	for range 2 {
		li, x := c.leader()
		ids := submit(c.t, x, 5, 2, 0)
		c.waitAllSuccess(ids, 2)
		c.waitSameState(f, li)
		if err := c.nodes[f].Raft().Snapshot().Error(); err != nil {
			c.t.Fatalf("snapshot on m%d: %v", f, err)
		}
	}
	list := snapshots(c.t, c.cfgs[f].DataDir)
	if len(list) < 2 || list[0].Index <= list[1].Index {
		c.t.Fatalf("want two snapshots on m%d, have %v", f, list)
	}
	return list
}

func (c *testCluster) follower() int {
	li, _ := c.leader()
	return (li + 1) % len(c.nodes)
}

// A follower's newest snapshot fails its CRC and its local WAL is gone, so
// it must restore a snapshot: the damaged one is set aside, the older one
// restored, and the log (which still reaches back to it) replayed. The
// node ends with the leader's state.
func TestDamagedSnapshotFallsBackToOlder(t *testing.T) {
	c := newTestCluster(t, clusterOpts{tcp: true})
	f := c.follower()
	list := c.snapshotTwice(f)
	c.nodes[f].Kill()
	state := filepath.Join(c.cfgs[f].DataDir, "snapshots", list[0].ID, "state.bin")
	flipFileBytes(t, state, list[0].Size/2)
	if err := os.RemoveAll(filepath.Join(c.cfgs[f].DataDir, "fsm")); err != nil {
		t.Fatal(err)
	}

	c.restart(f)
	set, _ := filepath.Glob(filepath.Join(c.cfgs[f].DataDir, "snapshots.damaged", list[0].ID+".*"))
	if len(set) != 1 {
		t.Fatalf("damaged snapshot %s not set aside (found %v)", list[0].ID, set)
	}
	if left := snapshots(t, c.cfgs[f].DataDir); len(left) == 0 || left[0].ID != list[1].ID {
		t.Fatalf("snapshots left: %v, want the older %s first", left, list[1].ID)
	}
	li, x := c.leader()
	ids := submit(t, x, 3, 2, 0)
	c.waitAllSuccess(ids, 2)
	c.waitSameState(f, li)
}

// With the log compacted past the older snapshot, a damaged newest one
// leaves a gap: when the local WAL cannot bridge it either, the node
// refuses to start, naming the snapshot, instead of letting raft panic on
// the missing entry. With its WAL in place (it reaches the damaged
// snapshot's index, so raft need not read it) the node starts, and a new
// snapshot replaces the damaged one.
func TestDamagedSnapshotWithCompactedLog(t *testing.T) {
	c := newTestCluster(t, clusterOpts{tcp: true, tweak: func(_ int, cfg *Config) { cfg.TrailingLogs = 2 }})
	f := c.follower()
	list := c.snapshotTwice(f)
	c.nodes[f].Kill()
	dataDir := c.cfgs[f].DataDir
	flipFileBytes(t, filepath.Join(dataDir, "snapshots", list[0].ID, "state.bin"), list[0].Size/2)

	// WAL gone: only the older snapshot is intact, and the log starts
	// after it.
	fsmDir := filepath.Join(dataDir, "fsm")
	if err := os.Rename(fsmDir, fsmDir+".saved"); err != nil {
		t.Fatal(err)
	}
	_, err := NewNode(c.cfgs[f])
	if err == nil {
		t.Fatal("started with a gap between its newest intact snapshot and its raft log")
	}
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), list[0].ID) || !strings.Contains(err.Error(), "starts at index") {
		t.Fatalf("refusal %q does not name the damaged snapshot %s and the gap", err, list[0].ID)
	}
	t.Logf("refused: %v", err)

	// WAL back: it reaches the damaged snapshot's index.
	if err := os.RemoveAll(fsmDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fsmDir+".saved", fsmDir); err != nil {
		t.Fatal(err)
	}
	c.restart(f)
	li, x := c.leader()
	c.waitAllSuccess(submit(t, x, 3, 2, 0), 2)
	c.waitSameState(f, li)
	testwait.For(t, 10*time.Second, "a new snapshot to replace the damaged one", func() bool {
		left := snapshots(t, dataDir)
		return len(left) > 0 && left[0].Index > list[0].Index
	})
}

func flipFileBytes(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := off; i < off+8 && i < int64(len(b)); i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
