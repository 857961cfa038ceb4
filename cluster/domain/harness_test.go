package domain

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/cluster/regionserver"
	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/store"
)

// Test timings: leases short enough that a crash is detected in about two
// seconds, long enough that -race and a busy machine never expire a live
// server (heartbeats every 200 ms against a 1.5 s hard limit). A server
// fences itself 3 heartbeats (600 ms) after the last renewal it sent:
// shorter, and a loaded failover makes servers drop their regions.
const (
	testSoftLimit = 800 * time.Millisecond
	testHardLimit = 1500 * time.Millisecond
	testHeartbeat = 200 * time.Millisecond
)

// testLogger logs nothing unless BATON_TEST_LOG is set: to a level name
// ("info", "warn"), or to anything else for debug.
func testLogger(name string) hclog.Logger {
	lvl := hclog.Off
	if v := os.Getenv("BATON_TEST_LOG"); v != "" {
		if lvl = hclog.LevelFromString(v); lvl == hclog.NoLevel {
			lvl = hclog.Debug
		}
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: lvl, Output: os.Stderr})
}

// masterNode is one in-process master: Raft node, domain, and the admin
// gRPC server carrying the Master service.
type masterNode struct {
	id     string
	node   *cluster.Node
	dom    *Domain
	srv    *admin.Server
	gs     *grpc.Server
	addr   string
	cc     *grpc.ClientConn
	client adminpb.AdminClient
	// trans is the dispatcher's transport to the region servers, through
	// the harness's fault injector; nil if the test gave its own.
	trans *dispatch.GRPCTransport
	// raftTrans is its raft transport (in memory), for isolateRaft.
	raftTrans *raft.InmemTransport
	dead      bool
}

// harness is a cluster of in-process masters (raft's in-memory transport,
// admin servers on 127.0.0.1) and real region servers (cluster/regionserver).
//
// Every RPC between masters and region servers passes faults, an injector
// with no rules until a test adds some: the masters' gRPC servers (admin
// API, and the Master service the region servers call: RegisterServer,
// Heartbeat, ReportTransition) intercept what they receive, and the
// dispatchers' transport what they send (RegionServer.ExecuteBatch), so a
// test can lose, delay or repeat single messages in either direction.
type harness struct {
	t       testing.TB
	opts    harnessOpts
	faults  *rpcfault.Injector
	masters []*masterNode
	mu      sync.Mutex
	rss     map[string]*regionserver.Server
	stopped map[string]bool
}

type harnessOpts struct {
	masters   int
	servers   int
	opLatency time.Duration
	failRate  float64
	// domain adjusts each master's domain configuration.
	domain func(*Config)
	// faultSeed seeds the fault injector's draws; 0 picks one (logged).
	faultSeed uint64
}

func newHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	if o.masters == 0 {
		o.masters = 3
	}
	h := &harness{t: t, opts: o, rss: map[string]*regionserver.Server{}, stopped: map[string]bool{},
		faults: rpcfault.New(rpcfault.Config{Seed: o.faultSeed, Logger: testLogger("faults")})}
	var peers []cluster.Peer
	var cfgs []cluster.Config
	var trans []*raft.InmemTransport
	for i := range o.masters {
		id := fmt.Sprintf("m%d", i)
		reg := procedure.NewRegistry()
		if err := Register(reg); err != nil {
			t.Fatal(err)
		}
		dcfg := Config{
			Logger:            testLogger(id),
			ServerLease:       lease.Config{SoftLimit: testSoftLimit, HardLimit: testHardLimit, MonitorInterval: 50 * time.Millisecond},
			HeartbeatInterval: testHeartbeat,
			Dispatch:          dispatch.Config{Delay: 10 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, MaxFailures: 10, CallTimeout: 2 * time.Second},
			DispatchTimeout:   2 * time.Second,
			RetryBackoff:      procedure.Backoff{Base: 20 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: 0.1},
		}
		m := &masterNode{id: id}
		m.trans = dispatch.NewGRPCTransport(dispatch.GRPCTransportConfig{
			DialOptions: []grpc.DialOption{h.faults.DialOption()}, Logger: testLogger(id)})
		dcfg.Transport = m.trans
		if o.domain != nil {
			o.domain(&dcfg)
		}
		if dcfg.Transport != m.trans {
			m.trans.Close()
			m.trans = nil
		}
		dom, err := New(dcfg)
		if err != nil {
			t.Fatal(err)
		}
		m.dom = dom
		c := cluster.DefaultConfig()
		c.ID = id
		c.DataDir = t.TempDir()
		c.HeartbeatTimeout = 50 * time.Millisecond
		c.ElectionTimeout = 50 * time.Millisecond
		c.LeaderLeaseTimeout = 50 * time.Millisecond
		c.CommitTimeout = 5 * time.Millisecond
		c.SnapshotInterval = time.Hour
		c.HealthInterval = 50 * time.Millisecond
		c.BarrierTimeout = 5 * time.Second
		c.Registry = reg
		c.Env = dom
		c.LeaderServices = dom.LeaderServices
		c.Workers = 8
		c.Executor = func(pc *procedure.Config) {
			pc.RollbackBackoff = 50 * time.Millisecond
			pc.RollbackBackoffMax = 500 * time.Millisecond
		}
		c.WAL = store.WALConfig{NoSync: true}
		c.RaftNoSync = true
		c.Logger = testLogger(id)
		addr, tr := raft.NewInmemTransport("")
		c.Transport = tr
		ls := raft.NewInmemStore()
		c.LogStore, c.StableStore = ls, ls
		c.SnapshotStore = raft.NewInmemSnapshotStore()
		peers = append(peers, cluster.Peer{ID: id, Address: string(addr)})
		cfgs = append(cfgs, c)
		trans = append(trans, tr)
		m.raftTrans = tr
		h.masters = append(h.masters, m)
	}
	for i, a := range trans {
		for j, b := range trans {
			if i != j {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	t.Cleanup(h.close)
	for i := range cfgs {
		cfgs[i].Peers = peers
		m := h.masters[i]
		n, err := cluster.NewNode(cfgs[i])
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		m.node = n
		m.dom.Attach(n)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		m.addr = lis.Addr().String()
		m.srv, err = admin.New(admin.WithDomain(admin.NodeBackend(n), m.dom), admin.Config{AdvertiseAddr: m.addr, Logger: testLogger(m.id), RegisterInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		m.gs = grpc.NewServer(append([]grpc.ServerOption{admin.KeepaliveEnforcement()}, h.faults.ServerOptions()...)...)
		m.srv.RegisterServices(m.gs)
		RegisterMasterService(m.gs, m.dom, admin.Unavailable)
		if err := m.srv.Start(m.addr); err != nil {
			t.Fatal(err)
		}
		go m.gs.Serve(lis)
		m.cc, err = grpc.NewClient(m.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		m.client = adminpb.NewAdminClient(m.cc)
	}
	h.leader()
	for i := range o.servers {
		h.startRS(fmt.Sprintf("rs%d", i+1), o.opLatency, o.failRate)
	}
	return h
}

func (h *harness) adminAddrs() []string {
	var out []string
	for _, m := range h.masters {
		out = append(out, m.addr)
	}
	return out
}

// startRS starts region server id and waits for its registration.
func (h *harness) startRS(id string, latency time.Duration, failRate float64) *regionserver.Server {
	h.t.Helper()
	s, err := regionserver.New(regionserver.Config{
		ID: id, GRPCAddr: "127.0.0.1:0", Masters: h.adminAddrs(),
		OpLatency: latency, FailureRate: failRate,
		RPCTimeout: time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Logger: testLogger(id),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := s.WaitRegistered(ctx); err != nil {
		h.t.Fatal(err)
	}
	h.mu.Lock()
	h.rss[id] = s
	delete(h.stopped, id) // a restart under the same id
	h.mu.Unlock()
	return s
}

// stopRS stops region server id as a crash would look from outside.
func (h *harness) stopRS(id string) {
	h.t.Helper()
	h.mu.Lock()
	s := h.rss[id]
	h.stopped[id] = true
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		h.t.Logf("stop %s: %v", id, err)
	}
}

func (h *harness) liveRS() map[string]*regionserver.Server {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]*regionserver.Server{}
	for id, s := range h.rss {
		if !h.stopped[id] {
			out[id] = s
		}
	}
	return out
}

// killMaster crashes master i: Raft stops without handing over, its API
// goes away.
func (h *harness) killMaster(i int) {
	m := h.masters[i]
	if m.dead {
		return
	}
	m.dead = true
	m.node.Kill()
	m.gs.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	m.srv.Stop(ctx)
	cancel()
	m.cc.Close()
	m.dom.Close()
	if m.trans != nil {
		m.trans.Close()
	}
}

func (h *harness) close() {
	for id, s := range h.liveRS() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.Stop(ctx); err != nil {
			h.t.Logf("stop %s: %v", id, err)
		}
		cancel()
	}
	for i := range h.masters {
		if h.masters[i].node != nil {
			h.killMaster(i)
		}
	}
}

// leader waits for exactly one master with a running executor and leader
// services.
func (h *harness) leader() (*masterNode, *procedure.Executor) {
	h.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var lm *masterNode
		var lx *procedure.Executor
		n := 0
		for _, m := range h.masters {
			if m.dead {
				continue
			}
			if x, err := m.node.Executor(); err == nil && m.dom.services() != nil {
				lm, lx = m, x
				n++
			}
		}
		if n == 1 {
			return lm, lx
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no single leader with services after 15s (%d)", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *harness) leaderIndex() int {
	lm, _ := h.leader()
	for i, m := range h.masters {
		if m == lm {
			return i
		}
	}
	return -1
}

// submit submits p on the leader, retrying across leadership changes.
func (h *harness) submit(p procedure.Procedure, nonce string) uint64 {
	h.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, x := h.leader()
		id, err := x.Submit(p, procedure.SubmitOptions{Nonce: nonce, Owner: "test"})
		if err == nil {
			return id
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("submit %T: %v", p, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wait waits for root procedure id to finish, following leadership
// changes, and returns its final state.
func (h *harness) wait(id uint64, d time.Duration) procedure.Info {
	h.t.Helper()
	deadline := time.Now().Add(d)
	for {
		if time.Now().After(deadline) {
			_, x := h.leader()
			w, _ := x.Why(id)
			h.t.Fatalf("procedure %d did not finish within %v: %+v", id, d, w)
		}
		_, x := h.leader()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		info, err := x.Wait(ctx, id)
		cancel()
		if err == nil && info.State.Terminal() {
			return info
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, procedure.ErrStopped) &&
			!errors.Is(err, procedure.ErrNotStarted) && !errors.Is(err, procedure.ErrNotFound) {
			h.t.Fatalf("wait %d: %v", id, err)
		}
	}
}

func (h *harness) mustSucceed(id uint64, d time.Duration) procedure.Info {
	h.t.Helper()
	info := h.wait(id, d)
	if info.State != procedure.Success {
		h.t.Fatalf("procedure %d (%s) ended %v: %s", id, info.Type, info.State, info.Error)
	}
	return info
}

// reader reads the leader's FSM.
func (h *harness) reader() reader {
	lm, _ := h.leader()
	f := lm.node.FSM()
	return kvReader{Get: f.Get, Scan: f.Scan}
}

func (h *harness) createTable(ns, name string, regions int) uint64 {
	h.t.Helper()
	p, err := NewCreateTable(ns, name, regions)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.submit(p, "")
}

// hosted asks every live region server which regions it hosts (its own
// answer, over gRPC like any client): region → servers.
func (h *harness) hosted() map[string][]string {
	h.t.Helper()
	out := map[string][]string{}
	for id, s := range h.liveRS() {
		resp, err := s.ListRegions(context.Background(), nil)
		if err != nil {
			h.t.Fatalf("ListRegions %s: %v", id, err)
		}
		for _, r := range resp.GetRegions() {
			out[r.GetRegion()] = append(out[r.GetRegion()], id)
		}
	}
	for _, v := range out {
		sort.Strings(v)
	}
	return out
}

// hostedQuiet is hosted without failing the test (for goroutines).
func (h *harness) hostedQuiet() map[string][]string {
	out := map[string][]string{}
	for id, s := range h.liveRS() {
		resp, err := s.ListRegions(context.Background(), nil)
		if err != nil {
			continue
		}
		for _, r := range resp.GetRegions() {
			out[r.GetRegion()] = append(out[r.GetRegion()], id)
		}
	}
	return out
}

// checkNoDoubles fails if any region is open on two live servers.
func (h *harness) checkNoDoubles() {
	h.t.Helper()
	for r, srvs := range h.hosted() {
		if len(srvs) > 1 {
			h.t.Errorf("region %s is open on %d servers: %v", r, len(srvs), srvs)
		}
	}
}

// checkTableOpen checks that every region of table is OPEN in the
// replicated state, on a live server, and hosted by exactly that server
// (by the servers' own answers). It returns the per-server counts.
func (h *harness) checkTableOpen(full string, want int) map[string]int {
	h.t.Helper()
	// A region server that missed heartbeats for a self-fence period (a
	// loaded machine, a failover) closed its regions while the procedure
	// ran; its crash procedure reopens them. Wait for that, then judge.
	var problems []string
	var counts map[string]int
	deadline := time.Now().Add(20 * time.Second)
	for {
		problems, counts = h.tableOpenProblems(full, want)
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range problems {
		h.t.Error(p)
	}
	h.checkNoDoubles()
	return counts
}

// tableOpenProblems lists what keeps table from being fully open, and the
// regions per server.
func (h *harness) tableOpenProblems(full string, want int) ([]string, map[string]int) {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	r := h.reader()
	t, ok, err := getTable(r, full)
	if err != nil || !ok {
		return []string{fmt.Sprintf("table %s: found=%v err=%v", full, ok, err)}, nil
	}
	if t.State != TableEnabled {
		bad("table %s is %s, want ENABLED", full, t.State)
	}
	if len(t.Regions) != want {
		bad("table %s has %d regions, want %d", full, len(t.Regions), want)
	}
	hosted := h.hostedQuiet()
	live := h.liveRS()
	counts := map[string]int{}
	for _, rn := range t.Regions {
		rg, ok, err := getRegion(r, rn)
		if err != nil || !ok {
			bad("region %s: found=%v err=%v", rn, ok, err)
			continue
		}
		if rg.State != RegionOpen || rg.ProcID != 0 {
			bad("region %s is %s (proc %d), want OPEN", rn, rg.State, rg.ProcID)
		}
		if s := live[rg.Server]; s == nil || s.StartCode() != rg.StartCode {
			bad("region %s recorded on %s/%d, not a live incarnation", rn, rg.Server, rg.StartCode)
		}
		if got := hosted[rn]; len(got) != 1 || got[0] != rg.Server {
			bad("region %s recorded on %s but hosted by %v", rn, rg.Server, got)
		}
		counts[rg.Server]++
	}
	return out, counts
}

// checkTableGone checks that neither the table nor any of its regions is
// recorded, and that no live server hosts a region of it.
func (h *harness) checkTableGone(full string) {
	h.t.Helper()
	r := h.reader()
	if _, ok, _ := getTable(r, full); ok {
		h.t.Errorf("table %s still recorded", full)
	}
	scanRegions(r, func(name string, rg Region) bool {
		if rg.Table == full {
			h.t.Errorf("region %s of %s still recorded (%s)", name, full, rg.State)
		}
		return true
	})
	for rn, srvs := range h.hosted() {
		if strings.HasPrefix(rn, full+",") {
			h.t.Errorf("region %s of %s still open on %v", rn, full, srvs)
		}
	}
}

func spread(counts map[string]int) (lo, hi int) {
	lo = -1
	for _, c := range counts {
		if lo < 0 || c < lo {
			lo = c
		}
		hi = max(hi, c)
	}
	return lo, hi
}

func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// isolateRaft cuts master i's raft traffic from the other masters, both
// ways; its admin API and its region-server traffic stay reachable, as
// when a leader's peer links fail but clients still reach it.
func (h *harness) isolateRaft(i int) {
	me := h.masters[i].raftTrans
	me.DisconnectAll()
	for j, m := range h.masters {
		if j != i {
			m.raftTrans.Disconnect(me.LocalAddr())
		}
	}
}

// healRaft undoes isolateRaft.
func (h *harness) healRaft(i int) {
	me := h.masters[i].raftTrans
	for j, m := range h.masters {
		if j != i {
			m.raftTrans.Connect(me.LocalAddr(), me)
			me.Connect(m.raftTrans.LocalAddr(), m.raftTrans)
		}
	}
}
