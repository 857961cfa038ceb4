package domain

import (
	"google.golang.org/grpc"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/defaults"
	"github.com/baton-dev/baton/procedure"
)

// Defaults of Config.
const (
	DefaultLockLease       = 30 * time.Second
	DefaultDispatchTimeout = 10 * time.Second
	DefaultMaxOpenAttempts = 10
	DefaultRegionWave      = 5000
	DefaultRegionBudget    = 10000
	DefaultApplyTimeout    = 10 * time.Second
	DefaultFenceMargin     = time.Second
	DefaultCrashWave       = 5000
	DefaultCrashBatch      = 1000
)

// DefaultRetryBackoff paces a region procedure that has nothing to do but
// wait (no live server to open on, a refused close): 200 ms doubling to
// 10 s. Shorter than the procedure package's (1 s to 10 min) because a
// region waiting here is unavailable.
var DefaultRetryBackoff = procedure.Backoff{Base: 200 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.1}

// Config configures a Domain. Zero fields take the defaults.
type Config struct {
	// Logger. Default: a null logger.
	Logger hclog.Logger
	// Clock drives the leases, the dispatcher's timers and the domain's own
	// waits (lock acquisition and release, remote closes, retries).
	// Default: real.
	Clock clock.Clock
	// ServerLease is the region servers' lease configuration (soft and
	// hard limit, monitor); its Clock and OnExpire are set by the domain.
	// Zero: lease.DefaultConfig() (soft 6 s, hard 15 s).
	ServerLease lease.Config
	// LockLease is the lease of an external lock that asks for none of
	// its own (catalog.LockRequest.Lease; HBase's LockProcedure heartbeat
	// timeout for remote holders). Default 30 s. Not bounded by
	// MinLockLease and MaxLockLease, which bound what a lock may ask for.
	LockLease time.Duration
	// HeartbeatInterval is what RegisterServer tells region servers.
	// Default a third of the soft limit, so two heartbeats may be lost
	// before a server is suspect.
	HeartbeatInterval time.Duration
	// Transport carries the dispatcher's batches. Default a
	// dispatch.GRPCTransport, shared by the dispatchers of every term.
	Transport dispatch.Transport
	// RegionServerDialOptions, if set, gives the options added to the
	// connections the domain makes to region server serverID (the default
	// Transport's and ServerRegions'): with TLS, credentials that accept
	// that server's certificate alone. Default plaintext.
	RegionServerDialOptions func(serverID string) []grpc.DialOption
	// Dispatch is the template of each term's dispatcher configuration
	// (MinBatch, MaxBatch, Delay, retries); Term, MasterID, Transport,
	// callbacks, Clock and Logger are set by the domain. Zero fields take
	// dispatch's defaults (32 and 1,000 ops, 150 ms).
	Dispatch dispatch.Config
	// DispatchTimeout is how long a region procedure waits for the result
	// of one open or close before it checks the server again and re-sends
	// (idempotent on the server). Default 10 s.
	DispatchTimeout time.Duration
	// MaxOpenAttempts bounds the servers a create or enable tries for one
	// region before it fails (and rolls back). Crash recovery, moves and
	// balancing never give up. Default 10.
	MaxOpenAttempts int
	// RegionWave bounds the region procedures a table procedure (create,
	// enable, disable, delete) spawns at once; the next wave is spawned
	// when these are done. The spawn is one write holding every child's
	// record (a few hundred bytes each), which must stay well inside one
	// Raft entry (raftfsm.DefaultMaxBatchBytes, 4 MiB); smaller waves
	// wait more often for their slowest region. Default 5,000.
	RegionWave int
	// RegionBudget bounds the region procedures that the table procedures
	// of the whole cluster have in flight at once, the leader's memory
	// with it (a few KB each): the tables take turns, a wave each, and
	// one that finds no room waits, its Why saying so. More lets more
	// tables open at once, which gains nothing once the region servers
	// and the leader's CPU are busy; a budget below RegionWave shrinks
	// the waves to it. Crash recovery keeps its own bound (CrashWave).
	// Default 10,000 (two waves): measured in BENCHMARKS.md ("Region
	// work in flight").
	RegionBudget int
	// RetryBackoff paces waits with nothing to do. Default
	// DefaultRetryBackoff.
	RetryBackoff procedure.Backoff
	// ApplyTimeout bounds the Raft writes of server registrations and
	// expiries. Default 10 s.
	ApplyTimeout time.Duration
	// FenceMargin is added to a region server's self-fence period (3 ×
	// HeartbeatInterval) before a fenced incarnation that did not register
	// again is taken to have stopped serving its regions. It absorbs the
	// rate drift between the region server's clock and the leader's over
	// one self-fence period (see "Proof that a server stopped serving" in
	// the package doc). Default 1 s: with the default 6 s period, the
	// bound holds while the server's clock runs at most 16% slower than
	// the leader's.
	FenceMargin time.Duration
	// CrashWave is how many region reassignments a server crash
	// procedure spawns in one step. Each wave is one Raft entry holding
	// that many child procedures and, for those it could prepare, their
	// regions' OPENING records (about 500 bytes a region), and ends when
	// its last region is open, so the next wave waits for the slowest
	// region of this one: smaller waves write less at once but leave the
	// workers idle more often between waves. Default 5,000 (an entry of
	// about 2.5 MB).
	CrashWave int
	// CrashInFlight bounds the region reassignments a server crash has
	// in flight at once, its waves overlapping: the next wave is spawned
	// once at most CrashInFlight − CrashWave of the earlier ones are
	// unfinished, rather than once all are, so the slowest regions of one
	// wave no longer hold the next back. The region servers' own limits
	// hold whatever it is (the dispatcher sends each server one batch of
	// at most dispatch.Config.MaxBatch at a time, which the server runs
	// OpParallelism at a time); what it bounds is the leader's: live
	// procedures and buffered ops, a few KB each. At most CrashWave
	// waits for every wave to finish before the next, as 0.1.0 did.
	// Default 2 × CrashWave.
	CrashInFlight int
	// CrashBatch is how many of a crashed server's regions one procedure
	// reopens on one server, from cluster format 2 (AssignBatch): one
	// record, one step and one OPEN write for them all, where a procedure
	// per region costs each of those per region. Regions the batch's
	// server does not open are handed to a procedure each. Default 1,000.
	CrashBatch int
	// Metrics, when set, registers the domain's collectors for as long as
	// the domain lives (baton_leases, baton_regions, baton_tables,
	// baton_region_servers: reported by the leader only;
	// baton_maintenance_mode, 1 while this node's replicated state says
	// maintenance mode is on) and is each term's dispatcher's
	// dispatch.Config.Metrics. Default: none (tests run several domains in
	// one process).
	Metrics prometheus.Registerer
	// TracerProvider, when set, traces each term's dispatcher calls
	// (dispatch.Config.Tracer) and the region servers' transition reports
	// the Master service receives. Default nil: no spans.
	TracerProvider trace.TracerProvider
	// FailPoint, if set, is consulted at named points of the procedures
	// ("create.layout", "create.enable", "enable.enable", "crash.assign",
	// "region.open"); a non-nil error
	// fails the step there. For fault-injection tests.
	FailPoint func(point string) error
}

func (c Config) withDefaults() Config {
	defaults.Set(&c.Logger, hclog.NewNullLogger())
	defaults.Set[clock.Clock](&c.Clock, clock.Real{})
	if c.ServerLease.HardLimit == 0 {
		onExp := c.ServerLease.OnExpire
		c.ServerLease = lease.DefaultConfig()
		c.ServerLease.OnExpire = onExp
	}
	defaults.Set(&c.ServerLease.MonitorInterval, min(lease.DefaultConfig().MonitorInterval, c.ServerLease.HardLimit))
	defaults.Set(&c.ServerLease.MaxPassTime, lease.DefaultConfig().MaxPassTime)
	defaults.Set(&c.ServerLease.SoftLimit, c.ServerLease.HardLimit*2/5)
	defaults.Set(&c.LockLease, DefaultLockLease)
	defaults.Set(&c.HeartbeatInterval, max(c.ServerLease.SoftLimit/3, time.Millisecond))
	defaults.Set(&c.DispatchTimeout, DefaultDispatchTimeout)
	defaults.Set(&c.MaxOpenAttempts, DefaultMaxOpenAttempts)
	defaults.Set(&c.RegionWave, DefaultRegionWave)
	defaults.Set(&c.RegionBudget, DefaultRegionBudget)
	if c.RetryBackoff.Base == 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	defaults.Set(&c.ApplyTimeout, DefaultApplyTimeout)
	defaults.Set(&c.FenceMargin, DefaultFenceMargin)
	defaults.Set(&c.CrashWave, DefaultCrashWave)
	defaults.Set(&c.CrashInFlight, 2*c.CrashWave)
	defaults.Set(&c.CrashBatch, DefaultCrashBatch)
	return c
}
