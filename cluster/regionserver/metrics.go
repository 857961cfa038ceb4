package regionserver

import (
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/promkit"
	"github.com/baton-dev/baton/proto/rspb"
)

// metrics are a region server's Prometheus collectors: events counted as
// they happen, and its state (regions, registration, lease) read at scrape
// time (stateCollector).
type metrics struct {
	ops         *prometheus.CounterVec
	heartbeats  *prometheus.CounterVec
	registers   *prometheus.CounterVec
	selfClosed  *prometheus.CounterVec
	selfFences  prometheus.Counter
	refused     *prometheus.CounterVec
	reports     *prometheus.CounterVec
	aclDenied   *prometheus.CounterVec
	opening     atomic.Int64 // opens past their checks, not yet applied
	closing     atomic.Int64
	regionsDesc *prometheus.Desc
	regDesc     *prometheus.Desc
	ageDesc     *prometheus.Desc
	termDesc    *prometheus.Desc
}

func newMetrics() *metrics {
	s := promkit.NewSet(nil) // registered by the server (collectors)
	return &metrics{
		ops:         s.CounterVec("regionserver", "region_operations_total", "Region opens and closes a master asked for, by kind (open, close) and result: done, already (it was so), failed (an open that failed), fenced (overtaken by a newer term or registration), interrupted.", "kind", "result"),
		heartbeats:  s.CounterVec("regionserver", "heartbeats_total", "Heartbeats sent to the masters, by result: ok (lease renewed), expired (the masters gave this registration up), failed (no master answered, or a deposed one).", "result"),
		registers:   s.CounterVec("regionserver", "registrations_total", "Registrations with the leader, by result (ok, failed).", "result"),
		selfClosed:  s.CounterVec("regionserver", "self_closed_regions_total", "Regions this server closed without being asked, by reason: self_fence (no heartbeat got through within the self-fence period), lease_expired (the masters answered expired), new_cluster (the masters answered with another cluster id: a restored cluster), closed_by_server (closed on its own initiative).", "reason"),
		selfFences:  s.Counter("regionserver", "self_fences_total", "Times this server fenced itself: no heartbeat renewed its lease within the self-fence period, so it closed every region and registers again."),
		refused:     s.CounterVec("regionserver", "refused_batches_total", "Batches refused whole by fencing, by reason: stale_term (a deposed master), stale_attempt, wrong_start_code, wrong_server.", "reason"),
		reports:     s.CounterVec("regionserver", "transition_reports_total", "Transition reports (FAILED_OPEN, CLOSED) to the masters, by result: sent, dropped (queue full, registration changed, or no master took it).", "result"),
		aclDenied:   s.CounterVec("regionserver", "acl_denied_total", "Client calls refused by the cluster's access control, by method (ListRegions, /metrics) and the status code answered: PERMISSION_DENIED (no read), UNAUTHENTICATED (a bearer token), UNAVAILABLE (no grants heard from the masters, or none lately).", "method", "code"),
		regionsDesc: promkit.Desc("baton_regionserver_regions", "Regions on this server by state: open (served), opening and closing (an operation under way).", "state"),
		regDesc:     promkit.Desc("baton_regionserver_registered", "1 while this server holds a registration (a start code) with the masters."),
		ageDesc:     promkit.Desc("baton_regionserver_heartbeat_age_seconds", "Seconds since the last heartbeat (or registration) that renewed this server's lease was sent; absent while not registered. Past the self-fence period the server closes every region."),
		termDesc:    promkit.Desc("baton_regionserver_highest_term", "Highest leader term this server has seen: requests of lower terms are refused."),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.ops, m.heartbeats, m.registers, m.selfClosed, m.selfFences, m.refused, m.reports, m.aclDenied}
}

// stateCollector reads the server's state when Prometheus scrapes.
type stateCollector struct{ s *Server }

// Describe implements prometheus.Collector.
func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	m := c.s.metrics
	promkit.Describe(ch, m.regionsDesc, m.regDesc, m.ageDesc, m.termDesc)
}

// Collect implements prometheus.Collector.
func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	m := s.metrics
	s.mu.Lock()
	s.selfFenceLocked()
	open, registered, renewed, term := len(s.regions), s.startCode != 0, s.renewedAt, s.highestTerm
	s.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(m.regionsDesc, float64(open), "open")
	gauge(m.regionsDesc, float64(m.opening.Load()), "opening")
	gauge(m.regionsDesc, float64(m.closing.Load()), "closing")
	reg := 0.0
	if registered {
		reg = 1
		gauge(m.ageDesc, s.clk.Now().Sub(renewed).Seconds())
	}
	gauge(m.regDesc, reg)
	gauge(m.termDesc, float64(term))
}

// refusalReason names why fencing refused a batch, from its status.
func refusalReason(err error) string {
	msg := status.Convert(err).Message()
	for _, r := range []string{"stale term", "stale attempt", "wrong start code", "wrong server"} {
		if strings.HasPrefix(msg, r) {
			return strings.ReplaceAll(r, " ", "_")
		}
	}
	return "other"
}

// opResult names an operation's outcome for region_operations_total.
func opResult(res *rspb.RegionOpResult, err error) string {
	switch {
	case err != nil:
		return "interrupted"
	case res.GetOk() && res.GetAlready():
		return "already"
	case res.GetOk():
		return "done"
	case strings.Contains(res.GetError(), "stale") || strings.Contains(res.GetError(), "wrong start code"):
		return "fenced"
	}
	return "failed"
}
