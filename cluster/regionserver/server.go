package regionserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/baton-dev/baton/internal/grpcstop"
	"github.com/baton-dev/baton/security"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/locked"
	"github.com/baton-dev/baton/internal/reqlimit"
	"github.com/baton-dev/baton/internal/tracectx"
	"github.com/baton-dev/baton/proto/rspb"
)

// States a region server reports with ReportTransition.
const (
	StateOpen       = "OPEN"
	StateClosed     = "CLOSED"
	StateFailedOpen = "FAILED_OPEN"
)

// InjectedFailure is the error of an open failed on purpose
// (Config.FailureRate).
const InjectedFailure = "injected failure"

// Errors of the Server's methods.
var (
	// ErrNotHosted: the region is not open on this server.
	ErrNotHosted = errors.New("rs: region not hosted here")
	// ErrStarted: Start was called twice.
	ErrStarted = errors.New("rs: server already started")
	// ErrStopped: Start after Stop (a Server runs once; make a new one).
	ErrStopped = errors.New("rs: server stopped")
)

// hosted is a region open on this server.
type hosted struct {
	table  string
	opened time.Time
}

// Server is a simulated region server. Its exported ExecuteBatch and
// ListRegions are the RegionServer service; they may also be called
// in-process. It is safe for concurrent use.
type Server struct {
	rspb.UnimplementedRegionServerServer

	// hosts admits the names of the server's own addresses in a request's
	// Host header, on every HTTP path.
	hosts *security.HostCheck
	// listenerMetrics counts connections the per-source cap refused.
	listenerMetrics *security.ListenerMetrics
	// policy is who may call the server with TLS (its refusals counted in
	// Config.Metrics); nil without TLS.
	policy *security.Policy
	// access is what the masters' access control grants clients here
	// (with TLS).
	access access

	cfg     Config
	log     hclog.Logger
	clk     clock.Clock
	locks   regionLocks
	masters *masterConns
	reports chan report
	metrics *metrics
	// refusals wait here for the next heartbeat, to the audit trail.
	refusals *refusalQueue
	tracer   trace.Tracer // nil: tracing off

	// ctx ends at Stop: it ends the lease loop and the reporter, and
	// interrupts operations in progress.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	regions     map[string]hosted
	startCode   uint64 // 0: not registered
	highestTerm uint64 // fencing: the highest leader term seen
	highestSeq  uint64 // fencing: the highest attempt admitted in highestTerm
	dropped     uint64 // the start code last given up (told to the masters at registration)
	// clusterID is the cluster id the masters last answered with ("":
	// none yet): one that changes is a new cluster (a restore), whose
	// terms and start codes owe nothing to the ones seen before.
	clusterID string
	interval  time.Duration // heartbeat interval in force
	// fenceAt is when the current registration stops serving unless
	// renewed: the self-fence period counted from the moment the last
	// successful registration or heartbeat was sent (not answered: an
	// answer may be delayed, and the masters count from no later than the
	// send). Every read, operation and heartbeat checks it first
	// (selfFenceLocked), so nothing is served past it, to anyone.
	fenceAt    time.Time
	renewedAt  time.Time     // when the request behind the last renewal was sent
	registered chan struct{} // closed (and replaced) at each registration
	addr       string        // advertised address, once started
	phase      phase
	grpc       *grpc.Server
	http       *http.Server // nil without Config.HTTPAddr
	httpAddr   string       // bound address of http
}

// report is a transition report waiting to be sent, with the span of the
// operation it is about (invalid if none), which it joins.
type report struct {
	req  *rspb.ReportTransitionRequest
	span trace.SpanContext
}

type phase int

const (
	phaseNew phase = iota
	phaseStarted
	phaseStopped
)

// reportQueue bounds the transition reports waiting to be sent; more are
// dropped (reports are best effort).
const reportQueue = 1024

// New validates cfg and returns a Server that has not started.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m := newMetrics()
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
	}
	s := &Server{
		cfg:        cfg,
		log:        cfg.Logger.With("server_id", cfg.ID),
		clk:        cfg.Clock,
		masters:    newMasterConns(cfg.Masters, cfg.TLS),
		reports:    make(chan report, reportQueue),
		metrics:    m,
		tracer:     tracectx.Tracer(cfg.TracerProvider, "github.com/baton-dev/baton/cluster/regionserver"),
		regions:    map[string]hosted{},
		registered: make(chan struct{}),
		refusals:   newRefusalQueue(),
	}
	for _, c := range append(m.collectors(), stateCollector{s}, s.refusals.droppedTotal) {
		if err := cfg.Metrics.Register(c); err != nil {
			return nil, fmt.Errorf("%w: Metrics: %w (is the registry another server's?)", ErrInvalidConfig, err)
		}
	}
	var err error
	if s.hosts, err = security.NewHostCheck(s.log.Named("http"), append([]string{cfg.GRPCAddr, cfg.HTTPAddr}, cfg.HTTPAllowedHosts...)...); err != nil {
		return nil, fmt.Errorf("%w: HTTPAllowedHosts: %w", ErrInvalidConfig, err)
	}
	if s.listenerMetrics, err = security.NewListenerMetrics(cfg.Metrics); err != nil {
		return nil, fmt.Errorf("%w: Metrics: %w (is the registry another server's?)", ErrInvalidConfig, err)
	}
	if cfg.TLS != nil {
		s.policy = security.RegionServerPolicy()
		if err := s.policy.CountDenials(cfg.Metrics); err != nil {
			return nil, fmt.Errorf("%w: Metrics: %w (is the registry another server's?)", ErrInvalidConfig, err)
		}
	}
	s.access.why = "not registered with a master yet"
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Start listens on Config.GRPCAddr, serves the RegionServer service there,
// and starts the lease loop (register with the leader, then heartbeat) and
// the transition reporter in the background. It does not wait for the
// registration (the masters may not be up yet): see WaitRegistered. ctx
// bounds only the start itself; the server runs until Stop.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	switch s.phase {
	case phaseStarted:
		s.mu.Unlock()
		return ErrStarted
	case phaseStopped:
		s.mu.Unlock()
		return ErrStopped
	}
	s.phase = phaseStarted
	s.mu.Unlock()

	bind := s.cfg.GRPCAddr
	if s.cfg.ListenAddr != "" {
		bind = s.cfg.ListenAddr
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", bind)
	if err != nil {
		s.mu.Lock()
		s.phase = phaseNew
		s.mu.Unlock()
		return fmt.Errorf("rs: listen on %s: %w", bind, err)
	}
	addr := s.cfg.GRPCAddr
	if _, port, _ := net.SplitHostPort(addr); port == "0" {
		// Port 0 is for tests: advertise the port actually bound.
		addr = lis.Addr().String()
	}
	var hlis net.Listener
	if s.cfg.HTTPAddr != "" {
		if hlis, err = (&net.ListenConfig{}).Listen(ctx, "tcp", s.cfg.HTTPAddr); err != nil {
			_ = lis.Close()
			s.mu.Lock()
			s.phase = phaseNew
			s.mu.Unlock()
			return fmt.Errorf("rs: HTTP listen on %s: %w", s.cfg.HTTPAddr, err)
		}
	}
	lis = security.Limit(lis, s.cfg.ConnLimits, "grpc", s.listenerMetrics, s.log)
	if hlis != nil {
		hlis = security.Limit(hlis, s.cfg.ConnLimits, "http", s.listenerMetrics, s.log)
	}
	gopts := s.cfg.ConnLimits.GRPCServerOptions()
	if s.cfg.TLS != nil {
		gopts = append(gopts, s.policy.ServerOptions(s.cfg.TLS)...)
		gopts = append(gopts, grpc.ChainUnaryInterceptor(s.accessInterceptor()))
		if hlis != nil {
			// A certificate is optional at the handshake so that a
			// kubelet can probe /readyz and /livez; the handler refuses
			// every other path to a caller without one
			// (probesWithoutCert), and one presented is checked as before.
			hlis = tls.NewListener(hlis, s.cfg.TLS.ServerConfigCertOptional(security.RoleMaster, security.RoleClient))
		}
	}
	// Limits after the policy: a caller refused is refused unread.
	gopts = append(gopts, reqlimit.ServerOptions()...)
	g := grpc.NewServer(gopts...)
	rspb.RegisterRegionServerServer(g, s)
	s.mu.Lock()
	if s.phase == phaseStopped { // Stop ran while we were listening
		s.mu.Unlock()
		_ = lis.Close()
		if hlis != nil {
			_ = hlis.Close()
		}
		return ErrStopped
	}
	s.addr, s.grpc = addr, g
	if hlis != nil {
		// Every path behind the Host check, the handshake within the bound.
		s.http = &http.Server{Handler: s.hosts.Wrap(s.HTTPHandler(), "'baton regionserver --http-allowed-hosts NAME'"),
			ReadHeaderTimeout: min(5*time.Second, s.cfg.ConnLimits.WithDefaults().HandshakeTimeout)}
		s.httpAddr = hlis.Addr().String()
	}
	hs := s.http
	s.mu.Unlock()

	if hs != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := hs.Serve(hlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("HTTP endpoints stopped", "addr", hlis.Addr().String(), "error", err)
			}
		}()
	}
	s.wg.Add(3)
	go func() {
		defer s.wg.Done()
		if err := g.Serve(lis); err != nil {
			s.log.Error("RegionServer service stopped", "addr", addr, "error", err)
		}
	}()
	go func() { defer s.wg.Done(); s.leaseLoop(s.ctx) }()
	go func() { defer s.wg.Done(); s.reporter(s.ctx) }()
	s.log.Info("region server started", "addr", addr, "http_addr", s.httpAddr, "masters", s.cfg.Masters,
		"op_latency", s.cfg.OpLatency, "failure_rate", s.cfg.FailureRate)
	return nil
}

// Stop ends the lease loop, interrupts operations in progress, and stops
// serving: gracefully until ctx ends, then at once. The regions stay in
// memory (Regions still lists them) but nobody can reach them any more,
// which is what the masters see of a crashed server. Stop is idempotent.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	prev := s.phase
	s.phase = phaseStopped
	g, hs := s.grpc, s.http
	s.mu.Unlock()
	s.cancel()
	defer s.masters.close()
	if prev != phaseStarted || g == nil {
		return nil
	}
	if hs != nil {
		// Not gracefully: a scrape in progress may as well fail, the
		// server is going away.
		_ = hs.Close()
	}
	grpcstop.Stop(ctx, g)
	waited := make(chan struct{})
	go func() { s.wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
		return fmt.Errorf("rs: stop: background loops still running: %w", ctx.Err())
	}
	s.log.Info("region server stopped")
	return nil
}

// Addr is the address the RegionServer service is advertised at ("" before
// Start): Config.GRPCAddr, or with port 0 the port bound.
func (s *Server) Addr() string { return locked.Load(&s.mu, &s.addr) }

// HTTPAddr is the address /metrics and /readyz are served at ("" without
// Config.HTTPAddr, or before Start): with port 0, the port bound.
func (s *Server) HTTPAddr() string { return locked.Load(&s.mu, &s.httpAddr) }

// Metrics is the registry the server's metrics are in (Config.Metrics or
// its own).
func (s *Server) Metrics() *prometheus.Registry { return s.cfg.Metrics }

// ID is Config.ID.
func (s *Server) ID() string { return s.cfg.ID }

// StartCode is the start code of the current registration, 0 while the
// server is not registered.
func (s *Server) StartCode() uint64 { return locked.Load(&s.mu, &s.startCode) }

// HighestTerm is the highest leader term this server has seen: requests
// with a lower term are refused.
func (s *Server) HighestTerm() uint64 { return locked.Load(&s.mu, &s.highestTerm) }

// HeartbeatInterval is the interval in force: Config.HeartbeatInterval,
// else the registering master's, else DefaultHeartbeatInterval.
func (s *Server) HeartbeatInterval() time.Duration {
	return locked.Call(&s.mu, func() time.Duration { return s.intervalLocked() })
}

func (s *Server) intervalLocked() time.Duration {
	switch {
	case s.cfg.HeartbeatInterval > 0:
		return s.cfg.HeartbeatInterval
	case s.interval > 0:
		return s.interval
	}
	return DefaultHeartbeatInterval
}

// WaitRegistered waits until the server holds a start code (returning it)
// or ctx ends.
func (s *Server) WaitRegistered(ctx context.Context) (uint64, error) {
	for {
		s.mu.Lock()
		sc, ch := s.startCode, s.registered
		s.mu.Unlock()
		if sc != 0 {
			return sc, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, fmt.Errorf("rs: %s not registered: %w", s.cfg.ID, ctx.Err())
		}
	}
}

// Regions lists the regions hosted now, sorted by name. (Pointers, as
// generated messages must not be copied.)
func (s *Server) Regions() []*rspb.HostedRegion {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.selfFenceLocked()
	return s.regionsLocked()
}

func (s *Server) regionsLocked() []*rspb.HostedRegion {
	out := make([]*rspb.HostedRegion, 0, len(s.regions))
	for name, h := range s.regions {
		out = append(out, &rspb.HostedRegion{Region: name, Table: h.table, OpenedUnixMs: h.opened.UnixMilli()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Region < out[j].Region })
	return out
}

// ListRegions implements rspb.RegionServerServer: which regions this
// server hosts now, under which start code, a page at a time: a hundred
// thousand regions with long names are more than a gRPC message holds.
func (s *Server) ListRegions(_ context.Context, req *rspb.ListRegionsRequest) (*rspb.ListRegionsResponse, error) {
	if n := req.GetPageSize(); n < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "list regions: negative page_size %d", n)
	}
	after, err := rspb.DecodeRegionsToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.selfFenceLocked()
	regions, next := regionsPage(s.regionsLocked(), after, int(req.GetPageSize()))
	return &rspb.ListRegionsResponse{ServerId: s.cfg.ID, StartCode: s.startCode, Regions: regions, NextPageToken: next}, nil
}

// regionsPage keeps of sorted the regions after region after, at most
// size of them (0: the most) in at most rspb.MaxRegionsPageBytes, and
// the token of the next page if there are more.
func regionsPage(sorted []*rspb.HostedRegion, after string, size int) ([]*rspb.HostedRegion, string) {
	if size <= 0 || size > rspb.MaxRegionsPage {
		size = rspb.MaxRegionsPage
	}
	from := sort.Search(len(sorted), func(i int) bool { return sorted[i].GetRegion() > after })
	rest, bytes := sorted[from:], 0
	for i, h := range rest {
		bytes += proto.Size(h) + 4 // the field's tag and length
		if i == size || (i > 0 && bytes > rspb.MaxRegionsPageBytes) {
			return rest[:i], rspb.EncodeRegionsToken(rest[i-1].GetRegion())
		}
	}
	return rest, ""
}

// ExecuteBatch implements rspb.RegionServerServer: fencing first (the
// whole batch is refused on a stale term, a wrong start code or another
// server's id), then every operation, in parallel across regions and in
// order within one. Per-operation failures are results with ok = false;
// an error means the batch was refused or interrupted (the server stopping,
// the caller gone), in which case some operations may have been applied.
func (s *Server) ExecuteBatch(ctx context.Context, req *rspb.BatchRequest) (_ *rspb.BatchResponse, err error) {
	term, sc, seq := req.GetTerm(), req.GetStartCode(), req.GetSeq()
	var batchSpan trace.Span
	if s.tracer != nil {
		ctx, batchSpan = s.batchSpan(ctx, req)
		defer func() { endSpan(batchSpan, err) }()
	}
	s.mu.Lock()
	err = s.admitLocked(req)
	hi := s.highestTerm
	s.mu.Unlock()
	if err != nil {
		s.metrics.refused.WithLabelValues(refusalReason(err)).Inc()
		s.log.Warn("batch refused", "master_id", req.GetMasterId(), "term", term, "highest_term", hi,
			"start_code", sc, "ops", len(req.GetOps()), "reason", status.Convert(err).Message())
		return nil, err
	}

	ops := req.GetOps()
	results := make([]*rspb.RegionOpResult, len(ops))
	// Operations on one region run in batch order (an open then a close
	// must stay in that order); different regions run in parallel.
	var order []string
	byRegion := map[string][]int{}
	for i, op := range ops {
		r := op.GetRegion()
		if _, ok := byRegion[r]; !ok {
			order = append(order, r)
		}
		byRegion[r] = append(byRegion[r], i)
	}
	opCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)() // Stop interrupts the batch
	var (
		wg          sync.WaitGroup
		imu         sync.Mutex
		interrupted error
		next        atomic.Int64 // index into order of the next region to take
	)
	// A fixed pool of OpParallelism workers takes the regions in batch
	// order: a batch of a thousand opens (a crash's reassignments) costs
	// a handful of goroutines, not one per region.
	for range min(s.cfg.OpParallelism, len(order)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1)) - 1
				if k >= len(order) {
					return
				}
				for _, i := range byRegion[order[k]] {
					octx := opCtx
					var span trace.Span
					if batchSpan != nil {
						octx, span = s.opSpan(opCtx, batchSpan, ops[i])
					}
					res, err := s.execOp(octx, term, sc, seq, ops[i])
					result := opResult(res, err)
					s.metrics.ops.WithLabelValues(ops[i].GetKind().Label(), result).Inc()
					if span != nil {
						span.SetAttributes(attribute.String("baton.result", result))
						endSpan(span, err)
					}
					results[i] = res
					if err != nil {
						imu.Lock()
						interrupted = err
						imu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	if interrupted != nil {
		if s.ctx.Err() != nil {
			return nil, status.Error(codes.Unavailable, "region server stopping: batch interrupted, some operations may have been applied")
		}
		return nil, status.FromContextError(interrupted).Err()
	}
	s.mu.Lock()
	hi = s.highestTerm
	s.mu.Unlock()
	s.log.Debug("batch done", "master_id", req.GetMasterId(), "term", term, "ops", len(ops))
	return &rspb.BatchResponse{Results: results, HighestTerm: hi}, nil
}

// admitLocked is the batch-level fencing. A term at least as high as the
// highest seen is recorded even when the start code is then refused: a
// higher term can only come from a newer leader, and recording it fences
// the older one sooner.
func (s *Server) admitLocked(req *rspb.BatchRequest) error {
	if id := req.GetServerId(); id != "" && id != s.cfg.ID {
		return status.Errorf(codes.FailedPrecondition, "wrong server: this is %q, the batch is for %q", s.cfg.ID, id)
	}
	if c := req.GetClusterId(); s.clusterID != "" && c != s.clusterID {
		// Before the term: a restored cluster's terms may be below the
		// old one's, and a stale-term answer would depose its leader for
		// its whole term. The batch is for an incarnation of another
		// cluster (this server learns of the new one at its next
		// heartbeat, closes everything and registers with it): to the
		// sender's dispatcher it is a start code that is no longer live.
		return s.refusalLocked(rspb.ReasonClusterIDMismatch, "wrong start code %d: the batch is from cluster %q, this server's is %q",
			req.GetStartCode(), req.GetClusterId(), s.clusterID)
	}
	if t := req.GetTerm(); t < s.highestTerm {
		return s.fenceLocked(t, req.GetStartCode(), req.GetSeq())
	}
	s.raiseTermLocked(req.GetTerm(), "batch from "+req.GetMasterId())
	if err := s.fenceLocked(req.GetTerm(), req.GetStartCode(), req.GetSeq()); err != nil {
		return err
	}
	if seq := req.GetSeq(); seq > s.highestSeq {
		s.highestSeq = seq
	}
	return nil
}

// fenceLocked checks a master request's term and start code against this
// server's state.
func (s *Server) fenceLocked(term, startCode, seq uint64) error {
	s.selfFenceLocked()
	if term < s.highestTerm {
		return s.refusalLocked(rspb.ReasonStaleTerm, "stale term %d: this server has seen term %d", term, s.highestTerm)
	}
	if seq != 0 && seq < s.highestSeq {
		// A newer attempt of the same term was admitted since: the master
		// gave this one up, and applying it now could undo what newer
		// batches did (reopen a region a later batch closed).
		return status.Errorf(codes.FailedPrecondition, "stale attempt %d: this server has admitted attempt %d of term %d", seq, s.highestSeq, term)
	}
	if s.startCode == 0 {
		return s.refusalLocked(rspb.ReasonWrongStartCode, "wrong start code %d: this server is not registered (it is registering again)", startCode)
	}
	if startCode != s.startCode {
		return s.refusalLocked(rspb.ReasonWrongStartCode, "wrong start code %d: this server's is %d", startCode, s.startCode)
	}
	return nil
}

// refusalLocked is a fencing refusal: FAILED_PRECONDITION with the message
// a 0.1.0 master reads, and an rspb.RefusalDomain ErrorInfo for a master
// that reads the reason and this server's state instead of the text.
func (s *Server) refusalLocked(reason, format string, args ...any) error {
	meta := map[string]string{
		rspb.MetaServerTerm:      strconv.FormatUint(s.highestTerm, 10),
		rspb.MetaServerStartCode: strconv.FormatUint(s.startCode, 10),
	}
	if s.clusterID != "" {
		meta[rspb.MetaServerClusterID] = s.clusterID
	}
	return rspb.Refusal(reason, meta, fmt.Sprintf(format, args...))
}

// ClusterID is the cluster id the masters last answered with ("" until
// one did).
func (s *Server) ClusterID() string { return locked.Load(&s.mu, &s.clusterID) }

// newClusterLocked takes id, the cluster id in an answer of a master of
// term term, and reports whether it names a new cluster. A first id is
// only learned (an upgraded cluster writes one once its version is 2).
// Another one, or none after one (a restored cluster whose leader has not
// written its new id yet; a leader of the cluster learned always sends
// it), is a cluster restored from a snapshot older than what this server
// lived through: every region is closed, as at a self-fence, since the
// new masters' record of where regions are is not this server's; and the
// highest term seen is forgotten, since the new cluster's terms start at
// the snapshot's. The registration that follows names the start code given
// up, and gets a code above it.
func (s *Server) newClusterLocked(id string, term uint64, from string) bool {
	if s.clusterID == "" || id == s.clusterID {
		if id != "" && s.clusterID == "" {
			s.log.Info("cluster id learned", "cluster_id", id, "from", from)
		}
		s.clusterID = id
		return false
	}
	n, sc, prev := len(s.regions), s.startCode, s.clusterID
	s.regions = map[string]hosted{}
	if sc != 0 {
		s.startCode, s.dropped = 0, sc
	}
	s.clusterID = id
	s.highestTerm, s.highestSeq = term, 0
	s.metrics.selfClosed.WithLabelValues("new_cluster").Add(float64(n))
	s.log.Warn("the masters answer for another cluster (restored from a snapshot?): closed every region, forgot the terms seen, registering with it",
		"cluster_id", id, "previous_cluster_id", prev, "term", term, "start_code", sc, "regions_closed", n, "from", from)
	return true
}

// raiseTermLocked records a term seen from a master.
func (s *Server) raiseTermLocked(term uint64, from string) {
	if term > s.highestTerm {
		s.highestSeq = 0 // attempts are ordered within a term
		s.log.Info("fencing term raised", "term", term, "previous", s.highestTerm, "from", from)
		s.highestTerm = term
	}
}

// execOp runs one operation under its region's lock. It returns an error
// only when ctx ended before the operation was decided (then it was not
// applied).
func (s *Server) execOp(ctx context.Context, term, sc, seq uint64, op *rspb.RegionOp) (*rspb.RegionOpResult, error) {
	region, kind := op.GetRegion(), op.GetKind()
	res := &rspb.RegionOpResult{Region: region, Kind: kind, ProcId: op.GetProcId()}
	if region == "" {
		res.Error = "empty region name"
		return res, nil
	}
	if kind != rspb.OpKind_OP_KIND_OPEN && kind != rspb.OpKind_OP_KIND_CLOSE {
		res.Error = fmt.Sprintf("unknown operation kind %v", kind)
		return res, nil
	}
	unlock, err := s.locks.lock(ctx, region)
	if err != nil {
		res.Error = "interrupted: " + err.Error()
		return res, err
	}
	defer unlock()

	s.mu.Lock()
	err = s.fenceLocked(term, sc, seq)
	_, isHosted := s.regions[region]
	s.mu.Unlock()
	if err != nil {
		// A newer term or a re-registration came in since the batch was
		// admitted.
		res.Error = status.Convert(err).Message()
		return res, nil
	}
	open := kind == rspb.OpKind_OP_KIND_OPEN
	if open == isHosted {
		res.Ok, res.Already = true, true
		return res, nil
	}
	inProgress := &s.metrics.closing
	if open {
		inProgress = &s.metrics.opening
	}
	inProgress.Add(1)
	defer inProgress.Add(-1)
	if err := clock.Sleep(ctx, s.clk, s.cfg.OpLatency); err != nil {
		res.Error = "interrupted: " + err.Error()
		return res, err
	}
	if open && s.cfg.FailureRate > 0 && rand.Float64() < s.cfg.FailureRate {
		res.Error = InjectedFailure
		s.log.Info("region failed to open", "region", region, "table", op.GetTable(), "error", InjectedFailure, "proc_id", op.GetProcId())
		s.report(trace.SpanContextFromContext(ctx), sc, region, StateFailedOpen, InjectedFailure)
		return res, nil
	}
	s.mu.Lock()
	if err := s.fenceLocked(term, sc, seq); err != nil {
		// Overtaken during the latency: applying now could undo what the
		// newer leader (or the master that expired us) has done since.
		s.mu.Unlock()
		res.Error = status.Convert(err).Message() + " (overtaken while running)"
		return res, nil
	}
	if open {
		s.regions[region] = hosted{table: op.GetTable(), opened: s.clk.Now()}
	} else {
		delete(s.regions, region)
	}
	s.mu.Unlock()
	res.Ok = true
	msg := "region closed"
	if open {
		msg = "region opened"
	}
	s.log.Debug(msg, "region", region, "table", op.GetTable(), "term", term, "proc_id", op.GetProcId())
	return res, nil
}

// CloseRegion closes a hosted region on the server's own initiative (as a
// region server does when a region aborts) and reports CLOSED to the
// leader. It returns ErrNotHosted if the region is not open here.
func (s *Server) CloseRegion(ctx context.Context, region string) error {
	unlock, err := s.locks.lock(ctx, region)
	if err != nil {
		return fmt.Errorf("rs: close %s: %w", region, err)
	}
	defer unlock()
	s.mu.Lock()
	_, ok := s.regions[region]
	delete(s.regions, region)
	sc := s.startCode
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotHosted, region)
	}
	s.log.Info("region closed by the region server", "region", region)
	s.metrics.selfClosed.WithLabelValues("closed_by_server").Inc()
	s.report(trace.SpanContext{}, sc, region, StateClosed, "closed by the region server")
	return nil
}

// regionLocks is a lock per region, made on demand and dropped when
// nobody holds or waits for it.
type regionLocks struct {
	mu sync.Mutex
	m  map[string]*regionLock
}

type regionLock struct {
	ch   chan struct{} // holds one token while locked
	refs int           // holders and waiters
}

// lock takes region's lock, or gives up when ctx ends; it returns the
// unlock function.
func (l *regionLocks) lock(ctx context.Context, region string) (func(), error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*regionLock{}
	}
	rl := l.m[region]
	if rl == nil {
		rl = &regionLock{ch: make(chan struct{}, 1)}
		l.m[region] = rl
	}
	rl.refs++
	l.mu.Unlock()
	select {
	case rl.ch <- struct{}{}:
		return func() { <-rl.ch; l.release(region, rl) }, nil
	case <-ctx.Done():
		l.release(region, rl)
		return nil, ctx.Err()
	}
}

func (l *regionLocks) release(region string, rl *regionLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rl.refs--; rl.refs == 0 {
		delete(l.m, region)
	}
}
