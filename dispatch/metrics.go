package dispatch

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/baton-dev/baton/internal/promkit"
	"github.com/prometheus/client_golang/prometheus"
)

// rpcMethod names the one RPC the dispatcher makes, in its metrics' method
// label and its spans.
const rpcMethod = "ExecuteBatch"

// metrics are a dispatcher's Prometheus collectors. A leader builds one
// dispatcher per term on the same registerer: the counters are adopted, so
// their series go on, and the queue gauges read whichever dispatcher runs.
type metrics struct {
	batchOps       prometheus.Histogram
	rpcs           *prometheus.CounterVec
	rpcDuration    *prometheus.HistogramVec
	results        *prometheus.CounterVec
	retries        prometheus.Counter
	serverFailures prometheus.Counter
	live           *liveCollector
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	s := promkit.NewSet(reg)
	m := &metrics{
		batchOps:       s.Histogram("dispatch", "batch_operations", "Operations per ExecuteBatch call (first sends and retries).", prometheus.ExponentialBuckets(1, 2, 13)), // 1 .. 4096, maxOpsPerRPC
		rpcs:           s.CounterVec("dispatch", "rpcs_total", "Calls to region servers, by method and outcome: ok; retry (no answer, or one that may hide an executed batch: sent again); stale_term (this master is deposed); wrong_start_code (the server restarted); refused (the server refused the batch); abandoned (the server was removed while the call ran).", "method", "outcome"),
		rpcDuration:    s.HistogramVec("dispatch", "rpc_duration_seconds", "Time of one call to a region server, whatever its outcome, by method.", prometheus.ExponentialBuckets(0.0005, 4, 10), "method"),
		results:        s.CounterVec("dispatch", "operations_total", "Region operations answered, by kind (open, close) and result: done, already (it was so), failed (the server tried and failed), refused, stale_term, server_removed, stopped, invalid.", "kind", "result"),
		retries:        s.Counter("dispatch", "retries_total", "Calls that re-sent the operations of a failed call."),
		serverFailures: s.Counter("dispatch", "server_failures_total", "Region server incarnations given up: too many consecutive failed calls, or a restart found (the server is then expired)."),
		live:           promkit.Add(s, newLiveCollector()),
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("dispatch: registering metrics: %w", err)
	}
	return m, nil
}

// errorLabels label the failed Results, the first error a Result's
// matches (errors.Is) winning.
var errorLabels = []struct {
	err   error
	label string
}{
	{ErrOpFailed, "failed"}, {ErrRefused, "refused"}, {ErrStaleTerm, "stale_term"},
	{ErrServerRemoved, "server_removed"}, {ErrStopped, "stopped"}, {ErrInvalidOp, "invalid"},
}

// resultLabel sorts a Result for the operations counter.
func resultLabel(r Result) string {
	switch {
	case r.OK && r.Already:
		return "already"
	case r.OK:
		return "done"
	}
	for _, l := range errorLabels {
		if errors.Is(r.Err, l.err) {
			return l.label
		}
	}
	return "other"
}

// outcomeLabel names a call's outcome for the RPC counter and span.
func outcomeLabel(err error) string {
	if err == nil {
		return "ok"
	}
	switch classify(err) {
	case classStaleTerm:
		return "stale_term"
	case classWrongStartCode:
		return "wrong_start_code"
	case classRefused:
		return "refused"
	}
	return "retry"
}

// liveCollector reports the buffers of the dispatcher that runs now (none
// on a master that does not lead), read at scrape time.
type liveCollector struct {
	d       atomic.Pointer[Dispatcher]
	queued  *prometheus.Desc
	servers *prometheus.Desc
}

func newLiveCollector() *liveCollector {
	return &liveCollector{
		queued:  promkit.Desc("baton_dispatch_queued_operations", "Operations not answered yet, by state: buffered (waiting for a call, retries and held ones included) or in_flight (in a call).", "state"),
		servers: promkit.Desc("baton_dispatch_servers", "Region server incarnations the dispatcher holds a buffer for, by state: ok, backoff (waiting to retry), held (given up, waiting for removal), dead (restarted).", "state"),
	}
}

// Describe implements prometheus.Collector.
func (c *liveCollector) Describe(ch chan<- *prometheus.Desc) {
	promkit.Describe(ch, c.queued, c.servers)
}

// Collect implements prometheus.Collector.
func (c *liveCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.d.Load()
	if d == nil {
		return
	}
	var buffered, inFlight int
	states := map[string]int{"ok": 0, "backoff": 0, "held": 0, "dead": 0}
	d.mu.Lock()
	for _, s := range d.servers {
		buffered += len(s.buf)
		inFlight += len(s.inflightOps)
		switch {
		case s.dead != nil:
			states["dead"]++
		case s.held:
			states["held"]++
		case s.backoff:
			states["backoff"]++
		default:
			states["ok"]++
		}
	}
	d.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(buffered), "buffered")
	ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(inFlight), "in_flight")
	for st, n := range states {
		ch <- prometheus.MustNewConstMetric(c.servers, prometheus.GaugeValue, float64(n), st)
	}
}
