package admin

import (
	"context"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/proto/adminpb"
)

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
	if s.membershipCheck.CompareAndSwap(false, true) {
		// Off the tick: its probes may take a second, and the health
		// status must not wait for them.
		s.loops.Add(1)
		go func() {
			defer s.loops.Done()
			defer s.membershipCheck.Store(false)
			s.checkMembership()
		}()
	}
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
	if s.cfg.Access != nil && s.acc.Enforce && s.b.IsLeader() {
		bctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.bootstrapACL(bctx)
		cancel()
	}
	if s.b.IsLeader() {
		// Membership changes and reports that came another way (a member
		// removed, a leader elected after the last report) are caught
		// here.
		mctx, cancel := s.untilStop(context.Background(), 5*time.Second)
		if _, err := s.commitWithRaise(mctx, nil, nil); err != nil {
			s.log.Debug("raising the cluster version failed; will retry", "error", err)
		}
		cancel()
	}
	me := s.b.ID()
	httpAdv := s.cfg.HTTPAddr
	if got, _ := s.b.DomainGet(cluster.AdminAddrKey(me)); string(got) == adv && (httpAdv == "" || s.httpAddr(me) == httpAdv) && s.secretMayGo(me, adv) && s.reported(me) {
		return
	}
	ctx, cancel := s.untilStop(context.WithValue(context.Background(), noHoldKey{}, true), 5*time.Second)
	defer cancel()
	b := buildOf(s.b)
	if _, err := s.RegisterNode(ctx, &adminpb.RegisterNodeRequest{Id: me, AdminAddress: adv, HttpAddress: httpAdv,
		Version: b.Version, MaxFormat: uint32(b.MaxFormat)}); err != nil {
		s.log.Debug("registering admin address failed; will retry", "error", err)
		return
	}
	s.log.Info("registered admin address", "id", me, "admin_addr", adv, "http_addr", httpAdv, "version", b.Version, "max_format", uint32(b.MaxFormat))
}

// untilStop is parent bounded by d and also ended when the server
// stops: a background call of the server's own (a registration, a
// membership probe) must not hold Stop up.
func (s *Server) untilStop(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(parent, d)
	go func() {
		select {
		case <-s.stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// adminAddr is node id's registered admin address, or "".
func (s *Server) adminAddr(id string) string {
	v, _ := s.b.DomainGet(cluster.AdminAddrKey(id))
	return string(v)
}

// httpAddr is node id's registered HTTP address, or "".
func (s *Server) httpAddr(id string) string {
	v, _ := s.b.DomainGet(cluster.HTTPAddrKey(id))
	return string(v)
}
