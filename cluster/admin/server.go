package admin

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/internal/grpcstop"
	"github.com/baton-dev/baton/internal/reqlimit"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// Defaults of Config.
const (
	DefaultWatchInterval    = 50 * time.Millisecond
	DefaultRegisterInterval = 250 * time.Millisecond
	DefaultForwardTimeout   = 10 * time.Second
	DefaultLeaderHold       = 2 * time.Second
	DefaultPageSize         = 100
	MaxPageSize             = 1000
)

// serviceName is the admin service's full name, for the health service.
const serviceName = "baton.admin.v1.Admin"

// Factory builds a procedure from a submission's type and arguments. Its
// errors should wrap procedure.ErrInvalid (or ErrUnknownType) for bad input.
type Factory func(typ string, args map[string]string) (procedure.Procedure, error)

// Config configures a Server.
type Config struct {
	// AdvertiseAddr is the host:port other nodes and clients reach this
	// node's admin API at. If empty, Serve uses its listener's address.
	AdvertiseAddr string
	// HTTPAddr is the host:port this node's HTTP endpoints (status,
	// metrics, web console) are reached at, registered beside the admin
	// address so that a standby's console can link to the leader's.
	// Empty: none is registered.
	HTTPAddr string
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
	// LeaderHold is how long a call that finds no leader ready to take it
	// (an election under way, the new leader still loading, the old one
	// unreachable) waits for one before answering UNAVAILABLE; a call with
	// a deadline keeps part of it to answer in. Negative: none (answer at
	// once). Default 2 s, a few elections: a client's call during a
	// failover is answered as soon as the new leader is ready, instead of
	// failing and backing off past that moment. A call held by a standby
	// and then by the leader it reaches (elected, still loading) waits up
	// to twice this, within the caller's deadline if it set one.
	LeaderHold time.Duration
	// DialOptions are used to reach the leader when forwarding, after
	// client.FailoverDialOptions (so they may override them). Default:
	// insecure transport credentials.
	DialOptions []grpc.DialOption
	// ServerOptions are used by Serve to build the gRPC server, after
	// KeepaliveEnforcement.
	ServerOptions []grpc.ServerOption
	// Logger. Default: a null logger.
	Logger hclog.Logger
	// Metrics, if set, receives the server's own counters
	// (baton_admin_forwarded_reads_total, baton_admin_forward_reads_calls_total).
	Metrics prometheus.Registerer
	// ClusterSecret, in a plaintext cluster, is the secret every master is
	// given (agent --cluster-secret): this server sends it on its calls to
	// other masters, and believes what a caller says of a call it passes
	// on (forwarded, for whom, from where) only if the call carries it.
	// Empty: nothing a plaintext caller says of that is believed. With TLS
	// a master's certificate proves it instead, and this is not used.
	ClusterSecret string
	// Access, if set, turns on access control (when Access.Enforce) and
	// the audit trail: Serve's server enforces it; a gRPC server of the
	// caller's needs UnaryInterceptor and StreamInterceptor. Nil: neither
	// (an embedded or test master).
	Access *Access
	// Snapshots, if set, has the leader write scheduled snapshots
	// (snapshot_schedule.go). Nil: none.
	Snapshots *SnapshotSchedule
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
	// batchers gather the reads forwarded to each leader (forward_reads.go).
	batchers map[string]*readBatcher
	bulk     bulkCounts
	// unprovenDial are the dial options without the cluster secret: for
	// an address no proven registration gave (secretMayGo).
	unprovenDial []grpc.DialOption
	fwd          map[*fwdCall]struct{} // forwarded calls in flight
	acl          *access.ACL           // access control's state, and its tokens' last uses noted here
	gs           *grpc.Server
	started      bool
	closed       bool
	stopCh       chan struct{}
	loops        sync.WaitGroup
	lastReady    string // last readiness reason logged
	// lastRegistered is this node's last registration the leader took
	// (registerDue).
	lastRegistered registration
	// membershipCheck: a checkMembership is under way.
	membershipCheck atomic.Bool
	// bootWaitSaid: the log said once that the bootstrap token waits for
	// the cluster version (access.ErrBootstrapWaits).
	bootWaitSaid atomic.Bool
	// bootIgnoredSaid: the log said once that the bootstrap token file
	// this master was given is not the cluster's.
	bootIgnoredSaid atomic.Bool
	// raiseMu is held by each write of the cluster version, from the read
	// of the committed value to its commit (commitWithRaise).
	raiseMu sync.Mutex

	acc     Access // Config.Access with defaults; zero without one
	accessM *accessMetrics
	// catchingUp, if set (tests), is told the leader's applied index a
	// stream's refusal waits for this node to apply (caughtUp).
	catchingUp atomic.Pointer[func(index uint64)]
	audit      *access.Trail // nil without Config.Access
	// changes is Access.ChangeLimit's buckets; nil: no limit.
	changes *rateLimiter
	// exporter writes the trail to Access.AuditFile, if set.
	exporter *access.Exporter
	// gateway are the methods served without a handler of their own
	// (gateway.go), by full name: those the domain builds.
	gateway map[string]gatewayMethod
	// snapshots runs Config.Snapshots; nil without.
	snapshots *snapshotScheduler
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

// rulesErr is access.RulesErr; a test stands in a service with a method
// that has no rule.
var rulesErr = access.RulesErr

// New returns a server for b. Call Serve, or RegisterServices and Start.
func New(b Backend, cfg Config) (*Server, error) {
	if b == nil {
		return nil, errors.New("admin: nil backend")
	}
	if err := rulesErr(); err != nil {
		return nil, err
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
	switch {
	case cfg.LeaderHold == 0:
		cfg.LeaderHold = DefaultLeaderHold
	case cfg.LeaderHold < 0:
		cfg.LeaderHold = 0
	}
	if cfg.DialOptions == nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	cfg.DialOptions = append(append(client.FailoverDialOptions(), cfg.DialOptions...), grpc.WithChainUnaryInterceptor(markUnsent))
	unprovenDial := cfg.DialOptions
	if cfg.ClusterSecret != "" {
		cfg.DialOptions = append(cfg.DialOptions, security.ClusterSecretDialOption(cfg.ClusterSecret))
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	s := &Server{
		b:            b,
		cfg:          cfg,
		unprovenDial: unprovenDial[:len(unprovenDial):len(unprovenDial)],
		log:          cfg.Logger.Named("admin"),
		health:       health.NewServer(),
		advertise:    cfg.AdvertiseAddr,
		conns:        map[string]*grpc.ClientConn{},
		batchers:     map[string]*readBatcher{},
		fwd:          map[*fwdCall]struct{}{},
		stopCh:       make(chan struct{}),
	}
	if d, err := s.domain(); err == nil {
		if s.gateway, err = gatewayMethods(adminService, d.BuildMethods()); err != nil {
			return nil, err
		}
	}
	s.acc = Access{}.withDefaults() // for the Acl* calls of a master without access control
	if cfg.Access != nil {
		if err := cfg.Access.Validate(); err != nil {
			return nil, err
		}
		s.acc = cfg.Access.withDefaults()
	}
	s.acl = access.NewACL(domainReader{b}, s.acc.Clock, s.acc.InitialGrants, func() version.Format { return clusterFormatOf(b) })
	if s.acc.BootstrapToken != "" {
		if err := s.acl.UseBootstrapToken(s.acc.BootstrapToken); err != nil {
			return nil, err // Validate said it already
		}
	}
	if err := s.registerBulkMetrics(cfg.Metrics); err != nil {
		return nil, err
	}
	if cfg.Access != nil {
		var err error
		if s.accessM, err = newAccessMetrics(s.acc.Metrics); err != nil {
			return nil, err
		}
		if s.audit, err = newAuditTrail(s); err != nil {
			return nil, err
		}
		if s.changes, err = newChangeLimiter(s.acc.ChangeLimit, s.acc.Clock, s.acc.Metrics); err != nil {
			return nil, err
		}
		if f := s.acc.AuditFile; f != nil {
			if s.exporter, err = newAuditExporter(s, *f); err != nil {
				return nil, err
			}
		}
	}
	if cfg.Snapshots != nil {
		var err error
		if s.snapshots, err = newSnapshotScheduler(*cfg.Snapshots, s, b.ID(), s.log); err != nil {
			return nil, err
		}
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(serviceName, healthpb.HealthCheckResponse_NOT_SERVING)
	return s, nil
}

// NewForNode is New(NodeBackend(n), cfg).
func NewForNode(n *cluster.Node, cfg Config) (*Server, error) { return New(NodeBackend(n), cfg) }

// RequestLimits are the server options that hold every request, of the
// admin API and of the Master service beside it, to reqlimit.Fields: in a
// server's chain after UnaryInterceptor, so that a call refused for its
// size is refused as the caller's, and audited, and before anything that
// stores or forwards it.
func RequestLimits() []grpc.ServerOption {
	return reqlimit.ServerOptions()
}

// RegisterServices registers the admin service (with the gateway's
// handlers for the methods the domain builds), the health service and
// reflection on gs.
func (s *Server) RegisterServices(gs grpc.ServiceRegistrar) {
	gs.RegisterService(s.serviceDesc(), s)
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
	if r, ok := s.b.(memberRemoverSetter); ok {
		// The autopilot's removals go the way of a cluster remove.
		r.SetMemberRemover(s.removeDeadMember)
	}
	s.loops.Add(3)
	go s.loop()
	go s.raiseLoop()
	go s.watchLeader()
	if s.audit != nil {
		s.loops.Add(1)
		go s.audit.Run()
	}
	if s.exporter != nil {
		s.loops.Add(1)
		go s.exporter.Run()
	}
	if s.snapshots != nil {
		s.snapshots.start()
	}
	return nil
}

// Serve serves the API on lis until Stop. The advertised address defaults
// to lis's address.
func (s *Server) Serve(lis net.Listener) error {
	// The interceptors also turn away the calls a removed member does
	// not serve, with access control or without.
	// Refusals are recorded by the first interceptor, which sees the
	// identity policy's too.
	opts := append([]grpc.ServerOption{KeepaliveEnforcement(), grpc.ChainUnaryInterceptor(s.RefusalInterceptor()), grpc.ChainStreamInterceptor(s.RefusalStreamInterceptor())}, s.cfg.ServerOptions...)
	opts = append(opts, grpc.ChainUnaryInterceptor(s.UnaryInterceptor()), grpc.ChainStreamInterceptor(s.StreamInterceptor()))
	opts = append(opts, RequestLimits()...)
	gs := grpc.NewServer(opts...)
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

// memberRemoverSetter is a backend whose node runs the autopilot
// (cluster.Node.SetMemberRemover).
type memberRemoverSetter interface {
	SetMemberRemover(func(ctx context.Context, id, why string) error)
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
	if r, ok := s.b.(memberRemoverSetter); ok && s.started {
		// The node may lead on without this server. Only the server
		// that set it: another on the same node (HTTPHandler's) never
		// started.
		r.SetMemberRemover(nil)
	}
	gs := s.gs
	close(s.stopCh)
	for c := range s.fwd {
		c.cancel(errStopping)
		delete(s.fwd, c)
	}
	s.mu.Unlock()
	s.health.Shutdown()
	if s.snapshots != nil {
		s.snapshots.stop()
	}
	s.loops.Wait()
	if gs != nil {
		grpcstop.Stop(ctx, gs)
	}
	s.mu.Lock()
	conns := s.conns
	s.conns = map[string]*grpc.ClientConn{}
	s.batchers = map[string]*readBatcher{}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// Ready says whether the node can serve the API (leader with a running
// executor, or follower that knows a leader), and if not, why.
func (s *Server) Ready() (bool, string) {
	if isRemoved(s.b) && !s.b.IsLeader() {
		return false, removedReason(s.b, s.Advertise())
	}
	return Ready(s.b)
}

// Ready is Server.Ready for any Backend.
func Ready(b Backend) (bool, string) {
	if isRemoved(b) && !b.IsLeader() {
		return false, removedReason(b, "")
	}
	if why := unreadableReason(b); why != "" {
		return false, why
	}
	_, err := b.Procedures()
	switch {
	case err == nil:
		return true, "leader"
	case errors.Is(err, cluster.ErrNotLeader):
		if id, _ := b.Leader(); id != "" && !b.IsLeader() {
			// Knowing a leader is not enough: a member restarted, joining
			// or cut off may be far behind it.
			if cu, ok := b.(catchUpper); ok {
				if c := cu.CatchUp(); !c.CaughtUp {
					return false, c.Reason
				}
			}
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

// catchUpper is a backend that can say whether its member is caught up
// with the leader (cluster.Node.CatchUp); a backend without it is taken
// to be once it knows a leader.
type catchUpper interface {
	CatchUp() cluster.CatchUp
}

// Live says whether the node is alive: its process serves and its node is
// not shut down, whatever its role (/livez). A follower, a candidate, a
// member catching up or one that knows no leader is alive: restarting it
// would not help, and a liveness probe that failed them would restart
// members during every election.
func Live(b Backend) (bool, string) {
	if l, ok := b.(liver); ok {
		return l.Live()
	}
	if _, err := b.Procedures(); errors.Is(err, cluster.ErrShutdown) {
		return false, "node shut down"
	}
	return true, "alive"
}

// liver is a backend that says itself whether it is alive.
type liver interface {
	Live() (bool, string)
}
