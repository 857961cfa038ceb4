package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/store"
)

// stepProc is a multi-step test procedure: it runs Steps steps, suspending
// with a short timer between them so that procedures are in flight long
// enough to be caught by a failover. Every run of a step is recorded in the
// recorder (Env); steps are at-least-once, success is exactly-once.
type stepProc struct {
	procedure.Base
	Steps int
	Pause time.Duration
	Done  int
}

func (p *stepProc) Execute(ctx *procedure.Context) (procedure.Step, error) {
	if rec, ok := ctx.Env.(*recorder); ok {
		rec.step(ctx.ID(), p.Done)
	}
	p.Done++
	if p.Done >= p.Steps {
		ctx.SetResult([]byte(fmt.Sprintf("done %d", p.Done)))
		return procedure.Done(), nil
	}
	if p.Pause > 0 {
		return procedure.Suspend(procedure.Timeout(p.Pause)), nil
	}
	return procedure.More(), nil
}

func (p *stepProc) Rollback(*procedure.Context) error { return nil }

func testRegistry() *procedure.Registry {
	r := procedure.NewRegistry()
	r.MustRegister("test.steps", 1, func() procedure.Procedure { return &stepProc{} })
	return r
}

// recorder collects, across every node and executor of a test cluster, the
// steps run and the SUCCESS transitions seen by listeners.
type recorder struct {
	mu    sync.Mutex
	steps map[uint64]map[int]int // proc id → step → runs
	// successes records, per procedure, the executors that reported its
	// SUCCESS: exactly-once means one executor, however many listener
	// calls it made.
	successes map[uint64]map[*procedure.Executor]bool
	failures  map[uint64]string
}

func newRecorder() *recorder {
	return &recorder{steps: map[uint64]map[int]int{}, successes: map[uint64]map[*procedure.Executor]bool{}, failures: map[uint64]string{}}
}

func (r *recorder) step(id uint64, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.steps[id] == nil {
		r.steps[id] = map[int]int{}
	}
	r.steps[id][n]++
}

func (r *recorder) listen(x *procedure.Executor, info procedure.Info) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch info.State {
	case procedure.Success:
		if r.successes[info.ID] == nil {
			r.successes[info.ID] = map[*procedure.Executor]bool{}
		}
		r.successes[info.ID][x] = true
	case procedure.Failed, procedure.RolledBack:
		r.failures[info.ID] = info.Error
	}
}

// testCluster is N in-process nodes. On the in-memory transport the
// partition helpers work; on TCP they do not.
type testCluster struct {
	t     *testing.T
	rec   *recorder
	nodes []*Node
	cfgs  []Config
	trans []*raft.InmemTransport // nil entries on TCP
	mesh  *testnet.Mesh          // nil on TCP
}

type clusterOpts struct {
	n   int
	tcp bool
	// tweak, if set, adjusts node i's configuration before it starts.
	tweak func(i int, cfg *Config)
	// wrap, if set (in-memory transport only), is the transport node i
	// uses in place of its in-memory one, which stays on the mesh
	// (isolate, reconnect) and in trans: a transport that drops or holds
	// single messages wraps it.
	wrap func(i int, tr *raft.InmemTransport) raft.Transport
}

func testLogger(t *testing.T, name string) hclog.Logger {
	lvl := hclog.Off
	if os.Getenv("BATON_TEST_LOG") != "" {
		lvl = hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: lvl, Output: os.Stderr})
}

// steadyTimings runs cfg's raft at clustertest.SteadyRaftTimeout (500
// ms) instead of fastConfig's 50 ms, for a test that picks the leader and
// a follower and walks through them, which a leadership change on a
// loaded machine would fail for no fault of the code under test.
func steadyTimings(_ int, cfg *Config) {
	cfg.HeartbeatTimeout = 500 * time.Millisecond
	cfg.ElectionTimeout = 500 * time.Millisecond
	cfg.LeaderLeaseTimeout = 500 * time.Millisecond
}

// fastConfig is a node configuration with the fast timings raft's own
// tests use.
func fastConfig(t *testing.T, id string, rec *recorder) Config {
	c := DefaultConfig()
	c.ID = id
	c.DataDir = t.TempDir()
	c.HeartbeatTimeout = 50 * time.Millisecond
	c.ElectionTimeout = 50 * time.Millisecond
	c.LeaderLeaseTimeout = 50 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.SnapshotInterval = time.Hour
	c.HealthInterval = 50 * time.Millisecond
	c.BarrierTimeout = 5 * time.Second
	c.Registry = testRegistry()
	c.Env = rec
	c.Workers = 4
	c.WAL = store.WALConfig{NoSync: true}
	c.RaftNoSync = true
	c.Logger = testLogger(t, id)
	c.PrepareExecutor = func(x *procedure.Executor) error {
		x.AddListener(func(info procedure.Info) { rec.listen(x, info) })
		return nil
	}
	return c
}

func newTestCluster(t *testing.T, o clusterOpts) *testCluster {
	t.Helper()
	if o.n == 0 {
		o.n = 3
	}
	c := &testCluster{t: t, rec: newRecorder()}
	var peers []Peer
	for i := range o.n {
		id := fmt.Sprintf("m%d", i)
		cfg := fastConfig(t, id, c.rec)
		var tr *raft.InmemTransport
		if o.tcp {
			cfg.RaftAddr = testnet.FreeAddr(t)
			cfg.TransportTimeout = 2 * time.Second
			peers = append(peers, Peer{ID: id, Address: cfg.RaftAddr})
		} else {
			var addr raft.ServerAddress
			addr, tr = raft.NewInmemTransport("")
			cfg.Transport = tr
			if o.wrap != nil {
				cfg.Transport = o.wrap(i, tr)
			}
			cfg.LogStore = raft.NewInmemStore()
			cfg.StableStore = cfg.LogStore.(raft.StableStore)
			cfg.SnapshotStore = raft.NewInmemSnapshotStore()
			peers = append(peers, Peer{ID: id, Address: string(addr)})
		}
		c.cfgs = append(c.cfgs, cfg)
		c.trans = append(c.trans, tr)
	}
	for i := range c.cfgs {
		c.cfgs[i].Peers = peers
		if o.tweak != nil {
			o.tweak(i, &c.cfgs[i])
		}
	}
	if !o.tcp {
		c.mesh = testnet.NewMesh(c.trans...)
	}
	for i := range c.cfgs {
		n, err := NewNode(c.cfgs[i])
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		c.nodes = append(c.nodes, n)
	}
	t.Cleanup(c.shutdownAll)
	return c
}

func (c *testCluster) shutdownAll() {
	for _, n := range c.nodes {
		if n == nil {
			continue
		}
		n.Kill()
	}
}

// restart reopens node i from its configuration (same DataDir). The node
// must have been shut down.
func (c *testCluster) restart(i int) *Node {
	c.t.Helper()
	n, err := NewNode(c.cfgs[i])
	if err != nil {
		c.t.Fatalf("restart node %d: %v", i, err)
	}
	c.nodes[i] = n
	return n
}

// isolate cuts node i off from every other node, both ways (in-memory
// transport only).
func (c *testCluster) isolate(i int) { c.mesh.Partition(i) }

// reconnect undoes isolate.
func (c *testCluster) reconnect(i int) { c.mesh.Heal(i) }

// timingsBy gives nodes m0..m(k-1) the timings slow (heartbeat, election,
// lease) and the others fast: cut off from the rest, the first keep
// leading and following while the others elect a leader of their own.
func timingsBy(k int, slow, fast time.Duration) func(int, *Config) {
	return func(i int, cfg *Config) {
		d := fast
		if i < k {
			d = slow
		}
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = d, d, d
	}
}

// leaderOnM0 moves the leadership to m0 and returns it; a test of what
// m0 does as the leader is skipped if the transfer fails.
func (c *testCluster) leaderOnM0() *Node {
	c.t.Helper()
	li, _ := c.leader()
	if err := c.leadOn(li, 0); err != nil {
		c.t.Skipf("transfer to m0: %v", err)
	}
	return c.nodes[0]
}

// leadOn moves the leadership from node li to node i (nothing if li is
// i) and waits for i's executor; the transfer's own failure is returned.
func (c *testCluster) leadOn(li, i int) error {
	c.t.Helper()
	if li == i {
		return nil
	}
	if err := c.nodes[li].Raft().LeadershipTransferToServer(raft.ServerID(c.nodes[i].ID()), c.trans[i].LocalAddr()).Error(); err != nil {
		return err
	}
	testwait.For(c.t, 20*time.Second, fmt.Sprintf("m%d to lead with an executor", i), func() bool {
		_, err := c.nodes[i].Executor()
		return err == nil
	})
	return nil
}

// leaderAmong waits for one of nodes from..to-1 to lead with an executor,
// and returns its index.
func (c *testCluster) leaderAmong(from, to int) int {
	c.t.Helper()
	ni := -1
	testwait.For(c.t, 10*time.Second, fmt.Sprintf("a new leader among m%d..m%d", from, to-1), func() bool {
		for j := from; j < to; j++ {
			if _, err := c.nodes[j].Executor(); err == nil {
				ni = j
				return true
			}
		}
		return false
	})
	return ni
}

// leader waits until exactly one live node (among those not excluded) is
// leader with a running executor, and returns its index and executor.
func (c *testCluster) leader(exclude ...int) (int, *procedure.Executor) {
	c.t.Helper()
	skip := map[int]bool{}
	for _, e := range exclude {
		skip[e] = true
	}
	var li int
	var lx *procedure.Executor
	testwait.For(c.t, 15*time.Second, "a leader with a running executor", func() bool {
		li, lx = -1, nil
		for i, n := range c.nodes {
			if skip[i] || n == nil {
				continue
			}
			if x, err := n.Executor(); err == nil {
				if lx != nil {
					return false // two claim it: wait for the old one to notice
				}
				li, lx = i, x
			}
		}
		return lx != nil
	})
	return li, lx
}

// submit submits k stepProcs on x and returns their ids.
func submit(t *testing.T, x *procedure.Executor, k, steps int, pause time.Duration) []uint64 {
	t.Helper()
	ids := make([]uint64, 0, k)
	for range k {
		id, err := x.Submit(&stepProc{Steps: steps, Pause: pause}, procedure.SubmitOptions{})
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		ids = append(ids, id)
	}
	return ids
}

// waitMidFlight waits until at least half of ids have run a step: the
// moment a failover test takes the leader away.
func (c *testCluster) waitMidFlight(ids []uint64) {
	c.t.Helper()
	testwait.For(c.t, 10*time.Second, "procedures to be mid-flight", func() bool {
		c.rec.mu.Lock()
		defer c.rec.mu.Unlock()
		return len(c.rec.steps) >= len(ids)/2
	})
}

// waitAllSuccess waits on the current leader until every id is SUCCESS,
// following leadership changes, and checks the recorder's invariants.
func (c *testCluster) waitAllSuccess(ids []uint64, steps int) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		var info procedure.Info
		testwait.ForNil(c.t, time.Until(deadline), fmt.Sprintf("procedure %d to finish", id), func() error {
			_, x := c.leader()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var err error
			info, err = x.Wait(ctx, id)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, procedure.ErrStopped) && !errors.Is(err, procedure.ErrNotStarted) {
				c.t.Fatalf("wait %d: %v", id, err)
			}
			return err // leadership may have moved: ask the next leader
		})
		if info.State != procedure.Success {
			c.t.Fatalf("procedure %d ended %v (%s), want SUCCESS", id, info.State, info.Error)
		}
		if want := fmt.Sprintf("done %d", steps); string(info.Result) != want {
			c.t.Fatalf("procedure %d result %q, want %q", id, info.Result, want)
		}
	}
	c.rec.mu.Lock()
	defer c.rec.mu.Unlock()
	for _, id := range ids {
		if n := len(c.rec.successes[id]); n > 1 {
			c.t.Errorf("procedure %d reached SUCCESS on %d executors", id, n)
		}
		if e, bad := c.rec.failures[id]; bad {
			c.t.Errorf("procedure %d failed: %s", id, e)
		}
		for s := range steps {
			if c.rec.steps[id][s] == 0 {
				c.t.Errorf("procedure %d never ran step %d", id, s)
			}
		}
	}
}

// snapshotAndStop waits until node fi has applied all that node li has,
// has it take a raft snapshot, and shuts it down cleanly (c.nodes[fi]
// becomes nil): what a node restarting from its snapshot starts from.
func (c *testCluster) snapshotAndStop(t *testing.T, li, fi int) {
	t.Helper()
	f := c.nodes[fi]
	testwait.For(t, 10*time.Second, "follower to apply everything", func() bool {
		return f.FSM().AppliedIndex() >= c.nodes[li].FSM().AppliedIndex()
	})
	if err := f.Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown follower: %v", err)
	}
	c.nodes[fi] = nil
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}
