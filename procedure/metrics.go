package procedure

import (
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

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
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
		for _, c := range []prometheus.Collector{m.submitted, m.failed, m.duration, m.steps, m.workers, m.stuck} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("procedure: registering metrics (one executor per registry): %w", err)
			}
		}
	}
	return m, nil
}
