package promkit

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A second Set on the same registry (a re-elected leader's executor) gets
// the first one's collectors back, so the series go on; names are
// baton_<sub>_<name>.
func TestSetAdoptsOnSameRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	s1 := NewSet(reg)
	c1 := s1.CounterVec("unit", "events_total", "Events.", "kind")
	h1 := s1.Histogram("unit", "wait_seconds", "Waits.", []float64{1, 2})
	c1.WithLabelValues("a").Inc()
	if err := s1.Err(); err != nil {
		t.Fatal(err)
	}
	s2 := NewSet(reg)
	c2 := s2.CounterVec("unit", "events_total", "Events.", "kind")
	h2 := s2.Histogram("unit", "wait_seconds", "Waits.", []float64{1, 2})
	if err := s2.Err(); err != nil {
		t.Fatal(err)
	}
	if c2 != c1 || h2 != h1 {
		t.Fatal("second Set made new collectors instead of adopting the registered ones")
	}
	c2.WithLabelValues("a").Inc()
	if got := testutil.ToFloat64(c1.WithLabelValues("a")); got != 2 {
		t.Fatalf("baton_unit_events_total{kind=a} = %v, want 2", got)
	}
	if n, err := testutil.GatherAndCount(reg, "baton_unit_events_total", "baton_unit_wait_seconds"); err != nil || n != 2 {
		t.Fatalf("gathered %d series of baton_unit_*, err %v; want 2", n, err)
	}
}

// A conflicting registration is kept in Err (the first only), and the
// collector still works, unregistered; a nil registerer registers nothing.
func TestSetErrAndNilRegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := NewSet(reg)
	s.Counter("unit", "x_total", "X.")
	g := s.Gauge("unit", "x_total", "X as a gauge.") // same name, other type
	if s.Err() == nil {
		t.Fatal("Err is nil after a conflicting registration")
	}
	g.Set(3)
	if got := testutil.ToFloat64(g); got != 3 {
		t.Fatalf("unregistered gauge = %v, want 3", got)
	}
	n := NewSet(nil)
	n.Counter("unit", "y_total", "Y.")
	if n.Err() != nil {
		t.Fatal(n.Err())
	}
}
