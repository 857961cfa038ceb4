package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/testwait"
)

// refusingLogStore is a member's log that takes no entries (a disk full
// or failing after the member was rebuilt): it answers the leader, but
// its log stays empty.
type refusingLogStore struct{ *raft.InmemStore }

func (refusingLogStore) StoreLog(*raft.Log) error { return errors.New("disk full") }
func (refusingLogStore) StoreLogs([]*raft.Log) error {
	return errors.New("disk full")
}

// TestLeaderSeesAMemberRebuiltEmpty: a member the leader saw caught up is
// rebuilt with an empty log (same id and address) that does not catch up.
// Its answers say so (AppendEntries refused, its last index 0), so the
// leader must stop reporting it caught up and healthy: a stale match
// index would have the autopilot promote it, or count it towards
// --min-quorum, while it holds nothing.
func TestLeaderSeesAMemberRebuiltEmpty(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3, tweak: func(i int, cfg *Config) {
		steadyTimings(i, cfg)
		cfg.ServerStabilizationTime = time.Hour // stays a non-voter
		cfg.MaxTrailingLogs = 3
	}})
	li, x := c.leader()
	l := c.nodes[li]
	setClusterFormat2(t, l)
	ids := submit(t, x, 5, 2, 0)
	c.waitAllSuccess(ids, 2)

	start := func(logs raft.LogStore) (*Node, raft.ServerAddress) { return c.startMember(t, "m3", logs) }
	m3, addr := start(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Join(ctx, "m3", string(addr)); err != nil {
		t.Fatalf("join: %v", err)
	}
	progress := func() PeerProgress {
		for _, p := range l.Status().Peers {
			if p.ID == "m3" && p.Progress != nil {
				return *p.Progress
			}
		}
		return PeerProgress{}
	}
	testwait.For(t, 10*time.Second, "the leader to see m3 caught up", func() bool {
		p := progress()
		return p.Healthy && p.Lag == 0
	})
	m3.Kill()
	rebuilt := time.Now()
	start(refusingLogStore{raft.NewInmemStore()})
	testwait.For(t, 10*time.Second, "the rebuilt m3 to answer the leader", func() bool {
		return progress().LastContact.After(rebuilt)
	})
	last := l.Raft().LastIndex()
	testwait.ForNil(t, 5*time.Second, "the leader to see the rebuilt m3 hold nothing", func() error {
		if p := progress(); p.Healthy || p.Lag < last-3 {
			return fmt.Errorf("leader's view of m3 (last index %d): %+v", last, p)
		}
		return nil
	})
}

// startMember starts a node id, not yet a member, on the cluster's
// in-memory network (same address each time), its log in logs (fresh
// if nil).
func (c *testCluster) startMember(t *testing.T, id string, logs raft.LogStore) (*Node, raft.ServerAddress) {
	t.Helper()
	cfg := fastConfig(t, id, c.rec)
	steadyTimings(0, &cfg)
	addr, tr := raft.NewInmemTransport(raft.ServerAddress(id + "-addr"))
	mem := raft.NewInmemStore()
	if logs == nil {
		logs = mem
	}
	cfg.Transport, cfg.LogStore, cfg.StableStore, cfg.SnapshotStore = tr, logs, mem, raft.NewInmemSnapshotStore()
	for _, o := range c.trans {
		o.Connect(addr, tr)
		tr.Connect(o.LocalAddr(), o)
	}
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Kill() })
	return n, addr
}

// TestAutopilotPromotionFencedToTheConfigurationItRead: the autopilot
// reads the configuration, decides to promote a non-voter, and waits for
// the quorum check; an operator's `cluster remove` of that member commits
// meanwhile. The promotion must not bring the removed member back as a
// voter (raft's AddVoter adds a server it does not have).
func TestAutopilotPromotionFencedToTheConfigurationItRead(t *testing.T) {
	l, _, addr := joinedNonvoter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cf := l.Raft().GetConfiguration()
	if err := cf.Error(); err != nil {
		t.Fatal(err)
	}
	read := cf.Configuration()
	m3 := raft.Server{ID: "m3", Address: addr, Suffrage: raft.Nonvoter}
	if err := l.RemovePeer(ctx, "m3"); err != nil {
		t.Fatalf("remove m3: %v", err)
	}
	err := l.promote(ctx, read.Servers, m3)
	if s := suffrageOf(l, "m3"); s != "" {
		t.Fatalf("the removed m3 is back as a %s (promote: %v)", s, err)
	}
}

// TestAutopilotDoesNotPromoteAMemberThatJustDied: a non-voter counts as
// healthy for two heartbeat timeouts after its last answer, so the
// autopilot may decide to promote one that has just died. The promotion
// must not go through (three voters and a dead fourth tolerate no further
// failure, where three tolerated one): the member must answer now.
func TestAutopilotDoesNotPromoteAMemberThatJustDied(t *testing.T) {
	l, m3, _ := joinedNonvoter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	testwait.For(t, 10*time.Second, "the leader to see m3 healthy", func() bool {
		for _, p := range l.Status().Peers {
			if p.ID == "m3" {
				return p.Progress != nil && p.Progress.Healthy
			}
		}
		return false
	})
	m3.Kill()
	now := time.Now()
	st := &autopilotState{healthySince: map[raft.ServerID]time.Time{"m3": now.Add(-2 * time.Hour)}, leadingSince: now.Add(-2 * time.Hour)}
	err := l.autopilotTick(ctx, st, now)
	if s := suffrageOf(l, "m3"); s != raft.Nonvoter.String() {
		t.Fatalf("m3, dead, is now a %s (tick: %v)", s, err)
	}
}

// joinedNonvoter is a 3-member cluster at cluster version 2 whose leader l
// has just joined a fresh member m3 as a non-voter, with a stabilization
// time its own loop never reaches: each test promotes by hand.
func joinedNonvoter(t *testing.T) (l, m3 *Node, addr raft.ServerAddress) {
	t.Helper()
	c := newTestCluster(t, clusterOpts{n: 3, tweak: func(i int, cfg *Config) {
		steadyTimings(i, cfg)
		cfg.ServerStabilizationTime = time.Hour // the loop never promotes
	}})
	li, _ := c.leader()
	l = c.nodes[li]
	setClusterFormat2(t, l)
	m3, addr = c.startMember(t, "m3", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Join(ctx, "m3", string(addr)); err != nil {
		t.Fatalf("join: %v", err)
	}
	return l, m3, addr
}

// TestNonvoterIsNotReadyUntilPromoted: a caught-up non-voter is not ready
// (/readyz, Node.CatchUp), since readiness counts a member toward a
// Kubernetes disruption budget that protects a quorum of voters; promoted,
// the same member is.
func TestNonvoterIsNotReadyUntilPromoted(t *testing.T) {
	l, m3, addr := joinedNonvoter(t)
	testwait.For(t, 10*time.Second, "the non-voter m3 to have caught up with the leader", func() bool {
		cu := m3.CatchUp()
		return !cu.CaughtUp && strings.Contains(cu.Reason, "non-voter") && cu.Lag <= m3.cfg.ReadyMaxLag
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := await(ctx, l.raft.AddVoter("m3", addr, 0, 0)); err != nil {
		t.Fatalf("promote m3: %v", err)
	}
	testwait.For(t, 10*time.Second, "m3, a voter now, to be ready", func() bool {
		return m3.CatchUp().CaughtUp
	})
}
