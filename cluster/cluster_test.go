package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
)

func TestParsePeers(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []Peer
		wantErr string
	}{
		{in: "", want: nil},
		{in: "a=h1:1", want: []Peer{{"a", "h1:1"}}},
		{in: " a = h1:1 , b=10.0.0.2:7000", want: []Peer{{"a", "h1:1"}, {"b", "10.0.0.2:7000"}}},
		{in: "a=[::1]:7000", want: []Peer{{"a", "[::1]:7000"}}},
		{in: "a=h:1,", wantErr: "item 2 is empty"},
		{in: "a", wantErr: "want id=host:port"},
		{in: "=h:1", wantErr: "empty id"},
		{in: "a=h", wantErr: "want host:port"},
		{in: "a=:1", wantErr: "empty host"},
		{in: "a=h:x", wantErr: "port must be a number"},
		{in: "a=h:70000", wantErr: "port must be a number"},
		{in: "a=h:1,a=h:2", wantErr: `id "a" appears in items 1 and 2`},
		{in: "a=h:1,b=h:1", wantErr: `address "h:1" appears in items 1 and 2`},
	} {
		got, err := ParsePeers(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParsePeers(%q) error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParsePeers(%q): %v", tc.in, err)
			continue
		}
		if FormatPeers(got) != FormatPeers(tc.want) || len(got) != len(tc.want) {
			t.Errorf("ParsePeers(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := func() Config {
		c := DefaultConfig()
		c.ID, c.DataDir, c.RaftAddr = "a", "/tmp/x", "127.0.0.1:7000"
		c.Registry = procedure.NewRegistry()
		c.Peers = []Peer{{"a", "127.0.0.1:7000"}, {"b", "127.0.0.1:7001"}}
		return c
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	// Counts set below the byte budget's floor stay as set: the default
	// floor must not make such a config invalid.
	few := good()
	few.SnapshotThreshold, few.TrailingLogs = 32, 16
	if err := few.Validate(); err != nil {
		t.Fatalf("config with small log counts: %v", err)
	}
	for _, tc := range []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{"no id", func(c *Config) { c.ID = "" }, "ID is required"},
		{"no dir", func(c *Config) { c.DataDir = "" }, "DataDir is required"},
		{"no addr", func(c *Config) { c.RaftAddr = "" }, "RaftAddr is required"},
		{"wildcard addr", func(c *Config) { c.RaftAddr = "0.0.0.0:7000"; c.Peers = nil }, "not a wildcard"},
		{"bad addr", func(c *Config) { c.RaftAddr = "nope" }, "RaftAddr"},
		{"no registry", func(c *Config) { c.Registry = nil }, "Registry is required"},
		{"lease", func(c *Config) { c.LeaderLeaseTimeout = time.Second }, "LeaderLeaseTimeout 1s exceeds HeartbeatTimeout"},
		{"tiny heartbeat", func(c *Config) { c.HeartbeatTimeout = time.Millisecond; c.LeaderLeaseTimeout = time.Millisecond }, "below raft's minimum"},
		{"negative", func(c *Config) { c.RevokeTimeout = -1 }, "RevokeTimeout -1ns is negative"},
		{"self missing", func(c *Config) { c.Peers = c.Peers[1:] }, `does not list this node's ID "a"`},
		{"self addr", func(c *Config) { c.Peers[0].Address = "127.0.0.1:9" }, `but RaftAddr is "127.0.0.1:7000"`},
		{"dup id", func(c *Config) { c.Peers[1].ID = "a" }, `id "a" appears twice`},
		{"half store", func(c *Config) { c.LogStore = raft.NewInmemStore() }, "go together"},
	} {
		c := good()
		tc.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: Validate() = %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestElectionAndFollowerRedirect(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3})
	li, _ := c.leader()
	l := c.nodes[li]
	for i, n := range c.nodes {
		if i == li {
			continue
		}
		testwait.For(t, 5*time.Second, "follower to know the leader", func() bool {
			id, _ := n.Leader()
			return id == l.ID()
		})
		_, err := n.Executor()
		var nle *NotLeaderError
		if !errors.As(err, &nle) || !errors.Is(err, ErrNotLeader) || !errors.Is(err, raft.ErrNotLeader) {
			t.Fatalf("follower %s Executor() = %v, want a NotLeaderError", n.ID(), err)
		}
		if nle.LeaderID != l.ID() || nle.LeaderAddr != l.Addr() {
			t.Errorf("follower %s names leader %q at %q, want %q at %q", n.ID(), nle.LeaderID, nle.LeaderAddr, l.ID(), l.Addr())
		}
		if err := n.Join(context.Background(), "x", "127.0.0.1:1"); !errors.Is(err, ErrNotLeader) {
			t.Errorf("Join on follower = %v, want ErrNotLeader", err)
		}
		if n.IsLeader() {
			t.Errorf("follower %s claims leadership", n.ID())
		}
	}
	st := l.Status()
	if st.State != "Leader" || st.LeaderID != l.ID() || !st.Executor || st.Term == 0 || len(st.Peers) != 3 {
		t.Errorf("leader status %+v", st)
	}
	voters := 0
	for _, p := range st.Peers {
		if p.Suffrage == "Voter" {
			voters++
		}
	}
	if voters != 3 {
		t.Errorf("status lists %d voters, want 3: %+v", voters, st.Peers)
	}
}

// TestHardFailover kills the leader (raft shut down, no transfer, no
// graceful executor stop) while procedures are half-way; the next leader
// resumes them and each reaches SUCCESS exactly once.
func TestHardFailover(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3})
	li, x := c.leader()
	const steps = 6
	ids := submit(t, x, 40, steps, 20*time.Millisecond)
	// Kill once some procedures have made progress and none has finished.
	c.waitMidFlight(ids)
	c.isolate(li)
	if err := c.nodes[li].Kill(); err != nil {
		t.Logf("kill: %v", err)
	}
	c.nodes[li] = nil
	c.rec.mu.Lock()
	finished := len(c.rec.successes)
	c.rec.mu.Unlock()
	t.Logf("killed leader with %d/%d procedures finished", finished, len(ids))

	nl, x2 := c.leader(li)
	if nl == li {
		t.Fatal("dead node still leader")
	}
	if p := x2.Problems(); len(p) > 0 {
		t.Fatalf("new leader load problems: %+v", p)
	}
	c.waitAllSuccess(ids, steps)
	// The survivors keep working.
	more := submit(t, x2, 5, 2, 0)
	c.waitAllSuccess(more, 2)
}

// TestGracefulShutdownHandsOver shuts the leader down gracefully while
// procedures run: leadership moves to another node and nothing fails.
func TestGracefulShutdownHandsOver(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3})
	li, x := c.leader()
	const steps = 5
	ids := submit(t, x, 30, steps, 20*time.Millisecond)
	c.waitMidFlight(ids)
	old := c.nodes[li]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := old.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := old.Executor(); !errors.Is(err, ErrShutdown) {
		t.Errorf("Executor() after Shutdown = %v, want ErrShutdown", err)
	}
	c.nodes[li] = nil
	c.isolate(li)
	nl, _ := c.leader(li)
	t.Logf("leadership moved from %s to %s", old.ID(), c.nodes[nl].ID())
	c.waitAllSuccess(ids, steps)
}

// TestPartitionedLeaderStopsExecutor cuts the leader off: it steps down
// (its lease lapses) and stops its executor, while the majority elects a
// new leader that carries on. After healing, the old leader follows.
func TestPartitionedLeaderStopsExecutor(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3})
	li, x := c.leader()
	const steps = 4
	ids := submit(t, x, 20, steps, 20*time.Millisecond)
	old := c.nodes[li]
	c.isolate(li)
	testwait.For(t, 10*time.Second, "the partitioned leader to step down and stop its executor", func() bool {
		_, err := old.Executor()
		return !old.IsLeader() && !old.Status().Executor && errors.Is(err, ErrNotLeader)
	})
	// The old executor refuses work now.
	if _, err := x.Submit(&stepProc{Steps: 1}, procedure.SubmitOptions{}); err == nil {
		t.Error("stopped executor accepted a submission")
	}
	nl, x2 := c.leader(li)
	more := submit(t, x2, 5, 2, 0)
	c.waitAllSuccess(ids, steps)
	c.waitAllSuccess(more, 2)
	c.reconnect(li)
	testwait.For(t, 10*time.Second, "the old leader to follow the new one", func() bool {
		id, _ := old.Leader()
		return id == c.nodes[nl].ID() && old.FSM().AppliedIndex() >= c.nodes[nl].FSM().AppliedIndex()
	})
}

// TestJoinAndRemove adds a fourth node (no bootstrap peers) with Join,
// re-joins it under a new address (the stale entry is replaced), and
// removes it.
func TestJoinAndRemove(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3})
	li, x := c.leader()
	ids := submit(t, x, 5, 2, 0)
	c.waitAllSuccess(ids, 2)

	cfg := fastConfig(t, "m3", c.rec)
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
	l := c.nodes[li]
	if err := l.Join(ctx, "m3", string(addr)); err != nil {
		t.Fatalf("join: %v", err)
	}
	if err := l.Join(ctx, "m3", string(addr)); err != nil {
		t.Fatalf("join again (no-op): %v", err)
	}
	testwait.For(t, 10*time.Second, "the new node to catch up", func() bool {
		return n4.FSM().AppliedIndex() >= l.FSM().AppliedIndex() && len(n4.Status().Peers) == 4
	})
	for _, id := range ids {
		if _, ok := n4.FSM().Proc(id); !ok {
			t.Errorf("joined node lacks procedure %d", id)
		}
	}
	// Same id, new address: the stale member is replaced, not duplicated.
	if err := l.Join(ctx, "m3", "10.9.9.9:7000"); err != nil {
		t.Fatalf("rejoin: %v", err)
	}
	st := l.Status()
	found := 0
	for _, p := range st.Peers {
		if p.ID == "m3" {
			found++
			if p.Address != "10.9.9.9:7000" {
				t.Errorf("m3 at %q after rejoin", p.Address)
			}
		}
	}
	if found != 1 || len(st.Peers) != 4 {
		t.Errorf("peers after rejoin: %+v", st.Peers)
	}
	if err := l.RemovePeer(ctx, "m3"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if err := l.RemovePeer(ctx, "m3"); !errors.Is(err, ErrUnknownPeer) || Code(err) != codes.NotFound {
		t.Fatalf("remove again: %v, want ErrUnknownPeer (NOT_FOUND)", err)
	}
	if n := len(l.Status().Peers); n != 3 {
		t.Errorf("%d peers after remove, want 3", n)
	}
}

// TestRemoveLeaderHandsOver: the leader asked to remove itself hands
// leadership to another voter and answers not-leader, naming none of its
// own; the new leader removes it. The removed node's raft keeps running
// (ShutdownOnRemove off), it reports itself removed once it knows, and a
// Join takes it back as a voter that follows the leader, without restart.
func TestRemoveLeaderHandsOver(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3})
	li, x := c.leader()
	ids := submit(t, x, 3, 1, 0)
	c.waitAllSuccess(ids, 1)
	old := c.nodes[li]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := old.RemovePeer(ctx, old.ID())
	var nle *NotLeaderError
	if !errors.As(err, &nle) || old.IsLeader() {
		t.Fatalf("leader removing itself: %v (leader still: %v), want a NotLeaderError after handing over", err, old.IsLeader())
	}
	nl, _ := c.leader(li)
	l := c.nodes[nl]
	if err := l.RemovePeer(ctx, old.ID()); err != nil {
		t.Fatalf("new leader removing %s: %v", old.ID(), err)
	}
	if len(l.Status().Peers) != 2 {
		t.Fatalf("peers after removal: %+v", l.Status().Peers)
	}
	// The leader's word, as the admin API passes it on when the change
	// did not reach the node itself.
	old.MarkRemoved()
	if !old.Removed() || !old.Status().Removed || old.Status().State == raft.Shutdown.String() {
		t.Fatalf("removed node: removed %v, state %s", old.Removed(), old.Status().State)
	}
	if err := l.Join(ctx, old.ID(), old.Addr()); err != nil {
		t.Fatalf("re-join: %v", err)
	}
	testwait.For(t, 10*time.Second, "the re-joined node to follow the leader as a voter", func() bool {
		id, _ := old.Leader()
		return id == l.ID() && !old.Removed() && len(old.Status().Peers) == 3 && old.FSM().AppliedIndex() >= l.FSM().AppliedIndex()
	})
}

// TestRemoveOnlyVoter: a single voter cannot remove itself.
func TestRemoveOnlyVoter(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 1})
	li, _ := c.leader()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.nodes[li].RemovePeer(ctx, c.nodes[li].ID())
	if !errors.Is(err, ErrLastVoter) || Code(err) != codes.FailedPrecondition {
		t.Fatalf("removing the only voter: %v, want ErrLastVoter (FAILED_PRECONDITION)", err)
	}
}

// TestTCPRestartCatchesUp runs three nodes on real TCP ports with bolt
// stores: a follower that was shut down (after a snapshot) restarts from
// the same DataDir and the same command line and catches up; then the
// leader is killed, the cluster fails over, and the killed node restarts
// and catches up too.
func TestTCPRestartCatchesUp(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3, tcp: true, tweak: steadyTimings})
	li, x := c.leader()
	ids := submit(t, x, 10, 3, 10*time.Millisecond)
	c.waitAllSuccess(ids, 3)

	fi := (li + 1) % 3
	f := c.nodes[fi]
	c.snapshotAndStop(t, li, fi)

	li, x = c.leader(fi)
	more := submit(t, x, 10, 3, 10*time.Millisecond)
	c.waitAllSuccess(more, 3)

	f = c.restart(fi)
	if !f.noSnapshotRestore {
		t.Error("restart after a snapshot the WAL covers should skip raft's snapshot restore")
	}
	// Caught up with whichever node leads now: on a loaded machine
	// leadership may move while the test waits, and the leader it picked
	// earlier is then no reference.
	caughtUp := func(n *Node) func() bool {
		return func() bool {
			id, _ := n.Leader()
			for _, ref := range c.nodes {
				if ref != nil && ref.ID() == id && ref.IsLeader() {
					return n.FSM().AppliedIndex() >= ref.FSM().AppliedIndex()
				}
			}
			return false
		}
	}
	testwait.For(t, 15*time.Second, "restarted follower to catch up", caughtUp(f))
	for _, id := range append(append([]uint64{}, ids...), more...) {
		if _, ok := f.FSM().Proc(id); !ok {
			t.Errorf("restarted follower lacks procedure %d", id)
		}
	}

	// Hard-kill the leader: failover over TCP, then restart the dead one.
	if err := c.nodes[li].Kill(); err != nil {
		t.Logf("kill: %v", err)
	}
	dead := li
	c.nodes[dead] = nil
	li, x = c.leader(dead)
	last := submit(t, x, 5, 2, 0)
	c.waitAllSuccess(last, 2)
	for _, id := range append(ids, more...) {
		info, err := x.Get(id)
		if err != nil || info.State != procedure.Success {
			t.Errorf("after failover procedure %d: %+v, %v", id, info.State, err)
		}
	}
	n := c.restart(dead)
	testwait.For(t, 15*time.Second, "restarted leader to catch up", caughtUp(n))
	if st := n.Status(); st.State != "Follower" || len(st.Peers) != 3 {
		t.Errorf("restarted node status %+v", st)
	}

	// A node whose local WAL is lost restores the snapshot instead.
	li, _ = c.leader()
	fi = (li + 1) % 3
	f = c.nodes[fi]
	testwait.For(t, 10*time.Second, "follower to follow the new leader", caughtUp(f))
	c.snapshotAndStop(t, li, fi)
	if err := os.RemoveAll(filepath.Join(c.cfgs[fi].DataDir, "fsm")); err != nil {
		t.Fatal(err)
	}
	f = c.restart(fi)
	if f.noSnapshotRestore {
		t.Error("restart without a local WAL must restore raft's snapshot")
	}
	testwait.For(t, 15*time.Second, "follower without WAL to catch up", caughtUp(f))
	for _, id := range append(append(append([]uint64{}, ids...), more...), last...) {
		if _, ok := f.FSM().Proc(id); !ok {
			t.Errorf("rebuilt follower lacks procedure %d", id)
		}
	}
}

// TestFailoverTimeDefaultTimings measures, without asserting, how long a
// hard failover takes with the default LAN timings: from killing the
// leader to a new leader's executor being ready.
func TestFailoverTimeDefaultTimings(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	c := newTestCluster(t, clusterOpts{n: 3})
	d := DefaultConfig()
	for _, n := range c.nodes {
		// Re-tune the running rafts to the defaults.
		if err := n.Raft().ReloadConfig(raft.ReloadableConfig{
			TrailingLogs: d.TrailingLogs, SnapshotInterval: d.SnapshotInterval, SnapshotThreshold: d.SnapshotThreshold,
			HeartbeatTimeout: d.HeartbeatTimeout, ElectionTimeout: d.ElectionTimeout,
		}); err != nil {
			t.Fatal(err)
		}
	}
	li, x := c.leader()
	ids := submit(t, x, 5, 3, 10*time.Millisecond)
	c.isolate(li)
	start := time.Now()
	c.nodes[li].Kill()
	c.nodes[li] = nil
	c.leader(li)
	t.Logf("failover with default timings (heartbeat %v, election %v): %v", d.HeartbeatTimeout, d.ElectionTimeout, time.Since(start))
	c.waitAllSuccess(ids, 3)
}

// A lease left unset defaults to the heartbeat timeout when that is set
// below the default lease: the default must not make a config that sets
// only HeartbeatTimeout (say 200 ms) invalid, as it did once the default
// lease was raised to 300 ms.
func TestConfigLeaseDefaultsWithinHeartbeat(t *testing.T) {
	base := func() Config {
		return Config{ID: "a", DataDir: "/tmp/x", RaftAddr: "127.0.0.1:7000", Registry: procedure.NewRegistry()}
	}
	for _, tc := range []struct {
		heartbeat, wantLease time.Duration
	}{
		{0, DefaultLeaderLeaseTimeout},
		{200 * time.Millisecond, 200 * time.Millisecond},
		{50 * time.Millisecond, 50 * time.Millisecond},
		{time.Second, DefaultLeaderLeaseTimeout},
	} {
		c := base()
		c.HeartbeatTimeout = tc.heartbeat
		if err := c.Validate(); err != nil {
			t.Errorf("HeartbeatTimeout %v, lease unset: %v", tc.heartbeat, err)
		}
		if got := c.withDefaults().LeaderLeaseTimeout; got != tc.wantLease {
			t.Errorf("HeartbeatTimeout %v: lease defaults to %v, want %v", tc.heartbeat, got, tc.wantLease)
		}
	}
	// A lease set explicitly is kept, and refused above the heartbeat.
	c := base()
	c.HeartbeatTimeout, c.LeaderLeaseTimeout = 200*time.Millisecond, 250*time.Millisecond
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "exceeds HeartbeatTimeout") {
		t.Errorf("lease 250ms over heartbeat 200ms: Validate() = %v", err)
	}
}

// TestJoinGrowsASingleVoter: the quorum check of Join (ErrNoQuorum) does
// not count the member being added, yet a single-voter cluster still
// takes its second one: there is no other way to grow it.
func TestJoinGrowsASingleVoter(t *testing.T) {
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
		t.Fatalf("join the second member: %v", err)
	}
	testwait.For(t, 10*time.Second, "the second member to follow", func() bool {
		id, _ := n2.Leader()
		return id == c.nodes[li].ID() && len(n2.Status().Peers) == 2
	})
}
