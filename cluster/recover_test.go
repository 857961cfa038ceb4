package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/internal/testwait"
)

// TestRecoverQuorum: a three-member cluster loses two members' disks for
// good. The survivor, recovered with Config.RecoverQuorum, leads alone
// with every procedure it had: the finished ones finished, the ones in
// flight finish. Two fresh members then join and catch up. On the way: a
// recovery in an empty directory is refused without creating anything,
// and a recovery not confirmed changes nothing (the same plan twice).
func TestRecoverQuorum(t *testing.T) {
	// Steady timings: the test submits on the leader it picked first, and
	// a leadership change under -race stopped that executor mid-test.
	c := newTestCluster(t, clusterOpts{n: 3, tcp: true, tweak: steadyTimings})
	li, x := c.leader()
	done := submit(t, x, 20, 2, 0)
	c.waitAllSuccess(done, 2)
	s := (li + 1) % 3
	// A snapshot on the survivor: recovery restores it, then replays the
	// log after it.
	testwait.For(t, 10*time.Second, "survivor to apply everything", func() bool {
		return c.nodes[s].FSM().AppliedIndex() >= c.nodes[li].FSM().AppliedIndex()
	})
	if err := c.nodes[s].Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	more := submit(t, x, 10, 2, 0)
	c.waitAllSuccess(more, 2)
	done = append(done, more...)
	const inflightSteps = 40
	inflight := submit(t, x, 10, inflightSteps, 25*time.Millisecond)
	testwait.For(t, 10*time.Second, "survivor to hold every procedure", func() bool {
		for _, id := range append(done, inflight...) {
			if _, ok := c.nodes[s].FSM().Proc(id); !ok {
				return false
			}
		}
		return true
	})

	for i, n := range c.nodes {
		if err := n.Kill(); err != nil {
			t.Fatalf("kill %d: %v", i, err)
		}
		c.nodes[i] = nil
	}
	var lost []int
	for i := range c.cfgs {
		if i != s {
			lost = append(lost, i)
			if err := os.RemoveAll(c.cfgs[i].DataDir); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Nothing to recover in a wiped directory, and nothing is created in it.
	empty := c.cfgs[lost[0]]
	empty.RecoverQuorum = func(QuorumRecoveryPlan) error { t.Fatal("plan confirmed for an empty directory"); return nil }
	if _, err := NewNode(empty); !errors.Is(err, ErrNothingToRecover) {
		t.Fatalf("recovery in an empty directory: %v, want ErrNothingToRecover", err)
	}
	if _, err := os.Stat(empty.DataDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused recovery created %s (%v)", empty.DataDir, err)
	}

	// Not confirmed: nothing changes, so the second plan is the first.
	errNo := errors.New("not confirmed")
	var plans []QuorumRecoveryPlan
	for range 2 {
		cfg := c.cfgs[s]
		cfg.RecoverQuorum = func(p QuorumRecoveryPlan) error { plans = append(plans, p); return errNo }
		if _, err := NewNode(cfg); !errors.Is(err, errNo) {
			t.Fatalf("recovery not confirmed: %v, want the confirmation's error", err)
		}
	}
	if len(plans) != 2 || !reflect.DeepEqual(plans[0], plans[1]) {
		t.Fatalf("plans differ after a recovery not confirmed:\n%+v\n%+v", plans[0], plans[1])
	}
	p := plans[0]
	t.Logf("plan:\n%s", p)
	if p.Self.ID != c.cfgs[s].ID || len(p.Dropped) != 2 || len(p.Members) != 3 || p.LastIndex == 0 || p.KnownCommitted > p.LastIndex || len(p.Answering) != 0 {
		t.Fatalf("plan %+v", p)
	}
	if p.WALIndex == 0 || p.WALIndex > p.LastIndex || p.Keeps() != p.LastIndex {
		t.Fatalf("plan %+v: want the local WAL's index, behind the log's last, and the log's kept", p)
	}
	checkPlanIndexes(t, p)

	cfg := c.cfgs[s]
	cfg.RecoverQuorum = func(QuorumRecoveryPlan) error { return nil }
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	c.nodes[s] = n
	if li, _ = c.leader(); li != s {
		t.Fatalf("leader %d after recovery, want the survivor %d", li, s)
	}
	if got := voters(t, n); len(got) != 1 || got[0] != cfg.ID {
		t.Fatalf("voters after recovery: %v", got)
	}
	c.waitAllSuccess(done, 2)
	c.waitAllSuccess(inflight, inflightSteps)

	// Recovering again is refused: it already is the only voter.
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.nodes[s] = nil
	if _, err := NewNode(cfg); !errors.Is(err, ErrRecoveryRefused) {
		t.Fatalf("a second recovery: %v, want ErrRecoveryRefused", err)
	}
	n = c.restart(s) // the plain configuration, as an operator restarts it
	c.leader()

	// Two fresh members join, as 'baton cluster join' adds them.
	for k := range 2 {
		jc := fastConfig(t, fmt.Sprintf("m%d", 3+k), c.rec)
		jc.RaftAddr = testnet.FreeAddr(t)
		jc.TransportTimeout = 2 * time.Second
		j, err := NewNode(jc)
		if err != nil {
			t.Fatalf("new member: %v", err)
		}
		c.nodes, c.cfgs = append(c.nodes, j), append(c.cfgs, jc)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = n.Join(ctx, jc.ID, jc.RaftAddr)
		cancel()
		if err != nil {
			t.Fatalf("join %s: %v", jc.ID, err)
		}
	}
	if got := voters(t, n); len(got) != 3 {
		t.Fatalf("voters after the joins: %v", got)
	}
	_, x = c.leader()
	last := submit(t, x, 5, 2, 0)
	c.waitAllSuccess(last, 2)
	for _, j := range c.nodes[3:] {
		testwait.For(t, 15*time.Second, j.ID()+" to catch up", func() bool {
			return j.FSM().AppliedIndex() >= n.FSM().AppliedIndex()
		})
		for _, id := range append(append(done, inflight...), last...) {
			if _, ok := j.FSM().Proc(id); !ok {
				t.Fatalf("%s lacks procedure %d", j.ID(), id)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(c.cfgs[3].DataDir, "raft", "raft.db")); err != nil {
		t.Fatalf("new member's raft log: %v", err)
	}
}

func voters(t *testing.T, n *Node) []string {
	t.Helper()
	f := n.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			ids = append(ids, string(s.ID))
		}
	}
	return ids
}

// A member stopped while the two others still run has not lost the
// quorum: its recovery is refused, the plan never offered, and it
// rejoins as it was when started normally.
func TestRecoverQuorumRefusedWhileAQuorumAnswers(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3, tcp: true})
	li, x := c.leader()
	c.waitAllSuccess(submit(t, x, 3, 1, 0), 1)
	s := (li + 1) % 3
	if err := c.nodes[s].Kill(); err != nil {
		t.Fatal(err)
	}
	c.nodes[s] = nil
	cfg := c.cfgs[s]
	cfg.RecoverQuorum = func(QuorumRecoveryPlan) error { t.Fatal("plan offered while a quorum answers"); return nil }
	if _, err := NewNode(cfg); !errors.Is(err, ErrRecoveryRefused) {
		t.Fatalf("recovery beside two running members: %v, want ErrRecoveryRefused", err)
	}
	n := c.restart(s)
	testwait.For(t, 15*time.Second, "the member to follow the leader again", func() bool {
		id, _ := n.Leader()
		return id != "" && len(voters(t, n)) == 3
	})
}
