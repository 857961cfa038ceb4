package domain

import (
	"encoding/json"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/internal/promkit"
)

// collector reports the cluster's domain when Prometheus scrapes: leases by
// state, regions, tables and region servers by state, and maintenance
// mode. Apart from maintenance mode, only the leader reports (the others have no leases, and their copy of the rest may lag):
// summed over the masters, each region counts once.
type collector struct {
	d                              *Domain
	leases, regions, tables, rsDsc *prometheus.Desc
	maintenance                    *prometheus.Desc
}

func newCollector(d *Domain) *collector {
	return &collector{
		d:           d,
		leases:      promkit.Desc("baton_leases", "Leases the leader holds, by kind (regionserver: region servers' leases; lock: external lock holders') and state (live; suspect: past the soft limit, nothing new is assigned; expired: past the hard limit, recovery starts).", "kind", "state"),
		regions:     promkit.Desc("baton_regions", "Regions by state (OFFLINE, OPENING, OPEN, CLOSING, CLOSED, FAILED_OPEN), as the leader's replicated state records them.", "state"),
		tables:      promkit.Desc("baton_tables", "Tables by state (CREATING, ENABLED, DISABLING, DISABLED, ENABLING, DELETING).", "state"),
		rsDsc:       promkit.Desc("baton_region_servers", "Region servers by replicated state (live, expired).", "state"),
		maintenance: promkit.Desc("baton_maintenance_mode", "1 while maintenance mode is on (the leader sends no region open or close and refuses new procedures), else 0, as this master's replicated state says."),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	promkit.Describe(ch, c.leases, c.regions, c.tables, c.rsDsc, c.maintenance)
}

// Collect implements prometheus.Collector. It decodes every region, table
// and server record of the leader's FSM once per scrape: work linear in
// the domain's size, done at the scrape interval rather than at every
// change.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	// Every master reports the mode: it is replicated state, and a
	// standby's answer tells whether it has caught up with it.
	ch <- prometheus.MustNewConstMetric(c.maintenance, prometheus.GaugeValue, c.d.maintenanceOn())
	s := c.d.services()
	if s == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	for kind, counts := range map[string]map[lease.State]int{"regionserver": s.leases.Counts(), "lock": s.lockLeases.Counts()} {
		for st, n := range counts {
			gauge(c.leases, n, kind, st.String())
		}
	}
	r := s.reader()
	count := func(prefix string, into map[string]int, states ...string) {
		for _, st := range states {
			into[st] = 0
		}
		var v struct {
			State string `json:"state"`
		}
		_ = r.scan(prefix, func(k string, b []byte) bool {
			if prefix == regionPrefix {
				if st := regionStateOf(b); st != "" {
					into[st]++
				}
				return true
			}
			v.State = ""
			if json.Unmarshal(b, &v) == nil && v.State != "" {
				into[v.State]++
			}
			return true
		})
	}
	regions := map[string]int{}
	count(regionPrefix, regions, RegionOffline, RegionOpening, RegionOpen, RegionClosing, RegionClosed, RegionFailedOpen)
	for st, n := range regions {
		gauge(c.regions, n, st)
	}
	tables := map[string]int{}
	count(tablePrefix, tables, TableCreating, TableEnabled, TableDisabling, TableDisabled, TableEnabling, TableDeleting)
	for st, n := range tables {
		gauge(c.tables, n, st)
	}
	servers := map[string]int{}
	count(serverPrefix, servers, ServerLive, ServerExpired)
	for st, n := range servers {
		gauge(c.rsDsc, n, strings.ToLower(st))
	}
}
