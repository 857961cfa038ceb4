package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/rspb"
)

// Metric families the issue asks for, by who serves them. Those of the
// leader are reported by the leader alone (one cluster-wide count); those
// of every master, by each master about itself.
var (
	everyMasterFamilies = []string{
		// Raft, as this master sees it.
		"baton_raft_state", "baton_raft_term", "baton_raft_leader", "baton_raft_last_log_index",
		"baton_raft_commit_index", "baton_raft_applied_index", "baton_fsm_applied_index",
		"baton_raft_last_contact_seconds", "baton_executor_running", "baton_storage_failed",
		// Raft's own metrics, under their stable names.
		"baton_raft_apply_total", "baton_raft_commit_duration_seconds", "baton_raft_state_transitions_total",
		"baton_raft_fsm_apply_batch_duration_seconds", "baton_raft_replication_heartbeat_duration_seconds",
		"baton_raft_replication_append_entries_duration_seconds", "baton_raft_leader_dispatch_duration_seconds",
		// The local WAL.
		"baton_wal_segments", "baton_wal_segment_bytes", "baton_wal_live_records", "baton_wal_live_bytes",
		"baton_wal_written_bytes_total", "baton_wal_records_total", "baton_wal_syncs_total", "baton_wal_rolls_total",
		"baton_wal_segments_deleted_total", "baton_wal_rewritten_records_total", "baton_wal_rewrite_bytes_total",
		// The binary and the cluster version.
		"baton_cluster_format", "baton_build_info",
		// What this master's autopilot did while it led.
		"baton_autopilot_promotions_total", "baton_autopilot_removals_total",
		// The reads it forwarded in bulk.
		"baton_admin_forwarded_reads_total", "baton_admin_forward_reads_calls_total",
	}
	leaderFamilies = []string{
		// Procedures.
		"baton_procedures", "baton_procedures_stuck", "baton_procedures_lock_waiting",
		"baton_procedure_submitted_total", "baton_procedure_steps_total", "baton_procedure_duration_seconds",
		"baton_procedure_step_duration_seconds", "baton_procedure_lock_waits_total", "baton_procedure_lock_wait_duration_seconds",
		"baton_executor_steps_in_flight", "baton_executor_workers", "baton_executor_stuck_workers",
		// The dispatcher.
		"baton_dispatch_batch_operations", "baton_dispatch_rpcs_total", "baton_dispatch_rpc_duration_seconds",
		"baton_dispatch_operations_total", "baton_dispatch_retries_total", "baton_dispatch_server_failures_total",
		"baton_dispatch_queued_operations", "baton_dispatch_servers",
		// Leases and the domain.
		"baton_leases", "baton_regions", "baton_tables", "baton_region_servers",
		// The members as the autopilot sees them.
		"baton_autopilot_members",
	}
	regionServerFamilies = []string{
		"baton_regionserver_regions", "baton_regionserver_region_operations_total", "baton_regionserver_heartbeats_total",
		"baton_regionserver_registrations_total", "baton_regionserver_heartbeat_age_seconds", "baton_regionserver_registered",
		"baton_regionserver_highest_term", "baton_regionserver_self_fences_total", "baton_regionserver_self_closed_regions_total",
		"baton_regionserver_transition_reports_total", "baton_regionserver_refused_batches_total",
	}
)

// families returns the names of g's metric families.
func families(t *testing.T, g prometheus.Gatherer) map[string]bool {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		out[mf.GetName()] = true
	}
	return out
}

func missing(have map[string]bool, want []string) []string {
	var out []string
	for _, name := range want {
		if !have[name] {
			out = append(out, name)
		}
	}
	return out
}

// value is the sum of the series of family name whose labels include want.
func value(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			match := true
			for k, v := range want {
				match = match && labels[k] == v
			}
			if match {
				sum += m.GetGauge().GetValue() + m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// observedCluster starts 3 masters and 3 region servers and runs what makes
// every family show: a table create that waits for an external lock on its
// table, and a region its server closes by itself (reported and reopened).
func observedCluster(t *testing.T) (c *clustertest.Cluster, parkedOn *clustertest.Master) {
	t.Helper()
	c = clustertest.New(t, clustertest.Config{Masters: 3, RegionServers: 3})
	cl := c.Client()
	lock, err := cl.AcquireLock(ctxT(t), client.LockTable, []string{"default:t1"}, true, "observe-test", "holds t1 so the create waits", "")
	if err != nil {
		t.Fatal(err)
	}
	c.WaitForNil("the lock acquired", func() error {
		if lock.GetState() == client.LockAcquired {
			return nil
		}
		lock, err = cl.LockHeartbeat(ctxT(t), lock.GetLockId())
		if err != nil {
			return err
		}
		return fmt.Errorf("lock %s", lock.GetState())
	})
	id, err := cl.CreateTable(ctxT(t), "", "t1", 6, "")
	if err != nil {
		t.Fatal(err)
	}
	c.WaitFor("the create parked behind the lock", func() bool {
		parkedOn = c.Leader()
		return value(t, parkedOn.Metrics(), "baton_procedures_lock_waiting", map[string]string{"type": "CreateTable"}) == 1
	})
	if _, err := cl.ReleaseLock(ctxT(t), lock.GetLockId()); err != nil {
		t.Fatal(err)
	}
	c.MustSucceed(id, 30*time.Second)

	// A region closed by its server: counted there, reported, reopened.
	rs := c.RegionServer("rs1")
	c.WaitFor("rs1 hosts a region", func() bool { return len(rs.Regions()) > 0 })
	if err := rs.CloseRegion(ctxT(t), rs.Regions()[0].GetRegion()); err != nil {
		t.Fatal(err)
	}
	c.WaitFor("the close reported", func() bool {
		return value(t, rs.Metrics(), "baton_regionserver_transition_reports_total", map[string]string{"result": "sent"}) == 1
	})
	c.WaitFor("the region reopened", func() bool {
		return value(t, c.Leader().Metrics(), "baton_regions", map[string]string{"state": "OPEN"}) == 6
	})
	c.WaitFor("a heartbeat of rs1 renewed its lease", func() bool {
		return value(t, rs.Metrics(), "baton_regionserver_heartbeats_total", map[string]string{"result": "ok"}) > 0
	})
	// A batch of a deposed master (term 0): refused by fencing, counted.
	if _, err := rs.ExecuteBatch(ctxT(t), &rspb.BatchRequest{Term: 0, MasterId: "deposed", StartCode: rs.StartCode()}); err == nil {
		t.Fatal("rs1 admitted a batch of term 0")
	}
	return c, parkedOn
}

// TestMetricFamilies: after a table create, every family listed above is
// served: the leader's by the leader alone, the others by every master,
// the region servers' by each of them.
func TestMetricFamilies(t *testing.T) {
	c, parkedOn := observedCluster(t)
	leader := c.Leader()
	if leader != parkedOn {
		// The lock wait's counters are kept by the leader that saw it.
		t.Skipf("the leader changed (%s to %s, an election on a loaded machine) after the create waited for its lock: the new leader has seen no lock wait to report", parkedOn.ID, leader.ID)
	}
	// The leader's families and values hold only while it leads: on a
	// loaded machine an election can move the leadership between the
	// wait and the checks, and the leader-only families then vanish from
	// it (CI: baton_procedures{CreateTable,SUCCESS} read 0). What the
	// checks that depend on who leads find (errorf) is reported only if
	// the leadership stayed where it was; the others report at once.
	term := leader.Node().Raft().CurrentTerm()
	var failures []string
	errorf := func(format string, args ...any) { failures = append(failures, fmt.Sprintf(format, args...)) }
	if err := testwait.Err(30*time.Second, "every family on the leader", func() error {
		if !leader.Node().IsLeader() {
			return nil // deposed: its leader-only families never come back (the checks below find them missing)
		}
		if m := missing(families(t, leader.Metrics()), append(slices.Clone(everyMasterFamilies), leaderFamilies...)); len(m) > 0 {
			return fmt.Errorf("missing %v", m)
		}
		return nil
	}); err != nil {
		errorf("%v", err)
	}
	for _, m := range c.Masters() {
		if m == leader {
			continue
		}
		have := families(t, m.Metrics())
		if miss := missing(have, everyMasterFamilies); len(miss) > 0 {
			t.Errorf("standby %s lacks %v", m.ID, miss) // every master's, whoever leads
		}
		for _, name := range []string{"baton_procedures", "baton_regions", "baton_leases", "baton_dispatch_queued_operations", "baton_autopilot_members"} {
			if have[name] {
				errorf("standby %s reports %s, which only the leader may (or sums over masters count twice)", m.ID, name)
			}
		}
		if v := value(t, m.Metrics(), "baton_raft_leader", map[string]string{"id": leader.ID}); v != 1 {
			errorf("standby %s: baton_raft_leader{id=%q} = %v, want 1", m.ID, leader.ID, v)
		}
		if v := value(t, m.Metrics(), "baton_raft_state", map[string]string{"state": "follower"}); v != 1 {
			errorf("standby %s: not reported a follower", m.ID)
		}
	}
	lm := leader.Metrics()
	for _, check := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"baton_raft_state", map[string]string{"state": "leader"}, 1},
		{"baton_executor_running", nil, 1},
		{"baton_autopilot_members", map[string]string{"suffrage": "voter", "health": "healthy"}, 3},
		{"baton_regions", map[string]string{"state": "OPEN"}, 6},
		{"baton_tables", map[string]string{"state": "ENABLED"}, 1},
		{"baton_region_servers", map[string]string{"state": "live"}, 3},
		{"baton_leases", map[string]string{"kind": "regionserver"}, 3},
		{"baton_procedure_lock_waits_total", map[string]string{"type": "CreateTable"}, 1},
		{"baton_procedure_lock_wait_duration_seconds", map[string]string{"type": "CreateTable"}, 1},
		{"baton_procedures", map[string]string{"type": "CreateTable", "state": "SUCCESS"}, 1},
	} {
		if got := value(t, lm, check.name, check.labels); got != check.want {
			errorf("leader %s%v = %v, want %v", check.name, check.labels, got, check.want)
		}
	}

	for id, rs := range c.RegionServers() {
		if miss := missing(families(t, rs.Metrics()), regionServerFamilies); len(miss) > 0 && id == "rs1" {
			t.Errorf("%s lacks %v", id, miss)
		}
	}
	rs1 := c.RegionServer("rs1")
	checkDashboard(t, errorf, leader.Metrics(), rs1.Metrics())
	if v := value(t, rs1.Metrics(), "baton_regionserver_self_closed_regions_total", map[string]string{"reason": "closed_by_server"}); v != 1 {
		t.Errorf("rs1 self-closed regions %v, want 1", v)
	}
	if v := value(t, rs1.Metrics(), "baton_regionserver_registered", nil); v != 1 {
		t.Errorf("rs1 registered = %v, want 1", v)
	}
	if len(failures) == 0 {
		return
	}
	if leader.Node().Raft().CurrentTerm() != term || !leader.Node().IsLeader() {
		t.Skipf("the leadership moved off %s during the checks (an election on a loaded machine), so its leader-only figures may be gone: %s",
			leader.ID, strings.Join(failures, "; "))
	}
	for _, f := range failures {
		t.Error(f)
	}
}

// checkDashboard: every metric the Grafana dashboard (docker/grafana)
// queries is one the cluster serves, so that a renamed metric cannot leave
// an empty panel behind. baton_procedure_failed_total shows only after a
// failure, which this cluster did not have. What it finds goes to errorf:
// the leader's families are read, so the caller decides what a deposed
// leader's missing ones mean.
func checkDashboard(t *testing.T, errorf func(string, ...any), gs ...prometheus.Gatherer) {
	t.Helper()
	have := map[string]bool{"baton_procedure_failed_total": true}
	for _, g := range gs {
		for name := range families(t, g) {
			have[name] = true
		}
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "docker", "grafana", "baton-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	name := regexp.MustCompile(`baton_[a-z0-9_]+`)
	queried := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				queried++
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(m, suffix); ok && have[b] {
						base = b
					}
				}
				if !have[base] {
					errorf("dashboard panel %q queries %s, which the cluster does not serve", p.Title, m)
				}
			}
		}
	}
	if queried < 50 {
		errorf("the dashboard queries %d metrics: is it the right file?", queried)
	}
}

// scrape is what handler serves at /metrics.
func scrape(t *testing.T, h http.Handler) []byte {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s, %v", resp.Status, err)
	}
	return body
}

// TestPromtoolCheckMetrics: Prometheus' own linter (promtool check
// metrics: names, units, _total, help) finds nothing to say about what a
// leader, a standby and a region server serve.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("skipped: promtool is not installed (Debian's prometheus package: apt-get install prometheus; .ci/run installs it)")
	}
	c, _ := observedCluster(t)
	leader := c.Leader()
	var standby *clustertest.Master
	for _, m := range c.Masters() {
		if m != leader {
			standby = m
			break
		}
	}
	rs := c.RegionServer("rs1")
	for name, h := range map[string]http.Handler{
		"leader " + leader.ID:   leader.HTTPHandler(),
		"standby " + standby.ID: standby.HTTPHandler(),
		"region server rs1":     rs.HTTPHandler(),
	} {
		body := scrape(t, h)
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics on the %s's /metrics: %v\n%s", name, err, out)
		}
		if !strings.Contains(string(body), "# HELP baton_") {
			t.Errorf("the %s's /metrics has no baton_ family:\n%.2000s", name, body)
		}
	}
}
