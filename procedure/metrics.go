package procedure

import (
	"fmt"
	"maps"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/internal/promkit"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are an executor's Prometheus collectors. Events (a step, a
// failure, a lock wait) are counted where they happen; what the executor
// holds (procedures by state, stuck ones, steps in flight) is reported by
// live when Prometheus scrapes, from counts the executor keeps as its
// table changes (liveCounts) and, for the stuck ones, a walk of the table
// that lets go of its lock as it goes (stuckCounts).
type metrics struct {
	submitted    *prometheus.CounterVec
	failed       *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	steps        *prometheus.CounterVec
	stepDuration *prometheus.HistogramVec
	lockWaits    *prometheus.CounterVec
	lockWaitTime *prometheus.HistogramVec
	workers      prometheus.Gauge
	stuck        prometheus.Gauge
	live         *liveCollector
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	// A master builds a new executor each time it becomes leader: the
	// collectors of the previous one are adopted, so the series go on.
	s := promkit.NewSet(reg)
	m := &metrics{
		submitted:    s.CounterVec("procedure", "submitted_total", "Root procedures submitted, by type.", "type"),
		failed:       s.CounterVec("procedure", "failed_total", "Procedures that failed (and started a rollback), by type.", "type"),
		duration:     s.HistogramVec("procedure", "duration_seconds", "Time from submission to a terminal state of root procedures, by type and outcome.", prometheus.ExponentialBuckets(0.001, 4, 12), "type", "outcome"),
		steps:        s.CounterVec("procedure", "steps_total", "Steps executed, by type.", "type"),
		stepDuration: s.HistogramVec("procedure", "step_duration_seconds", "Time one step takes on a worker, from its start to its outcome persisted, by type.", prometheus.ExponentialBuckets(0.0001, 4, 10), "type"),
		lockWaits:    s.CounterVec("procedure", "lock_waits_total", "Times a procedure was parked behind a conflicting lock (once per wait, however often it was re-parked), by type.", "type"),
		lockWaitTime: s.HistogramVec("procedure", "lock_wait_duration_seconds", "Time from a procedure's first parking behind a conflicting lock to getting its locks, by type.", prometheus.ExponentialBuckets(0.001, 4, 12), "type"),
		workers:      s.Gauge("executor", "workers", "Worker goroutines, core and keep-alive."),
		stuck:        s.Gauge("executor", "stuck_workers", "Workers whose current step has run longer than the stuck threshold."),
		live:         promkit.Add(s, newLiveCollector()),
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("procedure: registering metrics: %w", err)
	}
	return m, nil
}

// stepSeries are the series a step of one type updates.
type stepSeries struct {
	steps    prometheus.Counter
	duration prometheus.Observer
}

// stepMetrics returns e's step series, found in m's vectors once: a label
// lookup hashes the type's name, which every step would pay. Called by
// the goroutine that holds e's claim.
func (e *entry) stepMetrics(m *metrics) *stepSeries {
	if e.stepObs == nil {
		e.stepObs = &stepSeries{
			steps:    m.steps.WithLabelValues(e.ti.name),
			duration: m.stepDuration.WithLabelValues(e.ti.name),
		}
	}
	return e.stepObs
}

// liveCollector reports what the running executor holds, read at scrape
// time. It is adopted by every executor built on the same registry, and
// reads the one that runs now: none on a master that does not lead, so
// that these gauges summed over masters count each procedure once.
type liveCollector struct {
	x           atomic.Pointer[Executor]
	procs       *prometheus.Desc
	stuck       *prometheus.Desc
	lockWaiting *prometheus.Desc
	inFlight    *prometheus.Desc
}

func newLiveCollector() *liveCollector {
	return &liveCollector{
		procs:       promkit.Desc("baton_procedures", "Procedures the executor holds (live ones and finished roots kept for their result), by type and state.", "type", "state"),
		stuck:       promkit.Desc("baton_procedures_stuck", "Live procedures that are stuck: not finished, not paused, not waiting for children, and without a persisted transition for longer than the executor's StuckProcedureThreshold (default 5m), by type.", "type"),
		lockWaiting: promkit.Desc("baton_procedures_lock_waiting", "Procedures parked behind a conflicting lock now, by type.", "type"),
		inFlight:    promkit.Desc("baton_executor_steps_in_flight", "Steps running on a worker now."),
	}
}

// Describe implements prometheus.Collector.
func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	promkit.Describe(ch, c.procs, c.stuck, c.lockWaiting, c.inFlight)
}

// Collect implements prometheus.Collector.
func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	if x := c.x.Load(); x != nil {
		x.collectLive(c, ch)
	}
}

// collectLive reports the executor's table for one scrape. It holds x.mu
// only to copy the counts kept as procedures change (liveCounts): a scrape
// used to walk every procedure under x.mu, and every transition waited
// for the walk (BenchmarkGetDuringScrapes: a Get's p99 went from 6 µs to
// 27-42 ms with 100,000 procedures and scrapes back to back). The stuck
// procedures, which depend on the time, are counted apart (stuckCounts).
func (x *Executor) collectLive(c *liveCollector, ch chan<- prometheus.Metric) {
	x.mu.Lock()
	byState := maps.Clone(x.live.byState)
	waiting := maps.Clone(x.live.lockWaiting)
	x.unlock()
	stuck := x.stuckCounts()
	types := map[*typeInfo]bool{}
	for k, n := range byState {
		ch <- prometheus.MustNewConstMetric(c.procs, prometheus.GaugeValue, float64(n), k.ti.name, k.state.String())
		types[k.ti] = true
	}
	// Zeros too, for every type held: an alert on "> 0" and a graph both
	// see the series before anything is stuck.
	for ti := range types {
		ch <- prometheus.MustNewConstMetric(c.stuck, prometheus.GaugeValue, float64(stuck[ti]), ti.name)
		ch <- prometheus.MustNewConstMetric(c.lockWaiting, prometheus.GaugeValue, float64(waiting[ti]), ti.name)
	}
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(x.inFlight.Load()))
}

// typeState keys the procedure counts by the type's registry entry, not
// its name: a transition hashes a pointer, not a string.
type typeState struct {
	ti    *typeInfo
	state State
}

// liveCounts are the gauges baton_procedures and
// baton_procedures_lock_waiting, kept under Executor.mu by every change of
// the table: a procedure added or removed (holdLocked, forgetLocked), its
// state or its lock wait changed (setStateLocked, setLockWaitLocked).
// Constant work per change, so that a scrape copies a map of types by
// states instead of walking the table. Only procedures in the table
// (entry.inTable) are counted: a child being spawned, a procedure being
// loaded, changes state before it is added, and is counted as it stands
// then.
type liveCounts struct {
	byState     map[typeState]int
	lockWaiting map[*typeInfo]int
}

func newLiveCounts() liveCounts {
	return liveCounts{byState: map[typeState]int{}, lockWaiting: map[*typeInfo]int{}}
}

// count adds d (1 or -1) to e's series as e stands now.
func (c *liveCounts) count(e *entry, d int) {
	addCount(c.byState, typeState{e.ti, e.state}, d)
	if e.lockWait {
		addCount(c.lockWaiting, e.ti, d)
	}
}

// addCount adds d to m[k], and drops k at zero: a type held no more is no
// more reported.
func addCount[K comparable](m map[K]int, k K, d int) {
	if n := m[k] + d; n != 0 {
		m[k] = n
	} else {
		delete(m, k)
	}
}

// holdLocked puts e in the table and in the counts. Ids are never reused;
// were one, the entry it replaced would leave the counts with it.
func (x *Executor) holdLocked(e *entry) {
	if old := x.procs[e.id]; old != nil && old != e {
		x.forgetLocked(e.id)
	}
	x.procs[e.id] = e
	if !e.inTable {
		e.inTable = true
		x.live.count(e, 1)
	}
}

// forgetLocked takes procedure id out of the table and the counts.
func (x *Executor) forgetLocked(id uint64) {
	e := x.procs[id]
	if e == nil {
		return
	}
	delete(x.procs, id)
	if e.inTable {
		e.inTable = false
		x.live.count(e, -1)
	}
}

// setStateLocked is the only way e's state changes once e is in the
// table: the counts follow it.
func (x *Executor) setStateLocked(e *entry, s State) {
	// An end (or a SUCCESS rolled back to ROLLEDBACK) is shown once the
	// write carrying it has committed (written).
	if s.Terminal() && e.state != s {
		if !e.endUnwritten {
			e.stateBeforeEnd = e.state
		}
		e.endUnwritten = true
	}
	if !e.inTable || e.state == s {
		e.state = s
		return
	}
	x.live.count(e, -1)
	e.state = s
	x.live.count(e, 1)
}

// setLockWaitLocked is the only way e enters or leaves a lock wait once e
// is in the table: the counts follow it.
func (x *Executor) setLockWaitLocked(e *entry, waiting bool) {
	if e.inTable && e.lockWait != waiting {
		d := 1
		if !waiting {
			d = -1
		}
		addCount(x.live.lockWaiting, e.ti, d)
	}
	e.lockWait = waiting
}

// stuckReuse is how long, on the executor's clock, a count of stuck
// procedures answers the scrapes after it: scrapes back to back (several
// Prometheus servers, or anyone polling /metrics) share one walk of the
// table instead of each making its own. baton_procedures_stuck is thus up
// to this much older than the scrape, next to a threshold of minutes.
const stuckReuse = 5 * time.Second

// stuckChunk is how many procedures the stuck count looks at per hold of
// x.mu: what it makes a transition wait is one chunk's walk (about 100 µs
// on the 2-core VM, BenchmarkCountStuck), not the table's (10 ms at
// 100,000 procedures).
const stuckChunk = 1024

// stuckCount is the newest count of stuck procedures by type. mu is held
// through a count, so that scrapes that come meanwhile wait for it and
// share it.
type stuckCount struct {
	mu     sync.Mutex
	at     time.Time
	byType map[*typeInfo]int // never changed once published: readers share it
}

// stuckCounts returns the stuck procedures by type, counted at most
// stuckReuse ago.
func (x *Executor) stuckCounts() map[*typeInfo]int {
	s := &x.stuck
	s.mu.Lock()
	defer s.mu.Unlock()
	now := x.clock.Now()
	if s.byType != nil && !now.Before(s.at) && now.Sub(s.at) < stuckReuse {
		return s.byType
	}
	s.byType, s.at = x.countStuck(now), now
	return s.byType
}

// countStuck walks the table for the procedures stuck at now, letting go
// of x.mu after every stuckChunk of them. A map may change between the
// steps of a range over it: a procedure added meanwhile may be counted or
// not, one removed before it is reached is not, and none is counted twice.
// A procedure is judged as it stands when reached: the count is of a
// table that moves during the walk (milliseconds), no loss next to a
// threshold of minutes.
func (x *Executor) countStuck(now time.Time) map[*typeInfo]int {
	stuck := map[*typeInfo]int{}
	n := 0
	x.mu.Lock()
	for _, e := range x.procs {
		if x.stuckLocked(e, now) {
			stuck[e.ti]++
		}
		if n++; n%stuckChunk == 0 {
			x.unlock()
			// Unlocking readied a goroutine waiting for x.mu, if any;
			// yielding lets it take the lock before we take it back, which
			// would otherwise make it wait a millisecond (sync.Mutex's
			// starvation threshold) per chunk.
			runtime.Gosched()
			x.mu.Lock()
		}
	}
	x.unlock()
	return stuck
}

// stuckLocked reports whether e counts as stuck (see
// Config.StuckProcedureThreshold). A parent waiting for its children is
// not: it waits as long as its slowest child, which is counted itself.
func (x *Executor) stuckLocked(e *entry, now time.Time) bool {
	if e.state.Terminal() || e.paused || (e.state == Waiting && e.childLatch > 0) {
		return false
	}
	return now.Sub(e.updated) >= x.cfg.StuckProcedureThreshold
}

// noteLockParked counts the start of e's lock wait (not a re-parking of
// the same wait). Called with x.mu held.
func (x *Executor) noteLockParkedLocked(e *entry) {
	if e.lockWaitSince.IsZero() {
		e.lockWaitSince = x.clock.Now()
		x.metrics.lockWaits.WithLabelValues(e.ti.name).Inc()
	}
}

// noteLocksGrantedLocked observes the lock wait e's grant ends, if any.
// Called with x.mu held.
func (x *Executor) noteLocksGrantedLocked(e *entry) {
	if !e.lockWaitSince.IsZero() {
		x.metrics.lockWaitTime.WithLabelValues(e.ti.name).Observe(x.clock.Now().Sub(e.lockWaitSince).Seconds())
		e.lockWaitSince = time.Time{}
	}
}
