package cluster

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/testwait"
)

func TestLogTunerTurnsBytesIntoEntries(t *testing.T) {
	tu := &logTuner{floor: 16 << 20, minEntries: 256, maxThresh: 8192, maxTrail: 10240}

	// Nothing written yet: the configured counts stand.
	if lim := tu.observe(0, 0, 1<<20); lim.SnapshotThreshold != 8192 || lim.TrailingLogs != 10240 || lim.Budget != 16<<20 {
		t.Fatalf("before any entry: %+v", lim)
	}
	// 100 entries of 256 KiB under a 16 MiB floor: 64 entries, raised to the minimum.
	lim := tu.observe(100, 100*256<<10, 1<<20)
	if lim.AvgEntryBytes != 256<<10 || lim.SnapshotThreshold != 256 || lim.TrailingLogs != 256 {
		t.Fatalf("big entries: %+v", lim)
	}
	// A live state over the floor is the budget: 64 MiB of live state ÷ 16 KiB entries.
	tu = &logTuner{floor: 16 << 20, minEntries: 256, maxThresh: 8192, maxTrail: 10240}
	lim = tu.observe(1000, 1000*16<<10, 64<<20)
	if lim.Budget != 64<<20 || lim.SnapshotThreshold != 4096 || lim.TrailingLogs != 4096 {
		t.Fatalf("budget from the live state: %+v", lim)
	}
	// Small entries: the configured counts are the ceiling.
	tu = &logTuner{floor: 16 << 20, minEntries: 256, maxThresh: 8192, maxTrail: 10240}
	lim = tu.observe(1000, 1000*100, 0)
	if lim.SnapshotThreshold != 8192 || lim.TrailingLogs != 10240 {
		t.Fatalf("small entries: %+v", lim)
	}
	// A set budget wins over the live state, and the mean follows the
	// entries' new size: the past weighs half at each observation.
	tu = &logTuner{budget: 1 << 20, floor: 16 << 20, minEntries: 4, maxThresh: 8192, maxTrail: 10240}
	tu.observe(100, 100*1000, 64<<20)
	lim = tu.observe(200, 100*1000+100*4000, 64<<20)
	if lim.Budget != 1<<20 || lim.AvgEntryBytes != 3000 {
		t.Fatalf("set budget, changing entries: %+v", lim)
	}
	// A quiet interval leaves the mean as it was.
	if again := tu.observe(200, 100*1000+100*4000, 64<<20); again.AvgEntryBytes != lim.AvgEntryBytes {
		t.Fatalf("quiet interval moved the mean: %+v → %+v", lim, again)
	}
}

// logBytes sums the data of the entries n's bolt log holds.
func logBytes(t *testing.T, n *Node) (entries, data uint64) {
	t.Helper()
	first, err := n.bolt.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := n.bolt.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	for i := first; i != 0 && i <= last; i++ {
		var l raft.Log
		if err := n.bolt.GetLog(i, &l); err != nil {
			continue // compacted under us
		}
		entries++
		data += uint64(len(l.Data))
	}
	return entries, data
}

// TestRaftLogBoundedInBytes: big entries (as group commits are under
// load) make the node lower raft's entry counts so that the log holds
// about the byte budget twice over (since the last snapshot, and
// trailing), not SnapshotThreshold + TrailingLogs entries; a follower
// that lagged a little catches up from that log, and one that lagged far
// from a snapshot.
func TestRaftLogBoundedInBytes(t *testing.T) {
	const (
		budget    = 256 << 10
		entrySize = 16 << 10
		keys      = 8 // rewritten over and over: the live state stays small
	)
	c := newTestCluster(t, clusterOpts{n: 3, tcp: true, tweak: func(_ int, cfg *Config) {
		cfg.SnapshotInterval = 100 * time.Millisecond
		cfg.LogBytesBudget = budget
		cfg.LogMinEntries = 4
	}})
	value := func(i int) string { return string(bytes.Repeat([]byte{byte('a' + i%26)}, entrySize)) }
	written := 0
	write := func(k int) {
		li, _ := c.leader()
		for range k {
			putKey(t, c.nodes[li], fmt.Sprintf("k/%d", written%keys), value(written))
			written++
		}
	}
	write(100)
	// budget ÷ entry: the counts the nodes should settle on.
	want := uint64(budget / (entrySize + 64))
	for i, n := range c.nodes {
		testwait.For(t, 20*time.Second, fmt.Sprintf("node %d to lower its counts", i), func() bool {
			rc := n.Raft().ReloadableConfig()
			return rc.SnapshotThreshold <= want+1 && rc.TrailingLogs <= want+1
		})
	}
	write(100)
	limit := uint64(2*budget + 2*entrySize)
	for i, n := range c.nodes {
		testwait.For(t, 20*time.Second, fmt.Sprintf("node %d's log to shrink to its budget", i), func() bool {
			_, b := logBytes(t, n)
			return b <= limit
		})
		e, b := logBytes(t, n)
		t.Logf("node %d: log %d entries, %d bytes (budget 2×%d); %d entries written; raft.db %d bytes",
			i, e, b, budget, written, fileSize(t, filepath.Join(c.cfgs[i].DataDir, "raft", "raft.db")))
	}

	// A little behind: the entries it lacks are still in the leader's log.
	li, _ := c.leader()
	fi := (li + 1) % 3
	if err := c.nodes[fi].Kill(); err != nil {
		t.Fatalf("kill follower: %v", err)
	}
	c.nodes[fi] = nil
	write(3)
	first, _ := c.nodes[li].bolt.FirstIndex()
	f := c.restart(fi)
	if last := f.Raft().LastIndex(); last+1 < first {
		t.Fatalf("the follower (last %d) fell behind the leader's log (first %d): not the case this step tests", last, first)
	}
	c.waitCaughtUp(f, written)

	// Far behind: the leader's log moved past the follower's, so it is
	// sent a snapshot.
	stopAt := f.Raft().LastIndex()
	if err := f.Kill(); err != nil {
		t.Fatalf("kill follower: %v", err)
	}
	c.nodes[fi] = nil
	write(60)
	li, _ = c.leader()
	testwait.For(t, 20*time.Second, "the leader to compact past the stopped follower", func() bool {
		first, _ := c.nodes[li].bolt.FirstIndex()
		return first > stopAt+1
	})
	c.waitCaughtUp(c.restart(fi), written)
}

// waitCaughtUp waits until f holds the newest value of every key written.
func (c *testCluster) waitCaughtUp(f *Node, written int) {
	c.t.Helper()
	testwait.For(c.t, 20*time.Second, "the follower to catch up", func() bool {
		for w := max(written-8, 0); w < written; w++ {
			v, ok := f.FSM().Get(fmt.Sprintf("k/%d", w%8))
			if !ok || len(v) == 0 || v[0] != byte('a'+w%26) {
				return false
			}
		}
		return true
	})
}
