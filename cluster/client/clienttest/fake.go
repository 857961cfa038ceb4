// Package clienttest is a fake Baton cluster for tests of admin API
// clients: in-process gRPC servers on loopback ports that share one
// procedure table, with one of them the leader. Standbys answer every call
// with UNAVAILABLE and an adminpb.LeaderHint, as real standbys do when they
// cannot forward. Tests can move leadership, stop nodes (breaking their
// streams), inject errors and drive procedures by hand.
//
// Procedure types the fake knows:
//   - "sleep": RUNNABLE, then SUCCESS a few milliseconds later; argument
//     "steps", if given, must be an integer (else INVALID_ARGUMENT).
//   - "fail": RUNNABLE, FAILED, then ROLLEDBACK with an error.
//   - "manual": stays RUNNABLE until the test calls SetState.
//
// Any other type is refused with INVALID_ARGUMENT.
//
// The domain API (namespaces, tables, regions, region servers, locks) is
// kept in memory too; see domain.go for what the fake does of it.
package clienttest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/proto/adminpb"
)

// StepDelay is how long the fake's "sleep" and "fail" procedures stay in
// each state.
const StepDelay = 10 * time.Millisecond

// Cluster is a fake cluster. Its methods are safe for concurrent use.
type Cluster struct {
	mu       sync.Mutex
	nodes    []*Node
	leader   int // index in nodes; -1: none
	procs    map[uint64]*adminpb.Procedure
	nonces   map[string]uint64
	nextID   uint64
	changed  chan struct{} // closed and replaced on every change
	faults   map[string][]error
	lossy    int // submissions to apply, then answer UNAVAILABLE
	peers    []*adminpb.Peer
	submits  []*adminpb.SubmitProcedureRequest
	requests map[string]int // per node id, calls received
	dom      *domain        // namespaces, tables, servers, locks (domain.go); nil until first used
}

// Node is one fake member.
type Node struct {
	adminpb.UnimplementedAdminServer
	ID   string
	Addr string
	c    *Cluster
	srv  *grpc.Server
	stop sync.Once
}

// Start starts a fake cluster of n nodes named n1..nN, n1 the leader. They
// are stopped when the test ends.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{procs: map[uint64]*adminpb.Procedure{}, nonces: map[string]uint64{}, changed: make(chan struct{}),
		faults: map[string][]error{}, requests: map[string]int{}}
	for i := range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		nd := &Node{ID: fmt.Sprintf("n%d", i+1), Addr: lis.Addr().String(), c: c, srv: grpc.NewServer()}
		adminpb.RegisterAdminServer(nd.srv, nd)
		go func() { _ = nd.srv.Serve(lis) }()
		c.nodes = append(c.nodes, nd)
		c.peers = append(c.peers, &adminpb.Peer{Id: nd.ID, RaftAddress: fmt.Sprintf("127.0.0.1:%d", 17000+i), AdminAddress: nd.Addr, Suffrage: "Voter"})
		t.Cleanup(nd.Stop)
	}
	return c
}

// DeadAddr returns a loopback address nothing listens on, nor can while
// t runs (testnet.DeadAddr).
func DeadAddr(t testing.TB) string {
	t.Helper()
	return testnet.DeadAddr(t)
}

// Addrs returns the nodes' admin addresses, in order.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, n := range c.nodes {
		a = append(a, n.Addr)
	}
	return a
}

// Node returns the i-th node (0-based).
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// SetLeader makes node i the leader (-1: no leader).
func (c *Cluster) SetLeader(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leader = i
	c.notify()
}

// Stop stops the node's server at once, breaking its connections and
// streams.
func (n *Node) Stop() { n.stop.Do(n.srv.Stop) }

// Inject makes the next calls of method (e.g. "SubmitProcedure", on any
// node that would otherwise serve them) fail with errs, one per call.
func (c *Cluster) Inject(method string, errs ...error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults[method] = append(c.faults[method], errs...)
}

// LoseSubmitReplies makes the next n submissions take effect but answer
// UNAVAILABLE, as when the leader dies between commit and reply.
func (c *Cluster) LoseSubmitReplies(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lossy += n
}

// Submits returns the submission requests the cluster received.
func (c *Cluster) Submits() []*adminpb.SubmitProcedureRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.submits)
}

// Requests returns how many calls node id received.
func (c *Cluster) Requests(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests[id]
}

// Procedures returns a copy of every procedure the cluster holds.
func (c *Cluster) Procedures() []*adminpb.Procedure {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*adminpb.Procedure
	for _, p := range c.procs {
		out = append(out, proto.Clone(p).(*adminpb.Procedure))
	}
	return out
}

// Add stores a procedure as given (its id is used as is), for listing
// tests.
func (c *Cluster) Add(p *adminpb.Procedure) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.procs[p.Id] = proto.Clone(p).(*adminpb.Procedure)
	c.nextID = max(c.nextID, p.Id)
	c.notify()
}

// SetState moves procedure id to state, with errMsg as its error.
func (c *Cluster) SetState(id uint64, state, errMsg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setState(id, state, errMsg)
}

func (c *Cluster) setState(id uint64, state, errMsg string) {
	p := c.procs[id]
	if p == nil {
		return
	}
	now := time.Now().UnixMilli()
	p.State, p.UpdatedUnixMs = state, now
	if errMsg != "" {
		p.Error = errMsg
	}
	if state == "SUCCESS" || state == "ROLLEDBACK" {
		p.FinishedUnixMs = now
		p.WaitingFor = ""
	}
	c.notify()
}

func (c *Cluster) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// serve is the preamble of every call: counts it, refuses it on a standby,
// or consumes an injected fault.
func (n *Node) serve(method string) error {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests[n.ID]++
	if c.leader < 0 {
		return status.Error(codes.Unavailable, "no leader known; retry")
	}
	if l := c.nodes[c.leader]; l != n {
		st, _ := status.New(codes.Unavailable, "not the leader; the leader is "+l.ID).
			WithDetails(&adminpb.LeaderHint{LeaderId: l.ID, LeaderAdminAddress: l.Addr})
		return st.Err()
	}
	if errs := c.faults[method]; len(errs) > 0 {
		c.faults[method] = errs[1:]
		return errs[0]
	}
	return nil
}

func (c *Cluster) later(d time.Duration, f func()) {
	time.AfterFunc(d, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		f()
	})
}

func (n *Node) SubmitProcedure(_ context.Context, r *adminpb.SubmitProcedureRequest) (*adminpb.SubmitProcedureResponse, error) {
	if err := n.serve("SubmitProcedure"); err != nil {
		return nil, err
	}
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.submits = append(c.submits, proto.Clone(r).(*adminpb.SubmitProcedureRequest))
	if id, ok := c.nonces[r.Nonce]; ok && r.Nonce != "" {
		return &adminpb.SubmitProcedureResponse{Id: id}, nil
	}
	switch r.Type {
	case "sleep", "manual", "fail":
	default:
		return nil, status.Errorf(codes.InvalidArgument, "unknown procedure type %q", r.Type)
	}
	if s, ok := r.Arguments["steps"]; ok {
		if _, err := strconv.Atoi(s); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "argument steps=%q: not an integer", s)
		}
	}
	c.nextID++
	id := c.nextID
	now := time.Now().UnixMilli()
	c.procs[id] = &adminpb.Procedure{Id: id, RootId: id, Type: r.Type, State: "RUNNABLE", Owner: r.Owner, Nonce: r.Nonce,
		SubmittedUnixMs: now, UpdatedUnixMs: now, WaitingFor: "queued"}
	if r.Nonce != "" {
		c.nonces[r.Nonce] = id
	}
	c.notify()
	switch r.Type {
	case "sleep":
		c.later(StepDelay, func() {
			if p := c.procs[id]; p != nil {
				p.Result = []byte("slept")
			}
			c.setState(id, "SUCCESS", "")
		})
	case "fail":
		c.later(StepDelay, func() {
			c.setState(id, "FAILED", "step 1 failed: diagnostic failure")
			c.later(StepDelay, func() { c.setState(id, "ROLLEDBACK", "") })
		})
	}
	if c.lossy > 0 {
		c.lossy--
		return nil, status.Error(codes.Unavailable, "leader lost before replying")
	}
	return &adminpb.SubmitProcedureResponse{Id: id}, nil
}

func (n *Node) lookup(method string, id uint64) (*adminpb.Procedure, error) {
	if err := n.serve(method); err != nil {
		return nil, err
	}
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	p := n.c.procs[id]
	if p == nil {
		return nil, status.Errorf(codes.NotFound, "procedure %d not found", id)
	}
	return proto.Clone(p).(*adminpb.Procedure), nil
}

func (n *Node) GetProcedure(_ context.Context, r *adminpb.GetProcedureRequest) (*adminpb.Procedure, error) {
	return n.lookup("GetProcedure", r.Id)
}

func (n *Node) change(method string, id uint64, f func(p *adminpb.Procedure) error) (*adminpb.Procedure, error) {
	if _, err := n.lookup(method, id); err != nil {
		return nil, err
	}
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[id]
	if p == nil {
		return nil, status.Errorf(codes.NotFound, "procedure %d not found", id)
	}
	if err := f(p); err != nil {
		return nil, err
	}
	c.notify()
	return proto.Clone(p).(*adminpb.Procedure), nil
}

func terminal(p *adminpb.Procedure) bool { return p.State == "SUCCESS" || p.State == "ROLLEDBACK" }

func (n *Node) AbortProcedure(_ context.Context, r *adminpb.ProcedureRef) (*adminpb.Procedure, error) {
	return n.change("AbortProcedure", r.Id, func(p *adminpb.Procedure) error {
		if terminal(p) {
			return status.Errorf(codes.FailedPrecondition, "procedure %d is already %s", p.Id, p.State)
		}
		p.AbortRequested = true
		n.c.later(StepDelay, func() { n.c.setState(p.Id, "ROLLEDBACK", "aborted") })
		return nil
	})
}

func (n *Node) PauseProcedure(_ context.Context, r *adminpb.ProcedureRef) (*adminpb.Procedure, error) {
	return n.change("PauseProcedure", r.Id, func(p *adminpb.Procedure) error {
		if terminal(p) {
			return status.Errorf(codes.FailedPrecondition, "procedure %d is already %s", p.Id, p.State)
		}
		p.Paused = true
		return nil
	})
}

func (n *Node) ResumeProcedure(_ context.Context, r *adminpb.ProcedureRef) (*adminpb.Procedure, error) {
	return n.change("ResumeProcedure", r.Id, func(p *adminpb.Procedure) error {
		if !p.Paused {
			return status.Errorf(codes.FailedPrecondition, "procedure %d is not paused", p.Id)
		}
		p.Paused = false
		return nil
	})
}

func (n *Node) AckResult(_ context.Context, r *adminpb.ProcedureRef) (*adminpb.Procedure, error) {
	return n.change("AckResult", r.Id, func(p *adminpb.Procedure) error {
		if !terminal(p) {
			return status.Errorf(codes.FailedPrecondition, "procedure %d is still %s", p.Id, p.State)
		}
		delete(n.c.procs, p.Id)
		return nil
	})
}

func (n *Node) ListProcedures(_ context.Context, r *adminpb.ListProceduresRequest) (*adminpb.ListProceduresResponse, error) {
	if err := n.serve("ListProcedures"); err != nil {
		return nil, err
	}
	var after uint64
	if r.PageToken != "" {
		v, err := strconv.ParseUint(r.PageToken, 10, 64)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "bad page token %q", r.PageToken)
		}
		after = v
	}
	size := int(r.PageSize)
	if size <= 0 {
		size = 100
	}
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []uint64
	for id, p := range c.procs {
		if id > after && (r.State == "" || p.State == r.State) && (r.Type == "" || p.Type == r.Type) && (!r.RootsOnly || p.ParentId == 0) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	resp := &adminpb.ListProceduresResponse{}
	for i, id := range ids {
		if i == size {
			resp.NextPageToken = strconv.FormatUint(ids[i-1], 10)
			break
		}
		resp.Procedures = append(resp.Procedures, proto.Clone(c.procs[id]).(*adminpb.Procedure))
	}
	return resp, nil
}

func (n *Node) WatchProcedure(r *adminpb.WatchProcedureRequest, s grpc.ServerStreamingServer[adminpb.Procedure]) error {
	var last *adminpb.Procedure
	for {
		// Every round checks leadership again, so that a deposed node
		// ends its streams with a hint.
		p, err := n.lookup("WatchProcedure", r.Id)
		if err != nil {
			return err
		}
		n.c.mu.Lock()
		changed := n.c.changed
		n.c.mu.Unlock()
		if last == nil || !proto.Equal(p, last) {
			if err := s.Send(p); err != nil {
				return err
			}
			last = p
		}
		if terminal(p) {
			return nil
		}
		select {
		case <-changed:
		case <-s.Context().Done():
			return s.Context().Err()
		}
	}
}

func (n *Node) status() *adminpb.ClusterStatusResponse {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &adminpb.ClusterStatusResponse{NodeId: n.ID, State: "Follower", Term: 3, CommitIndex: 42, AppliedIndex: 42, FsmIndex: 42}
	if c.leader >= 0 {
		l := c.nodes[c.leader]
		if l == n {
			r.State = "Leader"
		}
		r.LeaderId, r.LeaderAdminAddress = l.ID, l.Addr
	}
	for _, p := range c.peers {
		q := proto.Clone(p).(*adminpb.Peer)
		q.Leader = q.Id == r.LeaderId
		if q.Leader {
			r.LeaderRaftAddress = q.RaftAddress
		}
		r.Peers = append(r.Peers, q)
	}
	return r
}

func (n *Node) ClusterStatus(context.Context, *adminpb.ClusterStatusRequest) (*adminpb.ClusterStatusResponse, error) {
	if err := n.serve("ClusterStatus"); err != nil {
		return nil, err
	}
	return n.status(), nil
}

func (n *Node) AddPeer(_ context.Context, r *adminpb.AddPeerRequest) (*adminpb.ClusterStatusResponse, error) {
	if err := n.serve("AddPeer"); err != nil {
		return nil, err
	}
	if r.Id == "" || r.RaftAddress == "" {
		return nil, status.Error(codes.InvalidArgument, "id and raft_address are required")
	}
	n.c.mu.Lock()
	for _, p := range n.c.peers {
		if p.Id == r.Id {
			n.c.mu.Unlock()
			return nil, status.Errorf(codes.FailedPrecondition, "%s is already a member", r.Id)
		}
	}
	n.c.peers = append(n.c.peers, &adminpb.Peer{Id: r.Id, RaftAddress: r.RaftAddress, AdminAddress: r.AdminAddress, Suffrage: "Voter"})
	n.c.mu.Unlock()
	return n.status(), nil
}

func (n *Node) RemovePeer(_ context.Context, r *adminpb.RemovePeerRequest) (*adminpb.ClusterStatusResponse, error) {
	if err := n.serve("RemovePeer"); err != nil {
		return nil, err
	}
	n.c.mu.Lock()
	i := slices.IndexFunc(n.c.peers, func(p *adminpb.Peer) bool { return p.Id == r.Id })
	if i < 0 {
		n.c.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "no member %q", r.Id)
	}
	n.c.peers = slices.Delete(n.c.peers, i, i+1)
	n.c.mu.Unlock()
	return n.status(), nil
}
