package regionserver

import (
	"errors"
	"fmt"
	"github.com/baton-dev/baton/security"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/defaults"
	"github.com/baton-dev/baton/internal/version"
)

// Defaults of the Config fields left zero.
const (
	// DefaultHeartbeatInterval is used when neither Config.HeartbeatInterval
	// nor the master's RegisterServer answer gives an interval.
	DefaultHeartbeatInterval = time.Second
	// DefaultOpParallelism bounds the operations of one batch running at
	// once. HBase opens regions on a pool of executor threads too; with a
	// per-operation latency, a batch of N opens takes about
	// N/OpParallelism × OpLatency.
	DefaultOpParallelism = 8
	// DefaultRPCTimeout bounds one attempt of a call to a master, and a
	// transition report with its retries.
	DefaultRPCTimeout = 3 * time.Second
	// DefaultMinBackoff and DefaultMaxBackoff bound the pause before
	// trying another master: it starts at the minimum and doubles.
	DefaultMinBackoff = 50 * time.Millisecond
	DefaultMaxBackoff = 2 * time.Second
)

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("rs: invalid config")

// Config configures a Server. Zero values take the defaults above.
type Config struct {
	// ID names this server to the masters. Keep it stable across restarts
	// of the process: the start code, not the id, tells incarnations
	// apart. Required.
	ID string
	// GRPCAddr is where the RegionServer service listens, and the address
	// the masters are told to call (so it must name this host, not a
	// wildcard). Port 0 picks a free port, which is then advertised as
	// bound (tests). Required.
	GRPCAddr string
	// ListenAddr, if set, is where the RegionServer service listens
	// instead of GRPCAddr (e.g. 0.0.0.0:7080 in a pod whose own DNS name
	// may not resolve when it starts); GRPCAddr is still what the masters
	// are told. Empty (the default): listen on GRPCAddr.
	ListenAddr string
	// Masters are the admin (gRPC) addresses of the masters; any subset
	// will do, the leader is found through hints. Required.
	Masters []string
	// OpLatency is how long each open or close takes (default 0). Raising
	// it widens the windows in which failovers and re-dispatches overlap
	// running operations, which is what tests and demos want to exercise.
	OpLatency time.Duration
	// FailureRate is the probability, in [0, 1], that an open fails with
	// "injected failure" (default 0). Closes never fail: HBase treats a
	// failed close as an abort of the server, which a test does by
	// stopping the server instead.
	FailureRate float64
	// HeartbeatInterval, if positive, overrides the interval the master
	// answers to RegisterServer. Shorter than the master's means more
	// load; longer than its lease soft limit makes the server look suspect.
	HeartbeatInterval time.Duration
	// SelfFenceAfter: when no heartbeat sent this long ago or later has
	// renewed the lease, the server closes every region by itself and
	// registers again. Default 3 × the heartbeat interval in force (the
	// masters' soft limit). Whatever is set, it is capped at 3 × the
	// interval the master answered at registration: the masters reassign
	// the regions of a server they fenced once that long (plus a drift
	// margin) has passed since the last renewal they granted, so a server
	// that kept its regions longer could hold them twice.
	SelfFenceAfter time.Duration
	// OpParallelism bounds the operations of one batch running at once
	// (default DefaultOpParallelism). Operations on the same region always
	// run one at a time, in batch order.
	OpParallelism int
	// RPCTimeout bounds one attempt of a call to a master (default
	// DefaultRPCTimeout): a master that accepts connections but hangs is
	// given up after it, and the next one tried.
	RPCTimeout time.Duration
	// MinBackoff and MaxBackoff bound the pause before retrying a call
	// elsewhere (defaults DefaultMinBackoff, DefaultMaxBackoff). A leader
	// hint is followed without pause.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives the server's logs (default: none).
	Logger hclog.Logger
	// Clock drives operation latency, heartbeats and backoff (default
	// clock.Real). Per-attempt RPC deadlines are real time: they bound
	// real network calls.
	Clock clock.Clock
	// HTTPAddr, if set, is where the server serves /metrics and /readyz
	// (see HTTPHandler): a listening address, so a wildcard host is fine;
	// port 0 picks a free port (tests). Default: no HTTP.
	HTTPAddr string
	// Metrics is the registry the server's collectors (baton_regionserver_*)
	// are registered in and /metrics serves; the caller may add its own
	// (the Go runtime's). Default: a registry of the server's own, so that
	// several servers in one process never collide.
	Metrics *prometheus.Registry
	// TracerProvider, when set, traces the batches a master sends (a span
	// per batch under the master's call, and one per operation in its own
	// procedure's trace) and the transition reports sent back about them.
	// Default nil: no spans.
	TracerProvider trace.TracerProvider
	// TLS, if set, is this server's TLS material (its certificate naming
	// baton://regionserver/<ID>): its gRPC and HTTP endpoints then speak
	// mutual TLS and admit masters only (security.RegionServerPolicy;
	// HTTP also clients, for /metrics and /readyz), and it speaks mutual
	// TLS to the masters. Clients need read, by the grants the leader
	// tells (access.go). Default plaintext.
	TLS *security.Credentials
	// HTTPAllowedHosts are the names the HTTP endpoints answer to in a
	// request's Host header besides IP addresses, localhost and the hosts
	// of GRPCAddr and HTTPAddr (security.HostCheck): another name is
	// refused (403), against DNS rebinding. Default: none.
	HTTPAllowedHosts []string
	// ConnLimits bound the connections of the gRPC and HTTP ports: the
	// handshake, and how many one address may hold (refusals counted in
	// Metrics). Zero: the defaults of security.ConnLimits.
	ConnLimits security.ConnLimits
	// Build is what this server's binary is, as it tells the leader at
	// each registration (version and highest format level; `baton rs
	// list` shows them, `baton cluster upgrade-check` counts them).
	// Default version.Current(""): this binary, version.Dev. The command
	// gives the version it was linked with, a test an older one.
	Build version.Build
}

// Validate reports every problem of c at once, wrapping ErrInvalidConfig.
func (c *Config) Validate() error {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if strings.TrimSpace(c.ID) == "" {
		bad("ID is required")
	}
	if c.TLS != nil {
		if want := (security.Identity{Role: security.RoleRegionServer, ID: c.ID}); c.TLS.Identity() != want {
			bad("TLS: the certificate names %s, but this server is %s", c.TLS.Identity(), want)
		}
	}
	if c.GRPCAddr == "" {
		bad("GRPCAddr is required")
	} else if err := checkHostPort(c.GRPCAddr, true); err != nil {
		bad("GRPCAddr: %v", err)
	}
	if c.ListenAddr != "" {
		// Only listened on, never told anyone: a wildcard is fine.
		checkListenAddr("ListenAddr", c.ListenAddr, bad)
	}
	n := 0
	for _, m := range c.Masters {
		if strings.TrimSpace(m) == "" {
			continue
		}
		n++
		if err := checkHostPort(strings.TrimSpace(m), false); err != nil {
			bad("Masters: %v", err)
		}
	}
	if n == 0 {
		bad("Masters: at least one master admin address is required")
	}
	if c.OpLatency < 0 {
		bad("OpLatency %v: must not be negative", c.OpLatency)
	}
	if math.IsNaN(c.FailureRate) || c.FailureRate < 0 || c.FailureRate > 1 {
		bad("FailureRate %v: want a probability in [0, 1]", c.FailureRate)
	}
	if c.HeartbeatInterval < 0 {
		bad("HeartbeatInterval %v: must not be negative (0: the master's)", c.HeartbeatInterval)
	}
	if c.OpParallelism < 0 {
		bad("OpParallelism %d: must not be negative (0: default %d)", c.OpParallelism, DefaultOpParallelism)
	}
	if c.RPCTimeout < 0 {
		bad("RPCTimeout %v: must not be negative", c.RPCTimeout)
	}
	if c.HTTPAddr != "" {
		checkListenAddr("HTTPAddr", c.HTTPAddr, bad)
	}
	if c.MinBackoff < 0 || c.MaxBackoff < 0 || (c.MaxBackoff > 0 && c.MinBackoff > c.MaxBackoff) {
		bad("backoff %v..%v: want 0 ≤ min ≤ max (0: defaults)", c.MinBackoff, c.MaxBackoff)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	return nil
}

// withDefaults returns c with the zero fields set to their defaults and
// the master list trimmed and deduplicated.
func (c Config) withDefaults() Config {
	defaults.Set(&c.OpParallelism, DefaultOpParallelism)
	defaults.Set(&c.RPCTimeout, DefaultRPCTimeout)
	defaults.Set(&c.MinBackoff, DefaultMinBackoff)
	defaults.Set(&c.MaxBackoff, max(DefaultMaxBackoff, c.MinBackoff))
	defaults.Set(&c.Logger, hclog.NewNullLogger())
	defaults.Set[clock.Clock](&c.Clock, clock.Real{})
	// What this binary says it is, as `baton version` does: a test
	// build's format stamp included (version.Current).
	self := version.Current("")
	defaults.Set(&c.Build.Version, self.Version)
	defaults.Set(&c.Build.MaxFormat, self.MaxFormat)
	var ms []string
	for _, m := range c.Masters {
		if m = strings.TrimSpace(m); m != "" && !slices.Contains(ms, m) {
			ms = append(ms, m)
		}
	}
	c.Masters = ms
	return c
}

// checkHostPort checks a host:port. zeroPortOK allows port 0 (bind any
// free port), which only makes sense for the listening address.
// checkListenAddr reports through bad a listening address (field name)
// that is not host:port with a port in 0..65535; any host will do.
func checkListenAddr(name, v string, bad func(string, ...any)) {
	if _, port, err := net.SplitHostPort(v); err != nil {
		bad("%s %q: want host:port", name, v)
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		bad("%s %q: the port must be a number in 0..65535", name, v)
	}
}

func checkHostPort(v string, zeroPortOK bool) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("%q: want host:port", v)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 || (p == 0 && !zeroPortOK) {
		return fmt.Errorf("%q: the port must be a number in 1..65535", v)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("%q: must name a reachable host, not a wildcard", v)
	}
	return nil
}
