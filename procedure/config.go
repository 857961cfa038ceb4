package procedure

import (
	"fmt"
	"runtime"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/defaults"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/store"
)

// Config of an Executor. Zero fields take the documented defaults.
type Config struct {
	// Store persists procedures. Required.
	Store store.Store
	// Registry decodes persisted procedures. Required.
	Registry *Registry
	// Env is handed to every step as Context.Env.
	Env any
	// Workers is the core worker pool. Default max(GOMAXPROCS/4, 16), as in
	// HBase: steps block on I/O, so more workers than cores pays.
	Workers int
	// MaxExtraWorkers bounds the keep-alive workers added when core workers
	// are stuck. Default Workers.
	MaxExtraWorkers int
	// StuckThreshold: a worker whose step has run this long counts as stuck.
	// Default 10 s.
	StuckThreshold time.Duration
	// StuckCheckInterval is how often stuck workers are counted; when half
	// the core workers are stuck a keep-alive worker is added. Default 5 s.
	StuckCheckInterval time.Duration
	// KeepAliveTime: an added worker leaves after idling this long.
	// Default 1 min.
	KeepAliveTime time.Duration
	// ResultTTL keeps a finished root procedure (and its result) this long
	// after it finished, unless acknowledged. Default 15 min. What a
	// finished root costs meanwhile is its record in the store (on every
	// master, with a RaftStore: 165 bytes for a five-step root with a
	// 42-byte state, a nonce and a result) and 26-29 bytes of the leader
	// executor's heap (BenchmarkFinishedFootprint), so a longer TTL costs
	// about 195 bytes per root finished in the extra time.
	ResultTTL time.Duration
	// AckedResultTTL keeps an acknowledged result this long after the
	// acknowledgement. Default 5 min.
	AckedResultTTL time.Duration
	// EvictInterval is how often expired results are deleted. Default 30 s.
	EvictInterval time.Duration
	// RollbackBackoff is the first delay before retrying a failed rollback
	// step, or a failed step of a procedure that RetriesUntilDone; it
	// doubles up to RollbackBackoffMax. Defaults 1 s and 10 min.
	RollbackBackoff    time.Duration
	RollbackBackoffMax time.Duration
	// Node names the process this executor runs in (a master's id). Each
	// procedure's persisted Runs record which node wrote which of its
	// writes, so that after a failover one can see which master ran which
	// step. Default: "" (runs are then recorded without a name).
	Node string
	// Logger. Default: a null logger.
	Logger hclog.Logger
	// Clock drives timeouts, TTLs and the stuck monitor. Default: real time.
	Clock clock.Clock
	// Metrics, when set, registers the executor's Prometheus collectors.
	// Executors built one after another on the same registerer (a master's,
	// one per term it leads) share the counters, and the gauges read at
	// scrape time follow the one that runs.
	Metrics prometheus.Registerer
	// StuckProcedureThreshold: a live procedure counts as stuck in the
	// metrics (baton_procedures_stuck) when it has not been persisted for
	// this long and is neither paused nor waiting for its children: it
	// waits for a lock, an event or a remote answer, retries a failing
	// step, or runs one step, for that long. An external lock held that
	// long counts too. Shorter flags trouble sooner, and flags slow but
	// healthy work. The count is up to 5 s older than the scrape that
	// reports it (scrapes share one walk of the table). Default 5 min.
	StuckProcedureThreshold time.Duration
	// Tracer, when set, makes an OpenTelemetry span per procedure (a root's
	// span starts its trace; a child's span is a child of its parent's) and
	// a span per step and rollback step under it. A step's span is in its
	// Context, so what the step hands on (a remote call) can carry it. Each
	// procedure persists its first span's context, so an executor that
	// resumes it (after a failover or a restart) starts a span in the same
	// trace. Default nil: no spans, and no cost (a no-op tracer is treated
	// as nil).
	Tracer trace.Tracer
	// RecordFormat is the cluster version the executor's records are
	// written at (docs/upgrades.md): the record fields a format level
	// added are written only once it allows that level, so that a member
	// of an older release that reads the same store (a RaftStore) never
	// meets them. Format 2 added a finished root's child summaries (field
	// 113) and the submitter (field 114): below it a finished root keeps
	// no summaries (Get of its forgotten descendants answers ErrNotFound,
	// as for a root an older release finished) and SubmitOptions.Submitter
	// is not kept (the procedure is no one's, as 0.1.0 leaves it). Default
	// nil: format 1, what 0.1.0 reads; a process no older binary shares
	// its store with passes version.Newest.
	RecordFormat version.Gate
}

// DefaultWorkers is the default core pool size on this machine.
func DefaultWorkers() int {
	return max(runtime.GOMAXPROCS(0)/4, 16)
}

func (c *Config) setDefaults() {
	defaults.Set(&c.Workers, DefaultWorkers())
	defaults.Set(&c.MaxExtraWorkers, c.Workers)
	defaults.Set(&c.StuckThreshold, 10*time.Second)
	defaults.Set(&c.StuckProcedureThreshold, 5*time.Minute)
	defaults.Set(&c.StuckCheckInterval, 5*time.Second)
	defaults.Set(&c.KeepAliveTime, time.Minute)
	defaults.Set(&c.ResultTTL, 15*time.Minute)
	defaults.Set(&c.AckedResultTTL, 5*time.Minute)
	defaults.Set(&c.EvictInterval, 30*time.Second)
	defaults.Set(&c.RollbackBackoff, time.Second)
	defaults.Set(&c.RollbackBackoffMax, 10*time.Minute)
	defaults.Set(&c.Logger, hclog.NewNullLogger())
	defaults.Set[clock.Clock](&c.Clock, clock.Real{})
	if _, ok := c.Tracer.(noop.Tracer); ok {
		c.Tracer = nil
	}
}

// Validate says what is wrong with c, after defaults are applied.
func (c Config) Validate() error {
	c.setDefaults()
	switch {
	case c.Store == nil:
		return fmt.Errorf("%w: Config.Store is required", ErrInvalid)
	case c.Registry == nil:
		return fmt.Errorf("%w: Config.Registry is required", ErrInvalid)
	case c.Workers < 1:
		return fmt.Errorf("%w: Config.Workers = %d, want >= 1", ErrInvalid, c.Workers)
	case c.MaxExtraWorkers < 0:
		return fmt.Errorf("%w: Config.MaxExtraWorkers = %d, want >= 0", ErrInvalid, c.MaxExtraWorkers)
	}
	for name, d := range map[string]time.Duration{
		"StuckThreshold": c.StuckThreshold, "StuckCheckInterval": c.StuckCheckInterval, "StuckProcedureThreshold": c.StuckProcedureThreshold,
		"KeepAliveTime": c.KeepAliveTime, "ResultTTL": c.ResultTTL, "AckedResultTTL": c.AckedResultTTL,
		"EvictInterval": c.EvictInterval, "RollbackBackoff": c.RollbackBackoff, "RollbackBackoffMax": c.RollbackBackoffMax,
	} {
		if d < 0 {
			return fmt.Errorf("%w: Config.%s = %v, want > 0", ErrInvalid, name, d)
		}
	}
	if c.RollbackBackoffMax < c.RollbackBackoff {
		return fmt.Errorf("%w: Config.RollbackBackoffMax %v < RollbackBackoff %v", ErrInvalid, c.RollbackBackoffMax, c.RollbackBackoff)
	}
	return nil
}
