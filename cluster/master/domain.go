package master

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/cluster/rspb"
	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/scheduler"
)

// errInvalid is wrapped by errors about bad input, so the admin API answers
// INVALID_ARGUMENT.
var errInvalid = procedure.ErrInvalid

// Errors of the domain.
var (
	// ErrNoServices: this node runs no leader services (it is not the
	// leader, or its leadership is being established or revoked).
	ErrNoServices = fmt.Errorf("master: no leader services on this node: %w", cluster.ErrNotReady)
	// ErrNotFound is wrapped when a table, region, server or lock does not
	// exist (it matches procedure.ErrNotFound, so the API answers
	// NOT_FOUND).
	ErrNotFound = procedure.ErrNotFound
)

// Node is what the domain uses of the master node; *cluster.Node
// implements it.
type Node interface {
	ID() string
	Raft() *raft.Raft
	FSM() *raftfsm.FSM
	Leader() (id, raftAddr string)
	IsLeader() bool
	Executor() (*procedure.Executor, error)
}

var _ Node = (*cluster.Node)(nil)

// Defaults of Config.
const (
	DefaultLockLease       = 30 * time.Second
	DefaultDispatchTimeout = 10 * time.Second
	DefaultMaxOpenAttempts = 10
	DefaultApplyTimeout    = 10 * time.Second
	DefaultFenceMargin     = time.Second
)

// DefaultRetryBackoff paces a region procedure that has nothing to do but
// wait (no live server to open on, a refused close): 200 ms doubling to
// 10 s. Shorter than the procedure package's (1 s to 10 min) because a
// region waiting here is unavailable.
var DefaultRetryBackoff = procedure.Backoff{Base: 200 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.1}

// Config configures a Domain. Zero fields take the defaults.
type Config struct {
	// Logger. Default: a null logger.
	Logger hclog.Logger
	// Clock drives the leases and the dispatcher's timers. Default: real.
	Clock clock.Clock
	// ServerLease is the region servers' lease configuration (soft and
	// hard limit, monitor); its Clock and OnExpire are set by the domain.
	// Zero: lease.DefaultConfig() (soft 6 s, hard 15 s).
	ServerLease lease.Config
	// LockLease is the hard limit of external locks' leases (HBase's
	// LockProcedure heartbeat timeout for remote holders). Default 30 s.
	LockLease time.Duration
	// HeartbeatInterval is what RegisterServer tells region servers.
	// Default a third of the soft limit, so two heartbeats may be lost
	// before a server is suspect.
	HeartbeatInterval time.Duration
	// Transport carries the dispatcher's batches. Default a
	// dispatch.GRPCTransport, shared by the dispatchers of every term.
	Transport dispatch.Transport
	// Dispatch is the template of each term's dispatcher configuration
	// (MaxBatch, Delay, retries); Term, MasterID, Transport, callbacks,
	// Clock and Logger are set by the domain. Zero fields take dispatch's
	// defaults (32 ops, 150 ms).
	Dispatch dispatch.Config
	// DispatchTimeout is how long a region procedure waits for the result
	// of one open or close before it checks the server again and re-sends
	// (idempotent on the server). Default 10 s.
	DispatchTimeout time.Duration
	// MaxOpenAttempts bounds the servers a create or enable tries for one
	// region before it fails (and rolls back). Crash recovery, moves and
	// balancing never give up. Default 10.
	MaxOpenAttempts int
	// RetryBackoff paces waits with nothing to do. Default
	// DefaultRetryBackoff.
	RetryBackoff procedure.Backoff
	// ApplyTimeout bounds the Raft writes of server registrations and
	// expiries. Default 10 s.
	ApplyTimeout time.Duration
	// FenceMargin is added to a region server's self-fence period (3 ×
	// HeartbeatInterval) before a fenced incarnation that did not register
	// again is taken to have stopped serving its regions. It absorbs the
	// rate drift between the region server's clock and the leader's over
	// one self-fence period (see "Proof that a server stopped serving" in
	// the package doc). Default 1 s: with the default 6 s period, the
	// bound holds while the server's clock runs at most 16% slower than
	// the leader's.
	FenceMargin time.Duration
	// FailPoint, if set, is consulted at named points of the procedures
	// ("create.layout", "create.enable", "enable.enable", "crash.assign",
	// "region.open"); a non-nil error
	// fails the step there. For fault-injection tests.
	FailPoint func(point string) error
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.ServerLease.HardLimit == 0 {
		onExp := c.ServerLease.OnExpire
		c.ServerLease = lease.DefaultConfig()
		c.ServerLease.OnExpire = onExp
	}
	if c.ServerLease.MonitorInterval == 0 {
		c.ServerLease.MonitorInterval = min(lease.DefaultConfig().MonitorInterval, c.ServerLease.HardLimit)
	}
	if c.ServerLease.MaxPassTime == 0 {
		c.ServerLease.MaxPassTime = lease.DefaultConfig().MaxPassTime
	}
	if c.ServerLease.SoftLimit == 0 {
		c.ServerLease.SoftLimit = c.ServerLease.HardLimit * 2 / 5
	}
	if c.LockLease == 0 {
		c.LockLease = DefaultLockLease
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = max(c.ServerLease.SoftLimit/3, time.Millisecond)
	}
	if c.DispatchTimeout == 0 {
		c.DispatchTimeout = DefaultDispatchTimeout
	}
	if c.MaxOpenAttempts == 0 {
		c.MaxOpenAttempts = DefaultMaxOpenAttempts
	}
	if c.RetryBackoff.Base == 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.ApplyTimeout == 0 {
		c.ApplyTimeout = DefaultApplyTimeout
	}
	if c.FenceMargin == 0 {
		c.FenceMargin = DefaultFenceMargin
	}
	return c
}

// Domain is the master's domain layer on one node: the procedures' Env,
// the region servers' Master service and the admin API's namespaces,
// tables, regions, servers and locks. It lives as long as the node; the
// leader-only services of each term (dispatcher, leases, waiting
// procedures' events) are built by LeaderServices and dropped when the term
// ends.
type Domain struct {
	cfg       Config
	log       hclog.Logger
	transport dispatch.Transport
	ownsTrans bool

	attached chan struct{}
	nodeOnce sync.Once
	node     Node

	mu     sync.Mutex
	svc    *services
	conns  map[string]*grpc.ClientConn // region servers, for ServerRegions
	closed bool

	// attempts numbers the dispatchers' calls across every term's
	// dispatcher (dispatch.Config.NextSeq).
	attempts atomic.Uint64
}

// New returns a Domain. Attach the node once it is built (the node needs
// the Domain first, as its Env).
func New(cfg Config) (*Domain, error) {
	cfg = cfg.withDefaults()
	lc := cfg.ServerLease
	lc.Clock = cfg.Clock
	if err := lc.Validate(); err != nil {
		return nil, fmt.Errorf("master: server lease: %w", err)
	}
	if cfg.LockLease < 0 || cfg.DispatchTimeout < 0 || cfg.MaxOpenAttempts < 0 || cfg.ApplyTimeout < 0 {
		return nil, fmt.Errorf("%w: master: negative LockLease, DispatchTimeout, MaxOpenAttempts or ApplyTimeout", errInvalid)
	}
	d := &Domain{
		cfg:       cfg,
		log:       cfg.Logger.Named("master"),
		transport: cfg.Transport,
		attached:  make(chan struct{}),
		conns:     map[string]*grpc.ClientConn{},
	}
	if d.transport == nil {
		d.transport = dispatch.NewGRPCTransport(dispatch.GRPCTransportConfig{Logger: cfg.Logger})
		d.ownsTrans = true
	}
	return d, nil
}

// Attach gives the domain its node. Call it once, right after NewNode.
func (d *Domain) Attach(n Node) {
	d.nodeOnce.Do(func() {
		d.node = n
		close(d.attached)
	})
}

// Close releases the domain's connections. The node must be shut down
// first (its leader services are stopped with the executor).
func (d *Domain) Close() error {
	d.mu.Lock()
	d.closed = true
	conns := d.conns
	d.conns = map[string]*grpc.ClientConn{}
	d.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	if c, ok := d.transport.(interface{ Close() error }); ok && d.ownsTrans {
		return c.Close()
	}
	return nil
}

// nodeOrNil returns the attached node, or nil.
func (d *Domain) nodeOrNil() Node {
	select {
	case <-d.attached:
		return d.node
	default:
		return nil
	}
}

// fsmReader reads the local FSM.
func (d *Domain) fsmReader() (reader, error) {
	n := d.nodeOrNil()
	if n == nil {
		return nil, fmt.Errorf("master: node not attached yet: %w", cluster.ErrNotReady)
	}
	f := n.FSM()
	return kvReader{Get: f.Get, Scan: f.Scan}, nil
}

// services returns the current term's leader services, or nil.
func (d *Domain) services() *services {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.svc
}

// servicesFor returns the leader services of the executor running the
// step, or nil: a step of an executor that was stopped (its term ended)
// and is still finishing must not use the next term's services, which
// would dispatch, wait and decide in a term that is not its own.
func (d *Domain) servicesFor(ctx *procedure.Context) *services {
	s := d.services()
	if s == nil || s.x != ctx.Executor() {
		return nil
	}
	return s
}

// LeaderServices starts the leader-only services of term for executor x
// (cluster.Config.LeaderServices): the term-fenced dispatcher, the lease
// managers with every replicated live server granted and given a fresh
// grace period, and their monitors. The returned stop ends them all.
func (d *Domain) LeaderServices(term uint64, x *procedure.Executor) (func(), error) {
	var n Node
	select {
	case <-d.attached:
		n = d.node
	case <-time.After(10 * time.Second):
		return nil, errors.New("master: node not attached to the domain")
	}
	svc := &services{
		d:      d,
		n:      n,
		term:   term,
		x:      x,
		log:    d.log.With("term", term),
		stopCh: make(chan struct{}),
		waits:  map[uint64]*opWait{},
		locks:  map[uint64]*lockWait{},
		revoke: map[string]uint64{},

		startedAt: d.cfg.Clock.Now(),
		renewed:   map[ServerRef]time.Time{},
	}
	lc := d.cfg.ServerLease
	lc.Clock = d.cfg.Clock
	lc.OnExpire = svc.onServerLeaseExpired
	var err error
	if svc.leases, err = lease.New(lc); err != nil {
		return nil, fmt.Errorf("master: server leases: %w", err)
	}
	kc := lease.Config{
		SoftLimit:       d.cfg.LockLease / 2,
		HardLimit:       d.cfg.LockLease,
		MonitorInterval: min(lc.MonitorInterval, d.cfg.LockLease),
		MaxPassTime:     lc.MaxPassTime,
		Clock:           d.cfg.Clock,
		OnExpire:        svc.onLockLeaseExpired,
	}
	if svc.lockLeases, err = lease.New(kc); err != nil {
		return nil, fmt.Errorf("master: lock leases: %w", err)
	}
	dc := d.cfg.Dispatch
	dc.Term, dc.MasterID, dc.Transport = term, n.ID(), d.transport
	dc.OnResult, dc.OnServerFailed = svc.onResult, svc.onServerFailed
	dc.Clock, dc.Logger = d.cfg.Clock, d.cfg.Logger.With("term", term)
	dc.NextSeq = func() uint64 { return d.attempts.Add(1) }
	if svc.disp, err = dispatch.New(dc); err != nil {
		return nil, fmt.Errorf("master: dispatcher: %w", err)
	}
	// Only grants and expiries are replicated: every server the log says
	// is live gets a lease, and all of them a fresh grace period, since
	// the previous leader's renewal times are unknown here.
	servers, err := scanServers(kvReader{Get: n.FSM().Get, Scan: n.FSM().Scan})
	if err != nil {
		svc.disp.Stop()
		return nil, err
	}
	for id, s := range servers {
		if s.State == ServerLive {
			svc.leases.Grant(holderOf(ServerRef{id, s.StartCode}))
		}
	}
	svc.leases.GraceAll()
	svc.leases.Start()
	svc.lockLeases.Start()

	d.mu.Lock()
	d.svc = svc
	d.mu.Unlock()
	svc.background(svc.reconcileWhenReady)
	svc.log.Info("leader services started", "servers", len(servers))
	return func() {
		d.mu.Lock()
		if d.svc == svc {
			d.svc = nil
		}
		d.mu.Unlock()
		svc.stop()
	}, nil
}

// holderOf is the lease holder of a server incarnation: "rs/<id>/<start code>".
// Incarnations hold separate leases, so the late expiry of an old one is
// never taken for the new one's.
func holderOf(ref ServerRef) string {
	return "rs/" + ref.ID + "/" + strconv.FormatUint(ref.StartCode, 10)
}

func refOfHolder(h string) (ServerRef, bool) {
	h, ok := strings.CutPrefix(h, "rs/")
	if !ok {
		return ServerRef{}, false
	}
	i := strings.LastIndexByte(h, '/')
	if i < 0 {
		return ServerRef{}, false
	}
	sc, err := strconv.ParseUint(h[i+1:], 10, 64)
	if err != nil {
		return ServerRef{}, false
	}
	return ServerRef{ID: h[:i], StartCode: sc}, true
}

func lockHolder(id uint64) string { return "lock/" + strconv.FormatUint(id, 10) }

// services are one term's leader-only services.
type services struct {
	d          *Domain
	n          Node
	term       uint64
	x          *procedure.Executor
	log        hclog.Logger
	disp       *dispatch.Dispatcher
	leases     *lease.Manager // region servers
	lockLeases *lease.Manager // external lock holders

	stopCh   chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	// regMu serializes the read-modify-write of server records
	// (registrations, expiries).
	regMu sync.Mutex
	// pickMu serializes target picks (see pick).
	pickMu sync.Mutex

	mu      sync.Mutex
	stopped bool
	waits   map[uint64]*opWait   // by proc id: a region procedure waiting for an op
	locks   map[uint64]*lockWait // by lock proc id
	revoke  map[string]uint64    // server id → start code told "expired" at its next heartbeat
	// startedAt is when this term's services started: every renewal a
	// predecessor granted happened before it (see renewedAt).
	startedAt time.Time
	// renewed is, per incarnation, the latest renewal this term granted
	// (or was about to grant: see Heartbeat), for fencing proofs.
	renewed  map[ServerRef]time.Time
	startSeq uint64
	load     map[string]int // regions per server, cached for target picks
	loadAt   time.Time
	// closedTables: rolled-back trees whose table's regions were all sent
	// a close (closeTableOnce), by root id.
	closedTables map[uint64]bool
}

func (s *services) stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		close(s.stopCh)
		s.leases.Stop()
		s.lockLeases.Stop()
		s.disp.Stop()
		s.wg.Wait()
		s.log.Info("leader services stopped")
	})
}

func (s *services) isStopped() bool {
	select {
	case <-s.stopCh:
		return true
	default:
		return false
	}
}

// reader reads the local FSM (on the leader: every committed entry of
// this term's executor and of the registrations is applied).
func (s *services) reader() reader {
	f := s.n.FSM()
	return kvReader{Get: f.Get, Scan: f.Scan}
}

// commit writes domain mutations through Raft, fenced by the term: the FSM
// refuses the entry in any other term, so a deposed leader's registration
// or expiry never lands.
func (s *services) commit(ctx context.Context, muts ...raftfsm.Mutation) error {
	data, err := raftfsm.EncodeFencedProcBatch(s.term, raftfsm.Write{Mutations: muts})
	if err != nil {
		return err
	}
	f := s.n.Raft().Apply(data, s.d.cfg.ApplyTimeout)
	if err := s.awaitRaft(ctx, "domain write", f); err != nil {
		return err
	}
	if rerr, ok := f.Response().(error); ok && rerr != nil {
		return fmt.Errorf("master: domain write refused: %w", rerr)
	}
	return nil
}

// awaitRaft waits for f until ctx ends or the services stop. Losing
// leadership, however raft words it (not leader, leadership lost, shut
// down), is cluster.ErrNotLeader, so callers answer UNAVAILABLE with a
// leader hint.
func (s *services) awaitRaft(ctx context.Context, what string, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopCh:
		return fmt.Errorf("master: %s: %w", what, cluster.ErrNotLeader)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("master: %s: %w (%v)", what, cluster.ErrNotLeader, err)
	}
	return fmt.Errorf("master: %s: %w", what, err)
}

// nextStartCode is term<<32 | n: unique across terms (a term has one
// leader) and increasing, like HBase's start codes (a timestamp).
func (s *services) nextStartCode() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startSeq++
	return s.term<<32 | s.startSeq&0xffffffff
}

// reconcileWhenReady waits for the executor to be published (it has loaded
// every procedure), then repairs what the previous leader may have left
// half done: crash procedures owed to expired or superseded incarnations
// that still hold regions, and leases of external locks.
func (s *services) reconcileWhenReady() {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if x, err := s.n.Executor(); err == nil && x == s.x {
			break
		}
		select {
		case <-s.stopCh:
			return
		case <-t.C:
		}
	}
	r := s.reader()
	servers, err := scanServers(r)
	if err != nil {
		s.log.Error("reconcile: reading servers", "error", err)
		return
	}
	owed := map[ServerRef]bool{}
	err = scanRegions(r, func(_ string, rg Region) bool {
		if rg.Server == "" || (rg.State != RegionOpen && rg.State != RegionOpening && rg.State != RegionClosing) {
			return true
		}
		ref := ServerRef{rg.Server, rg.StartCode}
		if srv, ok := servers[rg.Server]; !ok || srv.StartCode != rg.StartCode || srv.State != ServerLive {
			owed[ref] = true
		}
		return true
	})
	if err != nil {
		s.log.Error("reconcile: reading regions", "error", err)
	}
	for ref := range owed {
		s.submitCrash(ref, "reconcile at leadership start")
	}
	for _, info := range s.x.List(procedure.Filter{Type: TypeLock}) {
		if !info.State.Terminal() {
			s.lockLeases.Grant(lockHolder(info.ID))
		}
	}
}

// submitCrash submits the ServerCrashProcedure of ref, once per need: the
// nonce makes every later submission for the same incarnation return the
// first one's id while that one is unfinished. One that has already ended
// is not an answer to a new need (regions recorded on the incarnation
// again, found by a registration or a new leader's reconcile): a new
// procedure is submitted, under a nonce derived from the ended one's id,
// so concurrent callers still share it. Retries in the background while
// the executor is not accepting yet.
func (s *services) submitCrash(ref ServerRef, why string) {
	nonce := fmt.Sprintf("scp-%s-%d", ref.ID, ref.StartCode)
	submit := func() error {
		for range maxCrashResubmits {
			id, err := s.x.Submit(&ServerCrash{Server: ref}, procedure.SubmitOptions{Nonce: nonce, Owner: "master"})
			if err != nil {
				return err
			}
			info, err := s.x.Get(id)
			if err != nil || !info.State.Terminal() {
				s.log.Info("server crash procedure", "server", ref.String(), "proc_id", id, "why", why)
				return nil
			}
			// Ended before this need arose: the nonce answered with it.
			nonce = fmt.Sprintf("scp-%s-%d-after-%d", ref.ID, ref.StartCode, id)
		}
		return fmt.Errorf("master: server crash of %s: %d ended procedures in a row", ref, maxCrashResubmits)
	}
	err := submit()
	if err == nil {
		return
	}
	s.log.Warn("submitting server crash procedure failed; retrying", "server", ref.String(), "error", err)
	s.background(func() {
		for delay := 50 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
			select {
			case <-s.stopCh:
				return
			case <-time.After(delay):
			}
			err := submit()
			if err == nil || errors.Is(err, procedure.ErrStopped) {
				return
			}
			if errors.Is(err, procedure.ErrNotAllowed) || errors.Is(err, procedure.ErrInvalid) {
				// Held (unloadable) or refused: retrying cannot help; the
				// executor reports held procedures as load problems.
				s.log.Error("server crash procedure cannot be submitted", "server", ref.String(), "error", err)
				return
			}
		}
	})
}

// maxCrashResubmits bounds the chain of ended crash procedures submitCrash
// follows for one call (each link is a real need that arose after the
// previous one ended, so a long chain means something else is wrong).
const maxCrashResubmits = 8

// background runs f in a goroutine that stop waits for, unless the
// services are stopping already.
func (s *services) background(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// expire makes incarnation ref expired in the replicated state, if it is
// still the live one, and starts its crash procedure.
func (s *services) expire(ref ServerRef, why string) {
	s.regMu.Lock()
	srv, ok, err := getServer(s.reader(), ref.ID)
	if err == nil && ok && srv.StartCode == ref.StartCode && srv.State == ServerLive {
		srv.State = ServerExpired
		ctx, cancel := context.WithTimeout(context.Background(), s.d.cfg.ApplyTimeout)
		err = s.commit(ctx, raftfsm.Put(ServerKey(ref.ID), mustJSON(srv)))
		cancel()
	}
	s.regMu.Unlock()
	if err != nil {
		// The crash procedure fences the server itself; go on.
		s.log.Warn("recording server expiry failed", "server", ref.String(), "error", err)
	}
	s.log.Warn("region server expired", "server", ref.String(), "why", why)
	s.submitCrash(ref, why)
}

// onServerLeaseExpired is the server lease monitor's OnExpire.
func (s *services) onServerLeaseExpired(info lease.Info) {
	ref, ok := refOfHolder(info.Holder)
	if !ok || s.isStopped() {
		return
	}
	s.expire(ref, fmt.Sprintf("lease expired (last renewal %s)", info.LastRenewal.Format(time.RFC3339Nano)))
}

// onServerFailed is the dispatcher's OnServerFailed.
//
// A server the dispatcher cannot reach is not expired at once: it may be
// alive and serving its regions, and reassigning them now would open them
// twice (HBASE-14012, HBASE-21811). Instead its lease is revoked: it is no
// longer renewed, and the server's next heartbeat is answered expired =
// true, upon which it drops every region and registers again (the new
// registration then starts the crash procedure of the old incarnation at
// once). A server that does not heartbeat at all expires with its lease,
// one hard limit after its last renewal.
func (s *services) onServerFailed(serverID string, err error) {
	if errors.Is(err, dispatch.ErrWrongStartCode) {
		// The incarnation the ops were for is gone; the server registered
		// again, which already dealt with the old one's regions.
		s.log.Info("dispatcher met a restarted region server", "server", serverID, "error", err)
		return
	}
	srv, ok, rerr := getServer(s.reader(), serverID)
	if rerr != nil || !ok || srv.State != ServerLive {
		return
	}
	s.mu.Lock()
	s.revoke[serverID] = srv.StartCode
	s.mu.Unlock()
	s.log.Error("region server unreachable: its lease is revoked; it expires at its next heartbeat or at the hard limit",
		"server", ServerRef{serverID, srv.StartCode}.String(), "error", err)
}

func (s *services) revoked(ref ServerRef) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc, ok := s.revoke[ref.ID]
	return ok && sc == ref.StartCode
}

// opWait is a region procedure waiting for one dispatched op.
type opWait struct {
	ref    ServerRef
	region string
	kind   rspb.OpKind
	ev     *scheduler.Event
	res    *dispatch.Result
	done   chan struct{} // closed with the first result
}

func (w *opWait) matches(ref ServerRef, region string, kind rspb.OpKind) bool {
	return w.ref == ref && w.region == region && w.kind == kind
}

// arm prepares procID's wait for an op, replacing any earlier one.
func (s *services) arm(procID uint64, ref ServerRef, region string, kind rspb.OpKind) *opWait {
	w := &opWait{ref: ref, region: region, kind: kind, done: make(chan struct{}),
		ev: scheduler.NewEvent(fmt.Sprintf("%v %s on %s", kind, region, ref))}
	s.mu.Lock()
	s.waits[procID] = w
	s.mu.Unlock()
	return w
}

// outstanding returns procID's wait for the op if it was sent in this term
// and is not answered yet: it need not be sent again (the dispatcher
// answers every op exactly once).
func (s *services) outstanding(procID uint64, ref ServerRef, region string, kind rspb.OpKind) *opWait {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.waits[procID]; w != nil && w.matches(ref, region, kind) && w.res == nil {
		return w
	}
	return nil
}

// take returns and forgets procID's result for the op, if one arrived.
func (s *services) take(procID uint64, ref ServerRef, region string, kind rspb.OpKind) *dispatch.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.waits[procID]
	if w == nil || !w.matches(ref, region, kind) || w.res == nil {
		return nil
	}
	delete(s.waits, procID)
	return w.res
}

// forget drops procID's wait.
func (s *services) forget(procID uint64) {
	s.mu.Lock()
	delete(s.waits, procID)
	s.mu.Unlock()
}

// onResult is the dispatcher's OnResult: it hands the result to the
// procedure waiting for it and wakes it.
func (s *services) onResult(r dispatch.Result) {
	s.deliver(r.Op.ProcID, r)
}

// deliver hands r to procID if it waits for exactly that op (same
// incarnation, region and kind) and has no result yet.
func (s *services) deliver(procID uint64, r dispatch.Result) bool {
	ref := ServerRef{r.Target.ServerID, r.Target.StartCode}
	s.mu.Lock()
	w := s.waits[procID]
	if w == nil || !w.matches(ref, r.Op.Region, r.Op.Kind) || w.res != nil {
		s.mu.Unlock()
		return false
	}
	w.res = &r
	close(w.done)
	s.mu.Unlock()
	s.x.Wake(w.ev)
	return true
}

// dispatch sends op for procID to ref and returns its wait. The wait is
// armed before the send: a result can arrive (even inside Dispatch) before
// the procedure suspends; the event then stays ready, so the suspension
// returns at once.
func (s *services) dispatch(procID uint64, ref ServerRef, address, region, table string, kind rspb.OpKind) *opWait {
	w := s.arm(procID, ref, region, kind)
	s.disp.Dispatch(dispatch.Target{ServerID: ref.ID, Address: address, StartCode: ref.StartCode},
		dispatch.Op{Kind: kind, Region: region, Table: table, ProcID: procID})
	return w
}

// lockWait is an external lock procedure's wake-up: released by its
// holder, or its lease expired.
type lockWait struct {
	ev       *scheduler.Event
	released bool
	expired  bool
}

func (s *services) lockWaitOf(id uint64) *lockWait {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.locks[id]
	if w == nil {
		w = &lockWait{ev: scheduler.NewEvent(fmt.Sprintf("release of lock %d", id))}
		s.locks[id] = w
	}
	return w
}

// lockFlags reports what happened to lock id, and re-arms its event for
// the next wait.
func (s *services) lockFlags(id uint64) (released, expired bool, ev *scheduler.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.locks[id]
	if w == nil {
		w = &lockWait{ev: scheduler.NewEvent(fmt.Sprintf("release of lock %d", id))}
		s.locks[id] = w
	}
	if !w.released && !w.expired && w.ev.Ready() {
		w.ev = scheduler.NewEvent(fmt.Sprintf("release of lock %d", id))
	}
	return w.released, w.expired, w.ev
}

// lockExpired reports whether lock id's lease expired in this term.
func (s *services) lockExpired(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.locks[id]
	return w != nil && w.expired
}

func (s *services) setLock(id uint64, released, expired bool) {
	w := s.lockWaitOf(id)
	s.mu.Lock()
	w.released = w.released || released
	w.expired = w.expired || expired
	ev := w.ev
	s.mu.Unlock()
	s.x.Wake(ev)
}

func (s *services) dropLock(id uint64) {
	s.mu.Lock()
	delete(s.locks, id)
	s.mu.Unlock()
	s.lockLeases.Release(lockHolder(id))
}

// onLockLeaseExpired is the lock lease monitor's OnExpire.
func (s *services) onLockLeaseExpired(info lease.Info) {
	idStr, ok := strings.CutPrefix(info.Holder, "lock/")
	if !ok {
		return
	}
	id, err := strconv.ParseUint(idStr, 10, 64)
	if err != nil {
		return
	}
	s.log.Warn("external lock expired: its holder stopped heartbeating", "lock_id", id)
	s.setLock(id, false, true)
}

// liveTargets lists the servers new regions may go to: live in the
// replicated state and live (not suspect, not revoked) by their lease.
func (s *services) liveTargets(r reader) (map[string]Server, error) {
	servers, err := scanServers(r)
	if err != nil {
		return nil, err
	}
	for id, srv := range servers {
		ref := ServerRef{id, srv.StartCode}
		if srv.State != ServerLive || s.leases.State(holderOf(ref)) != lease.Live || s.revoked(ref) {
			delete(servers, id)
		}
	}
	return servers, nil
}

// loadCacheTTL bounds how stale the region counts used to pick targets
// may be; picks made meanwhile are counted in, so the many assignments of
// one create spread evenly without a full scan each.
const loadCacheTTL = 250 * time.Millisecond

// pick chooses the live server with the fewest regions among candidates
// (ties by id), preferring want if it is a candidate, and counts the pick.
func (s *services) pick(r reader, candidates map[string]Server, want string) (string, error) {
	if len(candidates) == 0 {
		return "", nil
	}
	// Picks are serialized, so concurrent assignments (a create's
	// children run side by side) each see the others' picks.
	s.pickMu.Lock()
	defer s.pickMu.Unlock()
	s.mu.Lock()
	stale := s.load == nil || time.Since(s.loadAt) > loadCacheTTL
	s.mu.Unlock()
	if stale {
		load := map[string]int{}
		err := scanRegions(r, func(_ string, rg Region) bool {
			if rg.Server != "" && (rg.State == RegionOpen || rg.State == RegionOpening) {
				load[rg.Server]++
			}
			return true
		})
		if err != nil {
			return "", err
		}
		s.mu.Lock()
		s.load, s.loadAt = load, time.Now()
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	best := ""
	if _, ok := candidates[want]; ok && want != "" {
		best = want
	} else {
		for id := range candidates {
			if best == "" || s.load[id] < s.load[best] || s.load[id] == s.load[best] && id < best {
				best = id
			}
		}
	}
	s.load[best]++
	return best, nil
}

// serverAlive reports whether incarnation ref is the live one in the
// replicated state (its address too). One that is not is fenced: nothing
// new is sent to it, its start code is refused, and it drops every region
// when told it expired. That is not yet proof that it stopped serving
// (the answer may be lost): see presenceOf.
func serverAlive(r reader, ref ServerRef) (Server, bool, error) {
	srv, ok, err := getServer(r, ref.ID)
	if err != nil || !ok {
		return Server{}, false, err
	}
	return srv, srv.StartCode == ref.StartCode && srv.State == ServerLive, nil
}

// presence is what a region procedure may assume of a server incarnation
// a region is recorded on.
type presence int

const (
	// present: the live incarnation; operations go to it.
	present presence = iota
	// fencing: no longer the live incarnation, but it may still serve its
	// regions until its self-fence deadline; nothing of it may be counted
	// closed yet.
	fencing
	// gone: proven to serve nothing; its regions count as closed.
	gone
)

// presenceOf tells whether incarnation ref is live, gone, or fencing; for
// fencing, also how long until it is certainly gone.
//
// Not being the live incarnation in the replicated state is not enough to
// reopen its regions elsewhere: the "expired" answer that tells a server
// to drop its regions may have been lost, and a server cut off from the
// masters keeps serving until it fences itself. An incarnation is gone
// once the process that held it registered again saying it dropped it
// (a server drops every region before it registers), or once its
// self-fence deadline has certainly passed:
// selfFence (3 × the heartbeat interval the server was told) plus
// FenceMargin after the last renewal it may have been granted. That is the
// latest renewal this term granted it, or, when there is none, the moment
// this term's services started: a renewal takes effect only after the
// granting leader verified its leadership with a quorum (see Heartbeat),
// which no predecessor can do once this leader was elected.
func (s *services) presenceOf(r reader, ref ServerRef) (Server, presence, time.Duration, error) {
	srv, ok, err := getServer(r, ref.ID)
	if err != nil {
		return Server{}, fencing, 0, err
	}
	if ok && srv.StartCode == ref.StartCode && srv.State == ServerLive {
		return srv, present, 0, nil
	}
	if ok && srv.StartCode > ref.StartCode && srv.Dropped >= ref.StartCode {
		// The live registration says it gave ref (or a later incarnation
		// of the same process, which gave ref up before registering) up:
		// a process closes everything before it registers again. A
		// registration that does not say so (a fresh process, a late copy
		// of an earlier request) proves nothing about ref.
		return srv, gone, 0, nil
	}
	left := s.renewedAt(ref).Add(s.selfFence() + s.d.cfg.FenceMargin).Sub(s.d.cfg.Clock.Now())
	if left > 0 {
		return srv, fencing, left, nil
	}
	return srv, gone, 0, nil
}

// selfFence is how long a region server keeps its regions after the
// renewal it last sent: the region server caps its self-fence period at
// three of the heartbeat intervals it was told (package rs). Every master
// must be configured with the same HeartbeatInterval: the interval told
// is not replicated, so a leader with a shorter one would count a server
// gone too soon.
func (s *services) selfFence() time.Duration { return 3 * s.toldInterval() }

// toldInterval is the heartbeat interval told to registering servers: the
// wire carries whole milliseconds, so it is rounded up to one, never down
// (a server told 0 would fall back to its own default, longer than the
// masters assume).
func (s *services) toldInterval() time.Duration {
	return max((s.d.cfg.HeartbeatInterval + time.Millisecond - 1).Truncate(time.Millisecond), time.Millisecond)
}

// renewedAt is the latest moment from which incarnation ref may be
// counting its self-fence period.
func (s *services) renewedAt(ref ServerRef) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.renewed[ref]; ok && t.After(s.startedAt) {
		return t
	}
	return s.startedAt
}

// noteRenewal records that ref may be granted a renewal now. Heartbeat
// calls it before its last liveness check, so a crash procedure that reads
// renewedAt after committing the expiry sees every renewal that check let
// through.
func (s *services) noteRenewal(ref ServerRef) {
	now := s.d.cfg.Clock.Now()
	s.mu.Lock()
	s.renewed[ref] = now
	s.mu.Unlock()
}

// rsClient returns a RegionServer client for addr (ServerRegions).
func (d *Domain) rsClient(addr string) (rspb.RegionServerClient, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("master: domain closed")
	}
	cc := d.conns[addr]
	if cc == nil {
		var err error
		cc, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("master: region server at %s: %w", addr, err)
		}
		d.conns[addr] = cc
	}
	return rspb.NewRegionServerClient(cc), nil
}
