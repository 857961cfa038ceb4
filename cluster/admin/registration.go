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
	me := s.b.ID()
	httpAdv := s.cfg.HTTPAddr
	got, _ := s.b.DomainGet(cluster.AdminAddrKey(me))
	addrs := string(got) == adv && (httpAdv == "" || s.httpAddr(me) == httpAdv)
	leader, _ := s.b.Leader()
	now := registration{adminAddr: adv, httpAddr: httpAdv, leader: leader, at: time.Now()}
	marks := s.secretMayGo(me, adv) && s.reported(me)
	s.mu.Lock()
	if addrs && marks {
		// The leader stores them: if they go (a report deleted, another
		// written over it), register again at once.
		s.lastRegistered = registration{}
	}
	last := s.lastRegistered
	s.mu.Unlock()
	if !registerDue(addrs, marks, last, now) {
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
	logf := s.log.Info
	now.wait = s.cfg.RegisterInterval
	if last.same(now) {
		now.wait = min(2*last.wait, reRegisterEvery)
		logf = s.log.Debug // a repeat for what a 0.1.0 leader does not store
	}
	s.mu.Lock()
	s.lastRegistered = now
	s.mu.Unlock()
	logf("registered admin address", "id", me, "admin_addr", adv, "http_addr", httpAdv, "version", b.Version, "max_format", uint32(b.MaxFormat))
}

// registration is a RegisterNode this node sent and the leader took, and
// whose marks the state has not held since: the addresses it gave, the
// leader it saw then, when, and how long to wait before sending it again.
type registration struct {
	adminAddr, httpAddr, leader string
	at                          time.Time
	wait                        time.Duration
}

// same says r and o say the same to the same leader.
func (r registration) same(o registration) bool {
	return r.adminAddr == o.adminAddr && r.httpAddr == o.httpAddr && r.leader == o.leader
}

// reRegisterEvery bounds the wait before a registration whose addresses
// the state holds, but not the marks a leader of this release adds (the
// report of this node's binary, the proof of its address), is sent again.
const reRegisterEvery = time.Minute

// registerDue says whether the registration tick sends RegisterNode now:
// addrs says the state holds this node's addresses, marks that it holds
// its report and its address's proof; last is the last registration the
// leader took, now the one the tick would send. A 0.1.0 leader stores the
// addresses and never the marks: sending every tick would not bring them.
// So once a leader took a registration, it is sent again when the
// addresses or the leader change, else after last's wait, which doubles
// from the tick's interval with each repeat up to reRegisterEvery. It
// starts short because this node's state may not have applied what the
// leader stored when the tick looks, or may hold another write over it.
func registerDue(addrs, marks bool, last, now registration) bool {
	switch {
	case !addrs:
		return true
	case marks:
		return false
	}
	return !last.same(now) || now.at.Sub(last.at) >= last.wait
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
