package cluster

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
)

// TestRestartCompactsRaftLog: a node whose raft.db grew with a backlog
// that raft has since compacted away gets a small file back at its next
// start, and rejoins with everything it held.
func TestRestartCompactsRaftLog(t *testing.T) {
	// Steady timings: the test submits to the leader it found, and raft's
	// test timings lose it on a loaded machine (CI: leadership lost while
	// committing).
	c := newTestCluster(t, clusterOpts{n: 3, tcp: true, tweak: func(i int, cfg *Config) {
		steadyTimings(i, cfg)
		cfg.TrailingLogs = 16
		cfg.RaftLogCompactBytes = 256 << 10
	}})
	li, x := c.leader()
	var ids []uint64
	for range 8 {
		more := submit(t, x, 50, 5, 0)
		c.waitAllSuccess(more, 5)
		ids = append(ids, more...)
	}
	fi := (li + 1) % 3
	f := c.nodes[fi]
	// The snapshot lets raft drop all but 16 entries of the backlog.
	c.snapshotAndStop(t, li, fi)
	path := filepath.Join(c.cfgs[fi].DataDir, "raft", "raft.db")
	before := fileSize(t, path)

	f = c.restart(fi)
	after := fileSize(t, path)
	t.Logf("raft.db %d → %d bytes at restart", before, after)
	if after*2 > before {
		t.Fatalf("raft.db %d → %d bytes: a log cut to 16 entries should shrink its file", before, after)
	}
	li, x = c.leader()
	last := submit(t, x, 5, 2, 0)
	c.waitAllSuccess(last, 2)
	testwait.For(t, 15*time.Second, "restarted follower to catch up", func() bool {
		return f.FSM().AppliedIndex() >= c.nodes[li].FSM().AppliedIndex()
	})
	for _, id := range append(ids, last...) {
		if _, ok := f.FSM().Proc(id); !ok {
			t.Fatalf("restarted follower lacks procedure %d", id)
		}
	}
}
