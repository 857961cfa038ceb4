package admin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/security"
)

// RateLimit bounds how fast each caller may start procedures through one
// master: a token bucket per caller, refilled at Rate per second up to
// Burst. The caller is the identity its TLS certificate names, or its IP
// address without TLS. A call a standby forwards to the leader is not
// counted again there: the standby counted it for its caller (only a
// master's mark is believed: its certificate's, or without TLS a call
// carrying the cluster secret; anyone else's call is counted as its own). A master
// calling on its own behalf (its web console acting for a user) has a
// bucket like any caller, or counts against the user it names as acting
// for (security.OnBehalfOf: its console, for the browser's certificate).
// A dry run starts nothing and is not counted.
// A call over the limit is refused with RESOURCE_EXHAUSTED, saying when a
// token is next due, before it reaches the leader.
type RateLimit struct {
	// Rate is the calls per second each caller may make; 0 is no limit.
	Rate float64
	// Burst is how many calls a caller that was idle may make at once.
	// Default: max(1, Rate).
	Burst int
	// MaxCallers bounds the buckets kept; the longest idle go first.
	// Default 10,000.
	MaxCallers int
	// Clock; default real.
	Clock clock.Clock
}

// Bounds of a submit rate: below MinSubmitRate a token would be due in
// more than a day (and its wait overflow a time.Duration far below); above
// MaxSubmitRate the limit limits nothing a master can serve.
const (
	MinSubmitRate = 1e-4
	MaxSubmitRate = 1e6
)

// Validate reports a rate out of bounds or a negative burst.
func (r RateLimit) Validate() error {
	if r.Rate != 0 && !(r.Rate >= MinSubmitRate && r.Rate <= MaxSubmitRate) {
		return fmt.Errorf("admin: submit rate %v: want 0 (no limit) or calls per second in [%g, %g]", r.Rate, MinSubmitRate, MaxSubmitRate)
	}
	if r.Burst > int(MaxSubmitRate) {
		return fmt.Errorf("admin: submit burst %d: want at most %d", r.Burst, int(MaxSubmitRate))
	}
	if r.Burst < 0 || r.MaxCallers < 0 {
		return errors.New("admin: negative submit burst or caller bound")
	}
	return nil
}

type bucket struct {
	tokens float64
	last   time.Time
}

// rateLimiter is RateLimit's state. Safe for concurrent use.
type rateLimiter struct {
	cfg     RateLimit
	methods map[string]bool
	limited *prometheus.CounterVec

	mu      sync.Mutex
	buckets map[string]*bucket
}

// RateLimitInterceptor is the interceptor enforcing cfg on the admin
// service's SubmitMethods (nil when cfg.Rate is 0: nothing is limited).
// Refusals are counted in reg, if not nil, as
// baton_rpc_rate_limited_total{method}.
func RateLimitInterceptor(cfg RateLimit, reg prometheus.Registerer) (grpc.UnaryServerInterceptor, error) {
	l, err := newRateLimiter(cfg, reg)
	if l == nil || err != nil {
		return nil, err
	}
	return l.intercept, nil
}

// newRateLimiter builds RateLimitInterceptor's limiter (nil for no limit).
func newRateLimiter(cfg RateLimit, reg prometheus.Registerer) (*rateLimiter, error) {
	return newLimiter(cfg, access.SubmitMethods(), prometheus.CounterOpts{
		Name: "baton_rpc_rate_limited_total",
		Help: "Admin calls that start procedures refused because their caller exceeded the submit rate limit, by method.",
	}, reg)
}

// newLimiter is a limiter of methods (short names on the admin service),
// counting its refusals in metric (nil for no limit).
func newLimiter(cfg RateLimit, methods []string, metric prometheus.CounterOpts, reg prometheus.Registerer) (*rateLimiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Rate == 0 {
		return nil, nil
	}
	if cfg.Burst == 0 {
		cfg.Burst = max(1, int(math.Ceil(cfg.Rate))) // Rate ≤ MaxSubmitRate: no overflow
	}
	if cfg.MaxCallers == 0 {
		cfg.MaxCallers = 10000
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	l := &rateLimiter{cfg: cfg, methods: map[string]bool{}, buckets: map[string]*bucket{}}
	for _, m := range methods {
		l.methods[security.AdminService+m] = true
	}
	l.limited = prometheus.NewCounterVec(metric, []string{"method"})
	if reg != nil {
		if err := reg.Register(l.limited); err != nil {
			return nil, fmt.Errorf("admin: rate limit metric: %w", err)
		}
	}
	return l, nil
}

// dryRunner is a request that may ask for a dry run.
type dryRunner interface{ GetDryRun() bool }

func (l *rateLimiter) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !l.methods[info.FullMethod] {
		return handler(ctx, req)
	}
	if d, ok := req.(dryRunner); ok && d.GetDryRun() {
		return handler(ctx, req)
	}
	who, limited := callerKey(ctx)
	if !limited {
		return handler(ctx, req)
	}
	if wait, ok := l.take(who); !ok {
		l.limited.WithLabelValues(info.FullMethod).Inc()
		return nil, retryIn(wait, fmt.Sprintf("%s: %s exceeded the submit rate limit of %g calls/s (burst %d); the next is allowed in %v",
			info.FullMethod, who, l.cfg.Rate, l.cfg.Burst, wait.Round(time.Millisecond)))
	}
	return handler(ctx, req)
}

// retryIn is a RESOURCE_EXHAUSTED answer saying, in msg and as RetryInfo
// (for a client that reads the details), when to try again.
func retryIn(wait time.Duration, msg string) error {
	st := status.New(codes.ResourceExhausted, msg)
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
		st = d
	}
	return st.Err()
}

// callerKey names the caller a bucket is kept for, and says whether it is
// limited at all (not a call forwarded by a master, counted where it came
// in).
func callerKey(ctx context.Context) (string, bool) {
	// Only a master's mark is believed: a caller that could forge it would
	// never be limited.
	forwarded := isForwarded(ctx) && relayTrusted(ctx)
	// Who access control found (after it in the chain): a token, the
	// console's user, a client's certificate.
	if p, ok := principalOf(ctx); ok && !forwarded && p.Kind != access.KindAnonymous && p.Kind != access.KindMaster {
		return p.String(), true
	}
	if id, ok := security.CallerOf(ctx); ok {
		if id.Role == security.RoleMaster {
			if forwarded {
				return "", false
			}
			// Its console, calling for the user whose browser asked.
			if user, ok := security.ActingFor(ctx); ok {
				return user.String(), true
			}
		}
		return id.String(), true
	}
	if forwarded {
		return "", false
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
			return host, true
		}
		return p.Addr.String(), true
	}
	return "unknown", true
}

// take spends one of who's tokens, or says how long until one is due.
func (l *rateLimiter) take(who string) (time.Duration, bool) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[who]
	if b == nil {
		if len(l.buckets) >= l.cfg.MaxCallers {
			l.evictLocked()
		}
		b = &bucket{tokens: float64(l.cfg.Burst), last: now}
		l.buckets[who] = b
	}
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = math.Min(float64(l.cfg.Burst), b.tokens+el*l.cfg.Rate)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	wait := (1 - b.tokens) / l.cfg.Rate * float64(time.Second)
	return time.Duration(min(wait, float64(24*time.Hour))), false
}

// evictLocked drops the buckets that are full again (their callers idle
// long enough to be as if new), else the longest idle half.
func (l *rateLimiter) evictLocked() {
	now := l.cfg.Clock.Now()
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.cfg.Rate >= float64(l.cfg.Burst) {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) < l.cfg.MaxCallers {
		return
	}
	var oldest time.Time
	n := 0
	for _, b := range l.buckets {
		if n == 0 || b.last.Before(oldest) {
			oldest = b.last
		}
		n++
	}
	cut := oldest.Add(now.Sub(oldest) / 2)
	for k, b := range l.buckets {
		if !b.last.After(cut) {
			delete(l.buckets, k)
		}
	}
}
