package procedure

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are an executor's Prometheus collectors. Events (a step, a
// failure, a lock wait) are counted where they happen; what the executor
// already holds (procedures by state, stuck ones, steps in flight) is read
// when Prometheus scrapes, by live, so that no counter has to be kept in
// step with the procedure table.
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

func newMetrics(reg prometheus.Registerer) (m *metrics, err error) {
	m = &metrics{
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "baton", Subsystem: "procedure", Name: "submitted_total",
			Help: "Root procedures submitted, by type.",
		}, []string{"type"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "baton", Subsystem: "procedure", Name: "failed_total",
			Help: "Procedures that failed (and started a rollback), by type.",
		}, []string{"type"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "baton", Subsystem: "procedure", Name: "duration_seconds",
			Help:    "Time from submission to a terminal state of root procedures, by type and outcome.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
		}, []string{"type", "outcome"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "baton", Subsystem: "procedure", Name: "steps_total",
			Help: "Steps executed, by type.",
		}, []string{"type"}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "baton", Subsystem: "procedure", Name: "step_duration_seconds",
			Help:    "Time one step takes on a worker, from its start to its outcome persisted, by type.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"type"}),
		lockWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "baton", Subsystem: "procedure", Name: "lock_waits_total",
			Help: "Times a procedure was parked behind a conflicting lock (once per wait, however often it was re-parked), by type.",
		}, []string{"type"}),
		lockWaitTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "baton", Subsystem: "procedure", Name: "lock_wait_duration_seconds",
			Help:    "Time from a procedure's first parking behind a conflicting lock to getting its locks, by type.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
		}, []string{"type"}),
		workers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "baton", Subsystem: "executor", Name: "workers",
			Help: "Worker goroutines, core and keep-alive.",
		}),
		stuck: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "baton", Subsystem: "executor", Name: "stuck_workers",
			Help: "Workers whose current step has run longer than the stuck threshold.",
		}),
		live: newLiveCollector(),
	}
	if reg != nil {
		// A master builds a new executor each time it becomes leader: the
		// collectors of the previous one are adopted, so the series go on.
		m.submitted = adopt(reg, m.submitted, &err)
		m.failed = adopt(reg, m.failed, &err)
		m.duration = adopt(reg, m.duration, &err)
		m.steps = adopt(reg, m.steps, &err)
		m.stepDuration = adopt(reg, m.stepDuration, &err)
		m.lockWaits = adopt(reg, m.lockWaits, &err)
		m.lockWaitTime = adopt(reg, m.lockWaitTime, &err)
		m.workers = adopt(reg, m.workers, &err)
		m.stuck = adopt(reg, m.stuck, &err)
		m.live = adopt(reg, m.live, &err)
		if err != nil {
			return nil, fmt.Errorf("procedure: registering metrics: %w", err)
		}
	}
	return m, nil
}

func adopt[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	if *errp == nil {
		*errp = err
	}
	return c
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
		procs: prometheus.NewDesc("baton_procedures",
			"Procedures the executor holds (live ones and finished roots kept for their result), by type and state.",
			[]string{"type", "state"}, nil),
		stuck: prometheus.NewDesc("baton_procedures_stuck",
			"Live procedures that are stuck: not finished, not paused, not waiting for children, and without a persisted transition for longer than the executor's StuckProcedureThreshold (default 5m), by type.",
			[]string{"type"}, nil),
		lockWaiting: prometheus.NewDesc("baton_procedures_lock_waiting",
			"Procedures parked behind a conflicting lock now, by type.",
			[]string{"type"}, nil),
		inFlight: prometheus.NewDesc("baton_executor_steps_in_flight",
			"Steps running on a worker now.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.procs
	ch <- c.stuck
	ch <- c.lockWaiting
	ch <- c.inFlight
}

// Collect implements prometheus.Collector.
func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	if x := c.x.Load(); x != nil {
		x.collectLive(c, ch)
	}
}

// collectLive counts the procedure table for one scrape. It walks every
// procedure under x.mu, once per scrape interval: a cost linear in the
// table, paid by the scrape rather than by every transition
// (BenchmarkScrapeLive: 18-29 ms for 100,000 procedures on the 2-core VM,
// during which no transition commits).
func (x *Executor) collectLive(c *liveCollector, ch chan<- prometheus.Metric) {
	// Keyed by the type's registry entry, not its name: hashing a pointer
	// per procedure is what keeps the walk short.
	type typeState struct {
		ti    *typeInfo
		state State
	}
	now := x.clock.Now()
	byState := map[typeState]int{}
	stuck := map[*typeInfo]int{}
	waiting := map[*typeInfo]int{}
	inFlight := 0
	x.mu.Lock()
	for _, e := range x.procs {
		byState[typeState{e.ti, e.state}]++
		if x.stuckLocked(e, now) {
			stuck[e.ti]++
		}
		if e.lockWait {
			waiting[e.ti]++
		}
	}
	for w := range x.workers {
		if w.stepStart.Load() != 0 {
			inFlight++
		}
	}
	x.unlock()
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
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(inFlight))
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
