// Package admin serves Baton's admin API (proto/admin.proto) on every
// master, and the node's HTTP endpoints (/status, /readyz, /metrics,
// /debug/pprof).
//
// # Leader-only calls and forwarding
//
// Submit, Abort, Pause, Resume, Ack, AddPeer, RemovePeer and RegisterNode
// are served by the leader. A standby forwards them over gRPC to the
// leader's admin address and relays the answer (status codes and details
// unchanged). Reads are linearizable unless the caller asks for stale ones
// (read.go): a standby forwards a linearizable read to the leader, which
// confirms its leadership before answering. Procedures are read from the
// FSM's committed records (procread.go), never from the executor's memory,
// which runs ahead of its commits. ClusterStatus is answered locally: it is
// the answering node's view.
//
// The leader's admin address is learned from the replicated domain state:
// the key AdminAddrKey(id) ("nodes/<id>/admin_addr") holds node id's admin
// address. Each node's Server runs a registration loop: a leader writes its
// own key directly, a standby that sees a leader and finds its own key
// missing or stale calls RegisterNode, which it forwards to the leader's
// address once the leader has registered itself. Every node therefore
// converges to knowing every address, with no configuration beyond each
// node's own advertised address.
//
// Forwarding connections use client.FailoverDialOptions: keepalive notices
// a leader that vanished without closing its connections (a SIGKILLed
// container, a dead host) within seconds. A forwarded call is also
// cancelled, and answered UNAVAILABLE with a LeaderHint naming the new
// leader, as soon as this node's view of the leader changes (it becomes
// the leader itself, or learns of another one, or of none), so a client
// whose call was forwarded to a dead leader retries at once; and a
// forwarded unary call whose caller set no deadline is bounded by
// Config.ForwardTimeout. Servers must allow the forwarding connections'
// pings: Serve does, and a gRPC server built otherwise should be given
// KeepaliveEnforcement.
//
// A forwarded call is marked with the gRPC metadata key "x-baton-forwarded";
// a node that receives a marked call and is not the leader (stale state)
// does not forward again but answers UNAVAILABLE. UNAVAILABLE answers carry
// an adminpb.LeaderHint (leader id and admin address, as far as known), so
// the client library can retry at the leader.
//
// # Watch
//
// WatchProcedure polls the leader's committed state every
// Config.WatchInterval (default 50 ms) and sends the procedure each time it
// differs from what was last sent, starting with its current state (read
// after a leadership confirmation), until it is terminal or the client goes
// away. Polling was chosen over Executor.AddListener
// because a new executor is built at every leadership change and listeners
// cannot be removed: a hub would have to be re-attached per executor and
// would keep stopped executors alive; polling re-resolves the executor at
// each tick and costs one map lookup per watcher per tick. If the node loses
// leadership mid-watch the stream ends with UNAVAILABLE (and a hint); the
// client re-watches at the new leader, which sends the current state first.
//
// # Health
//
// The standard gRPC health service reports SERVING, for "" and for
// "baton.admin.v1.Admin", while the node is ready: it is the leader with a
// running executor, or a follower that knows a leader. Server reflection is
// registered too.
package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/adminpb"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
)

// Defaults of Config.
const (
	DefaultWatchInterval    = 50 * time.Millisecond
	DefaultRegisterInterval = 250 * time.Millisecond
	DefaultForwardTimeout   = 10 * time.Second
	DefaultPageSize         = 100
	MaxPageSize             = 1000
)

// forwardedKey marks a call forwarded by a standby.
const forwardedKey = "x-baton-forwarded"

// serviceName is the admin service's full name, for the health service.
const serviceName = "baton.admin.v1.Admin"

// AdminAddrKey is the domain key holding node id's admin address.
func AdminAddrKey(id string) string { return "nodes/" + id + "/admin_addr" }

// Factory builds a procedure from a submission's type and arguments. Its
// errors should wrap procedure.ErrInvalid (or ErrUnknownType) for bad input.
type Factory func(typ string, args map[string]string) (procedure.Procedure, error)

// Config configures a Server.
type Config struct {
	// AdvertiseAddr is the host:port other nodes and clients reach this
	// node's admin API at. If empty, Serve uses its listener's address.
	AdvertiseAddr string
	// Factory builds submitted procedures. Default diag.New (the diagnostic
	// types); a domain layer chains its own types before it.
	Factory Factory
	// WatchInterval is how often WatchProcedure polls. Default 50 ms.
	WatchInterval time.Duration
	// RegisterInterval is how often the registration loop checks this
	// node's registered address and updates the health status, and how
	// often forwarded calls are checked against this node's view of the
	// leader. Default 250 ms.
	RegisterInterval time.Duration
	// ForwardTimeout bounds a forwarded unary call whose caller set no
	// deadline. Default 10 s.
	ForwardTimeout time.Duration
	// DialOptions are used to reach the leader when forwarding, after
	// client.FailoverDialOptions (so they may override them). Default:
	// insecure transport credentials.
	DialOptions []grpc.DialOption
	// ServerOptions are used by Serve to build the gRPC server, after
	// KeepaliveEnforcement.
	ServerOptions []grpc.ServerOption
	// Logger. Default: a null logger.
	Logger hclog.Logger
}

// Server implements adminpb.AdminServer over a Backend.
type Server struct {
	adminpb.UnimplementedAdminServer

	b      Backend
	cfg    Config
	log    hclog.Logger
	health *health.Server

	mu        sync.Mutex
	advertise string
	conns     map[string]*grpc.ClientConn
	fwd       map[*fwdCall]struct{} // forwarded calls in flight
	gs        *grpc.Server
	started   bool
	closed    bool
	stopCh    chan struct{}
	loops     sync.WaitGroup
	lastReady string // last readiness reason logged
}

// KeepaliveEnforcement is the server option that lets peers ping as often
// as client.FailoverDialOptions does (gRPC's default policy closes the
// connection of a peer pinging more often than every 5 minutes, failing
// its calls). Serve uses it; give it to any gRPC server the admin service
// (or another service masters, region servers or clients reach with those
// dial options) is registered on.
func KeepaliveEnforcement() grpc.ServerOption {
	return grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
		MinTime:             500 * time.Millisecond,
		PermitWithoutStream: true,
	})
}

// New returns a server for b. Call Serve, or RegisterServices and Start.
func New(b Backend, cfg Config) (*Server, error) {
	if b == nil {
		return nil, errors.New("admin: nil backend")
	}
	if cfg.Factory == nil {
		cfg.Factory = diag.New
	}
	if cfg.WatchInterval <= 0 {
		cfg.WatchInterval = DefaultWatchInterval
	}
	if cfg.RegisterInterval <= 0 {
		cfg.RegisterInterval = DefaultRegisterInterval
	}
	if cfg.ForwardTimeout <= 0 {
		cfg.ForwardTimeout = DefaultForwardTimeout
	}
	if cfg.DialOptions == nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cfg.DialOptions = append(client.FailoverDialOptions(), cfg.DialOptions...)
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	s := &Server{
		b:         b,
		cfg:       cfg,
		log:       cfg.Logger.Named("admin"),
		health:    health.NewServer(),
		advertise: cfg.AdvertiseAddr,
		conns:     map[string]*grpc.ClientConn{},
		fwd:       map[*fwdCall]struct{}{},
		stopCh:    make(chan struct{}),
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(serviceName, healthpb.HealthCheckResponse_NOT_SERVING)
	return s, nil
}

// NewForNode is New(NodeBackend(n), cfg).
func NewForNode(n *cluster.Node, cfg Config) (*Server, error) { return New(NodeBackend(n), cfg) }

// RegisterServices registers the admin service, the health service and
// reflection on gs.
func (s *Server) RegisterServices(gs grpc.ServiceRegistrar) {
	adminpb.RegisterAdminServer(gs, s)
	healthpb.RegisterHealthServer(gs, s.health)
	if r, ok := gs.(reflection.GRPCServer); ok {
		reflection.Register(r)
	}
}

// Start starts the registration and health loop. advertise overrides
// Config.AdvertiseAddr when not empty. Serve calls it.
func (s *Server) Start(advertise string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("admin: server closed")
	}
	if s.started {
		return errors.New("admin: started twice")
	}
	if advertise != "" {
		s.advertise = advertise
	}
	if s.advertise == "" {
		return errors.New("admin: no advertised address")
	}
	s.started = true
	s.loops.Add(2)
	go s.loop()
	go s.watchLeader()
	return nil
}

// Serve serves the API on lis until Stop. The advertised address defaults
// to lis's address.
func (s *Server) Serve(lis net.Listener) error {
	gs := grpc.NewServer(append([]grpc.ServerOption{KeepaliveEnforcement()}, s.cfg.ServerOptions...)...)
	s.RegisterServices(gs)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return grpc.ErrServerStopped
	}
	s.gs = gs
	s.mu.Unlock()
	adv := s.cfg.AdvertiseAddr
	if adv == "" {
		adv = lis.Addr().String()
	}
	if err := s.Start(adv); err != nil {
		return err
	}
	return gs.Serve(lis)
}

// Advertise returns the admin address this node registers.
func (s *Server) Advertise() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.advertise
}

// Stop stops the loops, cancels the forwarded calls in flight (they answer
// UNAVAILABLE), stops the gRPC server Serve built (gracefully, bounded by
// ctx; then forcibly) and closes the forwarding connections.
func (s *Server) Stop(ctx context.Context) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	gs := s.gs
	close(s.stopCh)
	for c := range s.fwd {
		c.cancel(errStopping)
		delete(s.fwd, c)
	}
	s.mu.Unlock()
	s.health.Shutdown()
	s.loops.Wait()
	if gs != nil {
		done := make(chan struct{})
		go func() { gs.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			gs.Stop()
			<-done
		}
	}
	s.mu.Lock()
	conns := s.conns
	s.conns = map[string]*grpc.ClientConn{}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// Ready says whether the node can serve the API (leader with a running
// executor, or follower that knows a leader), and if not, why.
func (s *Server) Ready() (bool, string) { return Ready(s.b) }

// Ready is Server.Ready for any Backend.
func Ready(b Backend) (bool, string) {
	_, err := b.Procedures()
	switch {
	case err == nil:
		return true, "leader"
	case errors.Is(err, cluster.ErrNotLeader):
		if id, _ := b.Leader(); id != "" && !b.IsLeader() {
			return true, "following " + id
		}
		return false, "no leader known (election under way?)"
	case errors.Is(err, cluster.ErrNotReady):
		return false, "leader establishing (waiting for its FSM and executor)"
	case errors.Is(err, cluster.ErrShutdown):
		return false, "node shut down"
	}
	return false, err.Error()
}

// loop keeps this node's admin address registered and the health status
// current.
func (s *Server) loop() {
	defer s.loops.Done()
	t := time.NewTicker(s.cfg.RegisterInterval)
	defer t.Stop()
	for {
		s.tick()
		select {
		case <-s.stopCh:
			return
		case <-t.C:
		}
	}
}

func (s *Server) tick() {
	ok, why := s.Ready()
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(serviceName, st)
	s.mu.Lock()
	changed := why != s.lastReady
	s.lastReady = why
	adv := s.advertise
	s.mu.Unlock()
	if changed {
		s.log.Debug("readiness", "ready", ok, "reason", why)
	}
	if !ok {
		return
	}
	me := s.b.ID()
	if got, _ := s.b.DomainGet(AdminAddrKey(me)); string(got) == adv {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() { // end the call early on Stop
		select {
		case <-s.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	if _, err := s.RegisterNode(ctx, &adminpb.RegisterNodeRequest{Id: me, AdminAddress: adv}); err != nil {
		s.log.Debug("registering admin address failed; will retry", "error", err)
		return
	}
	s.log.Info("registered admin address", "id", me, "admin_addr", adv)
}

// adminAddr is node id's registered admin address, or "".
func (s *Server) adminAddr(id string) string {
	v, _ := s.b.DomainGet(AdminAddrKey(id))
	return string(v)
}

func isForwarded(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(forwardedKey)) > 0
}

// leaderView is a node's view of the leader: its id and registered admin
// address.
type leaderView struct{ id, addr string }

func (v leaderView) String() string {
	if v.id == "" {
		return "no leader known"
	}
	if v.addr == "" {
		return fmt.Sprintf("leader %q (admin address not registered)", v.id)
	}
	return fmt.Sprintf("leader %q at %s", v.id, v.addr)
}

// fwdCall is a forwarded call in flight, to the leader of view to.
type fwdCall struct {
	to     leaderView
	cancel context.CancelCauseFunc
}

// Causes of the cancellation of a forwarded call.
var (
	errStopping       = errors.New("admin: server stopping")
	errForwardTimeout = errors.New("admin: forwarded call timed out")
)

// leaderChangedError cancels a forwarded call whose leader is no longer
// the one this node sees.
type leaderChangedError struct {
	to   leaderView // the view now
	self bool       // this node became the leader
}

func (e *leaderChangedError) Error() string {
	if e.self {
		return "this node became the leader"
	}
	return "this node's view of the leader changed: now " + e.to.String()
}

// leaderClient returns a client of the leader's admin API and the leader
// it reaches, or an UNAVAILABLE status saying why it cannot.
func (s *Server) leaderClient(ctx context.Context) (adminpb.AdminClient, context.Context, leaderView, error) {
	var none leaderView
	if isForwarded(ctx) {
		return nil, nil, none, s.unavailable("admin: this node is not the leader (forwarded call; not forwarding again)")
	}
	id, _ := s.b.Leader()
	if id == "" {
		return nil, nil, none, s.unavailable("admin: no leader known (election under way?); retry shortly")
	}
	if id == s.b.ID() {
		return nil, nil, none, s.unavailable("admin: this node is the leader but not ready yet; retry shortly")
	}
	addr := s.adminAddr(id)
	if addr == "" {
		return nil, nil, none, s.unavailable(fmt.Sprintf("admin: leader %q has not registered its admin address yet; retry shortly", id))
	}
	if addr == s.Advertise() {
		return nil, nil, none, s.unavailable(fmt.Sprintf("admin: leader %q is registered at this node's own address %s (stale); retry shortly", id, addr))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, none, s.unavailable("admin: server stopping")
	}
	cc := s.conns[addr]
	if cc == nil {
		var err error
		cc, err = grpc.NewClient(addr, s.cfg.DialOptions...)
		if err != nil {
			return nil, nil, none, s.unavailable(fmt.Sprintf("admin: leader %q at %s: %v", id, addr, err))
		}
		s.conns[addr] = cc
	}
	out := metadata.AppendToOutgoingContext(ctx, forwardedKey, s.b.ID())
	return adminpb.NewAdminClient(cc), out, leaderView{id, addr}, nil
}

// track registers a forwarded call to the leader of view to: the returned
// context is cancelled when this node's view of the leader changes
// (watchLeader) or the server stops. done unregisters it.
func (s *Server) track(ctx context.Context, to leaderView) (_ context.Context, done func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	c := &fwdCall{to: to, cancel: cancel}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		cancel(errStopping)
		return ctx, func() {}
	}
	s.fwd[c] = struct{}{}
	return ctx, func() {
		s.mu.Lock()
		delete(s.fwd, c)
		s.mu.Unlock()
		cancel(nil)
	}
}

// watchLeader cancels forwarded calls whose leader is no longer the one
// this node sees, every RegisterInterval. It runs apart from the
// registration loop, whose RegisterNode call may itself be stuck on a dead
// leader.
func (s *Server) watchLeader() {
	defer s.loops.Done()
	t := time.NewTicker(s.cfg.RegisterInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopCh:
			return
		case <-t.C:
		}
		s.cancelStaleForwards()
	}
}

// cancelStaleForwards cancels the forwarded calls in flight whose leader
// differs from this node's current view of the leader, or all of them if
// this node is the leader.
func (s *Server) cancelStaleForwards() {
	// Only calls registered before the view is read are judged by it: a
	// call registered meanwhile may target a leader newer than the view.
	s.mu.Lock()
	calls := make([]*fwdCall, 0, len(s.fwd))
	for c := range s.fwd {
		calls = append(calls, c)
	}
	s.mu.Unlock()
	if len(calls) == 0 {
		return
	}
	id, _ := s.b.Leader()
	self := id == s.b.ID() || s.b.IsLeader()
	now := leaderView{id: id}
	if id != "" {
		now.addr = s.adminAddr(id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range calls {
		if _, ok := s.fwd[c]; ok && (self || c.to != now) {
			s.log.Debug("cancelling a forwarded call: the leader changed", "to", c.to.String(), "now", now.String(), "self", self)
			c.cancel(&leaderChangedError{to: now, self: self})
			delete(s.fwd, c)
		}
	}
}

// isNotLeader reports whether err means "ask the leader instead".
func isNotLeader(err error) bool { return errors.Is(err, cluster.ErrNotLeader) }

// onLeader runs local with the leader's executor when this node has one,
// else forwards with remote.
func onLeader[T any](s *Server, ctx context.Context, local func(Procedures) (T, error), remote func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	var zero T
	x, err := s.b.Procedures()
	if err == nil {
		v, err := local(x)
		if err != nil {
			return zero, s.toStatus(err)
		}
		return v, nil
	}
	if !isNotLeader(err) {
		return zero, s.toStatus(err)
	}
	return forward(s, ctx, remote)
}

// orForward runs local (a leader-only operation not needing the executor)
// and forwards with remote if it says this node is not the leader.
func orForward[T any](s *Server, ctx context.Context, local func() (T, error), remote func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	var zero T
	v, err := local()
	if err == nil {
		return v, nil
	}
	if !isNotLeader(err) {
		return zero, s.toStatus(err)
	}
	return forward(s, ctx, remote)
}

// forward runs a unary call at the leader: bounded by ForwardTimeout if ctx
// has no deadline (see forwardCall).
func forward[T any](s *Server, ctx context.Context, remote func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	return forwardCall(s, ctx, s.cfg.ForwardTimeout, remote)
}

// forwardCall runs remote with a client of the leader. If ctx has no
// deadline and timeout is positive, the call is bounded by timeout. The
// call is cancelled when this node's view of the leader changes (see
// track). Answers of the leader are relayed unchanged; failures to reach it
// (its own cancellation included) become UNAVAILABLE with a LeaderHint.
func forwardCall[T any](s *Server, ctx context.Context, timeout time.Duration, remote func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	var zero T
	cl, fctx, to, err := s.leaderClient(ctx)
	if err != nil {
		return zero, err
	}
	if _, ok := ctx.Deadline(); !ok && timeout > 0 {
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeoutCause(fctx, timeout, errForwardTimeout)
		defer cancel()
	}
	fctx, done := s.track(fctx, to)
	defer done()
	v, err := remote(fctx, cl)
	if err != nil {
		return zero, s.forwardError(ctx, fctx, to, timeout, err)
	}
	return v, nil
}

// forwardError turns err, the failure of a call forwarded to the leader of
// view to with context fctx (derived from the caller's ctx), into the
// answer to the caller.
func (s *Server) forwardError(ctx, fctx context.Context, to leaderView, timeout time.Duration, err error) error {
	if status.Code(err) == codes.DeadlineExceeded {
		if d, ok := fctx.Deadline(); ok && !time.Now().Before(d) {
			// The deadline passed; the context's timer may lag behind
			// it for a moment.
			<-fctx.Done()
		}
	}
	if ctx.Err() != nil {
		// The caller went away or its deadline passed: its own error.
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.FromContextError(ctx.Err()).Err()
	}
	if fctx.Err() != nil {
		cause := context.Cause(fctx)
		var lc *leaderChangedError
		switch {
		case errors.As(cause, &lc):
			return s.unavailable(fmt.Sprintf("admin: call forwarded to %s cancelled: %v; retry", to, lc))
		case errors.Is(cause, errForwardTimeout):
			return s.unavailable(fmt.Sprintf("admin: %s did not answer a forwarded call within %v; retry", to, timeout))
		case errors.Is(cause, errStopping):
			return s.unavailable("admin: server stopping; call forwarded to " + to.String() + " cancelled")
		}
	}
	st, ok := status.FromError(err)
	if !ok {
		return s.toStatus(err)
	}
	if st.Code() == codes.Unavailable {
		if _, ok := LeaderHintOf(err); !ok {
			// Not the leader's answer (it would carry a hint) but the
			// failure to reach it.
			return s.unavailable(fmt.Sprintf("admin: forwarding to %s: %s", to, st.Message()))
		}
	}
	return err
}

// SubmitProcedure implements adminpb.AdminServer.
func (s *Server) SubmitProcedure(ctx context.Context, req *adminpb.SubmitProcedureRequest) (*adminpb.SubmitProcedureResponse, error) {
	if req.GetType() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: submit: empty procedure type")
	}
	if req.GetTimeoutMs() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "admin: submit: negative timeout_ms %d", req.GetTimeoutMs())
	}
	// Validate here too, so a standby refuses bad input without a trip to
	// the leader.
	p, err := s.cfg.Factory(req.GetType(), req.GetArguments())
	if err != nil {
		return nil, s.toStatus(err)
	}
	return onLeader(s, ctx, func(x Procedures) (*adminpb.SubmitProcedureResponse, error) {
		id, err := x.Submit(p, procedure.SubmitOptions{
			Nonce:   req.GetNonce(),
			Owner:   req.GetOwner(),
			Timeout: time.Duration(req.GetTimeoutMs()) * time.Millisecond,
		})
		if err != nil {
			return nil, err
		}
		return &adminpb.SubmitProcedureResponse{Id: id}, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.SubmitProcedureResponse, error) {
		return c.SubmitProcedure(ctx, req)
	})
}

// GetProcedure implements adminpb.AdminServer: the procedure as committed
// (procread.go).
func (s *Server) GetProcedure(ctx context.Context, req *adminpb.GetProcedureRequest) (*adminpb.Procedure, error) {
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.Procedure, error) {
		x, err := s.localExecutor(ri)
		if err != nil {
			return nil, err
		}
		p, err := s.storedProc(x, req.GetId())
		if err != nil {
			return nil, err
		}
		p.Read = ri
		return p, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.Procedure, error) {
		return c.GetProcedure(ctx, req)
	})
}

// localExecutor returns this node's executor for a read, or nil where
// there is none and the read is stale (a linearizable read is served by
// the leader, which has one).
func (s *Server) localExecutor(ri *adminpb.ReadInfo) (Procedures, error) {
	x, err := s.b.Procedures()
	if err == nil {
		return x, nil
	}
	if ri.GetConsistency() == adminpb.Consistency_STALE {
		return nil, nil
	}
	return nil, err
}

func getProc(x Procedures, id uint64) (*adminpb.Procedure, error) {
	info, err := x.Get(id)
	if err != nil {
		return nil, err
	}
	return toProto(info, whyReason(x, info)), nil
}

func whyReason(x Procedures, info procedure.Info) string {
	if info.State.Terminal() {
		return "finished"
	}
	w, err := x.Why(info.ID)
	if err != nil {
		return ""
	}
	return w.Reason
}

// ListProcedures implements adminpb.AdminServer. Pages are in ascending id
// order; the page token is the last id of the previous page.
func (s *Server) ListProcedures(ctx context.Context, req *adminpb.ListProceduresRequest) (*adminpb.ListProceduresResponse, error) {
	f := procedure.Filter{Type: req.GetType(), RootsOnly: req.GetRootsOnly(), Limit: int(req.GetPageSize())}
	switch {
	case f.Limit < 0:
		return nil, status.Errorf(codes.InvalidArgument, "admin: list: negative page_size %d", f.Limit)
	case f.Limit == 0:
		f.Limit = DefaultPageSize
	case f.Limit > MaxPageSize:
		f.Limit = MaxPageSize
	}
	if st := strings.TrimSpace(req.GetState()); st != "" {
		state, err := procedure.ParseState(strings.ToUpper(st))
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "admin: list: %v", err)
		}
		f.States = []procedure.State{state}
	}
	if tok := req.GetPageToken(); tok != "" {
		after, err := strconv.ParseUint(tok, 10, 64)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "admin: list: bad page_token %q (pass next_page_token of the previous page)", tok)
		}
		f.AfterID = after
	}
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.ListProceduresResponse, error) {
		x, err := s.localExecutor(ri)
		if err != nil {
			return nil, err
		}
		procs, err := s.storedProcs(x, f)
		if err != nil {
			return nil, err
		}
		out := &adminpb.ListProceduresResponse{Procedures: procs, Read: ri}
		if len(procs) == f.Limit {
			out.NextPageToken = strconv.FormatUint(procs[len(procs)-1].GetId(), 10)
		}
		return out, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.ListProceduresResponse, error) {
		return c.ListProcedures(ctx, req)
	})
}

// WatchProcedure implements adminpb.AdminServer (see the package doc).
func (s *Server) WatchProcedure(req *adminpb.WatchProcedureRequest, stream grpc.ServerStreamingServer[adminpb.Procedure]) error {
	ctx := stream.Context()
	if _, err := s.b.Procedures(); err != nil {
		if !isNotLeader(err) {
			return s.toStatus(err)
		}
		// No timeout: a watch lasts as long as its procedure runs.
		_, err := forwardCall(s, ctx, 0, func(ctx context.Context, c adminpb.AdminClient) (struct{}, error) {
			ws, err := c.WatchProcedure(ctx, req)
			if err != nil {
				return struct{}{}, err
			}
			for {
				p, err := ws.Recv()
				if err != nil {
					if errors.Is(err, io.EOF) {
						return struct{}{}, nil
					}
					return struct{}{}, err
				}
				if err := stream.Send(p); err != nil {
					return struct{}{}, err
				}
			}
		})
		return err
	}
	// The first state sent is a linearizable read: a deposed leader that
	// still has its executor must not start a watch with what it holds.
	if _, err := s.b.LinearizableRead(ctx); err != nil {
		return s.toStatus(fmt.Errorf("admin: watch %d: %w", req.GetId(), err))
	}
	t := time.NewTicker(s.cfg.WatchInterval)
	defer t.Stop()
	var last *adminpb.Procedure
	for {
		x, err := s.b.Procedures()
		if err != nil {
			return s.toStatus(fmt.Errorf("admin: watch %d: %w", req.GetId(), err))
		}
		p, err := s.storedProc(x, req.GetId())
		if err != nil {
			if last != nil && errors.Is(err, procedure.ErrNotFound) {
				// A child is deleted with its root; it may go between
				// two polls.
				return status.Errorf(codes.NotFound, "admin: watch %d: procedure deleted before a terminal state was seen (children are removed when their root finishes; watch the root)", req.GetId())
			}
			return s.toStatus(err)
		}
		if last == nil || !proto.Equal(last, p) {
			if err := stream.Send(p); err != nil {
				return err
			}
			last = p
		}
		if st, _ := procedure.ParseState(p.GetState()); st.Terminal() {
			return nil
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
	}
}

func procOp(s *Server, ctx context.Context, req *adminpb.ProcedureRef, op func(Procedures, uint64) error, remote func(context.Context, adminpb.AdminClient) (*adminpb.Procedure, error)) (*adminpb.Procedure, error) {
	return onLeader(s, ctx, func(x Procedures) (*adminpb.Procedure, error) {
		if err := op(x, req.GetId()); err != nil {
			return nil, err
		}
		return getProc(x, req.GetId())
	}, remote)
}

// AbortProcedure implements adminpb.AdminServer.
func (s *Server) AbortProcedure(ctx context.Context, req *adminpb.ProcedureRef) (*adminpb.Procedure, error) {
	return procOp(s, ctx, req, Procedures.Abort, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.Procedure, error) {
		return c.AbortProcedure(ctx, req)
	})
}

// PauseProcedure implements adminpb.AdminServer.
func (s *Server) PauseProcedure(ctx context.Context, req *adminpb.ProcedureRef) (*adminpb.Procedure, error) {
	return procOp(s, ctx, req, Procedures.Pause, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.Procedure, error) {
		return c.PauseProcedure(ctx, req)
	})
}

// ResumeProcedure implements adminpb.AdminServer.
func (s *Server) ResumeProcedure(ctx context.Context, req *adminpb.ProcedureRef) (*adminpb.Procedure, error) {
	return procOp(s, ctx, req, Procedures.Resume, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.Procedure, error) {
		return c.ResumeProcedure(ctx, req)
	})
}

// AckResult implements adminpb.AdminServer.
func (s *Server) AckResult(ctx context.Context, req *adminpb.ProcedureRef) (*adminpb.Procedure, error) {
	return procOp(s, ctx, req, Procedures.Ack, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.Procedure, error) {
		return c.AckResult(ctx, req)
	})
}

// ClusterStatus implements adminpb.AdminServer: this node's view.
func (s *Server) ClusterStatus(ctx context.Context, _ *adminpb.ClusterStatusRequest) (*adminpb.ClusterStatusResponse, error) {
	return s.clusterStatus(), nil
}

func (s *Server) clusterStatus() *adminpb.ClusterStatusResponse {
	st := s.b.Status()
	out := &adminpb.ClusterStatusResponse{
		NodeId:            st.ID,
		State:             st.State,
		LeaderId:          st.LeaderID,
		LeaderRaftAddress: st.LeaderAddr,
		Term:              st.Term,
		CommitIndex:       st.CommitIndex,
		AppliedIndex:      st.AppliedIndex,
		FsmIndex:          st.FSMIndex,
	}
	if st.LeaderID != "" {
		out.LeaderAdminAddress = s.adminAddr(st.LeaderID)
	}
	for _, p := range st.Peers {
		out.Peers = append(out.Peers, &adminpb.Peer{
			Id:           p.ID,
			RaftAddress:  p.Address,
			AdminAddress: s.adminAddr(p.ID),
			Suffrage:     p.Suffrage,
			Leader:       p.Leader,
		})
	}
	return out
}

// AddPeer implements adminpb.AdminServer: the leader adds the node as a
// voter and records its admin address, if given.
func (s *Server) AddPeer(ctx context.Context, req *adminpb.AddPeerRequest) (*adminpb.ClusterStatusResponse, error) {
	if req.GetId() == "" || req.GetRaftAddress() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: add peer: id and raft_address are required")
	}
	return orForward(s, ctx, func() (*adminpb.ClusterStatusResponse, error) {
		if err := s.b.Join(ctx, req.GetId(), req.GetRaftAddress()); err != nil {
			return nil, err
		}
		if a := req.GetAdminAddress(); a != "" {
			if err := s.b.Mutate(ctx, []raftfsm.Mutation{raftfsm.Put(AdminAddrKey(req.GetId()), []byte(a))}); err != nil {
				return nil, err
			}
		}
		return s.clusterStatus(), nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.ClusterStatusResponse, error) {
		return c.AddPeer(ctx, req)
	})
}

// RemovePeer implements adminpb.AdminServer: the leader removes the node
// and its registered admin address.
func (s *Server) RemovePeer(ctx context.Context, req *adminpb.RemovePeerRequest) (*adminpb.ClusterStatusResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: remove peer: id is required")
	}
	return orForward(s, ctx, func() (*adminpb.ClusterStatusResponse, error) {
		if err := s.b.RemovePeer(ctx, req.GetId()); err != nil {
			return nil, err
		}
		if _, ok := s.b.DomainGet(AdminAddrKey(req.GetId())); ok {
			if err := s.b.Mutate(ctx, []raftfsm.Mutation{raftfsm.Del(AdminAddrKey(req.GetId()))}); err != nil {
				return nil, err
			}
		}
		return s.clusterStatus(), nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.ClusterStatusResponse, error) {
		return c.RemovePeer(ctx, req)
	})
}

// RegisterNode implements adminpb.AdminServer: the leader records a
// member's admin address in the domain state.
func (s *Server) RegisterNode(ctx context.Context, req *adminpb.RegisterNodeRequest) (*adminpb.RegisterNodeResponse, error) {
	if req.GetId() == "" || req.GetAdminAddress() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: register node: id and admin_address are required")
	}
	return orForward(s, ctx, func() (*adminpb.RegisterNodeResponse, error) {
		if !s.b.IsLeader() {
			id, addr := s.b.Leader()
			return nil, &cluster.NotLeaderError{LeaderID: id, LeaderAddr: addr}
		}
		if got, _ := s.b.DomainGet(AdminAddrKey(req.GetId())); string(got) == req.GetAdminAddress() {
			return &adminpb.RegisterNodeResponse{}, nil
		}
		if err := s.b.Mutate(ctx, []raftfsm.Mutation{raftfsm.Put(AdminAddrKey(req.GetId()), []byte(req.GetAdminAddress()))}); err != nil {
			return nil, err
		}
		return &adminpb.RegisterNodeResponse{}, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.RegisterNodeResponse, error) {
		return c.RegisterNode(ctx, req)
	})
}

// toProto converts a procedure snapshot.
func toProto(info procedure.Info, waitingFor string) *adminpb.Procedure {
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMilli()
	}
	return &adminpb.Procedure{
		Id:              info.ID,
		ParentId:        info.ParentID,
		RootId:          info.RootID,
		Type:            info.Type,
		State:           info.State.String(),
		Owner:           info.Owner,
		Nonce:           info.Nonce,
		SubmittedUnixMs: ms(info.Submitted),
		UpdatedUnixMs:   ms(info.Updated),
		FinishedUnixMs:  ms(info.Finished),
		Error:           info.Error,
		ErrorCode:       info.ErrorCode,
		Result:          info.Result,
		Paused:          info.Paused,
		AbortRequested:  info.AbortRequested,
		Children:        info.Children,
		WaitingFor:      waitingFor,
	}
}
