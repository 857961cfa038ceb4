package procedure

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	submitted *prometheus.CounterVec
	failed    *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	steps     *prometheus.CounterVec
	workers   prometheus.Gauge
	stuck     prometheus.Gauge
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
		workers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "baton", Subsystem: "executor", Name: "workers",
			Help: "Worker goroutines, core and keep-alive.",
		}),
		stuck: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "baton", Subsystem: "executor", Name: "stuck_workers",
			Help: "Workers whose current step has run longer than the stuck threshold.",
		}),
	}
	if reg != nil {
		// A master builds a new executor each time it becomes leader: the
		// collectors of the previous one are adopted, so the series go on.
		m.submitted = adopt(reg, m.submitted, &err)
		m.failed = adopt(reg, m.failed, &err)
		m.duration = adopt(reg, m.duration, &err)
		m.steps = adopt(reg, m.steps, &err)
		m.workers = adopt(reg, m.workers, &err)
		m.stuck = adopt(reg, m.stuck, &err)
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
