package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/syncbuf"
	"github.com/baton-dev/baton/internal/testwait"
)

// wipedCluster is a 3-voter cluster (steady timings, stabilization as
// given) at cluster version 2 if v2, with procedures committed, and its
// leader's log in a buffer.
func wipedCluster(t *testing.T, stabilization time.Duration, v2 bool) (c *testCluster, l *Node, logs *syncbuf.Buffer) {
	t.Helper()
	logs = &syncbuf.Buffer{}
	c = newTestCluster(t, clusterOpts{n: 3, tweak: func(i int, cfg *Config) {
		steadyTimings(i, cfg)
		cfg.ServerStabilizationTime = stabilization
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.ID, Level: hclog.Info, Output: logs})
	}})
	li, x := c.leader()
	l = c.nodes[li]
	if v2 {
		setClusterFormat2(t, l)
	}
	ids := submit(t, x, 3, 2, 0)
	c.waitAllSuccess(ids, 2)
	return c, l, logs
}

// wipe kills node i and restarts it with its id and address and nothing
// else: new stores and data directory, as after a disk replacement. It
// does not bootstrap (as the agent's bootstrap guard decides), and waits
// to be joined.
func (c *testCluster) wipe(i int) *Node {
	c.t.Helper()
	c.nodes[i].Kill()
	cfg := &c.cfgs[i]
	cfg.DataDir = c.t.TempDir()
	mem := raft.NewInmemStore()
	cfg.LogStore, cfg.StableStore, cfg.SnapshotStore = mem, mem, raft.NewInmemSnapshotStore()
	// The agent's bootstrap guard: the others' cluster runs, so join it.
	cfg.BeforeBootstrap = func() (bool, error) { return false, nil }
	n := c.restart(i)
	if !n.StartedEmpty() {
		c.t.Fatalf("%s, wiped, does not say it started empty", cfg.ID)
	}
	return n
}

// TestWipedVoterRejoinsAsNonvoter: a follower's disk is replaced and it
// restarts empty with its old id and address. A join that does not say
// so (a 0.1.0 agent) leaves it a voter, as before; one that says it holds
// no raft state has the leader demote it to a non-voter, so its lost log
// and vote elect nobody, and the autopilot makes it a voter again once it
// has caught up and stayed healthy for the stabilization time.
func TestWipedVoterRejoinsAsNonvoter(t *testing.T) {
	const stabilization = 1500 * time.Millisecond
	c, l, logs := wipedCluster(t, stabilization, true)
	if l.StartedEmpty() {
		t.Fatal("the leader, bootstrapped, says it started empty")
	}
	m := c.wipe(c.follower())
	id, addr := m.ID(), m.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if err := l.Join(ctx, id, addr); err != nil {
		t.Fatalf("join without holds_no_state: %v", err)
	}
	if s := suffrageOf(l, id); s != raft.Voter.String() {
		t.Fatalf("a join without holds_no_state made %s a %q: want it left a voter", id, s)
	}

	demoted := time.Now()
	if err := l.JoinEmpty(ctx, id, addr); err != nil {
		t.Fatalf("join with holds_no_state: %v", err)
	}
	if s := suffrageOf(l, id); s != raft.Nonvoter.String() && time.Since(demoted) < stabilization {
		t.Fatalf("%s, rejoined empty, is a %q: want a non-voter", id, s)
	}
	if !strings.Contains(logs.String(), "demoted to non-voter") || !strings.Contains(logs.String(), addr) {
		t.Errorf("the leader's log does not say it demoted %s at %s:\n%s", id, addr, logs)
	}
	testwait.For(t, 15*time.Second, "the autopilot to promote "+id+" again", func() bool {
		return suffrageOf(l, id) == raft.Voter.String()
	})
	if took := time.Since(demoted); took < stabilization {
		t.Fatalf("promoted %v after the demotion, before the stabilization time %v", took, stabilization)
	}
	want := l.FSM().AppliedIndex()
	testwait.For(t, 10*time.Second, id+" to hold the entries committed before its wipe", func() bool {
		return m.FSM().AppliedIndex() >= want
	})
}

// TestWipedVoterStaysVoterAtClusterVersion1: below cluster version 2
// nothing promotes a non-voter (a 0.1.0 member may lead next), so the
// wiped member stays a voter, as before, and the leader warns why.
func TestWipedVoterStaysVoterAtClusterVersion1(t *testing.T) {
	c, l, logs := wipedCluster(t, time.Second, false)
	m := c.wipe(c.follower())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.JoinEmpty(ctx, m.ID(), m.Addr()); err != nil {
		t.Fatalf("join with holds_no_state: %v", err)
	}
	if s := suffrageOf(l, m.ID()); s != raft.Voter.String() {
		t.Fatalf("%s is a %q at cluster version 1: want it left a voter", m.ID(), s)
	}
	if s := logs.String(); !strings.Contains(s, "rejoined holding no raft state") || !strings.Contains(s, "stays a voter") {
		t.Errorf("the leader's log does not warn that the empty member stays a voter:\n%s", s)
	}
}

// TestWipedVoterDemotionKeepsQuorum: demoting a voter of 3 leaves 2 voters
// that must both run. With the third down, the demotion is refused
// (ErrNoQuorum) and the member stays a voter: the leader and it are the
// quorum until the third is back.
func TestWipedVoterDemotionKeepsQuorum(t *testing.T) {
	c, l, _ := wipedCluster(t, time.Hour, true)
	f := c.follower()
	m := c.wipe(f)
	c.nodes[(f+1)%3].Kill() // the third: neither leader nor wiped
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := l.JoinEmpty(ctx, m.ID(), m.Addr())
	if !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("demotion with the third voter down: %v, want ErrNoQuorum", err)
	}
	if s := suffrageOf(l, m.ID()); s != raft.Voter.String() {
		t.Fatalf("%s is a %q after a refused demotion: want a voter", m.ID(), s)
	}
}
