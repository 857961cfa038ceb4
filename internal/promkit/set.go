package promkit

import "github.com/prometheus/client_golang/prometheus"

// Namespace is the first part of every Baton series' name.
const Namespace = "baton"

// Set makes one component's collectors, named baton_<sub>_<name>, and
// adopts each (Adopt) on the registerer it was made with, if any: the
// declarations of every component's metrics then read alike, one line a
// series, and a component rebuilt on the same registry goes on with the
// series of the one before.
type Set struct {
	reg prometheus.Registerer
	err error
}

// NewSet returns a Set that adopts its collectors on reg (nil: registers
// nothing, the caller does).
func NewSet(reg prometheus.Registerer) *Set { return &Set{reg: reg} }

// Err is the first registration that failed, or nil.
func (s *Set) Err() error { return s.err }

// Add adopts c on s's registerer and returns it, or the collector of the
// same description registered before.
func Add[C prometheus.Collector](s *Set, c C) C {
	if s.reg == nil {
		return c
	}
	return Adopt(s.reg, c, &s.err)
}

// Counter is a counter baton_<sub>_<name>.
func (s *Set) Counter(sub, name, help string) prometheus.Counter {
	return Add(s, prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: sub, Name: name, Help: help}))
}

// CounterVec is a counter baton_<sub>_<name> with these labels.
func (s *Set) CounterVec(sub, name, help string, labels ...string) *prometheus.CounterVec {
	return Add(s, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: sub, Name: name, Help: help}, labels))
}

// Gauge is a gauge baton_<sub>_<name>.
func (s *Set) Gauge(sub, name, help string) prometheus.Gauge {
	return Add(s, prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: sub, Name: name, Help: help}))
}

// Histogram is a histogram baton_<sub>_<name> with these buckets.
func (s *Set) Histogram(sub, name, help string, buckets []float64) prometheus.Histogram {
	return Add(s, prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: sub, Name: name, Help: help, Buckets: buckets}))
}

// HistogramVec is a histogram baton_<sub>_<name> with these buckets and
// labels.
func (s *Set) HistogramVec(sub, name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return Add(s, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: sub, Name: name, Help: help, Buckets: buckets}, labels))
}

// Desc is the description of a series a collector reads at scrape time:
// one line a series, like the Set's declarations.
func Desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// Describe sends descs on ch, for a collector's Describe.
func Describe(ch chan<- *prometheus.Desc, descs ...*prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
}
