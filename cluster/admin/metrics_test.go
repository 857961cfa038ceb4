package admin

import (
	"sort"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/promkit/scrapetest"
	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRaftSinkNames: every key of RaftMetricNames lands in its family, in
// base units, with its labels; other keys are dropped.
func TestRaftSinkNames(t *testing.T) {
	s := newRaftSink()
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	peer := []gometrics.Label{{Name: "peer_id", Value: "m2"}}
	for key := range RaftMetricNames {
		k := splitKey(key)
		switch RaftMetricNames[key][len(RaftMetricNames[key])-6:] {
		case "_total":
			s.IncrCounterWithLabels(k, 2, peer)
		default:
			s.AddSampleWithLabels(k, 250, peer) // 250 ms
		}
	}
	s.AddSample([]string{"raft", "not", "kept"}, 1)
	s.SetGauge([]string{"raft", "peers"}, 3)

	want := map[string]bool{}
	for _, name := range RaftMetricNames {
		want[name] = true
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		got = append(got, mf.GetName())
		if !want[mf.GetName()] {
			t.Errorf("unexpected family %s", mf.GetName())
		}
		delete(want, mf.GetName())
	}
	for name := range want {
		t.Errorf("family %s missing", name)
	}
	sort.Strings(got)
	t.Logf("families: %v", got)

	if v := testutil.ToFloat64(s.families["baton_raft_state_transitions_total"].vec.(*prometheus.CounterVec).WithLabelValues("leader")); v != 2 {
		t.Errorf("transitions to leader %v, want 2", v)
	}
	if v := testutil.ToFloat64(s.families["baton_raft_replicated_entries_total"].vec.(*prometheus.CounterVec).WithLabelValues("m2")); v != 2 {
		t.Errorf("replicated entries to m2 %v, want 2", v)
	}
	if v := testutil.ToFloat64(s.families["baton_raft_peers"].vec.(*prometheus.GaugeVec).WithLabelValues()); v != 3 {
		t.Errorf("peers %v, want 3", v)
	}
	// Milliseconds become seconds: 250 ms falls in the 0.4096 s bucket,
	// not the 0.1024 s one.
	h := s.families["baton_raft_commit_duration_seconds"].vec.(*prometheus.HistogramVec)
	if n := testutil.CollectAndCount(h); n != 1 {
		t.Fatalf("commit duration series %d", n)
	}
	m := &dtoMetric{}
	m.read(t, reg, "baton_raft_commit_duration_seconds")
	if m.sum != 0.25 {
		t.Errorf("commit duration sum %v s, want 0.25", m.sum)
	}
}

func splitKey(k string) []string {
	var out []string
	start := 0
	for i := 0; i < len(k); i++ {
		if k[i] == '.' {
			out = append(out, k[start:i])
			start = i + 1
		}
	}
	return append(out, k[start:])
}

type dtoMetric struct{ sum float64 }

func (m *dtoMetric) read(t *testing.T, g prometheus.Gatherer, name string) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m.sum = mf.GetMetric()[0].GetHistogram().GetSampleSum()
			return
		}
	}
	t.Fatalf("no %s", name)
}

// TestInstallRaftMetricsPerRegistry: the global sink is installed once;
// each registry gets the metrics, and a registry asked twice is fine.
func TestInstallRaftMetricsPerRegistry(t *testing.T) {
	a, b := prometheus.NewRegistry(), prometheus.NewRegistry()
	for _, reg := range []*prometheus.Registry{a, b, a} {
		if err := InstallRaftMetrics(reg); err != nil {
			t.Fatal(err)
		}
	}
	gometrics.MeasureSince([]string{"raft", "commitTime"}, time.Now().Add(-time.Millisecond))
	for name, reg := range map[string]*prometheus.Registry{"a": a, "b": b} {
		if n, err := testutil.GatherAndCount(reg, "baton_raft_commit_duration_seconds"); err != nil || n != 1 {
			t.Errorf("registry %s: %d commit duration series (%v), want 1", name, n, err)
		}
	}
}

// TestMetricsScrapesBounded: a master's /metrics is the bounded one:
// with promkit.MaxScrapes scrapes in progress, one more is refused at
// once (503); those in progress complete.
func TestMetricsScrapesBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	bc := scrapetest.NewBlockingCollector()
	reg.MustRegister(bc)
	scrapetest.CheckBounded(t, HTTPHandler(&fakeBackend{id: "m1"}, reg), bc)
}
