package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/integration/harness"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// The in-process clusters below run cluster.Node directly, for what the
// agent does not let a test control: the network between nodes (raft's
// in-memory transport can partition them) and Raft's snapshot settings.

// stepLog records, across the nodes of an in-process cluster, which node
// ran which step of a probe procedure, and when.
type stepLog struct {
	mu    sync.Mutex
	steps []stepRun
}

type stepRun struct {
	node string
	id   uint64
	step int
	at   time.Time
}

func (l *stepLog) add(r stepRun) {
	l.mu.Lock()
	l.steps = append(l.steps, r)
	l.mu.Unlock()
}

func (l *stepLog) runs() []stepRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]stepRun(nil), l.steps...)
}

// probeEnv is a node's Env: its id and the shared step log.
type probeEnv struct {
	node string
	log  *stepLog
}

// probe is a sleep that also logs, in its node's Env, every step it runs:
// which node dispatched work when.
type probe struct {
	procedure.Base
	Steps int
	Delay time.Duration
	Done  int
}

func (p *probe) Execute(ctx *procedure.Context) (procedure.Step, error) {
	if p.Done >= p.Steps {
		return procedure.Done(), nil
	}
	if env, ok := ctx.Env.(*probeEnv); ok {
		env.log.add(stepRun{node: env.node, id: ctx.ID(), step: p.Done, at: time.Now()})
	}
	if err := diag.RecordEffect(ctx, p.Done, 1); err != nil {
		return procedure.Step{}, err
	}
	p.Done++
	return procedure.Suspend(procedure.Timeout(p.Delay)), nil
}

func (p *probe) Rollback(ctx *procedure.Context) error {
	if p.Done > 0 {
		p.Done--
		return diag.RecordEffect(ctx, p.Done, -1)
	}
	return nil
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ipCluster is an in-process cluster of cluster.Nodes.
type ipCluster struct {
	t     *testing.T
	log   *stepLog
	cfgs  []cluster.Config
	logs  []*syncBuffer
	nodes []*cluster.Node        // nil while a node is down
	trans []*raft.InmemTransport // nil entries on TCP

	// With serveAdmin: each running node's admin API, every call it
	// receives (clients', and standbys' forwarded ones) passing faults.
	faults     *rpcfault.Injector
	adminAddrs []string
	admins     []*admin.Server // nil while a node is down
}

// newIPCluster starts n nodes with fast timings. tcp selects raft's TCP
// transport on loopback with the real bolt and file stores (as the agent
// uses); otherwise the in-memory transport and stores, which can
// partition. tweak adjusts each node's configuration.
func newIPCluster(t *testing.T, n int, tcp bool, tweak func(*cluster.Config)) *ipCluster {
	t.Helper()
	c := &ipCluster{t: t, log: &stepLog{}}
	var peers []cluster.Peer
	var addrs []string
	if tcp {
		addrs = harness.FreePorts(t, n)
	}
	for i := range n {
		id := fmt.Sprintf("m%d", i+1)
		reg := procedure.NewRegistry()
		if err := diag.Register(reg); err != nil {
			t.Fatal(err)
		}
		reg.MustRegister("probe", 1, func() procedure.Procedure { return &probe{} })
		buf := &syncBuffer{}
		level := hclog.Info
		if os.Getenv("BATON_TEST_LOG") != "" {
			level = hclog.Debug
		}
		cfg := cluster.DefaultConfig()
		cfg.ID = id
		cfg.DataDir = t.TempDir()
		cfg.HeartbeatTimeout = 50 * time.Millisecond
		cfg.ElectionTimeout = 50 * time.Millisecond
		cfg.LeaderLeaseTimeout = 50 * time.Millisecond
		cfg.CommitTimeout = 5 * time.Millisecond
		cfg.HealthInterval = 50 * time.Millisecond
		cfg.BarrierTimeout = 5 * time.Second
		cfg.RevokeTimeout = time.Second
		cfg.Registry = reg
		cfg.Env = &probeEnv{node: id, log: c.log}
		cfg.Workers = 4
		cfg.WAL = store.WALConfig{NoSync: true}
		cfg.RaftNoSync = true
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: id, Level: level, Output: buf})
		var tr *raft.InmemTransport
		if tcp {
			cfg.RaftAddr = addrs[i]
			cfg.TransportTimeout = 2 * time.Second
			peers = append(peers, cluster.Peer{ID: id, Address: cfg.RaftAddr})
		} else {
			var addr raft.ServerAddress
			addr, tr = raft.NewInmemTransport("")
			cfg.Transport = tr
			cfg.LogStore = raft.NewInmemStore()
			cfg.StableStore = cfg.LogStore.(raft.StableStore)
			cfg.SnapshotStore = raft.NewInmemSnapshotStore()
			peers = append(peers, cluster.Peer{ID: id, Address: string(addr)})
		}
		if tweak != nil {
			tweak(&cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
		c.logs = append(c.logs, buf)
		c.trans = append(c.trans, tr)
	}
	for i := range c.cfgs {
		c.cfgs[i].Peers = peers
	}
	if !tcp {
		for i, a := range c.trans {
			for j, b := range c.trans {
				if i != j {
					a.Connect(b.LocalAddr(), b)
				}
			}
		}
	}
	c.nodes = make([]*cluster.Node, n)
	t.Cleanup(c.cleanup)
	for i := range c.cfgs {
		c.start(i)
	}
	return c
}

func (c *ipCluster) start(i int) {
	c.t.Helper()
	n, err := cluster.NewNode(c.cfgs[i])
	if err != nil {
		c.t.Fatalf("start %s: %v", c.cfgs[i].ID, err)
	}
	c.nodes[i] = n
	if c.faults != nil {
		c.startAdmin(i)
	}
}

// serveAdmin gives every node an admin API on loopback (the same address
// across restarts), its gRPC server intercepted by faults, and returns the
// addresses.
func (c *ipCluster) serveAdmin(faults *rpcfault.Injector) []string {
	c.t.Helper()
	c.faults = faults
	c.admins = make([]*admin.Server, len(c.nodes))
	c.adminAddrs = harness.FreePorts(c.t, len(c.nodes))
	for i := range c.nodes {
		if c.nodes[i] != nil {
			c.startAdmin(i)
		}
	}
	return c.adminAddrs
}

func (c *ipCluster) startAdmin(i int) {
	c.t.Helper()
	lis, err := net.Listen("tcp", c.adminAddrs[i])
	if err != nil {
		c.t.Fatalf("admin API of %s: %v", c.cfgs[i].ID, err)
	}
	srv, err := admin.NewForNode(c.nodes[i], admin.Config{
		AdvertiseAddr:    c.adminAddrs[i],
		RegisterInterval: 20 * time.Millisecond,
		ServerOptions:    c.faults.ServerOptions(),
		Logger:           c.cfgs[i].Logger,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.admins[i] = srv
	go srv.Serve(lis)
}

// kill stops node i abruptly (cluster.Node.Kill: no leadership transfer,
// disk state left as is), and its admin API if it has one.
func (c *ipCluster) kill(i int) {
	if i < len(c.admins) && c.admins[i] != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c.admins[i].Stop(ctx)
		cancel()
		c.admins[i] = nil
	}
	if n := c.nodes[i]; n != nil {
		_ = n.Kill()
		c.nodes[i] = nil
	}
}

func (c *ipCluster) cleanup() {
	for i := range c.nodes {
		c.kill(i)
	}
	if c.t.Failed() {
		for i, b := range c.logs {
			s := b.String()
			if len(s) > 8000 {
				s = "...\n" + s[len(s)-8000:]
			}
			c.t.Logf("log of %s (tail):\n%s", c.cfgs[i].ID, s)
		}
	}
}

// isolate cuts node i off from the others, both ways (in-memory only).
func (c *ipCluster) isolate(i int) {
	c.trans[i].DisconnectAll()
	for j, tr := range c.trans {
		if j != i {
			tr.Disconnect(c.trans[i].LocalAddr())
		}
	}
}

// reconnect undoes isolate.
func (c *ipCluster) reconnect(i int) {
	for j, tr := range c.trans {
		if j != i {
			tr.Connect(c.trans[i].LocalAddr(), c.trans[i])
			c.trans[i].Connect(tr.LocalAddr(), tr)
		}
	}
}

// leader waits until exactly one running node, other than those excluded,
// has a running executor.
func (c *ipCluster) leader(exclude ...int) (int, *procedure.Executor) {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		li, found := -1, 0
		var lx *procedure.Executor
		for i, n := range c.nodes {
			if n == nil || containsInt(exclude, i) {
				continue
			}
			if x, err := n.Executor(); err == nil {
				li, lx = i, x
				found++
			}
		}
		if found == 1 {
			return li, lx
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no single leader with a running executor after 15s (%d found)", found)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// waitFor polls cond every 10 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// submitN submits n procedures built by mk on x.
func submitN(t *testing.T, x *procedure.Executor, n int, mk func() procedure.Procedure) []uint64 {
	t.Helper()
	var ids []uint64
	for range n {
		id, err := x.Submit(mk(), procedure.SubmitOptions{})
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		ids = append(ids, id)
	}
	return ids
}

// waitSuccess waits on x until every id is SUCCESS.
func waitSuccess(t *testing.T, x *procedure.Executor, ids []uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range ids {
		info, err := x.Wait(ctx, id)
		if err != nil {
			t.Fatalf("wait %d: %v", id, err)
		}
		if info.State != procedure.Success {
			t.Fatalf("procedure %d ended %v (%s), want SUCCESS", id, info.State, info.Error)
		}
	}
}

func sleepProc(steps int, delay time.Duration) func() procedure.Procedure {
	return func() procedure.Procedure { return &diag.Sleep{Steps: steps, Delay: delay} }
}

// fsmState is what a node's FSM holds: domain entries and procedure
// records.
func fsmState(f *raftfsm.FSM) (map[string]string, map[uint64][]byte) {
	v := f.View()
	dom := map[string]string{}
	v.Scan("", func(k string, val []byte) bool {
		dom[k] = string(val)
		return true
	})
	procs := map[uint64][]byte{}
	_ = v.Procs(func(p store.Proc) error {
		procs[p.ID] = append([]byte(nil), p.Data...)
		return nil
	})
	return dom, procs
}

// sameFSMs fails t unless every running node's FSM holds the same domain
// entries and procedure records.
func (c *ipCluster) sameFSMs(t *testing.T) {
	t.Helper()
	var refDom map[string]string
	var refProcs map[uint64][]byte
	refID := ""
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		dom, procs := fsmState(n.FSM())
		if refDom == nil {
			refDom, refProcs, refID = dom, procs, n.ID()
			continue
		}
		if !maps.Equal(dom, refDom) {
			t.Errorf("domain state of %s (%d keys) differs from %s's (%d keys)", n.ID(), len(dom), refID, len(refDom))
		}
		if !maps.EqualFunc(procs, refProcs, bytes.Equal) {
			t.Errorf("procedure records of %s (%d) differ from %s's (%d)", n.ID(), len(procs), refID, len(refProcs))
		}
	}
}

// caughtUp reports whether node n follows ref and has applied all ref has.
func caughtUp(n, ref *cluster.Node) bool {
	id, _ := n.Leader()
	return id == ref.ID() && n.FSM().AppliedIndex() >= ref.FSM().AppliedIndex()
}

// TestLaggingNodeCatchesUpFromSnapshot runs three nodes on raft's TCP
// transport with bolt stores (the agent's setup) and tiny snapshot
// settings (threshold 32 entries, 16 trailing logs), which the agent does
// not expose. A follower is crashed (Node.Kill) after it applied some
// work; the others commit far more than the trailing logs and snapshot, so
// the Raft log no longer reaches the follower's WAL index. Restarted, the
// follower must catch up by installing the leader's snapshot (its log
// says "Installed remote snapshot"), end at the leader's applied index,
// and hold the same domain state and procedure records as the others.
func TestLaggingNodeCatchesUpFromSnapshot(t *testing.T) {
	c := newIPCluster(t, 3, true, func(cfg *cluster.Config) {
		cfg.SnapshotThreshold = 32
		cfg.TrailingLogs = 16
		cfg.SnapshotInterval = 100 * time.Millisecond
	})
	li, x := c.leader()
	first := submitN(t, x, 10, sleepProc(3, 5*time.Millisecond))
	waitSuccess(t, x, first)
	fi := (li + 1) % 3
	f := c.nodes[fi]
	waitFor(t, 10*time.Second, "the follower to apply the first batch", func() bool { return caughtUp(f, c.nodes[li]) })
	w := f.FSM().WALIndex()
	c.kill(fi)

	// Far more entries than the trailing logs, one procedure at a time so
	// that group commit cannot fold them into a few entries.
	var more []uint64
	for range 40 {
		ids := submitN(t, x, 1, sleepProc(2, 0))
		waitSuccess(t, x, ids)
		more = append(more, ids...)
	}
	// Whichever of the two leads when the follower is back, its log must
	// no longer reach the follower's index: each has a snapshot far enough
	// past it that compaction dropped the entries after w.
	for _, i := range []int{li, (li + 2) % 3} {
		n := c.nodes[i]
		waitFor(t, 10*time.Second, c.cfgs[i].ID+"'s log to be compacted past the follower's index", func() bool {
			if err := n.Raft().Snapshot().Error(); err != nil && !strings.Contains(err.Error(), "nothing new to snapshot") {
				t.Fatalf("snapshot on %s: %v", c.cfgs[i].ID, err)
			}
			si, err := strconv.ParseUint(n.Raft().Stats()["last_snapshot_index"], 10, 64)
			return err == nil && si > w+16+1
		})
	}
	lead := c.nodes[li]
	t.Logf("follower %s down at WAL index %d; leader at %d, its last snapshot at %s", c.cfgs[fi].ID, w, lead.FSM().AppliedIndex(), lead.Raft().Stats()["last_snapshot_index"])

	c.start(fi)
	f = c.nodes[fi]
	if got := f.FSM().LoadedIndex(); got != w {
		t.Errorf("restarted follower loaded WAL index %d, want %d", got, w)
	}
	waitFor(t, 15*time.Second, "the lagging follower to catch up", func() bool { return caughtUp(f, lead) })
	if log := c.logs[fi].String(); !strings.Contains(log, "Installed remote snapshot") {
		t.Errorf("%s caught up without installing a snapshot; the test did not leave it behind far enough", c.cfgs[fi].ID)
	}
	for _, id := range append(append([]uint64{}, first...), more...) {
		if _, ok := f.FSM().Proc(id); !ok {
			t.Errorf("caught-up follower lacks procedure %d", id)
		}
	}
	// Quiesce, then compare every FSM.
	waitFor(t, 10*time.Second, "all FSMs at the leader's index", func() bool {
		for _, n := range c.nodes {
			if n.FSM().AppliedIndex() != lead.FSM().AppliedIndex() {
				return false
			}
		}
		return true
	})
	c.sameFSMs(t)
	dom, _ := fsmState(f.FSM())
	for _, id := range more {
		for s := range 2 {
			if v := dom[diag.EffectKey(id, s)]; v != "1" {
				t.Errorf("caught-up follower: effect %s = %q, want \"1\"", diag.EffectKey(id, s), v)
			}
		}
	}
}

// TestPartitionedLeaderStopsDispatching cuts the leader off from the other
// two nodes (raft's in-memory transport) while probe procedures run. It
// asserts that the old leader steps down and stops its executor within a
// few lease timeouts, that from then on it dispatches no step (the probe
// log shows none started on it), accepts no submission and can commit
// nothing (its Raft refuses writes and its FSM's applied index stays put);
// that the majority elects a new leader which finishes every procedure,
// each step's effect applied exactly once; and that after healing the old
// leader follows and holds the same state as the others.
func TestPartitionedLeaderStopsDispatching(t *testing.T) {
	c := newIPCluster(t, 3, false, nil)
	li, x := c.leader()
	const steps = 6
	ids := submitN(t, x, 20, func() procedure.Procedure { return &probe{Steps: steps, Delay: 20 * time.Millisecond} })
	time.Sleep(50 * time.Millisecond) // mid-flight
	old := c.nodes[li]
	start := time.Now()
	c.isolate(li)
	waitFor(t, 5*time.Second, "the partitioned leader to step down and stop its executor", func() bool {
		_, err := old.Executor()
		return !old.IsLeader() && !old.Status().Executor && errors.Is(err, cluster.ErrNotLeader)
	})
	stopped := time.Now()
	frozen := old.FSM().AppliedIndex()
	t.Logf("partitioned leader %s stopped its executor %v after the partition", old.ID(), stopped.Sub(start).Round(time.Millisecond))

	if _, err := x.Submit(&probe{Steps: 1}, procedure.SubmitOptions{}); err == nil {
		t.Error("the deposed leader's executor accepted a submission")
	}
	if err := old.Raft().Apply(raftfsm.EncodeNoop(), time.Second).Error(); !errors.Is(err, raft.ErrNotLeader) {
		t.Errorf("the deposed leader's raft Apply: %v, want raft.ErrNotLeader", err)
	}

	nl, x2 := c.leader(li)
	waitSuccess(t, x2, ids)
	extra := submitN(t, x2, 5, func() procedure.Procedure { return &probe{Steps: 2, Delay: time.Millisecond} })
	waitSuccess(t, x2, extra)
	t.Logf("%s leads and finished the work", c.nodes[nl].ID())

	if got := old.FSM().AppliedIndex(); got != frozen {
		t.Errorf("the isolated node's FSM moved from %d to %d", frozen, got)
	}
	for _, r := range c.log.runs() {
		if r.node == old.ID() && r.at.After(stopped) {
			t.Errorf("the deposed leader %s ran step %d of procedure %d %v after its executor stopped", old.ID(), r.step, r.id, r.at.Sub(stopped))
		}
	}
	dom, _ := fsmState(c.nodes[nl].FSM())
	for _, id := range ids {
		for s := range steps {
			if v := dom[diag.EffectKey(id, s)]; v != "1" {
				t.Errorf("effect %s = %q on the new leader, want \"1\"", diag.EffectKey(id, s), v)
			}
		}
	}

	c.reconnect(li)
	waitFor(t, 10*time.Second, "the old leader to follow the new one", func() bool { return caughtUp(old, c.nodes[nl]) })
	waitFor(t, 10*time.Second, "all FSMs at the leader's index", func() bool {
		for _, n := range c.nodes {
			if n.FSM().AppliedIndex() != c.nodes[nl].FSM().AppliedIndex() {
				return false
			}
		}
		return true
	})
	c.sameFSMs(t)
}
