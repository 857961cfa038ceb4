package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TestBootstrapGuardWipedMember: a member of a running 3-member cluster
// whose storage is lost comes back with the same configuration (its
// Peers, as the derived flags give on every start); the guard asks the
// others, who name a leader, so it does not bootstrap but joins through
// them (the agent's joinCluster, for an id still in the configuration),
// catches up, and every member reports the same leader and cluster id,
// with the procedures submitted before. Its join says it holds no raft
// state, so the leader demotes it, still a voter in the configuration, to
// a non-voter (its lost log and vote must elect nobody), and the autopilot
// makes it a voter again once it has caught up and stayed healthy.
func TestBootstrapGuardWipedMember(t *testing.T) {
	var c *clustertest.Cluster
	var guarding atomic.Bool // off for the first start: nobody has a cluster yet
	decided := map[string]chan bool{}
	const stabilization = time.Second
	c = clustertest.New(t, clustertest.Config{NoDomain: true, Node: func(i int, cfg *cluster.Config) {
		id := cfg.ID
		cfg.ServerStabilizationTime = stabilization
		decided[id] = make(chan bool, 4)
		cfg.BeforeBootstrap = func() (bool, error) {
			if !guarding.Load() {
				return true, nil
			}
			var others []string
			for _, m := range c.Masters() {
				if m.ID != id {
					others = append(others, m.AdminAddr())
				}
			}
			g := bootstrapGuard{self: id, addrs: others, ask: grpcStatusAsker(nil), logger: cfg.Logger.Named("bootstrap-guard")}
			boot, err := g.beforeBootstrap(t.Context())
			decided[id] <- boot
			return boot, err
		}
	}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cl := c.Client()
	var before []uint64
	for range 5 {
		p, err := cl.Submit(ctx, "sleep", map[string]string{"steps": "1"}, "", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Wait(ctx, p); err != nil {
			t.Fatal(err)
		}
		before = append(before, p)
	}
	li, _ := c.WaitLeader()
	wiped := (li + 1) % 3
	guarding.Store(true)
	c.Wipe(wiped)
	m := c.Restart(wiped)
	if boot := <-decided[m.ID]; boot {
		t.Fatalf("%s, wiped, bootstrapped although the others' cluster runs; log:\n%s", m.ID, m.Log())
	}
	if !strings.Contains(m.Log(), "joining it instead of bootstrapping") {
		t.Errorf("%s's log does not say it joins instead of bootstrapping:\n%s", m.ID, m.Log())
	}

	// What the agent does next: join through the others, although the
	// configuration still names it.
	var others []string
	for _, o := range c.Masters() {
		if o.ID != m.ID {
			others = append(others, o.AdminAddr())
		}
	}
	if !m.Node().StartedEmpty() {
		t.Fatalf("%s, wiped, does not say it started empty", m.ID)
	}
	jctx, jcancel := context.WithCancel(ctx)
	defer jcancel()
	joined := make(chan struct{})
	go func() {
		defer close(joined)
		joinCluster(jctx, agentConfig{ID: m.ID, RaftAddr: m.Node().Addr(), GRPCAddr: m.AdminAddr(), Join: others}, m.Node().StartedEmpty(), nil, hclog.NewNullLogger())
	}()
	joining := time.Now()
	select {
	case <-joined:
	case <-ctx.Done():
		t.Fatalf("%s never joined", m.ID)
	}

	leader := c.Master(li).Node()
	suffrage := func() string {
		for _, p := range leader.Status().Peers {
			if p.ID == m.ID {
				return p.Suffrage
			}
		}
		return ""
	}
	if s := suffrage(); s != "Nonvoter" && time.Since(joining) < stabilization {
		t.Fatalf("%s, rejoined empty, is a %q: want a non-voter until the autopilot promotes it", m.ID, s)
	}
	if l := c.Master(li).Log(); !strings.Contains(l, "demoted to non-voter") {
		t.Errorf("the leader's log does not say it demoted %s:\n%s", m.ID, l)
	}
	c.WaitForNil("the autopilot to promote "+m.ID+" again", func() error {
		if s := suffrage(); s != "Voter" {
			return fmt.Errorf("%s is a %q", m.ID, s)
		}
		return nil
	})
	if took := time.Since(joining); took < stabilization {
		t.Errorf("%s promoted %v after its join, before the stabilization time %v", m.ID, took, stabilization)
	}
	c.WaitForNil(m.ID+" caught up, following the same leader in one configuration", func() error {
		lid, _ := leader.Leader()
		for _, o := range c.Masters() {
			n := o.Node()
			if id, _ := n.Leader(); id != lid {
				return fmt.Errorf("%s follows %q, %s leads", o.ID, id, lid)
			}
			if n.FSM().AppliedIndex() < leader.FSM().AppliedIndex() {
				return fmt.Errorf("%s applied %d < leader's %d", o.ID, n.FSM().AppliedIndex(), leader.FSM().AppliedIndex())
			}
			if got := len(n.Status().Peers); got != 3 {
				return fmt.Errorf("%s has %d members", o.ID, got)
			}
		}
		return nil
	})
	var ids []string
	for _, o := range c.Masters() {
		st, err := o.Admin().ClusterStatus(ctx, &adminpb.ClusterStatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, st.GetClusterId())
	}
	if ids[0] == "" || slices.ContainsFunc(ids, func(s string) bool { return s != ids[0] }) {
		t.Errorf("cluster ids %v: want one, the same on every member", ids)
	}
	// The procedures submitted before are in the wiped member's state: a
	// stale read, answered from its own.
	for _, p := range before {
		got, err := m.Admin().GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: p, Consistency: adminpb.Consistency_STALE})
		if err != nil || got.GetState() != "SUCCESS" {
			t.Errorf("procedure %d submitted before the wipe, read on %s: %v, %v", p, m.ID, got.GetState(), err)
		}
	}
}
