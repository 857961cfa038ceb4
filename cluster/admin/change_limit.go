package admin

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/clock"
)

// The change limit: each caller has one more token bucket at every
// master (Access.ChangeLimit), spent by each call the audit trail records
// (every state-changing method, whatever it starts) and by each refusal
// (PERMISSION_DENIED, UNAUTHENTICATED: of access control, of the identity
// policy on any service of the port, of the HTTP authorizer). A caller
// with no token left is answered RESOURCE_EXHAUSTED instead, saying when
// the next is due; that answer is a refusal too, recorded within the
// caller's refusal quota, which evicts only its own. So no caller, known
// or not, makes records faster than its bucket refills.

// Defaults of the agent's --change-rate and --change-burst: far above
// what a person at the CLI or console, a script or a test makes, while a
// flood is cut down to the rate after its first thousand calls.
const (
	DefaultChangeRate  = 50
	DefaultChangeBurst = 1000
)

// httpLimitLabel is the method label of limited HTTP requests: their
// paths are the caller's to choose, and would make a label without bound.
const httpLimitLabel = "HTTP"

func newChangeLimiter(cfg RateLimit, clk clock.Clock, reg prometheus.Registerer) (*rateLimiter, error) {
	if cfg.Clock == nil {
		cfg.Clock = clk
	}
	return newLimiter(cfg, access.AuditedMethods(), prometheus.CounterOpts{
		Name: "baton_rpc_change_rate_limited_total",
		Help: "Calls refused because their caller exceeded the change rate limit (state-changing calls and refusals), by method (HTTP for the HTTP endpoints).",
	}, reg)
}

// limitChange spends one of the caller's tokens for a call of method, or
// refuses it RESOURCE_EXHAUSTED. A call a master forwarded was counted
// where it came in.
func (s *Server) limitChange(ctx context.Context, method string) error {
	if s.changes == nil {
		return nil
	}
	who, limited := callerKey(ctx)
	if !limited {
		return nil
	}
	return s.spendChange(who, method)
}

func (s *Server) spendChange(who, label string) error {
	wait, ok := s.changes.take(who)
	if ok {
		return nil
	}
	s.changes.limited.WithLabelValues(label).Inc()
	return retryIn(wait, "admin: "+s.overChangeLimit(who, wait))
}

// overChangeLimit says who is past the change limit, and when its next
// call is allowed.
func (s *Server) overChangeLimit(who string, wait time.Duration) string {
	return fmt.Sprintf("%s exceeded the rate limit of %g state-changing calls and refusals per second (burst %d); the next is allowed in %v",
		who, s.changes.cfg.Rate, s.changes.cfg.Burst, wait.Round(time.Millisecond))
}

// limitRefusal spends one of the caller's tokens for refusing it err (p,
// if known, is whom access control found): with none left the answer is
// RESOURCE_EXHAUSTED instead.
func (s *Server) limitRefusal(ctx context.Context, p access.Principal, method string, err error) error {
	if s.changes == nil || !policyRefusal(err) {
		return err
	}
	if _, ok := principalOf(ctx); !ok {
		// The bucket access control would have named (client/NAME, not
		// the certificate's URI), whichever interceptor refused.
		if p.Kind == "" {
			p = callerPrincipal(ctx)
		}
		ctx = context.WithValue(ctx, principalCtxKey{}, p)
	}
	if lerr := s.limitChange(ctx, method); lerr != nil {
		return lerr
	}
	return err
}

// limitHTTPRefusal is limitRefusal for an HTTP request refused to p: the
// wait before the next, if it is over the limit.
func (s *Server) limitHTTPRefusal(r *http.Request, p access.Principal) (time.Duration, bool) {
	if s.changes == nil {
		return 0, false
	}
	who := p.String()
	if p.Kind == "" || p.Kind == access.KindAnonymous {
		who = access.Host(r.RemoteAddr)
	}
	wait, ok := s.changes.take(who)
	if ok {
		return 0, false
	}
	s.changes.limited.WithLabelValues(httpLimitLabel).Inc()
	return wait, true
}

// retryAfter is an HTTP Retry-After value (whole seconds, at least 1).
func retryAfter(wait time.Duration) string {
	return strconv.Itoa(max(1, int((wait+time.Second-1)/time.Second)))
}
