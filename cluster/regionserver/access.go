package regionserver

import (
	"context"
	"fmt"
	"github.com/baton-dev/baton/internal/reqlimit"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/locked"
	"github.com/baton-dev/baton/internal/textcut"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/security"
)

// access holds what the masters' access control grants clients here, as
// the leader last told it (at registration, then at heartbeats when it
// changed). Clients need read for ListRegions and /metrics, as on the
// masters; masters may call everything. It applies only with TLS:
// without it nobody is told apart.
type access struct {
	mu      sync.Mutex
	grants  *rspb.AccessGrants // nil: none held, see why
	perms   map[string]security.Permission
	fresh   time.Time // the grants are not used from then on
	heard   time.Time // when the request behind the latest confirmation was sent
	why     string    // why none is held
	version uint64    // of grants; 0 when none
}

// accessNeed is what a client needs of the cluster's permissions to call
// anything a region server serves it: it only reads.
const accessNeed = security.PermRead

// heldVersion is the version of the grants held, for the next heartbeat
// to quote.
func (a *access) heldVersion() uint64 { return locked.Load(&a.mu, &a.version) }

// adopt takes g, told in answer to a request sent at heard, as the grants
// in force until fresh.
func (a *access) adopt(g *rspb.AccessGrants, heard, fresh time.Time) (changed bool) {
	perms := make(map[string]security.Permission, len(g.GetClients()))
	for _, c := range g.GetClients() {
		if p, err := security.ParsePermission(c.GetPermission()); err == nil {
			perms[c.GetClient()] = p
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	changed = a.grants == nil || a.version != g.GetVersion()
	a.grants, a.perms, a.heard, a.fresh, a.version, a.why = g, perms, heard, fresh, g.GetVersion(), ""
	return changed
}

// extend keeps the grants held, told they are still the leader's.
func (a *access) extend(heard, fresh time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.grants != nil {
		a.heard, a.fresh = heard, fresh
	}
}

// forget drops the grants: clients are refused until a master tells them
// again.
func (a *access) forget(why string) (had bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	had = a.grants != nil
	a.grants, a.perms, a.version, a.why = nil, nil, 0, why
	return had
}

// judge decides a client's call of method (or HTTP path) at now: nil, or
// the status to answer. server names this server in the message.
func (a *access) judge(server string, caller security.Identity, hasToken bool, method string, now time.Time) error {
	who := "region server " + server + ": " + method
	if caller.Role != security.RoleClient {
		return status.Errorf(codes.PermissionDenied, "%s: role %s may not call this", who, caller.Role)
	}
	if hasToken {
		return status.Errorf(codes.Unauthenticated, "%s: region servers take no bearer tokens: call with a client certificate alone, bound to permission %s ('baton acl grant')", who, accessNeed)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.grants == nil:
		return status.Errorf(codes.Unavailable, "%s: clients are refused until this server hears the cluster's access grants from the leading master (%s); masters are served", who, a.why)
	case !now.Before(a.fresh):
		return status.Errorf(codes.Unavailable, "%s: clients are refused: the cluster's access grants lapsed, no master has confirmed them since %s (masters unreachable?); masters are served", who, a.heard.UTC().Format(time.RFC3339Nano))
	case !a.grants.GetEnforced():
		return nil
	case a.grants.GetTokensOnly():
		return status.Errorf(codes.PermissionDenied, "%s needs permission %s; the masters run --client-auth token, under which a client certificate grants nothing, and region servers take no tokens", who, accessNeed)
	}
	held := a.perms[caller.ID]
	if held.Covers(accessNeed) {
		return nil
	}
	holds := "no permission"
	if held != security.PermNone {
		holds = "permission " + held.String()
	}
	return status.Errorf(codes.PermissionDenied, "%s needs permission %s; client/%s holds %s (an admin grants one with 'baton acl grant')", who, accessNeed, caller.ID, holds)
}

// admitClient decides a call of method by caller, from address from,
// refusing through refuse. Masters may call everything.
func (s *Server) admitClient(caller security.Identity, hasToken bool, method, from string) error {
	if caller.Role == security.RoleMaster {
		return nil
	}
	if err := s.access.judge(s.cfg.ID, caller, hasToken, method, s.clk.Now()); err != nil {
		return s.refuse(caller, method, from, err)
	}
	return nil
}

// refuse is the one way a region server refuses a caller by access
// control (gRPC and HTTP alike): counted, logged, reported to the leader
// for the audit trail (refusalQueue), and answered err.
func (s *Server) refuse(caller security.Identity, method, from string, err error) error {
	code := status.Code(err)
	s.metrics.aclDenied.WithLabelValues(method, code.String()).Inc()
	s.log.Debug("call refused by access control", "method", method, "caller", caller.String(), "code", code.String(), "reason", status.Convert(err).Message())
	if code == codes.PermissionDenied || code == codes.Unauthenticated {
		// UNAVAILABLE (no grants heard lately) says nothing of the
		// caller: not a refusal of who it is, and not reported.
		s.refusals.add(s.refusalReport(caller, method, from, err))
	}
	return err
}

func (s *Server) refusalReport(caller security.Identity, method, from string, err error) *rspb.RefusalReport {
	rep := &rspb.RefusalReport{Code: status.Code(err).String(), Peer: reportText(from), AtUnixMs: s.clk.Now().UnixMilli(),
		Message: reportText(status.Convert(err).Message())}
	if caller.Role != "" {
		rep.Caller = reportText(string(caller.Role) + "/" + caller.ID)
	}
	if strings.HasPrefix(method, "/") {
		rep.Method = reportText("HTTP " + method)
	} else {
		rep.Method = reportText(security.RegionServerService + method)
	}
	return rep
}

// reportText makes a report's text fit what the leader accepts of a
// heartbeat (reqlimit.Fields): the caller chooses an HTTP path, which once
// decoded may hold control characters, bytes that are not UTF-8 and any
// length, and one report the leader refused would refuse the heartbeat
// carrying it, and with it the server's lease. Escaped, then cut at a
// rune.
func reportText(m string) string {
	return textcut.Prefix(reqlimit.Escape(m), refusalMessageMax)
}

// peerAddr is the address ctx's call came from.
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// accessInterceptor applies the cluster's access control to the
// RegionServer service's calls, after the identity policy.
func (s *Server) accessInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		method, ok := strings.CutPrefix(info.FullMethod, security.RegionServerService)
		if !ok {
			return handler(ctx, req)
		}
		caller, _ := security.CallerOf(ctx)
		_, hasToken := security.TokenOf(ctx)
		if err := s.admitClient(caller, hasToken, method, peerAddr(ctx)); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// requireRead serves next only to a caller the cluster's access control
// lets read (with TLS; without it, to anyone, as the port is plaintext).
func (s *Server) requireRead(path string, next http.Handler) http.Handler {
	if s.cfg.TLS == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var caller security.Identity
		var err error
		if r.TLS == nil {
			err = status.Error(codes.Unauthenticated, "no TLS connection")
		} else if caller, err = security.PeerIdentity(*r.TLS); err != nil {
			err = status.Errorf(codes.Unauthenticated, "the caller's certificate names no baton identity: %v", err)
		}
		if err != nil {
			err = s.refuse(caller, path, r.RemoteAddr, err)
		} else {
			err = s.admitClient(caller, r.Header.Get("Authorization") != "", path, r.RemoteAddr)
		}
		if err != nil {
			http.Error(w, "baton: "+status.Convert(err).Message(), httpStatusOf(status.Code(err)))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func httpStatusOf(c codes.Code) int {
	switch c {
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusForbidden
}

// heardAtRegistration takes the grants a registration's answer carried:
// none from a master older than this server.
func (s *Server) heardAtRegistration(g *rspb.AccessGrants, heard, fresh time.Time) {
	if g == nil {
		s.forgetGrants("the leading master sends no access grants: it is older than this region server")
		return
	}
	s.adoptGrants(g, heard, fresh)
}

// heardAtHeartbeat takes what a renewing heartbeat's answer said of the
// grants: unchanged (version only), new ones, or none (an older master).
func (s *Server) heardAtHeartbeat(resp *rspb.HeartbeatResponse, heard, fresh time.Time) {
	switch v := resp.GetAccessVersion(); {
	case v == 0:
		s.forgetGrants("the leading master sends no access grants: it is older than this region server")
	case resp.GetAccess() != nil:
		s.adoptGrants(resp.GetAccess(), heard, fresh)
	case v == s.access.heldVersion():
		s.access.extend(heard, fresh)
	default:
		s.forgetGrants(fmt.Sprintf("the leader's grants are version %d, and it did not send them", v))
	}
}

func (s *Server) adoptGrants(g *rspb.AccessGrants, heard, fresh time.Time) {
	if s.access.adopt(g, heard, fresh) {
		s.log.Info("access grants from the masters", "version", g.GetVersion(), "enforced", g.GetEnforced(),
			"clients", len(g.GetClients()), "tokens_only", g.GetTokensOnly())
	}
}

func (s *Server) forgetGrants(why string) {
	if s.access.forget(why) {
		s.log.Warn("access grants dropped: clients are refused until a master tells them again", "reason", why)
	}
}
