package regionserver

import (
	"context"
	"errors"
	"fmt"
	"github.com/baton-dev/baton/security"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/tracectx"
	"github.com/baton-dev/baton/proto/rspb"
)

// masterConns holds one connection per master address; where calls go is
// cluster/client's LeaderTracker's business.
type masterConns struct {
	*client.LeaderTracker
	conns *client.Conns
}

func newMasterConns(addrs []string, creds *security.Credentials) *masterConns {
	var tls []grpc.DialOption
	if creds != nil {
		tls = []grpc.DialOption{creds.DialOption(security.RoleMaster)}
	}
	return &masterConns{LeaderTracker: client.NewLeaderTracker(addrs), conns: client.NewConns("rs: master connections closed", "rs: master ", tls...)}
}

func (m *masterConns) client(addr string) (rspb.MasterClient, error) {
	cc, err := m.conns.Get(addr)
	if err != nil {
		return nil, err
	}
	return rspb.NewMasterClient(cc), nil
}

func (m *masterConns) close() { _ = m.conns.Close() }

// callMaster runs call against the leader until it succeeds, fails with an
// error that is not about availability, or ctx ends. Each attempt is
// bounded by Config.RPCTimeout.
func (s *Server) callMaster(ctx context.Context, method string, call func(ctx context.Context, m rspb.MasterClient) error) error {
	f := s.masters.Follow(ctx, client.FollowPolicy{
		MinBackoff: s.cfg.MinBackoff,
		MaxBackoff: s.cfg.MaxBackoff,
		// Standbys with stale hints must not make us spin.
		HintLimit: len(s.cfg.Masters) + 1,
		Clock:     s.clk,
		OnRetry: func(addr string, err error, hinted bool, pause time.Duration) {
			if hinted {
				s.log.Debug("following leader hint", "method", method, "from", addr, "to", s.masters.Target())
				return
			}
			s.log.Debug("master unavailable; trying another", "method", method, "master", addr, "error", err, "retry_in", pause)
		},
	}, func(addr string) error { return s.attempt(ctx, addr, call) })
	switch {
	case f == nil:
		return nil
	case f.Err != nil:
		return fmt.Errorf("%s at %s: %w", method, f.Addr, f.Err)
	case f.Last == nil:
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
	return fmt.Errorf("%s: no master answered (tried %s): %w", method, strings.Join(f.Tried, ", "), f.Last)
}

// askMaster is callMaster for one method of the Master service (e.g.
// rspb.MasterClient.Heartbeat) sending req: it returns the last attempt's
// answer.
func askMaster[Req, Resp any](s *Server, ctx context.Context, method string, req Req, m func(rspb.MasterClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	var resp Resp
	err := s.callMaster(ctx, method, func(ctx context.Context, c rspb.MasterClient) error {
		r, err := m(c, ctx, req)
		resp = r
		return err
	})
	return resp, err
}

func (s *Server) attempt(ctx context.Context, addr string, call func(context.Context, rspb.MasterClient) error) error {
	m, err := s.masters.client(addr)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
	defer cancel()
	return call(actx, m)
}

// callTimeout bounds one register or heartbeat call, retries included:
// long enough to ride out an election, short enough that the loop logs
// the outage and starts over with fresh state.
func (s *Server) callTimeout() time.Duration { return 3 * s.cfg.RPCTimeout }

// leaseLoop registers, then heartbeats until ctx ends; it registers again
// whenever the masters say the lease expired.
func (s *Server) leaseLoop(ctx context.Context) {
	pause := s.cfg.MinBackoff
	retry := func(what string, err error) {
		s.log.Warn(what+" failed; retrying", "error", err, "retry_in", pause, "leader", s.masters.Leader())
		_ = clock.Sleep(ctx, s.clk, pause)
		pause = min(2*pause, s.cfg.MaxBackoff)
	}
	for ctx.Err() == nil {
		if s.StartCode() == 0 {
			if err := s.register(ctx); err != nil {
				if ctx.Err() == nil {
					retry("registration", err)
				}
				continue
			}
			pause = s.cfg.MinBackoff
		}
		if clock.Sleep(ctx, s.clk, s.HeartbeatInterval()) != nil {
			return
		}
		for ctx.Err() == nil && s.StartCode() != 0 {
			err := s.heartbeat(ctx)
			if err == nil {
				pause = s.cfg.MinBackoff
				break
			}
			if ctx.Err() == nil {
				retry("heartbeat", err)
			}
		}
	}
}

// register obtains a new start code from the leader.
func (s *Server) register(ctx context.Context) error {
	s.mu.Lock()
	req := &rspb.RegisterServerRequest{ServerId: s.cfg.ID, Address: s.addr, DroppedStartCode: s.dropped,
		Version: s.cfg.Build.Version, MaxFormat: uint32(s.cfg.Build.MaxFormat)}
	for name := range s.regions {
		req.Regions = append(req.Regions, name)
	}
	s.mu.Unlock()
	slices.Sort(req.Regions)
	sent := s.clk.Now()
	cctx, cancel := context.WithTimeout(ctx, s.callTimeout())
	defer cancel()
	resp, err := askMaster(s, cctx, "RegisterServer", req, rspb.MasterClient.RegisterServer)
	if err != nil {
		s.metrics.registers.WithLabelValues("failed").Inc()
		return err
	}
	s.metrics.registers.WithLabelValues("ok").Inc()
	if resp.GetStartCode() == 0 {
		return errors.New("RegisterServer: the master answered start code 0")
	}
	s.mu.Lock()
	// The registering server holds nothing: a new cluster costs it only
	// the terms it saw, which would otherwise refuse the new leader.
	s.newClusterLocked(resp.GetClusterId(), resp.GetTerm(), "RegisterServer")
	s.raiseTermLocked(resp.GetTerm(), "RegisterServer")
	s.startCode = resp.GetStartCode()
	s.interval = time.Duration(resp.GetHeartbeatIntervalMs()) * time.Millisecond
	s.renewedLocked(sent)
	interval := s.intervalLocked()
	grantsFresh := s.fenceAt
	close(s.registered)
	s.registered = make(chan struct{})
	s.mu.Unlock()
	s.heardAtRegistration(resp.GetAccess(), sent, grantsFresh)
	s.log.Info("registered", "start_code", resp.GetStartCode(), "term", resp.GetTerm(),
		"heartbeat_interval", interval, "leader", s.masters.Leader(), "address", req.Address, "regions", len(req.Regions))
	return nil
}

// heartbeat renews the lease; an expired answer drops every region and
// clears the start code, so that the loop registers again.
func (s *Server) heartbeat(ctx context.Context) error {
	s.mu.Lock()
	s.selfFenceLocked()
	req := &rspb.HeartbeatRequest{ServerId: s.cfg.ID, StartCode: s.startCode, RegionCount: int32(len(s.regions)), AccessVersion: s.access.heldVersion()}
	var refusalMark uint64
	req.Refusals, req.RefusalsDropped, refusalMark = s.refusals.batch()
	sent := s.clk.Now()
	left := s.fenceAt.Sub(sent)
	s.mu.Unlock()
	if req.StartCode == 0 {
		return nil // fenced itself: the loop registers again
	}
	cctx, cancel := context.WithTimeout(ctx, min(s.callTimeout(), left))
	defer cancel()
	resp, err := askMaster(s, cctx, "Heartbeat", req, rspb.MasterClient.Heartbeat)
	if status.Code(err) == codes.NotFound {
		// The protocol answers expired = true to an unknown server; a
		// master that says NOT_FOUND instead means the same.
		s.metrics.heartbeats.WithLabelValues("expired").Inc()
		s.expire(req.StartCode)
		return nil
	}
	if err != nil {
		s.metrics.heartbeats.WithLabelValues("failed").Inc()
		return err
	}
	// A master answered: the leader took the refusals (one older than
	// them ignored them, and they are gone; see docs/security.md).
	s.refusals.sent(refusalMark, req.RefusalsDropped)
	s.mu.Lock()
	// The cluster id before the term: a restored cluster's term may be
	// below what this server saw of the old one.
	if s.newClusterLocked(resp.GetClusterId(), resp.GetTerm(), "Heartbeat") {
		s.mu.Unlock()
		s.metrics.heartbeats.WithLabelValues("expired").Inc()
		return nil // registers with the new cluster
	}
	if t := resp.GetTerm(); t != 0 && t < s.highestTerm {
		// A deposed leader answered: its word on the lease counts for
		// nothing (neither a renewal nor an expiry).
		highest := s.highestTerm
		s.mu.Unlock()
		s.metrics.heartbeats.WithLabelValues("failed").Inc()
		return fmt.Errorf("heartbeat answered by a master of stale term %d (highest seen %d)", t, highest)
	}
	s.raiseTermLocked(resp.GetTerm(), "Heartbeat")
	if !resp.GetExpired() && s.startCode == req.StartCode {
		s.renewedLocked(sent)
	}
	// The grants are as fresh as a renewal would be: a master that stops
	// answering leaves them in force for a self-fence period at most.
	grantsFresh := sent.Add(s.selfFenceAfterLocked())
	s.mu.Unlock()
	if !resp.GetExpired() {
		s.heardAtHeartbeat(resp, sent, grantsFresh)
	}
	if resp.GetExpired() {
		s.metrics.heartbeats.WithLabelValues("expired").Inc()
		s.expire(req.StartCode)
		return nil
	}
	s.metrics.heartbeats.WithLabelValues("ok").Inc()
	return nil
}

// selfFenceAfterLocked is how long the server keeps its regions after
// sending the last heartbeat that renewed its lease: Config.SelfFenceAfter,
// else three heartbeat intervals in force; never more than three of the
// intervals the master told it, which is what the masters count on before
// they reassign a fenced server's regions (package domain).
func (s *Server) selfFenceAfterLocked() time.Duration {
	limit := 3 * s.intervalLocked()
	if s.cfg.SelfFenceAfter > 0 {
		limit = s.cfg.SelfFenceAfter
	}
	if s.interval > 0 {
		limit = min(limit, 3*s.interval)
	}
	return limit
}

// renewedLocked starts a new self-fence period, counted from sent, the
// moment the renewing request was sent.
func (s *Server) renewedLocked(sent time.Time) {
	s.renewedAt = sent
	s.fenceAt = sent.Add(s.selfFenceAfterLocked())
}

// selfFenceLocked drops every region once the self-fence deadline has
// passed without a renewal: the masters may reassign them from then on
// (never open in two places). The registration is given up too, so the
// lease loop registers again.
func (s *Server) selfFenceLocked() {
	if s.startCode == 0 || s.clk.Now().Before(s.fenceAt) {
		return
	}
	n := len(s.regions)
	sc := s.startCode
	s.regions = map[string]hosted{}
	s.startCode, s.dropped = 0, sc
	s.metrics.selfFences.Inc()
	s.metrics.selfClosed.WithLabelValues("self_fence").Add(float64(n))
	s.log.Warn("no heartbeat got through for too long: closed every region before the masters reassign them",
		"start_code", sc, "regions_closed", n, "fence_at", s.fenceAt)
}

// expire drops every region of the registration with start code sc: the
// masters have given it up and reassign (or have reassigned) its regions,
// so they must be closed here before they are opened elsewhere. Operations
// in progress see the start code change and are not applied.
func (s *Server) expire(sc uint64) {
	s.mu.Lock()
	if s.startCode != sc {
		s.mu.Unlock()
		return
	}
	n := len(s.regions)
	s.regions = map[string]hosted{}
	s.startCode, s.dropped = 0, sc
	s.mu.Unlock()
	s.metrics.selfClosed.WithLabelValues("lease_expired").Add(float64(n))
	s.log.Warn("lease expired: closed every region, registering again", "start_code", sc, "regions_closed", n)
}

// report queues a transition report of the registration sc; it drops the
// report if the queue is full (reports are best effort). span is the
// operation's the report is about (invalid: none): the report joins its
// trace.
func (s *Server) report(span trace.SpanContext, sc uint64, region, state, msg string) {
	if sc == 0 {
		return
	}
	r := &rspb.ReportTransitionRequest{ServerId: s.cfg.ID, StartCode: sc, Region: region, State: state, Error: msg}
	select {
	case s.reports <- report{req: r, span: span}:
	default:
		s.metrics.reports.WithLabelValues("dropped").Inc()
		s.log.Warn("transition report dropped: queue full", "region", region, "state", state)
	}
}

// reporter sends the queued transition reports, one at a time.
func (s *Server) reporter(ctx context.Context) {
	for {
		var q report
		select {
		case <-ctx.Done():
			return
		case q = <-s.reports:
		}
		r := q.req
		if sc := s.StartCode(); sc != r.GetStartCode() {
			// The masters have given that registration up: the report
			// would be refused, and they no longer care.
			s.metrics.reports.WithLabelValues("dropped").Inc()
			s.log.Debug("transition report dropped: start code changed", "region", r.GetRegion(), "state", r.GetState(), "start_code", sc)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
		var span trace.Span
		if s.tracer != nil && q.span.IsValid() {
			cctx, span = s.reportSpan(cctx, q)
		}
		err := s.callMaster(cctx, "ReportTransition", func(ctx context.Context, m rspb.MasterClient) error {
			_, err := m.ReportTransition(tracectx.Inject(ctx), r)
			return err
		})
		cancel()
		if span != nil {
			endSpan(span, err)
		}
		if err != nil {
			s.metrics.reports.WithLabelValues("dropped").Inc()
			s.log.Warn("transition report dropped", "region", r.GetRegion(), "state", r.GetState(), "error", err)
			continue
		}
		s.metrics.reports.WithLabelValues("sent").Inc()
		s.log.Debug("transition reported", "region", r.GetRegion(), "state", r.GetState())
	}
}
