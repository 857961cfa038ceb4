package domain_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
)

// Full method names of the RPCs between masters and region servers.
const (
	methodExecuteBatch   = "/baton.rs.v1.RegionServer/ExecuteBatch"
	methodHeartbeat      = "/baton.rs.v1.Master/Heartbeat"
	methodRegisterServer = "/baton.rs.v1.Master/RegisterServer"
	methodReport         = "/baton.rs.v1.Master/ReportTransition"
)

// Environment of the randomized tests: BATON_CHAOS_SECONDS lengthens the
// chaos phase (default chaosDefault), BATON_CHAOS_SEED replays a run (the
// seed is logged), BATON_CHAOS_MASTERS sets the number of masters (default
// 1: with three, the load of a -race run on a busy machine brings
// leadership changes too, which the default run leaves out to stay about
// message loss).
const chaosDefault = 12 * time.Second

func chaosSettings(t *testing.T) (seed uint64, d time.Duration, masters int) {
	t.Helper()
	d, masters = chaosDefault, 1
	if v := os.Getenv("BATON_CHAOS_MASTERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("BATON_CHAOS_MASTERS=%q: want a positive number", v)
		}
		masters = n
	}
	if v := os.Getenv("BATON_CHAOS_SECONDS"); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s <= 0 {
			t.Fatalf("BATON_CHAOS_SECONDS=%q: want a positive number of seconds", v)
		}
		d = time.Duration(s * float64(time.Second))
	}
	if v := os.Getenv("BATON_CHAOS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("BATON_CHAOS_SEED=%q: %v", v, err)
		}
	} else {
		seed = rand.Uint64() | 1
	}
	return seed, d, masters
}

// placementSampler samples, over and over, which regions the live region
// servers say they host, and records every region it finds open on two
// servers at once.
//
// A sample reads every live server twice, in two passes. A region that a
// server lists in both passes with the same opening time was open there
// during the whole span between its two reads, and every such span
// contains the moment between the passes: two servers listing one region
// that way held it at the same moment. A region moving from one server to
// another (closed there, then opened here) is never mistaken for a double,
// however slowly the sampler runs. A server stopped during a sample is left
// out of it (it keeps its regions in memory, unreachable, as a crashed
// process would).
type placementSampler struct {
	h *harness

	mu      sync.Mutex
	samples int
	doubles int
	reports []string        // the first doubles seen, described
	regions map[string]bool // regions found doubled
	firstAt time.Time
}

func (p *placementSampler) run(ctx context.Context, every time.Duration) {
	for {
		p.sample()
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

func (p *placementSampler) sample() {
	live := p.h.liveRS()
	read := func() map[string]map[string]int64 {
		out := make(map[string]map[string]int64, len(live))
		for id, s := range live {
			m := map[string]int64{}
			for _, r := range s.Regions() {
				m[r.GetRegion()] = r.GetOpenedUnixMs()
			}
			out[id] = m
		}
		return out
	}
	first := read()
	second := read()
	at := time.Now()
	still := p.h.liveRS()
	held := map[string][]string{}
	for id, regions := range second {
		if still[id] != live[id] {
			continue
		}
		for region, opened := range regions {
			if o, ok := first[id][region]; ok && o == opened {
				held[region] = append(held[region], id)
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.samples++
	for region, ids := range held {
		if len(ids) < 2 {
			continue
		}
		sort.Strings(ids)
		p.doubles++
		if p.regions == nil {
			p.regions = map[string]bool{}
		}
		if p.firstAt.IsZero() {
			p.firstAt = at
		}
		if !p.regions[region] && len(p.reports) < 10 {
			var where []string
			for _, id := range ids {
				where = append(where, fmt.Sprintf("%s/%d (opened %s)", id, live[id].StartCode(),
					time.UnixMilli(second[id][region]).Format("15:04:05.000")))
			}
			p.reports = append(p.reports, fmt.Sprintf("%s: region %s open on %s", at.Format("15:04:05.000"), region, strings.Join(where, " and ")))
		}
		p.regions[region] = true
	}
}

// chaos drives random table, region and server operations against a
// harness.
type chaos struct {
	t       *testing.T
	h       *harness
	rng     *rand.Rand
	servers []string
	tables  []string // created by the test, possibly deleted or rolled back since
	procs   []uint64 // submitted by the test, oldest first
	ops     map[string]int
}

// serverOf is the region server a request of the Master or RegionServer
// service is from or for.
func serverOf(req any) string {
	if r, ok := req.(interface{ GetServerId() string }); ok {
		return r.GetServerId()
	}
	return ""
}

// troubleLink makes server id's network bad for a moment: most answers to
// and from it are lost (batches the master sends it, heartbeats it sends),
// as with a failing link or an overloaded host. The dispatcher gives up on
// the server after a few lost answers, and its next heartbeat's answer may
// well be lost too.
func (c *chaos) troubleLink(id string, d time.Duration) {
	r := c.h.faults.MustAdd(rpcfault.Rule{
		Name:        "bad link",
		Methods:     []string{methodExecuteBatch, methodHeartbeat},
		Fault:       rpcfault.DropAnswer,
		Probability: 0.7,
		When:        func(call rpcfault.Call) bool { return serverOf(call.Request) == id },
		// Noticed by a timeout, shorter than the region server's.
		Delay: 20 * time.Millisecond, DelayMax: 150 * time.Millisecond,
	})
	time.AfterFunc(d, r.Remove)
}

// throttle keeps at most max of the test's procedures unfinished, waiting
// for some to end, so the load stays bounded. A procedure that never ends
// fails the test.
func (c *chaos) throttle(max int) {
	var x *procedure.Executor
	var open []uint64
	if !testwait.Until(90*time.Second, func() bool {
		_, x = c.h.leader()
		open = nil
		for _, id := range c.procs {
			info, err := x.Get(id)
			if errors.Is(err, procedure.ErrNotFound) {
				continue // finished, and its result evicted
			}
			if err != nil || !info.State.Terminal() {
				open = append(open, id)
			}
		}
		c.procs = open
		return len(open) <= max
	}) {
		w, _ := x.Why(open[0])
		c.t.Fatalf("%d procedures still running after 90 s, e.g. %d: %+v", len(open), open[0], w)
	}
}

func (c *chaos) submit(op string, p procedure.Procedure) {
	c.procs = append(c.procs, c.h.submit(p, ""))
	c.ops[op]++
}

// step runs one random operation.
func (c *chaos) step() {
	h := c.h
	live := h.liveRS()
	var stopped []string
	for _, id := range c.servers {
		if live[id] == nil {
			stopped = append(stopped, id)
		}
	}
	switch n := c.rng.IntN(100); {
	case n < 25:
		name := fmt.Sprintf("t%d", len(c.tables))
		c.tables = append(c.tables, name)
		p, err := domain.NewCreateTable("", name, 2+c.rng.IntN(5))
		if err != nil {
			c.t.Fatal(err)
		}
		c.submit("create", p)
	case n < 37:
		if len(c.tables) == 0 {
			return
		}
		name := c.tables[c.rng.IntN(len(c.tables))]
		dis, err := domain.NewDisableTable("", name)
		if err != nil {
			c.t.Fatal(err)
		}
		del, err := domain.NewDeleteTable("", name)
		if err != nil {
			c.t.Fatal(err)
		}
		// Table procedures run in submission order under the table's
		// lock: the delete finds the table disabled (or fails).
		c.submit("disable", dis)
		c.submit("delete", del)
	case n < 63:
		c.move("")
	case n < 70:
		c.submit("balance", &domain.Balance{})
	case n < 78:
		// Trouble on a server's link while a region moves there.
		id := c.servers[c.rng.IntN(len(c.servers))]
		if live[id] != nil {
			c.troubleLink(id, time.Duration(200+c.rng.IntN(400))*time.Millisecond)
			c.ops["bad link"]++
			c.move(id)
		}
	case n < 88:
		if len(live) <= 2 {
			return
		}
		ids := slices.Sorted(maps.Keys(live))
		id := ids[c.rng.IntN(len(ids))]
		h.stopRS(id)
		c.ops["kill server"]++
	default:
		if len(stopped) == 0 {
			return
		}
		h.startRS(stopped[c.rng.IntN(len(stopped))], h.opts.opLatency, 0)
		c.ops["restart server"]++
	}
}

// move moves a random open region to server to ("": anywhere else).
func (c *chaos) move(to string) {
	var open []string
	domain.ScanRegions(c.h.reader(), func(name string, rg domain.Region) bool {
		if rg.State == domain.RegionOpen && rg.ProcID == 0 && rg.Server != to {
			open = append(open, name)
		}
		return true
	})
	if len(open) == 0 {
		return
	}
	lm, _ := c.h.leader()
	p, err := lm.dom.MoveRegionProcedure(open[c.rng.IntN(len(open))], to)
	if err != nil {
		return // gone meanwhile
	}
	c.submit("move", p)
}

// placementProblems lists what is wrong with the placement now: every
// region of an enabled table must be recorded OPEN (no procedure on it) on
// a live incarnation and be hosted by exactly that server, by the servers'
// own answers; no region of a disabled or deleted table may be open
// anywhere; no table may be half way through a state change.
func (h *harness) placementProblems() []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	r := h.reader()
	tables, err := domain.ScanTables(r, "")
	if err != nil {
		return []string{err.Error()}
	}
	live := h.liveRS()
	hosted := h.hostedQuiet()
	wanted := map[string]bool{}
	for _, full := range sortedKeys(tables) {
		tb := tables[full]
		if tb.State == domain.TableDisabled {
			continue
		}
		if tb.State != domain.TableEnabled {
			bad("table %s is %s", full, tb.State)
			continue
		}
		for _, rn := range domain.TableRegionNames(tb, full) {
			wanted[rn] = true
			rg, ok, err := domain.GetRegion(r, rn)
			switch {
			case err != nil || !ok:
				bad("region %s of %s: recorded %v, %v", rn, full, ok, err)
				continue
			case rg.State != domain.RegionOpen || rg.ProcID != 0:
				bad("region %s is %s (procedure %d)", rn, rg.State, rg.ProcID)
			}
			if s := live[rg.Server]; s == nil || s.StartCode() != rg.StartCode {
				bad("region %s recorded on %s/%d, not a live incarnation", rn, rg.Server, rg.StartCode)
			}
			if got := hosted[rn]; len(got) != 1 || got[0] != rg.Server {
				bad("region %s recorded on %s, hosted by %v", rn, rg.Server, got)
			}
		}
	}
	for _, rn := range sortedKeys(hosted) {
		if !wanted[rn] {
			bad("region %s is open on %v but belongs to no enabled table", rn, hosted[rn])
		}
	}
	return out
}

// Random table creates and deletes, region moves, balancing, and region
// server crashes and restarts run while single messages between masters
// and region servers are lost, delayed or delivered twice, in both
// directions: batches of opens and closes (answers lost often enough that
// the dispatcher gives servers up and revokes their leases), heartbeats,
// registrations and transition reports. Meanwhile the region servers'
// own answers are sampled every few milliseconds. The two promises hold:
// no region is ever open on two servers at any sample, and once the faults
// stop every procedure ends and every region of every table is open on
// exactly one live server, none lost and none left over.
func TestRegionsOpenOnceUnderMessageLoss(t *testing.T) {
	seed, d, masters := chaosSettings(t)
	t.Logf("chaos seed %d, %v of faults, %d masters (replay: BATON_CHAOS_SEED=%d; longer: BATON_CHAOS_SECONDS)", seed, d, masters, seed)
	const servers = 4
	h := newHarness(t, harnessOpts{masters: masters, servers: servers, opLatency: 5 * time.Millisecond, faultSeed: seed,
		domain: func(c *domain.Config) {
			// Three lost answers in a row and the dispatcher gives a
			// server up: its lease is revoked, and it is told so at its
			// next heartbeat.
			c.Dispatch.MaxFailures = 3
		}})

	f := h.faults
	add := func(r rpcfault.Rule) *rpcfault.Handle { return f.MustAdd(r) }
	batch := []string{methodExecuteBatch}
	batchAnswerLost := add(rpcfault.Rule{Name: "batch answer lost", Methods: batch, Fault: rpcfault.DropAnswer, Probability: 0.3})
	add(rpcfault.Rule{Name: "batch lost", Methods: batch, Fault: rpcfault.DropRequest, Probability: 0.05})
	add(rpcfault.Rule{Name: "batch delivered twice", Methods: batch, Fault: rpcfault.Duplicate, Probability: 0.1})
	add(rpcfault.Rule{Name: "batch answer late", Methods: batch, Fault: rpcfault.DelayAnswer, Probability: 0.1, Delay: 5 * time.Millisecond, DelayMax: 40 * time.Millisecond})
	hb := []string{methodHeartbeat}
	// A lost answer is noticed by a timeout, here shorter than the
	// region server's: it retries within its lease.
	heartbeatAnswerLost := add(rpcfault.Rule{Name: "heartbeat answer lost", Methods: hb, Fault: rpcfault.DropAnswer, Probability: 0.2, Delay: 20 * time.Millisecond, DelayMax: 150 * time.Millisecond})
	add(rpcfault.Rule{Name: "heartbeat lost", Methods: hb, Fault: rpcfault.DropRequest, Probability: 0.05})
	add(rpcfault.Rule{Name: "heartbeat answer late", Methods: hb, Fault: rpcfault.DelayAnswer, Probability: 0.05, Delay: 5 * time.Millisecond, DelayMax: 20 * time.Millisecond})
	reg := []string{methodRegisterServer}
	add(rpcfault.Rule{Name: "registration answer lost", Methods: reg, Fault: rpcfault.DropAnswer, Probability: 0.2})
	add(rpcfault.Rule{Name: "registration delivered twice", Methods: reg, Fault: rpcfault.Duplicate, Probability: 0.2})
	rep := []string{methodReport}
	add(rpcfault.Rule{Name: "report answer lost", Methods: rep, Fault: rpcfault.DropAnswer, Probability: 0.15})
	add(rpcfault.Rule{Name: "report delivered twice", Methods: rep, Fault: rpcfault.Duplicate, Probability: 0.15})
	add(rpcfault.Rule{Name: "report late", Methods: rep, Fault: rpcfault.DelayRequest, Probability: 0.1, Delay: 5 * time.Millisecond, DelayMax: 50 * time.Millisecond})

	sampler := &placementSampler{h: h}
	sctx, stopSampler := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() { defer close(sampled); sampler.run(sctx, 3*time.Millisecond) }()
	defer func() { stopSampler(); <-sampled }()

	c := &chaos{t: t, h: h, rng: rand.New(rand.NewPCG(seed, 0)), ops: map[string]int{}}
	for i := range servers {
		c.servers = append(c.servers, fmt.Sprintf("rs%d", i+1))
	}
	end := time.Now().Add(d)
	// The timer paces the load (an operation every 10 to 70 ms); it
	// waits for no state.
	pace := time.NewTimer(0)
	defer pace.Stop()
	for time.Now().Before(end) {
		c.step()
		c.throttle(8)
		pace.Reset(time.Duration(10+c.rng.IntN(60)) * time.Millisecond)
		<-pace.C
	}
	f.Pause()
	t.Logf("operations: %v; faults injected: %v", c.ops, f.Counts())

	// Converge: every server back, every procedure ended, every region
	// where it belongs.
	for _, id := range c.servers {
		if h.liveRS()[id] == nil {
			h.startRS(id, h.opts.opLatency, 0)
		}
	}
	var x *procedure.Executor
	var running []procedure.Info
	if !testwait.Until(90*time.Second, func() bool {
		_, x = h.leader()
		running = nil
		for _, info := range x.List(procedure.Filter{RootsOnly: true}) {
			if !info.State.Terminal() {
				running = append(running, info)
			}
		}
		return len(running) == 0
	}) {
		w, _ := x.Why(running[0].ID)
		t.Fatalf("%d procedures still running 90 s after the faults stopped, e.g. %d (%s): %+v", len(running), running[0].ID, running[0].Type, w)
	}
	var problems []string
	testwait.Until(60*time.Second, func() bool {
		problems = h.placementProblems()
		return len(problems) == 0
	})
	stopSampler()
	<-sampled

	_, x = h.leader()
	outcomes := map[string]int{}
	for _, info := range x.List(procedure.Filter{RootsOnly: true}) {
		outcomes[info.Type+" "+info.State.String()]++
	}
	var disp string
	if lm, _ := h.leader(); lm.dom.Services() != nil {
		disp = fmt.Sprintf("%+v", lm.dom.Services().DispatchStats())
	}
	t.Logf("procedures: %v; placement samples: %d; leader's dispatcher: %s", outcomes, sampler.samples, disp)
	for _, p := range problems {
		t.Errorf("after the faults stopped: %s", p)
	}
	if sampler.doubles > 0 {
		t.Errorf("%d samples found a region open on two servers; the first ones:\n%s", sampler.doubles, strings.Join(sampler.reports, "\n"))
		var recent []string
		for _, ev := range f.Events() {
			if ev.At.After(sampler.firstAt.Add(-3*time.Second)) && ev.At.Before(sampler.firstAt) {
				recent = append(recent, ev.String())
			}
		}
		if len(recent) > 60 {
			recent = recent[len(recent)-60:]
		}
		t.Logf("faults injected in the 3 s before the first double:\n%s", strings.Join(recent, "\n"))
	}
	// The faults meant did happen.
	for _, r := range []*rpcfault.Handle{batchAnswerLost, heartbeatAnswerLost} {
		if r.Fired() == 0 {
			t.Errorf("rule %q never fired", r.Name())
		}
	}
	if sampler.samples < 100 {
		t.Errorf("only %d placement samples", sampler.samples)
	}
	if t.Failed() {
		t.Logf("replay with BATON_CHAOS_SEED=%d", seed)
	}
}
