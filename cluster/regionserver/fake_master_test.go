package regionserver

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/rspb"
)

// fakeCluster is the state a set of fake masters share, as a real cluster
// shares its leases through Raft: which master leads, in which term, and
// the servers' start codes. Every master but the leader answers
// UNAVAILABLE with a LeaderHint naming the leader.
type fakeCluster struct {
	mu         sync.Mutex
	leader     string // admin address of the leader; "" none
	term       uint64
	intervalMs int64
	nextCode   uint64
	servers    map[string]uint64 // server id → start code
	expire     map[string]bool   // expire these servers at their next heartbeat
	notFound   bool              // expire by answering NOT_FOUND instead of expired = true
	hold       chan struct{}     // non-nil: heartbeats are recorded, then answered once it closes
	regs       []call[*rspb.RegisterServerRequest]
	hbs        []call[*rspb.HeartbeatRequest]
	reports    []call[*rspb.ReportTransitionRequest]
	// reportParents are the traceparents the reports' metadata carried
	// ("" for none), in report order.
	reportParents []string
	// access is what the masters tell of their access control, as a real
	// leader does; nil: nothing, as a master older than access grants.
	access *rspb.AccessGrants
	// clusterID is told in every answer ("": none, as a 0.1.0 master).
	clusterID string
}

// call is a request a fake master served, and which master served it.
type call[T any] struct {
	master string
	req    T
}

type fakeMaster struct {
	rspb.UnimplementedMasterServer
	c    *fakeCluster
	addr string
}

// newFakeCluster starts n fake masters on loopback; the first leads, in
// term 1, with heartbeat interval intervalMs.
func newFakeCluster(t testing.TB, n int, intervalMs int64, opts ...grpc.ServerOption) (*fakeCluster, []string) {
	t.Helper()
	c := &fakeCluster{term: 1, intervalMs: intervalMs, nextCode: 1000, servers: map[string]uint64{}, expire: map[string]bool{}}
	var addrs []string
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		m := &fakeMaster{c: c, addr: lis.Addr().String()}
		g := grpc.NewServer(opts...)
		rspb.RegisterMasterServer(g, m)
		go func() { _ = g.Serve(lis) }()
		t.Cleanup(g.Stop)
		addrs = append(addrs, m.addr)
	}
	c.leader = addrs[0]
	return c, addrs
}

// deadAddr is a loopback address nobody listens on, nor can while t runs.
func deadAddr(t testing.TB) string {
	t.Helper()
	return testnet.DeadAddr(t)
}

// setLeader makes addr the leader in a new, higher term.
func (c *fakeCluster) setLeader(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leader = addr
	c.term++
}

// standby answers as a Baton standby does: UNAVAILABLE with a LeaderHint.
// It returns nil when m leads; the cluster's lock is held.
func (m *fakeMaster) standbyLocked() error {
	if m.c.leader == m.addr {
		return nil
	}
	st := status.New(codes.Unavailable, "not the leader")
	if d, err := st.WithDetails(&adminpb.LeaderHint{LeaderAdminAddress: m.c.leader}); err == nil {
		st = d
	}
	return st.Err()
}

func (m *fakeMaster) RegisterServer(_ context.Context, req *rspb.RegisterServerRequest) (*rspb.RegisterServerResponse, error) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	if err := m.standbyLocked(); err != nil {
		return nil, err
	}
	m.c.nextCode++
	m.c.servers[req.GetServerId()] = m.c.nextCode
	m.c.regs = append(m.c.regs, call[*rspb.RegisterServerRequest]{m.addr, req})
	return &rspb.RegisterServerResponse{StartCode: m.c.nextCode, HeartbeatIntervalMs: m.c.intervalMs, Term: m.c.term, Access: m.c.access, ClusterId: m.c.clusterID}, nil
}

func (m *fakeMaster) Heartbeat(ctx context.Context, req *rspb.HeartbeatRequest) (*rspb.HeartbeatResponse, error) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	if err := m.standbyLocked(); err != nil {
		return nil, err
	}
	m.c.hbs = append(m.c.hbs, call[*rspb.HeartbeatRequest]{m.addr, req})
	if hold := m.c.hold; hold != nil {
		// A delayed answer: decided now, delivered later.
		m.c.mu.Unlock()
		select {
		case <-hold:
		case <-ctx.Done():
		}
		m.c.mu.Lock()
	}
	id := req.GetServerId()
	if m.c.expire[id] || m.c.servers[id] != req.GetStartCode() {
		delete(m.c.expire, id)
		delete(m.c.servers, id)
		if m.c.notFound {
			return nil, status.Errorf(codes.NotFound, "server %s unknown", id)
		}
		return &rspb.HeartbeatResponse{Expired: true, Term: m.c.term, ClusterId: m.c.clusterID}, nil
	}
	resp := &rspb.HeartbeatResponse{Term: m.c.term, AccessVersion: m.c.access.GetVersion(), ClusterId: m.c.clusterID}
	if m.c.access != nil && m.c.access.GetVersion() != req.GetAccessVersion() {
		resp.Access = m.c.access
	}
	return resp, nil
}

func (m *fakeMaster) ReportTransition(ctx context.Context, req *rspb.ReportTransitionRequest) (*rspb.ReportTransitionResponse, error) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	if err := m.standbyLocked(); err != nil {
		return nil, err
	}
	m.c.reports = append(m.c.reports, call[*rspb.ReportTransitionRequest]{m.addr, req})
	parent := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get("traceparent")) > 0 {
		parent = md.Get("traceparent")[0]
	}
	m.c.reportParents = append(m.c.reportParents, parent)
	return &rspb.ReportTransitionResponse{}, nil
}

// snapshot returns copies of what the masters were told.
func (c *fakeCluster) snapshot() (regs []call[*rspb.RegisterServerRequest], hbs []call[*rspb.HeartbeatRequest], reports []call[*rspb.ReportTransitionRequest]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(regs, c.regs...), append(hbs, c.hbs...), append(reports, c.reports...)
}

func (c *fakeCluster) currentTerm() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term
}

// holdHeartbeats delays the answers of heartbeats arriving from now on
// until the returned function is called.
func (c *fakeCluster) holdHeartbeats() (release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	c.hold = ch
	return func() {
		c.mu.Lock()
		if c.hold == ch {
			c.hold = nil
		}
		c.mu.Unlock()
		close(ch)
	}
}

// restore makes the masters a cluster restored from a snapshot: cluster
// id id, in term term, knowing the servers as they were at the save (the
// start codes in servers) and counting start codes from nextCode.
func (c *fakeCluster) restore(id string, term, nextCode uint64, servers map[string]uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clusterID, c.term, c.nextCode, c.servers = id, term, nextCode, servers
}

func (c *fakeCluster) setClusterID(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clusterID = id
}

// setAccess makes the masters tell g from now on (nil: nothing).
func (c *fakeCluster) setAccess(g *rspb.AccessGrants) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.access = g
}

func (c *fakeCluster) expireNext(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire[id] = true
}

// rsClient dials a region server's RegionServer service.
func rsClient(t testing.TB, addr string) rspb.RegionServerClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return rspb.NewRegionServerClient(cc)
}
