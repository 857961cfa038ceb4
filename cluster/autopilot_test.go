package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/raftfsm"
)

// TestAutopilotPlan walks the plan through time, by hand: a non-voter is
// promoted only after a stabilization period of unbroken health; a dead
// voter is removed only past the timeout and only while MinQuorum other
// voters are healthy.
func TestAutopilotPlan(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	healthy := PeerProgress{Healthy: true, MatchKnown: true}
	member := func(id string, s raft.ServerSuffrage, p PeerProgress) autopilotMember {
		return autopilotMember{Server: raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":1"), Suffrage: s}, Progress: p}
	}
	lim := autopilotLimits{Stabilization: 10 * time.Second, MinQuorum: 3, Self: "m0"}
	st := &autopilotState{healthySince: map[raft.ServerID]time.Time{}, leadingSince: t0}

	voters := []autopilotMember{member("m0", raft.Voter, healthy), member("m1", raft.Voter, healthy), member("m2", raft.Voter, healthy)}
	withNew := func(p PeerProgress) []autopilotMember { return append(voters[:3:3], member("m3", raft.Nonvoter, p)) }
	if p := st.plan(t0, withNew(healthy), lim); p.Promote != nil {
		t.Fatalf("promoted at once: %+v", p)
	}
	if p := st.plan(t0.Add(9*time.Second), withNew(healthy), lim); p.Promote != nil {
		t.Fatalf("promoted before the stabilization time: %+v", p)
	}
	// A break in health starts the period again.
	st.plan(t0.Add(9500*time.Millisecond), withNew(PeerProgress{MatchKnown: true, Lag: 1000}), lim)
	if p := st.plan(t0.Add(12*time.Second), withNew(healthy), lim); p.Promote != nil {
		t.Fatalf("promoted though unhealthy 2.5 s ago: %+v", p)
	}
	p := st.plan(t0.Add(22*time.Second), withNew(healthy), lim)
	if p.Promote == nil || p.Promote.ID != "m3" {
		t.Fatalf("not promoted after 10 s of health: %+v", p)
	}
	if p.Remove != nil {
		t.Fatalf("removal with no dead-member timeout: %+v", p)
	}

	// Dead members.
	lim.DeadAfter = 30 * time.Second
	dead := PeerProgress{MatchKnown: true, LastContact: t0.Add(time.Second)}
	st = &autopilotState{healthySince: map[raft.ServerID]time.Time{}, leadingSince: t0}
	three := []autopilotMember{member("m0", raft.Voter, healthy), member("m1", raft.Voter, healthy), member("m2", raft.Voter, dead)}
	if p := st.plan(t0.Add(40*time.Second), three, lim); p.Remove != nil {
		t.Fatalf("removed a dead voter with no replacement, below min quorum: %+v", p)
	}
	four := append(three[:3:3], member("m3", raft.Voter, healthy))
	if p := st.plan(t0.Add(20*time.Second), four, lim); p.Remove != nil {
		t.Fatalf("removed before the timeout: %+v", p)
	}
	p = st.plan(t0.Add(40*time.Second), four, lim)
	if p.Remove == nil || p.Remove.ID != "m2" || !strings.Contains(p.Why, "dead-member timeout") {
		t.Fatalf("dead voter with a healthy replacement not removed: %+v", p)
	}
	// A voter that never answered this leader counts from when it began
	// to lead.
	never := member("m2", raft.Voter, PeerProgress{})
	st = &autopilotState{healthySince: map[raft.ServerID]time.Time{}, leadingSince: t0.Add(20 * time.Second)}
	if p := st.plan(t0.Add(40*time.Second), []autopilotMember{four[0], four[1], never, four[3]}, lim); p.Remove != nil {
		t.Fatalf("removed 20 s into this leadership: %+v", p)
	}
	// The leader itself is never removed; non-voters are not voters.
	if p := st.plan(t0.Add(time.Hour), []autopilotMember{member("m0", raft.Voter, dead), four[1], four[3], member("m4", raft.Voter, healthy), member("m5", raft.Nonvoter, dead)}, lim); p.Remove != nil {
		t.Fatalf("removed %+v", p)
	}
}

// setClusterFormat2 commits cluster version 2 through leader l, as the
// admin server's raise does: members then join as non-voters.
func setClusterFormat2(t *testing.T, l *Node) {
	t.Helper()
	data, err := raftfsm.EncodeFencedProcBatch(0, raftfsm.Write{Mutations: []raftfsm.Mutation{
		raftfsm.Put(ClusterFormatKey, version.EncodeClusterFormat(version.Format2))}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Raft().Apply(data, 5*time.Second).Error(); err != nil {
		t.Fatalf("set cluster version 2: %v", err)
	}
}

// suffrageOf is id's suffrage in n's configuration, "" if not a member.
func suffrageOf(n *Node, id string) string {
	for _, p := range n.Status().Peers {
		if p.ID == id {
			return p.Suffrage
		}
	}
	return ""
}

// TestJoinAsNonvoterThenPromoted: at cluster version 2 a joining member is
// added as a non-voter, the leader's status shows its lag and health, and
// the autopilot makes it a voter once it has been healthy for the
// stabilization time, not before.
func TestJoinAsNonvoterThenPromoted(t *testing.T) {
	const stabilization = 1500 * time.Millisecond
	c := newTestCluster(t, clusterOpts{n: 3, tweak: func(i int, cfg *Config) {
		steadyTimings(i, cfg)
		cfg.ServerStabilizationTime = stabilization
	}})
	li, x := c.leader()
	l := c.nodes[li]
	setClusterFormat2(t, l)
	ids := submit(t, x, 5, 2, 0)
	c.waitAllSuccess(ids, 2)

	cfg := fastConfig(t, "m3", c.rec)
	steadyTimings(3, &cfg)
	addr, tr := raft.NewInmemTransport("")
	cfg.Transport, cfg.LogStore, cfg.SnapshotStore = tr, raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	cfg.StableStore = cfg.LogStore.(raft.StableStore)
	for _, o := range c.trans {
		o.Connect(addr, tr)
		tr.Connect(o.LocalAddr(), o)
	}
	n4, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n4.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	joined := time.Now()
	if err := l.Join(ctx, "m3", string(addr)); err != nil {
		t.Fatalf("join: %v", err)
	}
	if s := suffrageOf(l, "m3"); s != raft.Nonvoter.String() && time.Since(joined) < stabilization {
		t.Fatalf("m3 joined as %q, want Nonvoter", s)
	}
	testwait.For(t, 10*time.Second, "the leader to see m3 caught up and healthy", func() bool {
		for _, p := range l.Status().Peers {
			if p.ID == "m3" {
				return p.Progress != nil && p.Progress.Healthy && p.Progress.MatchKnown && p.Progress.Lag == 0
			}
		}
		return false
	})
	testwait.For(t, 10*time.Second, "the autopilot to promote m3", func() bool {
		return suffrageOf(l, "m3") == raft.Voter.String()
	})
	if took := time.Since(joined); took < stabilization {
		t.Fatalf("promoted %v after the join, before the stabilization time %v", took, stabilization)
	}
	// A follower's status has no leader's view.
	for _, p := range n4.Status().Peers {
		if p.Progress != nil {
			t.Errorf("follower shows progress of %s: %+v", p.ID, p.Progress)
		}
	}
}

// TestJoinAtClusterVersion1AddsVoter: while the cluster is at version 1 (a
// 0.1.0 member may lead next, and would never promote), a join adds a
// voter at once, as 0.1.0 does.
func TestJoinAtClusterVersion1AddsVoter(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 1})
	li, _ := c.leader()
	cfg := fastConfig(t, "m1", c.rec)
	addr, tr := raft.NewInmemTransport("")
	cfg.Transport, cfg.LogStore, cfg.SnapshotStore = tr, raft.NewInmemStore(), raft.NewInmemSnapshotStore()
	cfg.StableStore = cfg.LogStore.(raft.StableStore)
	c.trans[0].Connect(addr, tr)
	tr.Connect(c.trans[0].LocalAddr(), c.trans[0])
	n2, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.nodes[li].Join(ctx, "m1", string(addr)); err != nil {
		t.Fatalf("join: %v", err)
	}
	if s := suffrageOf(c.nodes[li], "m1"); s != raft.Voter.String() {
		t.Fatalf("m1 joined as %q at cluster version 1, want Voter", s)
	}
}

// TestGracefulShutdownTransfersLeadership: a leader shut down gracefully
// hands leadership over (raft's LeadershipTransfer) before it stops: by
// the time Shutdown returns another member has started the next term,
// which no election timeout could have made it do (the leader heartbeat
// until then, and the timeouts are 500 ms), and that member leads in the
// very next term.
func TestGracefulShutdownTransfersLeadership(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3, tweak: steadyTimings})
	li, _ := c.leader()
	old := c.nodes[li]
	term := old.Raft().CurrentTerm()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := old.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	moved := false
	for i, n := range c.nodes {
		if i != li && n.Raft().CurrentTerm() > term {
			moved = true
		}
	}
	if !moved {
		t.Fatalf("no other member in a term above %d when Shutdown returned: leadership was not handed over", term)
	}
	c.nodes[li] = nil
	c.isolate(li)
	nl, _ := c.leader(li)
	if got := c.nodes[nl].Raft().CurrentTerm(); got != term+1 {
		t.Errorf("new leader %s in term %d, want %d (the transfer's election, not a later one)", c.nodes[nl].ID(), got, term+1)
	}
}
