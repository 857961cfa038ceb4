package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/testwait"
)

// recoverSurvivorWithLostLogTail runs a three-member in-memory cluster,
// stops every member, cuts the survivor's raft log back by cut entries
// (its FSM's local WAL now ahead of its log, as after a raft.db that lost
// its tail), and recovers the survivor alone. snapshot has the survivor
// take a raft snapshot before the last writes.
func recoverSurvivorWithLostLogTail(t *testing.T, snapshot bool, cut uint64) (*testCluster, int, *Node, QuorumRecoveryPlan, []uint64) {
	t.Helper()
	c := newTestCluster(t, clusterOpts{n: 3, tweak: steadyTimings})
	li, x := c.leader()
	done := submit(t, x, 5, 2, 0)
	c.waitAllSuccess(done, 2)
	s := (li + 1) % 3
	if snapshot {
		testwait.For(t, 10*time.Second, "survivor to apply everything", func() bool {
			return c.nodes[s].FSM().AppliedIndex() >= c.nodes[li].FSM().AppliedIndex()
		})
		if err := c.nodes[s].Raft().Snapshot().Error(); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
	}
	more := submit(t, x, 5, 2, 0)
	c.waitAllSuccess(more, 2)
	done = append(done, more...)
	testwait.For(t, 10*time.Second, "survivor to apply everything", func() bool {
		return c.nodes[s].FSM().AppliedIndex() >= c.nodes[li].FSM().AppliedIndex()
	})
	applied := c.nodes[s].FSM().AppliedIndex()
	for i, n := range c.nodes {
		if err := n.Kill(); err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
		c.nodes[i] = nil
	}
	logs := c.cfgs[s].LogStore
	last, err := logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if last < applied || last-cut <= 1 {
		t.Fatalf("log last %d, applied %d", last, applied)
	}
	if err := logs.DeleteRange(last-cut+1, last); err != nil {
		t.Fatal(err)
	}
	t.Logf("survivor applied %d; its log cut from %d to %d", applied, last, last-cut)

	cfg := c.cfgs[s]
	var plan QuorumRecoveryPlan
	cfg.RecoverQuorum = func(p QuorumRecoveryPlan) error { plan = p; return nil }
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	c.nodes[s] = n
	t.Logf("plan:\n%s", plan)
	return c, s, n, plan, done
}

// A survivor whose local WAL is ahead of its raft log (the log lost its
// tail) and that holds no snapshot: RecoverCluster replays the log into
// the FSM, which skips every entry up to its WAL index W, and stores a
// snapshot claiming index L < W. Raft then appends new entries from L+1;
// the FSM skips those up to W as "already applied": writes acknowledged
// after the recovery are silently lost.
func TestRecoverQuorumWALAheadOfLogNoSnapshot(t *testing.T) {
	c, s, n, _, _ := recoverSurvivorWithLostLogTail(t, false, 6)
	if li, _ := c.leader(); li != s {
		t.Fatalf("leader %d, want %d", li, s)
	}
	_, x := c.leader()
	// Suspended for good after their first step: each is an insert and an
	// update, one entry or two, all at indexes just after the recovery.
	after := submit(t, x, 8, 2, time.Hour)
	if err := n.Raft().Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "procedures to run their first step", func() bool {
		c.rec.mu.Lock()
		defer c.rec.mu.Unlock()
		for _, id := range after {
			if c.rec.steps[id][0] == 0 {
				return false
			}
		}
		return true
	})
	if err := n.Raft().Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	var missing []uint64
	for _, id := range after {
		if _, ok := n.FSM().Proc(id); !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("procedures submitted and running after the recovery are missing from the leader's FSM: %v of %v (raft applied %d, FSM applied %d)",
			missing, after, n.Raft().AppliedIndex(), n.FSM().AppliedIndex())
	}
}

// The same with a snapshot older than the lost tail: RecoverCluster
// restores the snapshot (the FSM's WAL is rewritten at its index) and
// replays the log that is left, so whatever the survivor had applied past
// its log's end is rolled back, finished procedures included. The plan
// says nothing of it: it reports "known committed up to" the log's end,
// not the index the node had applied.
func TestRecoverQuorumWALAheadOfLogWithSnapshot(t *testing.T) {
	c, s, n, plan, done := recoverSurvivorWithLostLogTail(t, true, 6)
	if li, _ := c.leader(); li != s {
		t.Fatalf("leader %d, want %d", li, s)
	}
	var lost []uint64
	for _, id := range done {
		if _, ok := n.FSM().Proc(id); !ok {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("procedures the survivor had applied as finished are gone after the recovery: %v; the plan said known committed up to %d, uncertain %d",
			lost, plan.KnownCommitted, plan.Uncertain)
	}
}

// failingDeleteRange is a log store whose DeleteRange fails while fail is
// set: a recovery that dies between RecoverCluster's snapshot and its log
// compaction.
type failingDeleteRange struct {
	*raft.InmemStore
	fail bool
}

func (f *failingDeleteRange) DeleteRange(min, max uint64) error {
	if f.fail {
		return errors.New("injected: crash before the log compaction")
	}
	return f.InmemStore.DeleteRange(min, max)
}

// A recovery that stops after writing its snapshot but before emptying
// the log: the log's configuration entries still name three members.
// Started again without the flag it already is the only voter (raft takes
// the snapshot's configuration, newer than every entry); with the flag
// again the plan still reads the three members from the stale log
// entries (latestConfiguration) and recovers once more, harmlessly: it
// leads and holds every procedure.
func TestRecoverQuorumInterruptedThenRerun(t *testing.T) {
	var stores [3]*failingDeleteRange
	c := newTestCluster(t, clusterOpts{n: 3, tweak: func(i int, cfg *Config) {
		steadyTimings(i, cfg)
		stores[i] = &failingDeleteRange{InmemStore: cfg.LogStore.(*raft.InmemStore)}
		cfg.LogStore, cfg.StableStore = stores[i], stores[i]
	}})
	li, x := c.leader()
	done := submit(t, x, 5, 2, 0)
	c.waitAllSuccess(done, 2)
	s := (li + 1) % 3
	testwait.For(t, 10*time.Second, "survivor to apply everything", func() bool {
		return c.nodes[s].FSM().AppliedIndex() >= c.nodes[li].FSM().AppliedIndex()
	})
	for i, n := range c.nodes {
		if err := n.Kill(); err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
		c.nodes[i] = nil
	}
	stores[s].fail = true
	cfg := c.cfgs[s]
	cfg.RecoverQuorum = func(QuorumRecoveryPlan) error { return nil }
	if _, err := NewNode(cfg); err == nil {
		t.Fatal("recovery with a failing compaction succeeded")
	} else {
		t.Logf("interrupted recovery: %v", err)
	}
	stores[s].fail = false
	n := c.restart(s)
	// Raft takes the configuration of the snapshot, newer than every log
	// entry: the recovery took effect though its compaction failed.
	if got := voters(t, n); len(got) != 1 || got[0] != cfg.ID {
		t.Fatalf("voters after an interrupted recovery: %v, want the survivor alone", got)
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	c.nodes[s] = nil
	var plan QuorumRecoveryPlan
	cfg.RecoverQuorum = func(p QuorumRecoveryPlan) error { plan = p; return nil }
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatalf("recovery again: %v", err)
	}
	c.nodes[s] = n
	t.Logf("plan again:\n%s", plan)
	if li, _ := c.leader(); li != s {
		t.Fatalf("leader %d, want %d", li, s)
	}
	for _, id := range done {
		if _, ok := n.FSM().Proc(id); !ok {
			t.Fatalf("procedure %d lost", id)
		}
	}
	_, x = c.leader()
	c.waitAllSuccess(submit(t, x, 3, 2, 0), 2)
}
