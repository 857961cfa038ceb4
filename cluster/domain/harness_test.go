package domain_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/cluster/regionserver"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// The domain's tests run on cluster/clustertest: masters (raft's in-memory
// transport, admin servers on 127.0.0.1) and real region servers. Every
// RPC between masters and region servers passes clustertest's fault
// injector, with no rules until a test adds some: the masters' gRPC
// servers (admin API, and the Master service the region servers call:
// RegisterServer, Heartbeat, ReportTransition) intercept what they
// receive, and the dispatchers' transport what they send
// (RegionServer.ExecuteBatch), so a test can lose, delay or repeat single
// messages in either direction.
//
// harness adds what the domain's assertions need: the replicated layout as
// the leader's FSM holds it, and the regions as the servers host them.

// The lease timings the cluster runs with.
const (
	testSoftLimit = clustertest.SoftLimit
	testHardLimit = clustertest.HardLimit
	testHeartbeat = clustertest.Heartbeat
)

// masterNode is one master as the tests see it: as it was started (the
// tests kill masters but never restart them).
type masterNode struct {
	id     string
	index  int
	node   *cluster.Node
	dom    *domain.Domain
	addr   string
	cc     *grpc.ClientConn
	client adminpb.AdminClient
}

type harness struct {
	t       testing.TB
	c       *clustertest.Cluster
	opts    harnessOpts
	faults  *rpcfault.Injector
	masters []*masterNode
}

type harnessOpts struct {
	masters   int
	servers   int
	opLatency time.Duration
	failRate  float64
	// domain adjusts each master's domain configuration.
	domain func(*domain.Config)
	// node adjusts each master's node configuration.
	node func(*cluster.Config)
	// faultSeed seeds the fault injector's draws; 0 picks one (logged).
	faultSeed uint64
	// domainAt adjusts master i's domain configuration, after domain.
	domainAt func(i int, c *domain.Config)
	// audit gives the masters an audit trail (clustertest.Config.Audit).
	audit bool
}

func newHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	cfg := clustertest.Config{
		Masters:       o.masters,
		RegionServers: o.servers,
		FaultSeed:     o.faultSeed,
		Audit:         o.audit,
		RegionServer: func(rc *regionserver.Config) {
			rc.OpLatency, rc.FailureRate = o.opLatency, o.failRate
		},
	}
	if o.domain != nil {
		cfg.Domain = func(_ int, dc *domain.Config) { o.domain(dc) }
	}
	if o.node != nil {
		cfg.Node = func(_ int, nc *cluster.Config) { o.node(nc) }
	}
	if o.domainAt != nil {
		outer := cfg.Domain
		cfg.Domain = func(i int, dc *domain.Config) {
			if outer != nil {
				outer(i, dc)
			}
			o.domainAt(i, dc)
		}
	}
	c := clustertest.New(t, cfg)
	h := &harness{t: t, c: c, opts: o, faults: c.Faults()}
	for i, m := range c.Masters() {
		h.masters = append(h.masters, &masterNode{id: m.ID, index: i, node: m.Node(), dom: m.Domain(),
			addr: m.AdminAddr(), cc: m.Conn(), client: m.Admin()})
	}
	return h
}

// close stops the cluster before the test ends (benchmarks start several).
func (h *harness) close() { h.c.Close() }

// rs is region server id's current incarnation.
func (h *harness) rs(id string) *regionserver.Server { return h.c.RegionServer(id) }

// startRS starts region server id and waits for its registration.
func (h *harness) startRS(id string, latency time.Duration, failRate float64) *regionserver.Server {
	h.t.Helper()
	return h.c.StartRegionServer(id, func(rc *regionserver.Config) { rc.OpLatency, rc.FailureRate = latency, failRate })
}

// stopRS stops region server id as a crash would look from outside.
func (h *harness) stopRS(id string) { h.c.StopRegionServer(id) }

func (h *harness) liveRS() map[string]*regionserver.Server { return h.c.RegionServers() }

// killMaster crashes master i: Raft stops without handing over, its API
// goes away.
func (h *harness) killMaster(i int) { h.c.Kill(i) }

// leader waits for exactly one master with a running executor and leader
// services.
func (h *harness) leader() (*masterNode, *procedure.Executor) {
	h.t.Helper()
	li, x := h.c.WaitLeader()
	return h.masters[li], x
}

func (h *harness) leaderIndex() int {
	h.t.Helper()
	li, _ := h.c.WaitLeader()
	return li
}

// submit submits p on the leader, retrying across leadership changes.
func (h *harness) submit(p procedure.Procedure, nonce string) uint64 {
	h.t.Helper()
	return h.c.Submit(p, nonce)
}

// wait waits for root procedure id to finish, following leadership
// changes, and returns its final state.
func (h *harness) wait(id uint64, d time.Duration) procedure.Info {
	h.t.Helper()
	return h.c.Wait(id, d)
}

func (h *harness) mustSucceed(id uint64, d time.Duration) procedure.Info {
	h.t.Helper()
	return h.c.MustSucceed(id, d)
}

// isolateRaft cuts master i's raft traffic from the other masters, both
// ways; its admin API and its region-server traffic stay reachable.
func (h *harness) isolateRaft(i int) { h.c.Partition(i) }

// healRaft undoes isolateRaft.
func (h *harness) healRaft(i int) { h.c.Heal(i) }

// reader reads the leader's FSM.
func (h *harness) reader() domain.Reader {
	h.t.Helper()
	lm, _ := h.leader()
	f := lm.node.FSM()
	return domain.NewReader(f.Get, f.Scan)
}

func (h *harness) createTable(ns, name string, regions int) uint64 {
	h.t.Helper()
	p, err := domain.NewCreateTable(ns, name, regions)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.submit(p, "")
}

// hosted asks every live region server which regions it hosts (its own
// answer, over gRPC like any client): region → servers.
func (h *harness) hosted() map[string][]string {
	h.t.Helper()
	out, err := h.hostedErr()
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// hostedQuiet is hosted without failing the test (for goroutines), leaving
// out the servers that did not answer.
func (h *harness) hostedQuiet() map[string][]string {
	out := map[string][]string{}
	for id, s := range h.liveRS() {
		resp, err := s.ListRegions(context.Background(), nil)
		if err != nil {
			continue
		}
		for _, r := range resp.GetRegions() {
			out[r.GetRegion()] = append(out[r.GetRegion()], id)
		}
	}
	return out
}

func (h *harness) hostedErr() (map[string][]string, error) {
	out := map[string][]string{}
	for id, s := range h.liveRS() {
		resp, err := s.ListRegions(context.Background(), nil)
		if err != nil {
			return nil, fmt.Errorf("ListRegions %s: %w", id, err)
		}
		for _, r := range resp.GetRegions() {
			out[r.GetRegion()] = append(out[r.GetRegion()], id)
		}
	}
	for _, v := range out {
		sort.Strings(v)
	}
	return out, nil
}

// checkNoDoubles fails if any region is open on two live servers.
func (h *harness) checkNoDoubles() {
	h.t.Helper()
	for r, srvs := range h.hosted() {
		if len(srvs) > 1 {
			h.t.Errorf("region %s is open on %d servers: %v", r, len(srvs), srvs)
		}
	}
}

// checkTableOpen checks that every region of table is OPEN in the
// replicated state, on a live server, and hosted by exactly that server
// (by the servers' own answers). It returns the per-server counts.
func (h *harness) checkTableOpen(full string, want int) map[string]int {
	h.t.Helper()
	// A region server that missed heartbeats for a self-fence period (a
	// loaded machine, a failover) closed its regions while the procedure
	// ran; its crash procedure reopens them. Wait for that, then judge.
	var problems []string
	var counts map[string]int
	testwait.Until(20*time.Second, func() bool {
		problems, counts = h.tableOpenProblems(full, want)
		return len(problems) == 0
	})
	for _, p := range problems {
		h.t.Error(p)
	}
	h.checkNoDoubles()
	return counts
}

// tableOpenProblems lists what keeps table from being fully open, and the
// regions per server.
func (h *harness) tableOpenProblems(full string, want int) ([]string, map[string]int) {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	r := h.reader()
	t, ok, err := domain.GetTable(r, full)
	if err != nil || !ok {
		return []string{fmt.Sprintf("table %s: found=%v err=%v", full, ok, err)}, nil
	}
	if t.State != domain.TableEnabled {
		bad("table %s is %s, want ENABLED", full, t.State)
	}
	names := domain.TableRegionNames(t, full)
	if len(names) != want {
		bad("table %s has %d regions, want %d", full, len(names), want)
	}
	hosted := h.hostedQuiet()
	live := h.liveRS()
	counts := map[string]int{}
	for _, rn := range names {
		rg, ok, err := domain.GetRegion(r, rn)
		if err != nil || !ok {
			bad("region %s: found=%v err=%v", rn, ok, err)
			continue
		}
		if rg.State != domain.RegionOpen || rg.ProcID != 0 {
			bad("region %s is %s (proc %d), want OPEN", rn, rg.State, rg.ProcID)
		}
		if s := live[rg.Server]; s == nil || s.StartCode() != rg.StartCode {
			bad("region %s recorded on %s/%d, not a live incarnation", rn, rg.Server, rg.StartCode)
		}
		if got := hosted[rn]; len(got) != 1 || got[0] != rg.Server {
			bad("region %s recorded on %s but hosted by %v", rn, rg.Server, got)
		}
		counts[rg.Server]++
	}
	return out, counts
}

// checkTableGone checks that neither the table nor any of its regions is
// recorded, and that no live server hosts a region of it.
func (h *harness) checkTableGone(full string) {
	h.t.Helper()
	r := h.reader()
	if _, ok, _ := domain.GetTable(r, full); ok {
		h.t.Errorf("table %s still recorded", full)
	}
	domain.ScanRegions(r, func(name string, rg domain.Region) bool {
		if rg.Table == full {
			h.t.Errorf("region %s of %s still recorded (%s)", name, full, rg.State)
		}
		return true
	})
	for rn, srvs := range h.hosted() {
		if strings.HasPrefix(rn, full+",") {
			h.t.Errorf("region %s of %s still open on %v", rn, full, srvs)
		}
	}
}

func spread(counts map[string]int) (lo, hi int) {
	lo = -1
	for _, c := range counts {
		if lo < 0 || c < lo {
			lo = c
		}
		hi = max(hi, c)
	}
	return lo, hi
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// busiestServer is the server holding the most regions in per (server id
// → regions): the one a crash test kills, to move the most.
func busiestServer(per map[string]int) string {
	victim := ""
	for id, n := range per {
		if victim == "" || n > per[victim] {
			victim = id
		}
	}
	return victim
}
