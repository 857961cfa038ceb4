package admin

import (
	"net/http"
	"strings"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/security"
)

// Authorizer decides HTTP requests to a master's endpoints (status,
// metrics, console, debug) by the certificate the client presented: read
// for everything but /debug/ (admin) and the probes /readyz and /livez
// (anyone: a kubelet's probe carries no credentials). With access
// control enforced, it puts the caller's permission in the request's
// context (security.WithPermission) for the console to hide what the
// caller may not do; the calls the console makes for it are checked
// again by the admin API.
func (s *Server) Authorizer(next http.Handler) http.Handler {
	return authorizeHTTP(s, next)
}

// authorizeHTTP is Server.Authorizer.
func authorizeHTTP(s *Server, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Access == nil || !s.acc.Enforce || ProbePath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		p, err := s.httpPrincipal(r)
		if err != nil {
			s.refuseHTTP(w, r, p, http.StatusUnauthorized, err.Error())
			return
		}
		need := security.PermRead
		if strings.HasPrefix(r.URL.Path, "/debug/") {
			need = security.PermAdmin
		}
		have := access.Effective(p, s.acc.Enforce)
		if !have.Covers(need) {
			held := "no permission"
			if have != security.PermNone {
				held = "permission " + have.String()
			}
			code := http.StatusForbidden
			if p.Kind == access.KindAnonymous {
				code = http.StatusUnauthorized
			}
			why := "baton: " + r.URL.Path + " needs permission " + need.String() + "; " + p.String() + " holds " + held + " (an admin grants one with 'baton acl grant')"
			s.refuseHTTP(w, r, p, code, why)
			return
		}
		ctx := security.WithPermission(r.Context(), have)
		// What a handler refuses on its own account (the console's
		// actions, which need admin) is recorded as the authorizer's own
		// refusals are.
		ctx = security.WithRefusalRecorder(ctx, func(code int, why string) { s.recordHTTPRefusal(r, p, code, why) })
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// refuseHTTP answers r code, saying why, and records it; a caller past
// the change limit is answered 429 Too Many Requests instead.
func (s *Server) refuseHTTP(w http.ResponseWriter, r *http.Request, p access.Principal, code int, why string) {
	if wait, limited := s.limitHTTPRefusal(r, p); limited {
		code = http.StatusTooManyRequests
		why = "baton: " + s.overChangeLimit(p.String(), wait)
		w.Header().Set("Retry-After", retryAfter(wait))
	}
	s.recordHTTPRefusal(r, p, code, why)
	http.Error(w, why, code)
}

// httpPrincipal names the caller of an HTTP request: its certificate, or
// a bearer token in its Authorization header (curl, a scraper).
func (s *Server) httpPrincipal(r *http.Request) (access.Principal, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return access.Principal{}, errBadAuthHeader
		}
		p, err := s.acl.TokenPrincipal(strings.TrimSpace(tok))
		if err != nil {
			return access.Principal{}, errTokenUnknown
		}
		return p, nil
	}
	if r.TLS == nil {
		return access.Principal{Kind: access.KindAnonymous}, nil
	}
	if len(r.TLS.PeerCertificates) == 0 {
		// Let through the handshake by --client-auth token or either.
		return access.Principal{Kind: access.KindAnonymous}, httpAuthError("baton: " + s.acc.ClientAuth.NoCredentialsAdvice() + " (over HTTP: send 'Authorization: Bearer <token>')")
	}
	id, err := security.PeerIdentity(*r.TLS)
	if err != nil {
		return access.Principal{Kind: access.KindAnonymous}, nil
	}
	switch id.Role {
	case security.RoleMaster:
		return access.Principal{Kind: access.KindMaster, ID: id.ID, Perm: security.PermAdmin}, nil
	case security.RoleClient:
		if !s.acc.ClientAuth.CertsGrant() {
			return access.Principal{Kind: access.KindClient, ID: id.ID}, httpAuthError("baton: client/" + id.ID + " presented a client certificate without a token; this cluster authenticates clients by token only (--client-auth token): send 'Authorization: Bearer <token>'")
		}
		return s.acl.ClientPrincipal(id.ID), nil
	}
	return access.Principal{Kind: string(id.Role), ID: id.ID}, nil
}

type httpAuthError string

func (e httpAuthError) Error() string { return string(e) }

const (
	errBadAuthHeader = httpAuthError("baton: the Authorization header is not 'Bearer <token>'")
	errTokenUnknown  = httpAuthError("baton: the bearer token is not recognized (deleted, mistyped, or of another cluster)")
)

// ProbePath reports whether path is a probe (/readyz, /livez), which
// anyone may ask, with no credentials: they say no more than whether the
// node is alive and ready, and why.
func ProbePath(path string) bool { return path == "/readyz" || path == "/livez" }
