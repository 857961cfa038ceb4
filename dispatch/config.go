package dispatch

import (
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/defaults"
)

// Defaults of Config: HBase's RSProcedureDispatcher values
// (hbase.procedure.remote.dispatcher.delay.msec, .threshold as MinBatch,
// and the backoff of RSProcedureDispatcher.ExecuteProceduresRemoteCall),
// and a cap on one call's ops.
const (
	DefaultMinBatch    = 32
	DefaultMaxBatch    = 1000
	DefaultDelay       = 150 * time.Millisecond
	DefaultPace        = 20 * time.Millisecond
	DefaultRetryBase   = 100 * time.Millisecond
	DefaultRetryMax    = 10 * time.Second
	DefaultMaxFailures = 10
	DefaultCallTimeout = 10 * time.Second
)

// maxOpsPerRPC bounds MaxBatch: a response of 4096 results (about 60
// bytes each) stays far below gRPC's default 4 MiB receive limit.
const maxOpsPerRPC = 4096

// Config configures a Dispatcher. Start from DefaultConfig and set the
// identity, the transport and the callbacks; zero durations and counts are
// replaced by the defaults.
type Config struct {
	// Term is the Raft term of the leader this dispatcher works for, and
	// MasterID its server id. Both travel in every request: a region server
	// refuses a term lower than the highest it has seen (fencing), so a
	// deposed leader's dispatcher gets ErrStaleTerm instead of opening or
	// closing anything. A dispatcher lives for one term; a new leader makes
	// a new one. Required (Term > 0, MasterID non-empty).
	Term     uint64
	MasterID string

	// Transport sends batches. Required.
	Transport Transport

	// MinBatch and MaxBatch size the batches by the work. A server's
	// buffer is sent as soon as the server has no call in flight and the
	// buffer holds more than MinBatch ops, or its oldest op has waited
	// Delay; a call that carried more than MinBatch ops marks a stream,
	// and what piled up during it is sent as soon as it returns, however
	// little. So a trickle of ops is gathered for up to Delay, and under
	// load each call carries what arrived during the previous one: the
	// slower the server, the bigger its batches. MaxBatch caps one call
	// (the rest follows in the next): at most 4096, and it bounds how
	// long one call keeps a server busy (MaxBatch / the server's
	// parallelism × its open time must stay well under CallTimeout).
	// Defaults 32 (HBase's threshold) and 1,000; MinBatch must be below
	// MaxBatch.
	MinBatch int
	MaxBatch int

	// Delay: a buffer is flushed once its oldest op has waited this long,
	// however few ops it holds. It bounds the latency batching adds to a
	// lone op; shorter means more, smaller calls. Default 150 ms.
	Delay time.Duration

	// Pace is the least time between the starts of two calls to one
	// server, unless the buffer holds MaxBatch ops or a retry is due: a
	// batch due sooner waits out the rest. It is what lets a stream of
	// small bursts (the opens of many small tables, each a few dozen ops
	// per server, each over MinBatch on its own) share calls: a call per
	// burst costs both ends a round trip's CPU each, which on a loaded
	// master is what the ops are waiting for anyway. A server that was
	// quiet for Pace gets its burst at once, so a lone burst pays
	// nothing; ops on a busy server wait at most Pace more. Default 20 ms;
	// negative: no pacing.
	Pace time.Duration

	// RetryBase and RetryMax: the n-th consecutive failed call to a server
	// is retried after RetryBase × n², capped at RetryMax, plus up to 10%
	// jitter so servers failing together do not retry together. Defaults
	// 100 ms and 10 s: ten attempts span about 28 s.
	RetryBase time.Duration
	RetryMax  time.Duration

	// MaxFailures is the number of consecutive failed calls to a server
	// after which OnServerFailed is called and the server's ops are held
	// until RemoveServer. Lower expires a flapping server sooner (and
	// moves its regions); higher rides out longer outages. Default 10.
	MaxFailures int

	// CallTimeout bounds one ExecuteBatch call. A timed-out call may have
	// been executed (see the package doc on retries). Default 10 s.
	CallTimeout time.Duration

	// OnResult receives each dispatched op's outcome, exactly once. It is
	// never called under the dispatcher's lock, may be called concurrently,
	// and may call the Dispatcher. Required.
	OnResult func(Result)

	// OnServerFailed is called once per server incarnation that failed
	// MaxFailures consecutive calls or answered "wrong start code": the
	// server should be expired (ServerCrashProcedure), which ends with
	// RemoveServer. Same calling rules as OnResult. Required.
	OnServerFailed func(serverID string, err error)

	// Clock schedules the flush and retry timers. Default clock.Real.
	Clock clock.Clock
	// NextSeq numbers the attempts (BatchRequest.seq): each call, retries
	// included, takes the next number, and a region server refuses an
	// attempt older than one it admitted in the same term, so an attempt
	// given up on never applies after a newer one. Share one counter
	// among the dispatchers one node builds within a term, so that a
	// rebuilt dispatcher's attempts order after its predecessor's. Default:
	// a counter of this dispatcher's own, starting at 1.
	NextSeq func() uint64
	// ClusterID is the leader's cluster id (BatchRequest.cluster_id), read
	// at each call: a region server that learned another id refuses the
	// batch before it judges the term, so a restored cluster, whose terms
	// may be below the old one's, is not taken for a deposed leader.
	// Default: none sent (a region server then judges the term alone).
	ClusterID func() string

	// Logger receives the dispatcher's logs. Default: discard.
	Logger hclog.Logger

	// Metrics, when set, registers the dispatcher's Prometheus collectors
	// (baton_dispatch_*). Dispatchers built one after another on the same
	// registerer (one per term) share the counters; the queue gauges read
	// the newest one until it stops.
	Metrics prometheus.Registerer
	// Tracer, when set, makes a client span of every call, in the trace of
	// the operations it carries (Op.Span), and sends the span's context to
	// the region server. Default nil: no spans.
	Tracer trace.Tracer
}

// DefaultConfig returns a Config holding every default; the identity, the
// transport and the callbacks are left for the caller.
func DefaultConfig() Config {
	return Config{
		MinBatch:    DefaultMinBatch,
		MaxBatch:    DefaultMaxBatch,
		Delay:       DefaultDelay,
		Pace:        DefaultPace,
		RetryBase:   DefaultRetryBase,
		RetryMax:    DefaultRetryMax,
		MaxFailures: DefaultMaxFailures,
		CallTimeout: DefaultCallTimeout,
		Clock:       clock.Real{},
	}
}

// withDefaults replaces zero values by the defaults.
func (c Config) withDefaults() Config {
	def := DefaultConfig()
	defaults.Set(&c.MinBatch, def.MinBatch)
	defaults.Set(&c.MaxBatch, def.MaxBatch)
	defaults.Set(&c.Delay, def.Delay)
	defaults.Set(&c.Pace, def.Pace)
	defaults.Set(&c.RetryBase, def.RetryBase)
	defaults.Set(&c.RetryMax, def.RetryMax)
	defaults.Set(&c.MaxFailures, def.MaxFailures)
	defaults.Set(&c.CallTimeout, def.CallTimeout)
	defaults.Set(&c.Clock, def.Clock)
	defaults.Set(&c.Logger, hclog.NewNullLogger())
	return c
}

// Validate reports every problem of the configuration New would use (zero
// values count as their defaults), joined in one error.
func (c Config) Validate() error {
	c = c.withDefaults()
	problems := defaults.NewProblems("dispatch: config: ")
	bad := problems.Addf
	if c.Term == 0 {
		bad("Term is 0; it must be the leader's Raft term (> 0)")
	}
	if c.MasterID == "" {
		bad("MasterID is empty")
	}
	if c.Transport == nil {
		bad("Transport is nil")
	}
	if c.OnResult == nil {
		bad("OnResult is nil: results would be lost")
	}
	if c.OnServerFailed == nil {
		bad("OnServerFailed is nil: a failed server's ops would be held forever")
	}
	if c.MinBatch < 0 {
		bad("MinBatch %d is negative", c.MinBatch)
	}
	if c.MaxBatch < 0 {
		bad("MaxBatch %d is negative", c.MaxBatch)
	} else if c.MaxBatch > maxOpsPerRPC {
		bad("MaxBatch %d is above %d, which keeps a response under gRPC's 4 MiB limit", c.MaxBatch, maxOpsPerRPC)
	} else if c.MinBatch >= c.MaxBatch {
		bad("MinBatch %d is not below MaxBatch %d", c.MinBatch, c.MaxBatch)
	}
	if c.Delay < 0 {
		bad("Delay %v is negative", c.Delay)
	}
	if c.RetryBase < 0 {
		bad("RetryBase %v is negative", c.RetryBase)
	}
	if c.RetryMax < 0 {
		bad("RetryMax %v is negative", c.RetryMax)
	} else if c.RetryBase > 0 && c.RetryMax < c.RetryBase {
		bad("RetryMax %v is below RetryBase %v", c.RetryMax, c.RetryBase)
	}
	if c.MaxFailures < 0 {
		bad("MaxFailures %d is negative", c.MaxFailures)
	}
	if c.CallTimeout < 0 {
		bad("CallTimeout %v is negative", c.CallTimeout)
	}
	return problems.Err()
}
