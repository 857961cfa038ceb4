package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// forwardedKey marks a call forwarded by a standby.
const forwardedKey = "x-baton-forwarded"

func isForwarded(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(forwardedKey)) > 0
}

// reforwardKey marks the context of a forwarded call that this node may
// forward once more: the removal of this node, which as the leader it
// handed to the leader it gave way to (Server.RemovePeer).
type reforwardKey struct{}

// removingKey carries the id a RemovePeer call removes, for track.
type removingKey struct{}

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

// forwardedRefusal is leaderClient's refusal of a call that came
// forwarded to this node, which does not lead: onLeader, which did
// nothing of the call before, marks it so (Unserved).
type forwardedRefusal struct{ statusCause }

// statusCause is an error that marks the status error it wraps for the
// hold, while gRPC and LeaderHintOf still see that status.
type statusCause struct{ err error }

func (e statusCause) Error() string              { return e.err.Error() }
func (e statusCause) Unwrap() error              { return e.err }
func (e statusCause) GRPCStatus() *status.Status { return status.Convert(e.err) }

// leaderClient returns a client of the leader's admin API and the leader
// it reaches, or an UNAVAILABLE status saying why it cannot: a noLeaderYet
// where the next moments may mend it (an election under way, this node
// elected but not ready, the leader's admin address not registered yet),
// which a held call waits out.
func (s *Server) leaderClient(ctx context.Context) (adminpb.AdminClient, context.Context, leaderView, error) {
	var none leaderView
	if isForwarded(ctx) && ctx.Value(reforwardKey{}) == nil {
		return nil, nil, none, &forwardedRefusal{statusCause{s.unavailable("admin: this node is not the leader (forwarded call; not forwarding again)")}}
	}
	id, _ := s.b.Leader()
	if id == "" {
		return nil, nil, none, noLeaderYet(s.unavailable("admin: no leader known (election under way?); retry shortly"))
	}
	if id == s.b.ID() {
		return nil, nil, none, noLeaderYet(s.unavailable("admin: this node is the leader but not ready yet; retry shortly"))
	}
	addr := s.adminAddr(id)
	if addr == "" {
		return nil, nil, none, noLeaderYet(s.unavailable(fmt.Sprintf("admin: leader %q has not registered its admin address yet; retry shortly", id)))
	}
	if addr == s.Advertise() {
		return nil, nil, none, noLeaderYet(s.unavailable(fmt.Sprintf("admin: leader %q is registered at this node's own address %s (stale); retry shortly", id, addr)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, none, s.unavailable("admin: server stopping")
	}
	proven := s.secretMayGo(id, addr)
	if !proven && ctx.Value(mustCarryPrincipalKey{}) != nil {
		return nil, nil, none, s.unavailable(fmt.Sprintf("admin: leader %q at %s is not proven a master: the call's principal does not go there", id, addr))
	}
	cc, err := s.connTo(addr, proven)
	if err != nil {
		return nil, nil, none, s.unavailable(fmt.Sprintf("admin: leader %q at %s: %v", id, addr, err))
	}
	kv := []string{forwardedKey, s.b.ID()}
	if proven {
		// What the call carries of its origin and principal goes only
		// where the secret may: elsewhere it would not be believed, and
		// may be no master's.
		if p, _ := callOrigin(ctx); p != "" {
			kv = append(kv, peerKey, p) // for the repair and audit records
		}
		kv = append(kv, forwardPrincipal(ctx)...)
	}
	out := metadata.AppendToOutgoingContext(ctx, kv...)
	to := leaderView{id, addr}
	var conn grpc.ClientConnInterface = cc
	if proven {
		conn = batchingConn{cc, s.readBatcherFor(cc, to)}
	}
	return leaderAPI{adminpb.NewAdminClient(conn), conn}, out, to, nil
}

// leaderAPI is the client of the leader a forward calls: its generated
// client, and the connection under it for the calls the gateway forwards
// by method name (forwardByName), which have no client method of their own.
type leaderAPI struct {
	adminpb.AdminClient
	grpc.ClientConnInterface
}

// relayTrusted says what ctx's caller says of a call it passes on (the
// standby that forwarded it, the address it came from, the client it
// calls for) is believed: the caller proved it is a master, by its
// certificate, or without TLS by the cluster secret (proveRelay). A call
// over TLS without a certificate (a token's, --client-auth token or
// either) is not a master's, whatever it says; nor is a plaintext call
// without the secret, or in a cluster that has none.
func relayTrusted(ctx context.Context) bool {
	if caller, ok := security.CallerOf(ctx); ok {
		return caller.Role == security.RoleMaster
	}
	proven, _ := ctx.Value(relayProvenKey{}).(bool)
	return proven && !security.OverTLS(ctx)
}

// relayProvenKey marks the context of a plaintext call that carried the
// cluster secret.
type relayProvenKey struct{}

// proveRelay marks ctx's call as a master's if it is plaintext and
// carries this server's cluster secret. The interceptors run it first, so
// that the rate limit after them (callerKey) sees the mark.
func (s *Server) proveRelay(ctx context.Context) context.Context {
	if s.cfg.ClusterSecret == "" || security.OverTLS(ctx) || !security.ClusterSecretProven(ctx, s.cfg.ClusterSecret) {
		return ctx
	}
	return context.WithValue(ctx, relayProvenKey{}, true)
}

// callOrigin is where a call came from, as the repair and audit records
// and a forward name it: the address (the one a master passing the call
// on named: a standby for its client, the console for the browser; else
// the caller's own) and the standby that forwarded it. What a caller says
// of this is taken from a master only, or from anyone where nothing is
// authenticated (plaintext).
func callOrigin(ctx context.Context) (peer, via string) {
	peer = peerAddr(ctx)
	if !relayTrusted(ctx) {
		return peer, ""
	}
	if v, ok := incomingOne(ctx, forwardedKey); ok {
		via = v
	}
	if v, ok := incomingOne(ctx, peerKey); ok && v != "" {
		peer = v
	}
	return peer, via
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
	if id, _ := ctx.Value(removingKey{}).(string); id != "" && id == to.id {
		// The removal of the leader it goes to: that leader hands
		// leadership over and passes the call on itself, so the change
		// of leader it brings about must not cut it.
		return ctx, func() { cancel(nil) }
	}
	if ctx.Value(handingOverKey{}) != nil {
		// A leadership transfer: the change of leader is what it asks
		// for, and cut at that change it would be sent again by the
		// client, to be told the member no longer leads.
		return ctx, func() { cancel(nil) }
	}
	s.fwd[c] = struct{}{}
	return ctx, func() {
		s.mu.Lock()
		delete(s.fwd, c)
		s.mu.Unlock()
		cancel(nil)
	}
}

// handingOverKey marks the context of a forwarded leadership transfer
// (Server.TransferLeadership): the leader change it brings about must not
// cut it.
type handingOverKey struct{}

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
	now := s.leaderView()
	self := now.id == s.b.ID() || s.b.IsLeader()
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

// relayed is how a standby forwards req to the leader: m, a method
// expression of the admin client (adminpb.AdminClient.AckResult), called
// on the leader's connection. Every forwarded handler's remote said
// "return c.X(ctx, req)" in a closure of its own.
func relayed[Req, Resp any](req Req, m func(adminpb.AdminClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) func(context.Context, adminpb.AdminClient) (Resp, error) {
	return func(ctx context.Context, c adminpb.AdminClient) (Resp, error) { return m(c, ctx, req) }
}

// onLeader runs local with the leader's executor when this node has one,
// else forwards with remote; a call that finds no leader ready to serve it
// is held for one (heldCall).
//
// Its refusal of a call forwarded to it while it does not lead is marked
// as one it did nothing of (Unserved): nothing runs before the executor
// is found. orForward's local may have proposed a write before it learns
// it does not lead, so its refusals are not marked.
func onLeader[T any](s *Server, ctx context.Context, local func(Procedures) (T, error), remote func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	v, err := heldCall(s, ctx, func() (v T, served bool, err error) {
		x, err := s.b.Procedures()
		if err != nil {
			return v, false, err
		}
		v, err = local(x)
		return v, true, err
	}, remote)
	var refused *forwardedRefusal
	if errors.As(err, &refused) {
		err = markUnserved(err)
	}
	return v, err
}

// orForward runs local (a leader-only operation not needing the executor)
// and forwards with remote if it says this node is not the leader.
func orForward[T any](s *Server, ctx context.Context, local func() (T, error), remote func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	return heldCall(s, ctx, func() (T, bool, error) {
		v, err := local()
		return v, !isNotLeader(err), err
	}, remote)
}

// heldCall serves a call on this node, or at the leader. here tries this
// node. Served, its answer is final: an error is the call's own, turned
// into a status, even one saying leadership was lost mid-way (what it did
// may have committed, so it is not sent elsewhere). Not served, err says
// why: not the leader (the call is forwarded with remote) or a leader not
// ready yet. While no leader can take the call it is held, tried again
// after a wait (leaderHold), so that a client's call during an election is
// answered once the new leader is ready instead of failing and backing off
// past that moment (Consul's RPCHoldTimeout). Each try asks here again:
// this node may have become the leader meanwhile.
func heldCall[T any](s *Server, ctx context.Context, here func() (T, bool, error), remote func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	var zero T
	h := leaderHold{s: s}
	for {
		v, served, err := here()
		switch {
		case served && err == nil:
			return v, nil
		case served:
			return zero, s.toStatus(err)
		case isNotLeader(err):
			v, err := forward(s, ctx, remote)
			if h.retry(ctx, err) {
				continue
			}
			return v, err
		case errors.Is(err, cluster.ErrNotReady) && h.wait(ctx):
			continue
		}
		return zero, s.toStatus(err)
	}
}

// forward runs a unary call at the leader: bounded by ForwardTimeout if ctx
// has no deadline (see forwardCall). It does not hold (heldCall does).
func forward[T any](s *Server, ctx context.Context, remote func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	return forwardCall(s, ctx, s.cfg.ForwardTimeout, remote)
}

// leaderHold is a call's wait for a leader to take it (heldCall). It
// starts at the call's first wait, so a call served at once pays nothing.
type leaderHold struct {
	s     *Server
	until time.Time // zero until the first wait
	// unreachable is the leader a forward just failed to reach: the hold
	// waits for another one, or tries it again after unreachableRetry.
	unreachable leaderView
}

// noHoldKey marks a context whose calls are not held: the registration
// loop's, which tries again at its next tick anyway and must not hold up
// the health updates of the ticks in between.
type noHoldKey struct{}

// holdPoll is how often a held call looks at this node's view of the
// leader again: a fraction of an election.
const holdPoll = 10 * time.Millisecond

// holdEnd is when a hold starting now ends: LeaderHold from now, early
// enough in ctx's deadline to answer before it (a quarter of what is left,
// at most a second, is kept for that). A call forwarded from a standby is
// held again by the leader (elected, still establishing) within the
// deadline the standby passed on, or LeaderHold if there is none.
func (s *Server) holdEnd(ctx context.Context, now time.Time) time.Time {
	if ctx.Value(noHoldKey{}) != nil {
		return now
	}
	until := now.Add(s.cfg.LeaderHold)
	if d, ok := ctx.Deadline(); ok {
		if cut := d.Add(-min(d.Sub(now)/4, time.Second)); cut.Before(until) {
			until = cut
		}
	}
	return until
}

// retry reports whether a forward that failed with err should be tried
// again after a wait, and waits: when no leader could be found yet, or the
// leader could not be reached before the request was sent (unsent, also
// when the forward was cut by a change of leader while it waited for a
// connection). A failure once it may have been sent is final, as are an
// answer of the leader and a cancellation by the caller: the leader may
// have acted on it, and a second try could act twice (a submission without
// a nonce, an abort). It is false, at once, once the hold or ctx has ended.
func (h *leaderHold) retry(ctx context.Context, err error) bool {
	var ur *unreachableLeader
	if err == nil || ctx.Err() != nil || !errors.As(err, &ur) || !ur.unsent {
		return false
	}
	h.unreachable = ur.to
	return h.wait(ctx)
}

// unreachableRetry is how often a held call tries a leader it could not
// reach again while this node sees no other: it may be back (a restart at
// the same address, a moment's refusal).
const unreachableRetry = 100 * time.Millisecond

// wait sleeps until this node's view of the leader may let the call
// through, polling every holdPoll: at the next poll, or, if the last
// leader was unreachable, once the view names another leader or
// unreachableRetry has passed. False when the hold or ctx ends first.
func (h *leaderHold) wait(ctx context.Context) bool {
	now := time.Now()
	if h.until.IsZero() {
		h.until = h.s.holdEnd(ctx, now)
	}
	again := now.Add(unreachableRetry)
	t := time.NewTimer(holdPoll)
	defer t.Stop()
	for {
		if !time.Now().Add(holdPoll).Before(h.until) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-h.s.stopCh:
			return false
		case <-t.C:
		}
		if h.unreachable.id == "" || h.s.leaderView() != h.unreachable || !time.Now().Before(again) {
			return true
		}
		t.Reset(holdPoll)
	}
}

// leaderView is this node's current view of the leader.
func (s *Server) leaderView() leaderView {
	id, _ := s.b.Leader()
	v := leaderView{id: id}
	if id != "" {
		v.addr = s.adminAddr(id)
	}
	return v
}

// unreachableLeader marks a call that reached no leader: to is the leader
// it was forwarded to, none if no leader could be found yet. unsent says
// the request never left this node (see markUnsent): only then may a held
// call try again. unserved says the master it reached refused it as not
// the leader, having done nothing of it (Unserved): a call that records
// nothing where it is refused may be sent again (sendAudit's); a client's
// call is not, for the master that refused it recorded its refusal, and
// the client decides.
type unreachableLeader struct {
	statusCause
	to       leaderView
	unsent   bool
	unserved bool
}

// noLeaderYet marks status err (an UNAVAILABLE with its hint) as the
// answer of a call that found no leader to forward to: never sent.
func noLeaderYet(err error) error {
	return &unreachableLeader{statusCause: statusCause{err}, unsent: true}
}

// errUnsent marks a forwarded call that failed before gRPC had a stream
// to send it on (markUnsent).
type errUnsent struct{ statusCause }

// isUnsent says err is a forward's failure before anything of it left
// this node (errUnsent).
func isUnsent(err error) bool {
	var un *errUnsent
	return errors.As(err, &un)
}

// markUnsent is the forwarding connections' interceptor that tells a call
// that was never sent from one that may have been: gRPC records the peer
// of a call only once it has a transport stream for it, before which
// nothing of the request has left this node (a connection refused, reset
// during its handshake, or in backoff fails the call at that point).
func markUnsent(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var p peer.Peer
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Peer(&p))...)
	if err != nil && p.Addr == nil {
		return &errUnsent{statusCause{err}}
	}
	return err
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
	fctx = context.WithValue(fctx, answeredByKey{}, to.addr)
	v, err := remote(fctx, cl)
	if err != nil {
		err = s.forwardError(ctx, fctx, to, timeout, err)
		var ur *unreachableLeader
		if !errors.As(err, &ur) || !ur.unsent {
			markForwarded(ctx) // the leader may have served it, and then recorded it
		}
		return zero, err
	}
	markForwarded(ctx)
	nameLeader(ctx, to.addr)
	return v, nil
}

// answeredByKey carries, in the context a forward calls the leader with,
// that leader's admin address: for a streamed answer, which names it
// (nameLeader) before its first message.
type answeredByKey struct{}

// nameLeader sets adminpb.LeaderHeader on the answer of ctx's call, which
// the leader at addr served: only once it did (a call that found the
// leader unreachable and was answered here, from this node's state or as
// the leader it became meanwhile, names nobody), and not on a call that
// moves the leadership (a transfer, the leader's removal: the leader it
// names may no longer be one). Outside a call's handler (a standby's own
// forward) there is no header to set.
func nameLeader(ctx context.Context, addr string) {
	switch m, _ := grpc.Method(ctx); m {
	case adminpb.Admin_TransferLeadership_FullMethodName, adminpb.Admin_RemovePeer_FullMethodName:
		return
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(adminpb.LeaderHeader, addr))
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
	unsent := isUnsent(err)
	if fctx.Err() != nil {
		cause := context.Cause(fctx)
		var lc *leaderChangedError
		switch {
		case errors.As(cause, &lc):
			// Cut while still waiting for a connection (a leader gone
			// without a reset), it was never sent: a held call goes on
			// to the leader this node sees now.
			return &unreachableLeader{statusCause: statusCause{s.unavailable(fmt.Sprintf("admin: call forwarded to %s cancelled: %v; retry", to, lc))}, to: to, unsent: unsent}
		case errors.Is(cause, errForwardTimeout):
			return &unreachableLeader{statusCause: statusCause{s.unavailable(fmt.Sprintf("admin: %s did not answer a forwarded call within %v; retry", to, timeout))}, to: to, unsent: unsent}
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
			return &unreachableLeader{statusCause: statusCause{s.unavailable(fmt.Sprintf("admin: forwarding to %s: %s", to, st.Message()))}, to: to, unsent: unsent}
		}
		if Unserved(err) {
			// The master reached is not the leader and did nothing of
			// it. Its answer, hint included, is relayed without the
			// mark: this node may have acted before it forwarded (a
			// leader handing over as it removes itself).
			return &unreachableLeader{statusCause: statusCause{withoutUnserved(err)}, to: to, unserved: true}
		}
	}
	return err
}
