package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/locked"
	"github.com/baton-dev/baton/internal/tracectx"
	"github.com/baton-dev/baton/proto/rspb"
)

// Op is one region operation asked for by a procedure.
type Op struct {
	Kind   rspb.OpKind // OP_KIND_OPEN or OP_KIND_CLOSE
	Region string
	Table  string
	ProcID uint64 // the procedure waiting for this op's Result
	// Span is the span the op belongs to (the procedure step that asked
	// for it): the call that carries it is traced under it (Config.Tracer).
	Span tracectx.Ref
}

// Target is a region server incarnation: the id it registered with, where
// to reach it, and the start code of its current registration. Ops are
// buffered per (ServerID, StartCode).
type Target struct {
	ServerID  string
	Address   string
	StartCode uint64
}

// Result is the outcome of one dispatched op. OK means the region server
// did it (Already: it was already so, e.g. a repeated open). Otherwise Err
// says why; errors.Is against the package's sentinels tells the cases
// apart:
//
//   - ErrOpFailed: the server tried and failed (e.g. the region failed to
//     open); the op was not retried.
//   - ErrRefused: the server refused the batch without acting on it.
//   - ErrStaleTerm: this master is deposed; nothing more will be sent.
//   - ErrServerRemoved (which ErrWrongStartCode also matches): the server
//     incarnation is gone or fenced; the op may be sent elsewhere.
//   - ErrStopped: the dispatcher stopped before an answer came.
//   - ErrInvalidOp: the op or target was malformed and never buffered.
type Result struct {
	Op      Op
	Target  Target
	OK      bool
	Already bool
	Err     error
}

// Transport sends one batch to one region server (a gRPC call in
// production). It must honour ctx: the dispatcher cancels a call when its
// server is removed or the dispatcher stops, and Stop waits for the call
// to return. Errors should be gRPC status errors where the server
// answered; anything else counts as a transport failure and is retried.
type Transport interface {
	ExecuteBatch(ctx context.Context, t Target, req *rspb.BatchRequest) (*rspb.BatchResponse, error)
}

// Stats counts the dispatcher's work since New.
type Stats struct {
	Ops            uint64 // ops accepted into a buffer
	Batches        uint64 // ExecuteBatch calls started (first sends and retries)
	Retries        uint64 // calls that re-sent ops of a failed call
	Failures       uint64 // calls that ended with an error
	ServerFailures uint64 // OnServerFailed calls
}

// Errors carried by Result.Err (wrapped) and OnServerFailed.
var (
	// ErrServerRemoved: the server was removed (RemoveServer) or its
	// incarnation is gone; the op was not, or no longer counts as, done
	// there.
	ErrServerRemoved = errors.New("dispatch: server removed")
	// ErrWrongStartCode: the server answered "wrong start code", it
	// restarted; errors.Is(ErrWrongStartCode, ErrServerRemoved) holds.
	ErrWrongStartCode = fmt.Errorf("%w: wrong start code (the server restarted)", ErrServerRemoved)
	// ErrStopped: the dispatcher was stopped.
	ErrStopped = errors.New("dispatch: dispatcher stopped")
	// ErrStaleTerm: a region server has seen a newer term; this master is
	// deposed.
	ErrStaleTerm = errors.New("dispatch: stale term (this master is deposed)")
	// ErrOpFailed: the region server executed the op and it failed.
	ErrOpFailed = errors.New("dispatch: operation failed on the region server")
	// ErrRefused: the region server refused the batch without acting on it
	// (INVALID_ARGUMENT, UNIMPLEMENTED and the like).
	ErrRefused = errors.New("dispatch: batch refused by the region server")
	// ErrInvalidOp: Dispatch got an op without kind or region, or a target
	// without server id.
	ErrInvalidOp = errors.New("dispatch: invalid op")
)

// Dispatcher batches region ops per server and sends them. See the package
// doc for the rules; all methods are safe for concurrent use.
type Dispatcher struct {
	cfg     Config
	log     hclog.Logger
	metrics *metrics

	ctx    context.Context // parent of every call; cancelled by Stop
	cancel context.CancelFunc
	wg     sync.WaitGroup // sender goroutines

	mu      sync.Mutex
	servers map[serverKey]*server
	stopped bool
	paused  map[string]bool // Pause's reasons: nothing is sent until each is resumed
	deposed error           // the first stale-term error; latched for good
	stats   Stats

	// Test hooks, set before the first Dispatch. jitter returns the random
	// part added to a retry delay; senderDone runs when a sender goroutine
	// has finished with its call (results delivered, next batch kicked).
	jitter     func(time.Duration) time.Duration
	senderDone func()
}

type serverKey struct {
	id        string
	startCode uint64
}

func (k serverKey) String() string { return fmt.Sprintf("%s@%d", k.id, k.startCode) }

type pending struct {
	op Op
	at time.Time // when Dispatch buffered it
}

// server is the state of one region server incarnation. Every field is
// guarded by Dispatcher.mu.
type server struct {
	key    serverKey
	target Target

	buf         []pending // waiting for the next call, oldest first
	inflight    bool      // a sender goroutine owns the server (call or delivery)
	inflightOps []pending // ops of the call in flight, until its outcome is taken

	streaming bool      // the call that just returned carried more than MinBatch ops: send what piled up now
	paced     bool      // a batch was due but waits out Pace: send it when the timer fires
	lastSend  time.Time // when the last call started (Config.Clock), for Pace
	backoff   bool      // a retry timer is armed; nothing is sent before it fires
	retryDue  bool      // the retry timer fired: send whatever the count and age
	failures  int       // consecutive failed calls
	held      bool      // MaxFailures reached: ops wait for RemoveServer
	dead      error     // "wrong start code": the incarnation is gone, new ops fail at once
	notified  bool      // OnServerFailed was called for this incarnation
	closed    bool      // removed or stopped; a returning call is ignored

	timer   clock.Timer // the delay, pace or retry timer, if armed
	timerAt time.Time   // when it fires
	gen     uint64      // bumped on disarm, so a timer that fires late is ignored

	ctx    context.Context // cancelled by RemoveServer and Stop
	cancel context.CancelFunc
}

// New validates cfg (zero values take the defaults) and returns an idle
// Dispatcher. Nothing runs until the first Dispatch.
func New(cfg Config) (*Dispatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.NextSeq == nil {
		var seq atomic.Uint64
		cfg.NextSeq = func() uint64 { return seq.Add(1) }
	}
	d := &Dispatcher{
		cfg:     cfg,
		log:     cfg.Logger.Named("dispatch"),
		metrics: m,
		ctx:     ctx,
		cancel:  cancel,
		servers: make(map[serverKey]*server),
		jitter:  defaultJitter,
	}
	m.live.d.Store(d)
	return d, nil
}

// result hands r to OnResult, counting it.
func (d *Dispatcher) result(r Result) {
	d.metrics.results.WithLabelValues(r.Op.Kind.Label(), resultLabel(r)).Inc()
	d.cfg.OnResult(r)
}

// defaultJitter is up to 10% of w, so servers that failed together do not
// retry together (the same share HBase adds to suspend timeouts).
func defaultJitter(w time.Duration) time.Duration {
	if w < 10 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(w/10) + 1))
}

// Dispatch buffers op for server t and returns without blocking; its
// Result comes through OnResult. An invalid op, or one dispatched after
// Stop, to a deposed dispatcher or to a dead incarnation (wrong start code),
// is answered at once, from this goroutine, before Dispatch returns.
func (d *Dispatcher) Dispatch(t Target, op Op) {
	if err := checkOp(t, op); err != nil {
		d.result(Result{Op: op, Target: t, Err: err})
		return
	}
	d.mu.Lock()
	var err error
	switch {
	case d.stopped:
		err = ErrStopped
	case d.deposed != nil:
		err = d.deposed
	}
	if err != nil {
		d.mu.Unlock()
		d.result(Result{Op: op, Target: t, Err: err})
		return
	}
	k := serverKey{id: t.ServerID, startCode: t.StartCode}
	s := d.servers[k]
	if s == nil {
		ctx, cancel := context.WithCancel(d.ctx)
		s = &server{key: k, target: t, ctx: ctx, cancel: cancel}
		d.servers[k] = s
	}
	if s.dead != nil {
		err := s.dead
		d.mu.Unlock()
		d.result(Result{Op: op, Target: t, Err: err})
		return
	}
	if t.Address != "" {
		s.target.Address = t.Address
	}
	s.buf = append(s.buf, pending{op: op, at: d.cfg.Clock.Now()})
	d.stats.Ops++
	d.kick(s)
	d.mu.Unlock()
}

func checkOp(t Target, op Op) error {
	switch {
	case t.ServerID == "":
		return fmt.Errorf("%w: target has no server id (region %q)", ErrInvalidOp, op.Region)
	case op.Region == "":
		return fmt.Errorf("%w: no region (proc %d)", ErrInvalidOp, op.ProcID)
	case op.Kind != rspb.OpKind_OP_KIND_OPEN && op.Kind != rspb.OpKind_OP_KIND_CLOSE:
		return fmt.Errorf("%w: kind %v of region %q", ErrInvalidOp, op.Kind, op.Region)
	}
	return nil
}

// kick decides what s should do now: send its buffer, arm the delay timer,
// or nothing (a call in flight, a backoff, held, dead, empty). Every state
// change ends with a kick, so this is the only place sends start.
// Caller holds d.mu.
func (d *Dispatcher) kick(s *server) {
	if s.closed || s.inflight || s.backoff || s.held || s.dead != nil ||
		d.stopped || len(d.paused) > 0 || d.deposed != nil || len(s.buf) == 0 {
		return
	}
	now := d.cfg.Clock.Now()
	due := s.retryDue || s.streaming || s.paced || len(s.buf) > d.cfg.MinBatch
	var wait time.Duration
	if !due {
		wait = d.cfg.Delay - now.Sub(s.buf[0].at)
		due = wait <= 0
	}
	if due && !s.retryDue && len(s.buf) < d.cfg.MaxBatch && d.cfg.Pace > 0 {
		if rest := d.cfg.Pace - now.Sub(s.lastSend); rest > 0 {
			due, wait = false, rest
			s.paced = true
		}
	}
	if due {
		d.send(s)
		return
	}
	if at := now.Add(wait); s.timer == nil || s.timerAt.After(at) {
		d.armAt(s, now, at, false)
	}
}

// send takes up to MaxBatch ops off the buffer and starts their call.
// Caller holds d.mu.
func (d *Dispatcher) send(s *server) {
	d.disarm(s)
	s.streaming, s.paced = false, false
	s.lastSend = d.cfg.Clock.Now()
	n := min(len(s.buf), d.cfg.MaxBatch)
	batch := s.buf[:n:n]
	s.buf = slices.Clone(s.buf[n:])
	retry := s.retryDue
	s.retryDue = false
	s.inflight = true
	s.inflightOps = batch
	d.stats.Batches++
	if retry {
		d.stats.Retries++
		d.metrics.retries.Inc()
	}
	d.wg.Add(1) // under d.mu with !d.stopped: ordered before Stop's Wait
	go d.call(s, s.target, batch, s.failures+1)
}

// call runs one ExecuteBatch and acts on its outcome.
func (d *Dispatcher) call(s *server, target Target, batch []pending, attempt int) {
	defer d.wg.Done()
	if d.senderDone != nil {
		defer d.senderDone()
	}
	req := &rspb.BatchRequest{
		Term:      d.cfg.Term,
		MasterId:  d.cfg.MasterID,
		ServerId:  s.key.id,
		StartCode: s.key.startCode,
		Ops:       make([]*rspb.RegionOp, len(batch)),
		Seq:       d.cfg.NextSeq(),
	}
	if d.cfg.ClusterID != nil {
		req.ClusterId = d.cfg.ClusterID()
	}
	for i, p := range batch {
		req.Ops[i] = &rspb.RegionOp{Kind: p.op.Kind, Region: p.op.Region, Table: p.op.Table, ProcId: p.op.ProcID}
	}
	ctx, cancel := context.WithTimeout(s.ctx, d.cfg.CallTimeout)
	var spans []trace.Span
	if d.cfg.Tracer != nil {
		ctx, spans = d.callSpans(ctx, s, batch, req, attempt)
	}
	// The wall clock, not cfg.Clock: "took" is the real latency of the
	// call, which a test's manual clock would report as zero.
	start := time.Now()
	resp, err := d.cfg.Transport.ExecuteBatch(ctx, target, req)
	took := time.Since(start)
	cancel()
	d.metrics.batchOps.Observe(float64(len(batch)))
	d.metrics.rpcDuration.WithLabelValues(rpcMethod).Observe(took.Seconds())
	if d.log.IsTrace() {
		d.log.Trace("batch sent", "server", s.key.String(), "ops", len(batch), "attempt", attempt,
			"took", time.Since(start), "error", err)
	}

	d.mu.Lock()
	if s.closed {
		// RemoveServer or Stop answered these ops already.
		d.mu.Unlock()
		d.metrics.rpcs.WithLabelValues(rpcMethod, "abandoned").Inc()
		endCallSpans(spans, "abandoned", err)
		return
	}
	outcome := outcomeLabel(err)
	d.metrics.rpcs.WithLabelValues(rpcMethod, outcome).Inc()
	endCallSpans(spans, outcome, err)
	s.inflightOps = nil
	var results []Result
	var serverErr error
	if err == nil {
		s.failures = 0
		results = answer(s.key, target, batch, resp)
	} else {
		d.stats.Failures++
		if d.builtBeforeTheClusterID(req, err) {
			// Not a restarted server: the batch left before this leader
			// had applied its cluster's id, and the server has learned it
			// since (from this leader's answers). Sent again, it names it.
			err = fmt.Errorf("dispatch: %s knows the cluster's id this batch was built without; sending again: %s", s.key, status.Convert(err).Message())
		}
		results, serverErr = d.callFailed(s, target, batch, err)
	}
	d.mu.Unlock()

	// Outside the lock: the callbacks may call back into the dispatcher.
	// s.inflight stays set meanwhile, so this server's next batch is sent
	// only after this one's results are out.
	if serverErr != nil {
		d.cfg.OnServerFailed(s.key.id, serverErr)
	}
	for _, r := range results {
		d.result(r)
	}

	d.mu.Lock()
	s.inflight = false
	s.streaming = err == nil && len(batch) > d.cfg.MinBatch
	d.kick(s)
	s.streaming = false
	d.mu.Unlock()
}

// builtBeforeTheClusterID reports whether err is a region server's
// refusal of req for naming no cluster id, where the id the server holds
// is the one this leader now has: the batch was built in the moment before
// the leader applied its cluster's id (a new cluster's first second, or
// the raise after an upgrade). A server that holds another id (a restored
// cluster's servers, until they register with it) is a dead incarnation.
func (d *Dispatcher) builtBeforeTheClusterID(req *rspb.BatchRequest, err error) bool {
	if req.GetClusterId() != "" || d.cfg.ClusterID == nil || status.Code(err) != codes.FailedPrecondition {
		return false
	}
	id := d.cfg.ClusterID()
	if id == "" {
		return false
	}
	if info := knownRefusal(err); info != nil {
		return info.GetReason() == rspb.ReasonClusterIDMismatch && info.GetMetadata()[rspb.MetaServerClusterID] == id
	}
	// A region server that sends no detail says which id it holds only in
	// the message.
	return strings.Contains(status.Convert(err).Message(), fmt.Sprintf("this server's is %q", id))
}

// knownRefusal returns err's region-server refusal detail when its reason
// is one this dispatcher knows; nil otherwise, and then the message
// decides, as it did before region servers sent details (a 0.1.0 server
// sends none; a newer one may give a reason this master does not know,
// while keeping the message an older master reads).
func knownRefusal(err error) *errdetails.ErrorInfo {
	info := rspb.RefusalInfo(err)
	switch info.GetReason() {
	case rspb.ReasonStaleTerm, rspb.ReasonWrongStartCode, rspb.ReasonClusterIDMismatch:
		return info
	}
	return nil
}

type errClass int

const (
	classRetry errClass = iota
	classStaleTerm
	classWrongStartCode
	classRefused
)

// classify sorts a call's error (see the package doc on errors).
func classify(err error) errClass {
	st, ok := status.FromError(err)
	if !ok {
		// Not from a server: connection refused, a context error, a
		// transport's own failure. It may or may not have arrived.
		return classRetry
	}
	switch st.Code() {
	case codes.FailedPrecondition:
		if info := knownRefusal(err); info != nil {
			if info.GetReason() == rspb.ReasonStaleTerm {
				return classStaleTerm
			}
			// A batch for another cluster's incarnation is, to this
			// dispatcher, a start code that is no longer live.
			return classWrongStartCode
		}
		msg := strings.ToLower(st.Message())
		switch {
		case strings.Contains(msg, "stale term"):
			return classStaleTerm
		case strings.Contains(msg, "wrong start code"):
			return classWrongStartCode
		}
		return classRefused
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.Unauthenticated, codes.Unimplemented, codes.OutOfRange:
		return classRefused
	default:
		// Canceled, Unknown, DeadlineExceeded, ResourceExhausted, Aborted,
		// Internal, Unavailable, DataLoss: the server may have acted.
		return classRetry
	}
}

// callFailed handles a call that ended with err: it returns the results to
// deliver and, when the server is to be expired, the error for
// OnServerFailed. Caller holds d.mu.
func (d *Dispatcher) callFailed(s *server, target Target, batch []pending, err error) ([]Result, error) {
	class := classify(err)
	if class == classRetry && d.deposed != nil {
		// Another server already said this term is over; retrying is futile.
		return failAll(target, batch, d.deposed), nil
	}
	switch class {
	case classStaleTerm:
		e := fmt.Errorf("%w: %s refused term %d: %w", ErrStaleTerm, s.key, d.cfg.Term, err)
		if d.deposed == nil {
			d.deposed = e
			d.log.Warn("a region server has seen a newer term: this master is deposed; failing every buffered op",
				"server", s.key.String(), "term", d.cfg.Term, "error", err)
		}
		out := failAll(target, batch, e)
		// Every buffer would meet the same answer.
		for _, o := range d.servers {
			d.disarm(o)
			o.backoff, o.retryDue = false, false
			out = append(out, failAll(o.target, o.buf, e)...)
			o.buf = nil
		}
		return out, nil

	case classWrongStartCode:
		e := fmt.Errorf("%w: %s: %w", ErrWrongStartCode, s.key, err)
		d.log.Warn("region server restarted: failing its ops", "server", s.key.String(), "ops", len(batch)+len(s.buf), "error", err)
		s.dead = e
		d.disarm(s)
		out := failAll(target, batch, e)
		out = append(out, failAll(s.target, s.buf, e)...)
		s.buf = nil
		return out, d.serverFailed(s, e)

	case classRefused:
		e := fmt.Errorf("%w: %s: %w", ErrRefused, s.key, err)
		d.log.Warn("region server refused a batch", "server", s.key.String(), "ops", len(batch), "error", err)
		return failAll(target, batch, e), nil
	}

	// Retry: the ops go back to the front, ahead of what arrived meanwhile.
	s.failures++
	s.buf = append(batch, s.buf...) // batch has no spare capacity: a new array
	if s.failures >= d.cfg.MaxFailures {
		e := fmt.Errorf("dispatch: %d consecutive failed calls to %s, the last: %w", s.failures, s.key, err)
		d.log.Error("region server unreachable: asking for its expiry, holding its ops until it is removed",
			"server", s.key.String(), "failures", s.failures, "ops", len(s.buf), "error", err)
		s.held = true
		d.disarm(s)
		return nil, d.serverFailed(s, e)
	}
	wait := d.backoff(s.failures)
	d.log.Warn("batch failed, will retry", "server", s.key.String(), "failures", s.failures,
		"ops", len(s.buf), "retry_in", wait, "error", err)
	s.backoff = true
	d.arm(s, wait, true)
	return nil, nil
}

// serverFailed returns err the first time it is called for s, nil after:
// OnServerFailed is called once per incarnation. Caller holds d.mu.
func (d *Dispatcher) serverFailed(s *server, err error) error {
	if s.notified {
		return nil
	}
	s.notified = true
	d.stats.ServerFailures++
	d.metrics.serverFailures.Inc()
	return err
}

// backoff is the wait before retry number n (n consecutive failures):
// RetryBase × n², capped at RetryMax, plus jitter.
func (d *Dispatcher) backoff(n int) time.Duration {
	w := d.cfg.RetryMax
	if n > 0 && n < 1<<20 {
		sq := time.Duration(n) * time.Duration(n)
		if d.cfg.RetryBase <= w/sq { // RetryBase × n² ≤ RetryMax, without overflow
			w = d.cfg.RetryBase * sq
		}
	}
	return w + d.jitter(w)
}

// arm (re)starts s's timer: a flush after the delay, or a retry. Caller
// holds d.mu.
func (d *Dispatcher) arm(s *server, wait time.Duration, retry bool) {
	now := d.cfg.Clock.Now()
	d.armAt(s, now, now.Add(wait), retry)
}

// armAt is arm for a deadline at, now being the time it was computed
// from: kick compares a later deadline with this one, so it must be the
// same reading of the clock, or every op into a waiting buffer would see
// a deadline a few nanoseconds sooner and arm the timer again.
func (d *Dispatcher) armAt(s *server, now, at time.Time, retry bool) {
	d.disarm(s)
	gen := s.gen
	s.timerAt = at
	s.timer = d.cfg.Clock.AfterFunc(at.Sub(now), func() { d.fire(s, gen, retry) })
}

// disarm stops s's timer; one already firing sees a changed gen and does
// nothing. Caller holds d.mu.
func (d *Dispatcher) disarm(s *server) {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.gen++
}

func (d *Dispatcher) fire(s *server, gen uint64, retry bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.closed || s.gen != gen {
		return
	}
	s.timer = nil
	if retry {
		s.backoff = false
		s.retryDue = true
	}
	d.kick(s)
}

// answer turns a response into one Result per op of the batch. Results are
// matched by position when the server kept the order, else by region and
// kind (and proc id, when the server echoes it).
func answer(k serverKey, target Target, batch []pending, resp *rspb.BatchResponse) []Result {
	res := resp.GetResults()
	matched := make([]*rspb.RegionOpResult, len(batch))
	positional := len(res) == len(batch)
	for i := 0; positional && i < len(batch); i++ {
		positional = matches(batch[i].op, res[i])
	}
	if positional {
		copy(matched, res)
	} else {
		type rk struct {
			region string
			kind   rspb.OpKind
		}
		left := make(map[rk][]*rspb.RegionOpResult, len(res))
		for _, r := range res {
			key := rk{r.GetRegion(), r.GetKind()}
			left[key] = append(left[key], r)
		}
		for i, p := range batch {
			key := rk{p.op.Region, p.op.Kind}
			q := left[key]
			for j, r := range q {
				if matches(p.op, r) {
					matched[i] = r
					left[key] = slices.Delete(q, j, j+1)
					break
				}
			}
		}
	}
	out := make([]Result, len(batch))
	for i, p := range batch {
		r := Result{Op: p.op, Target: target}
		switch m := matched[i]; {
		case m == nil:
			r.Err = fmt.Errorf("%w: %s: no result for %v of region %q in the response",
				ErrOpFailed, k, p.op.Kind, p.op.Region)
		case m.GetOk():
			r.OK, r.Already = true, m.GetAlready()
		default:
			r.Already = m.GetAlready()
			r.Err = fmt.Errorf("%w: %s: %v of region %q: %s", ErrOpFailed, k, p.op.Kind, p.op.Region, m.GetError())
		}
		out[i] = r
	}
	return out
}

func matches(op Op, r *rspb.RegionOpResult) bool {
	return r != nil && r.GetRegion() == op.Region && r.GetKind() == op.Kind &&
		(r.GetProcId() == 0 || r.GetProcId() == op.ProcID)
}

func failAll(target Target, ops []pending, err error) []Result {
	out := make([]Result, len(ops))
	for i, p := range ops {
		out[i] = Result{Op: p.op, Target: target, Err: err}
	}
	return out
}

// close answers every op of s (in flight and buffered) with err and
// cancels its call. Caller holds d.mu and removes s from d.servers.
func (d *Dispatcher) close(s *server, err error) []Result {
	s.closed = true
	d.disarm(s)
	s.cancel()
	out := failAll(s.target, s.inflightOps, err)
	out = append(out, failAll(s.target, s.buf, err)...)
	s.inflightOps, s.buf = nil, nil
	return out
}

// RemoveServer drops every incarnation of serverID: its buffered, retrying,
// held and in-flight ops get a Result wrapping ErrServerRemoved before
// RemoveServer returns, and a call in flight is cancelled. Call it once the
// server is fenced (expired), typically from the ServerCrashProcedure; ops
// dispatched to the id afterwards start a fresh buffer. If the Transport
// has a RemoveServer(serverID string) method, it is called too.
func (d *Dispatcher) RemoveServer(serverID string) {
	d.mu.Lock()
	var out []Result
	for k, s := range d.servers {
		if k.id != serverID {
			continue
		}
		n := len(s.buf) + len(s.inflightOps)
		out = append(out, d.close(s, fmt.Errorf("%w: %s", ErrServerRemoved, k))...)
		delete(d.servers, k)
		d.log.Info("server removed", "server", k.String(), "ops_failed", n)
	}
	d.mu.Unlock()
	if r, ok := d.cfg.Transport.(interface{ RemoveServer(string) }); ok {
		r.RemoveServer(serverID)
	}
	for _, r := range out {
		d.result(r)
	}
}

// Stop stops the timers and cancels the calls in flight; every op not yet
// answered gets a Result wrapping ErrStopped. It returns once every sender
// goroutine has ended; after that, OnResult is only called for Dispatch
// calls made after Stop (answered at once with ErrStopped). Stop may be
// called more than once.
func (d *Dispatcher) Stop() {
	d.mu.Lock()
	var out []Result
	if !d.stopped {
		d.stopped = true
		for k, s := range d.servers {
			out = append(out, d.close(s, fmt.Errorf("%w: %s", ErrStopped, k))...)
		}
		d.servers = make(map[serverKey]*server)
		d.metrics.live.d.CompareAndSwap(d, nil)
		d.cancel()
		d.log.Debug("stopped", "ops_failed", len(out))
	}
	d.mu.Unlock()
	for _, r := range out {
		d.result(r)
	}
	d.wg.Wait()
}

// Pause stops sending, for reason (the leader's maintenance mode: nothing
// reaches the region servers while an operator works on them; a restored
// cluster's hold): ops dispatched meanwhile, and ops a failed call gives
// back for a retry, stay buffered, unanswered, until every reason it was
// paused for is resumed; a call already on the wire finishes and its
// results are delivered. Pausing again for a reason it holds does nothing.
func (d *Dispatcher) Pause(reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.paused[reason] {
		return
	}
	if d.paused == nil {
		d.paused = map[string]bool{}
	}
	d.paused[reason] = true
	d.log.Info("paused: no batch is sent until resumed", "reason", reason)
}

// Resume undoes Pause for reason: once no reason is left, every buffer
// that is due is sent now (the delay of an op buffered during the pause
// has long passed), the others when due. Resuming a reason not paused for
// does nothing.
func (d *Dispatcher) Resume(reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.paused[reason] {
		return
	}
	delete(d.paused, reason)
	if len(d.paused) > 0 {
		d.log.Info("resumed one reason; still paused", "reason", reason, "paused_for", len(d.paused))
		return
	}
	d.log.Info("resumed", "reason", reason)
	for _, s := range d.servers {
		d.kick(s)
	}
}

// Paused reports whether the dispatcher is paused, for any reason.
func (d *Dispatcher) Paused() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.paused) > 0
}

// ServerState describes one server incarnation's buffer, for diagnostics
// ("why has this region not opened?").
type ServerState struct {
	Target   Target
	Buffered int   // ops waiting for a call (including ones to retry)
	InFlight int   // ops of the call in flight
	Failures int   // consecutive failed calls
	Backoff  bool  // waiting to retry
	Held     bool  // MaxFailures reached: waiting for RemoveServer
	Dead     error // the "wrong start code" error, if the server answered it
}

// Servers returns the state of every server incarnation the dispatcher
// knows, sorted by server id and start code.
func (d *Dispatcher) Servers() []ServerState {
	d.mu.Lock()
	out := make([]ServerState, 0, len(d.servers))
	for _, s := range d.servers {
		out = append(out, ServerState{
			Target: s.target, Buffered: len(s.buf), InFlight: len(s.inflightOps), Failures: s.failures,
			Backoff: s.backoff, Held: s.held, Dead: s.dead,
		})
	}
	d.mu.Unlock()
	slices.SortFunc(out, func(a, b ServerState) int {
		if c := strings.Compare(a.Target.ServerID, b.Target.ServerID); c != 0 {
			return c
		}
		return cmp.Compare(a.Target.StartCode, b.Target.StartCode)
	})
	return out
}

// Stats returns the counters.
func (d *Dispatcher) Stats() Stats { return locked.Load(&d.mu, &d.stats) }
