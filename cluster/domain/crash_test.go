package domain_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// A crash procedure that has ended is no answer to a later need to
// recover the same incarnation (regions recorded on it again): the nonce
// must not hand back the ended one, a new procedure must run.
func TestCrashNeedAfterAnEndedCrashProcedureRunsANewOne(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2})
	h.mustSucceed(h.createTable("", "t", 1), 20*time.Second)
	h.mustSucceed(h.submit(mustDisable(t, "", "t"), ""), 20*time.Second)
	var region string
	domain.ScanRegions(h.reader(), func(name string, _ domain.Region) bool { region = name; return false })

	lm, x := h.leader()
	svc := lm.dom.Services()
	ghost := domain.ServerRef{ID: "rs9", StartCode: 12345} // never registered: proven gone once the fence bound passes
	crashes := func() []procedure.Info { return x.List(procedure.Filter{Type: domain.TypeServerCrash}) }

	svc.SubmitCrash(ghost, "test: first need")
	testwait.For(t, 10*time.Second, "the first crash procedure to end", func() bool {
		c := crashes()
		return len(c) == 1 && c[0].State == procedure.Success
	})
	first := crashes()[0].ID

	// The region turns up recorded on the incarnation again.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := svc.Commit(ctx, raftfsm.Put(domain.RegionKey(region), domain.MustJSON(domain.Region{Table: "default:t", State: domain.RegionOpen, Server: ghost.ID, StartCode: ghost.StartCode}))); err != nil {
		t.Fatal(err)
	}
	svc.SubmitCrash(ghost, "test: second need")
	testwait.For(t, 10*time.Second, "a second crash procedure to recover the region", func() bool {
		rg, ok, _ := domain.GetRegion(h.reader(), region)
		return ok && !rg.OnServer(ghost)
	})
	var second []uint64
	for _, c := range crashes() {
		if c.ID != first {
			second = append(second, c.ID)
		}
	}
	if len(second) != 1 {
		t.Fatalf("crash procedures other than the ended %d: %v, want exactly one", first, second)
	}
	if info := h.mustSucceed(second[0], 10*time.Second); info.State != procedure.Success {
		t.Fatalf("second crash procedure ended %v", info.State)
	}
}

func mustDisable(t *testing.T, ns, name string) procedure.Procedure {
	t.Helper()
	p, err := domain.NewDisableTable(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Crash recovery has no meaningful rollback: failing steps, its own and
// its region children's, are retried until every region of the dead
// server is open elsewhere; it never ends ROLLEDBACK with regions left on
// the server.
func TestCrashRecoveryRetriesFailuresUntilDone(t *testing.T) {
	var mu sync.Mutex
	fails := map[string]int{"crash.assign": 3, "region.open": 0}
	armed := false
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, domain: func(c *domain.Config) {
		c.FailPoint = func(point string) error {
			mu.Lock()
			defer mu.Unlock()
			if !armed || fails[point] == 0 {
				return nil
			}
			fails[point]--
			return errors.New("injected")
		}
	}})
	h.mustSucceed(h.createTable("", "t", 6), 20*time.Second)
	before := h.checkTableOpen("default:t", 6)
	if before["rs2"] == 0 {
		t.Fatalf("rs2 holds no region: %v", before)
	}
	mu.Lock()
	armed = true
	fails["region.open"] = before["rs2"] + 2 // every region child fails at least once
	mu.Unlock()
	h.stopRS("rs2")
	testwait.For(t, 30*time.Second, "every region open on rs1 again", func() bool {
		n := 0
		domain.ScanRegions(h.reader(), func(_ string, rg domain.Region) bool {
			if rg.State == domain.RegionOpen && rg.Server == "rs1" && rg.ProcID == 0 {
				n++
			}
			return true
		})
		return n == 6
	})
	mu.Lock()
	left := fails
	mu.Unlock()
	if left["crash.assign"] != 0 || left["region.open"] != 0 {
		t.Fatalf("injected failures not all consumed: %v", left)
	}
	h.checkTableOpen("default:t", 6)
	_, x := h.leader()
	for _, info := range x.List(procedure.Filter{Type: domain.TypeServerCrash}) {
		if info := h.wait(info.ID, 10*time.Second); info.State != procedure.Success {
			t.Errorf("server crash %d ended %v", info.ID, info.State)
		}
	}
}

// A start code never comes back, even when the leader services are rebuilt
// within one term (their counter starts over): an old incarnation's crash
// procedure would otherwise take the new registration for itself.
func TestStartCodesNeverRepeatWithinATerm(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 1})
	lm, _ := h.leader()
	svc := lm.dom.Services()
	rs1 := h.rs("rs1")
	before := rs1.StartCode()
	svc.ResetStartSeq() // as in services rebuilt for the same term
	resp, err := domain.RegisterServer(context.Background(), lm.dom,
		&rspb.RegisterServerRequest{ServerId: "rs1", Address: rs1.Addr(), DroppedStartCode: before})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStartCode() <= before {
		t.Fatalf("registration after the counter restarted got start code %d, not above the previous %d", resp.GetStartCode(), before)
	}
}

// A start code never comes back across a restore either: a cluster
// restored from a snapshot counts from the snapshot's term, below the
// codes the old cluster may have handed out after the save. A server that
// says it gave up a higher code than any this state knows gets one above
// it, and one that leaves no code above it is refused.
func TestStartCodeAboveTheDroppedOne(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 1})
	lm, _ := h.leader()
	addr := h.rs("rs1").Addr()
	register := func(id string, dropped uint64) (*rspb.RegisterServerResponse, error) {
		return domain.RegisterServer(context.Background(), lm.dom,
			&rspb.RegisterServerRequest{ServerId: id, Address: addr, DroppedStartCode: dropped})
	}
	// As from the old cluster, terms after the one this state is at.
	fromLaterTerm := (lm.node.Raft().CurrentTerm()+5)<<32 | 7
	for _, id := range []string{"rs-known-here", "rs-new-here"} {
		if id == "rs-known-here" {
			if _, err := register(id, 0); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := register(id, fromLaterTerm)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetStartCode() <= fromLaterTerm {
			t.Errorf("%s: start code %#x, not above the %#x it gave up", id, resp.GetStartCode(), fromLaterTerm)
		}
	}
	_, err := register("rs-wraps", math.MaxUint64)
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("dropped_start_code MaxUint64: %v, want INVALID_ARGUMENT", err)
	}
}

// A crash's regions are reassigned in waves of CrashWave, and a leader
// lost at any wave boundary (cut off before the wave is written) hands
// over to one that resumes after the last wave written: every region of the dead
// server is reassigned exactly once, none missed, none spawned twice.
func TestCrashWavesSurviveAFailoverAtEveryBoundary(t *testing.T) {
	const wave, regions = 3, 24
	killNext := true // the next boundary's first try cuts its leader off
	w := startWaveFailover(t, wave, regions, "crash.assign", "the leader is lost at a wave boundary", func(*waveFailover, int) bool {
		if killNext {
			killNext = false
			return true
		}
		killNext = true // the new leader's try at this boundary goes through
		return false
	})
	boundaries := w.failovers("the crash procedure to end through a failover at every wave boundary")
	// Waves of 3 over the victim's regions, then the scan that finds none
	// left: a failover before each.
	if want := (w.per[w.victim]+wave-1)/wave + 1; boundaries < want {
		t.Errorf("%d failovers, want one at each of the %d boundaries", boundaries, want)
	}
	w.checkEachReassignedOnce()
	// The survivors held as many regions each, and took the victim's in
	// turn.
	if lo, hi := spread(w.h.checkTableOpen("default:t", regions)); hi-lo > 2 {
		t.Errorf("regions spread %d..%d over the survivors, want within 2 of each other", lo, hi)
	}
	w.h.checkNoDoubles()
}

// waveFailover is the crash the wave tests share: 3 masters on the
// production Raft timings, 3 region servers, a table "t" whose busiest
// server (the victim) is stopped, and its regions reassigned in waves
// while leaders are cut off at a fail point.
type waveFailover struct {
	t      *testing.T
	h      *harness
	victim string
	per    map[string]int // regions per server before the crash

	mu    sync.Mutex
	armed bool         // the crash has started: the fail point may cut
	down  map[int]bool // cut off, not healed yet
	kills chan int     // the leader to cut off
}

// startWaveFailover starts the cluster with crash waves of wave and table
// "t" of regions, then stops the victim. Once the victim is stopped, each
// call of fail point point on master i fails if i is cut off; otherwise
// cut(w, i), called under w.mu, says whether i's leadership is lost right
// there (the call then fails with why, and failovers cuts i off).
func startWaveFailover(t *testing.T, wave, regions int, point, why string, cut func(w *waveFailover, i int) bool) *waveFailover {
	t.Helper()
	return startWaveFailoverAt(t, 0, wave, regions, point, why, cut)
}

// startWaveFailoverAt is startWaveFailover with the masters' builds
// capped at format (0: this build's): version.Format1 keeps the cluster
// at 0.1.0's format, whose crash spawns a TransitRegionState per region
// (batches come with format 2).
func startWaveFailoverAt(t *testing.T, format version.Format, wave, regions int, point, why string, cut func(w *waveFailover, i int) bool) *waveFailover {
	t.Helper()
	w := &waveFailover{t: t, down: map[int]bool{}, kills: make(chan int, 1)}
	// Four elections and more: the production Raft timings, which a
	// loaded machine does not turn into a storm of elections.
	// Leases six times the tests': a failover a second must not make the
	// live region servers fence themselves and crash too.
	w.h = newHarness(t, harnessOpts{servers: 3, node: func(c *cluster.Config) {
		benchRaftTimings(c)
		if format != 0 {
			c.Build.MaxFormat = format
		}
	}, domainAt: func(i int, c *domain.Config) {
		c.ServerLease.SoftLimit *= 6
		c.ServerLease.HardLimit *= 6
		c.HeartbeatInterval *= 6
		c.CrashWave = wave
		c.FailPoint = func(p string) error {
			if p != point {
				return nil
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			switch {
			case !w.armed:
				return nil
			case w.down[i]:
				return errors.New("injected: this master is being cut off")
			case cut(w, i):
				w.down[i] = true
				w.kills <- i
				return errors.New("injected: " + why)
			}
			return nil
		}
	}})
	w.h.mustSucceed(w.h.createTable("", "t", regions), 30*time.Second)
	w.per = w.h.checkTableOpen("default:t", regions)
	w.victim = busiestServer(w.per)
	if w.per[w.victim] <= wave {
		t.Fatalf("%s holds %d regions: fewer than two waves of %d (%v)", w.victim, w.per[w.victim], wave, w.per)
	}
	w.mu.Lock()
	w.armed = true
	w.mu.Unlock()
	w.h.stopRS(w.victim)
	return w
}

// victimCrash is the victim's crash procedure, once it ended: its result
// names it.
func (w *waveFailover) victimCrash() (procedure.Info, bool) {
	_, x := w.h.leader()
	for _, c := range x.List(procedure.Filter{Type: domain.TypeServerCrash}) {
		if c.State == procedure.Success && strings.HasPrefix(string(c.Result), "server "+w.victim+"/") {
			return c, true
		}
	}
	return procedure.Info{}, false
}

// failovers cuts off each leader the fail point loses, until the victim's
// crash procedure ended, and returns how many it cut off. A leader cut
// off steps down, another takes over from the replicated state; then it
// rejoins as a follower.
func (w *waveFailover) failovers(what string) int {
	w.t.Helper()
	n := 0
	testwait.For(w.t, 2*time.Minute, what, func() bool {
		select {
		case i := <-w.kills:
			w.h.isolateRaft(i)
			testwait.For(w.t, time.Minute, "another leader", func() bool {
				li, _ := w.h.c.WaitLeader()
				return li != i
			})
			w.h.healRaft(i)
			w.mu.Lock()
			w.down[i] = false
			w.mu.Unlock()
			n++
			return false
		default:
			_, done := w.victimCrash()
			return done
		}
	})
	return n
}

// checkEachReassignedOnce checks the crash procedure's count: each of the
// victim's regions reassigned once.
func (w *waveFailover) checkEachReassignedOnce() {
	w.t.Helper()
	crash, _ := w.victimCrash()
	if want := fmt.Sprintf(": %d regions reassigned", w.per[w.victim]); !strings.Contains(string(crash.Result), want) {
		w.t.Errorf("crash procedure result %q, want %q: each of %s's regions reassigned once", crash.Result, want, w.victim)
	}
}

// The sweep of a crash's waves goes through the tables once; a region
// recorded on the dead incarnation behind its cursor (an open that picked
// the server just before the fence committed) is found by the scans that
// follow the sweep, and reassigned too.
func TestCrashWavesFindARegionRecordedBehindTheCursor(t *testing.T) {
	var (
		mu    sync.Mutex
		calls int
	)
	behind := make(chan chan struct{})
	h := newHarness(t, harnessOpts{masters: 1, servers: 1, domain: func(c *domain.Config) {
		c.CrashWave = 2
		c.FailPoint = func(point string) error {
			if point != "crash.assign" {
				return nil
			}
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			if n == 2 { // the first wave is done, the second not written yet
				done := make(chan struct{})
				behind <- done
				<-done
			}
			return nil
		}
	}})
	for _, name := range []string{"a", "b"} {
		h.mustSucceed(h.createTable("", name, 3), 20*time.Second)
		h.mustSucceed(h.submit(mustDisable(t, "", name), ""), 20*time.Second)
	}
	var regions []string
	domain.ScanRegions(h.reader(), func(name string, _ domain.Region) bool {
		regions = append(regions, name)
		return true
	})
	lm, _ := h.leader()
	svc := lm.dom.Services()
	ghost := domain.ServerRef{ID: "rs9", StartCode: 4242} // never registered
	place := func(names ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, rn := range names {
			rg, _, _ := domain.GetRegion(h.reader(), rn)
			rg.State, rg.Server, rg.StartCode = domain.RegionOpen, ghost.ID, ghost.StartCode
			if err := svc.Commit(ctx, raftfsm.Put(domain.RegionKey(rn), domain.MustJSON(rg))); err != nil {
				t.Fatal(err)
			}
		}
	}
	place(regions...)
	svc.SubmitCrash(ghost, "test: a crash of six regions in waves of two")
	select {
	case done := <-behind:
		// The first wave (a's first two regions) is back to CLOSED; put
		// its first region on the dead incarnation again, behind the
		// cursor.
		testwait.For(t, 10*time.Second, "the first wave's regions off the dead server", func() bool {
			rg, _, _ := domain.GetRegion(h.reader(), regions[0])
			return !rg.OnServer(ghost)
		})
		place(regions[0])
		close(done)
	case <-time.After(30 * time.Second):
		t.Fatal("the crash procedure never reached its second wave")
	}
	testwait.For(t, 30*time.Second, "every region off the dead server", func() bool {
		n := 0
		domain.ScanRegions(h.reader(), func(_ string, rg domain.Region) bool {
			if rg.OnServer(ghost) {
				n++
			}
			return true
		})
		return n == 0
	})
	_, x := h.leader()
	crashes := x.List(procedure.Filter{Type: domain.TypeServerCrash})
	if len(crashes) != 1 {
		t.Fatalf("%d crash procedures, want the ghost's alone", len(crashes))
	}
	info := h.mustSucceed(crashes[0].ID, 20*time.Second)
	want := fmt.Sprintf("server %s: %d regions reassigned", ghost, len(regions)+1)
	if string(info.Result) != want {
		t.Errorf("result %q, want %q (the region placed behind the cursor once more)", info.Result, want)
	}
}

// A crashed server's region reassignments wait in that server's queue,
// which the scheduler serves before any table's: they do not queue behind
// a big create's assignments of the same or another table.
func TestCrashReassignmentsQueueAheadOfTableWork(t *testing.T) {
	crash := &domain.TransitRegionState{Region: "default:t,00000,1", Namespace: "default", Table: "t", Kind: domain.KindAssign,
		From: domain.ServerRef{ID: "rs1", StartCode: 7}}
	create := &domain.TransitRegionState{Region: "default:t,00001,1", Namespace: "default", Table: "t", Kind: domain.KindAssign, Bounded: true}
	if k := crash.QueueKey(); k.Kind != scheduler.KindServer || k.Name != "rs1" {
		t.Errorf("a crash's reassignment queues in %v, want the crashed server's queue", k)
	}
	if k := create.QueueKey(); k.Kind != scheduler.KindTable || k.Name != "default:t" {
		t.Errorf("a create's assignment queues in %v, want its table's queue", k)
	}
	scp := &domain.ServerCrash{Server: domain.ServerRef{ID: "rs1", StartCode: 7}}
	if scp.QueueKey() != crash.QueueKey() {
		t.Errorf("crash procedure in %v, its reassignments in %v: want the same queue", scp.QueueKey(), crash.QueueKey())
	}
}

// A crash's wave is written with its regions already prepared: each child
// holds its region's lock from the crash procedure's step on, and its
// region is recorded OPENING on the server picked for it in the wave's
// write, so the child starts by sending the open. A leader lost while
// such a wave's opens are under way (some sent, some answered, none or
// some recorded OPEN) hands over to one that resumes the children where
// the write left them: every region of the dead server is reassigned
// exactly once (the wave is not spawned again) and opens on exactly one
// server, none left behind.
func TestCrashWaveSurvivesALeaderLostWhileItsOpensAreUnderWay(t *testing.T) {
	const wave, regions = 4, 24
	var (
		calls  int
		killAt = map[int]bool{1: true, 7: true, 14: true} // the opens after which a leader is lost
		seen   []string                                   // what the first open found written
	)
	// The children this checks are version 1's: a TransitRegionState per
	// region (TestCrashBatchSurvivesALeaderLostWhileItsOpensAreUnderWay
	// is version 2's).
	w := startWaveFailoverAt(t, version.Format1, wave, regions, "region.open", "the leader is lost while a wave's opens are under way", func(w *waveFailover, i int) bool {
		calls++
		if calls == 1 {
			seen = preparedWave(w.h.masters[i].node.FSM())
		}
		return killAt[calls]
	})
	failovers := w.failovers("the crash procedure to end through failovers mid-wave")
	w.mu.Lock()
	for _, problem := range seen {
		t.Error(problem)
	}
	w.mu.Unlock()
	if failovers != len(killAt) {
		t.Errorf("%d failovers, want %d", failovers, len(killAt))
	}
	w.checkEachReassignedOnce()
	w.h.checkTableOpen("default:t", regions)
	w.h.checkNoDoubles()
}

// preparedWave checks, at the first open of a crash's first wave, what
// the wave's write left in f: every region child there was written
// prepared (it starts by sending the open) and holding its locks, and its
// region is recorded OPENING in its name. It returns what is not so.
func preparedWave(f *raftfsm.FSM) []string {
	var problems []string
	r := domain.NewReader(f.Get, f.Scan)
	children := 0
	_ = f.View().Procs(func(p store.Proc) error {
		info, err := procedure.DecodeInfo(p.Data)
		if err != nil || info.Type != domain.TypeTransitRegionState {
			return nil
		}
		children++
		var c domain.TransitRegionState
		if err := json.Unmarshal(info.Data, &c); err != nil {
			problems = append(problems, fmt.Sprintf("child %d: %v", info.ID, err))
			return nil
		}
		if !c.Prepared || !info.Locked {
			problems = append(problems, fmt.Sprintf("child %d of %s written prepared=%v locked=%v, want both", info.ID, c.Region, c.Prepared, info.Locked))
		}
		rg, ok, err := domain.GetRegion(r, c.Region)
		if err != nil || !ok || rg.State != domain.RegionOpening || rg.ProcID != info.ID || rg.Server != c.Server.ID {
			problems = append(problems, fmt.Sprintf("region %s recorded %+v, want OPENING on %s by child %d", c.Region, rg, c.Server.ID, info.ID))
		}
		return nil
	})
	if children == 0 {
		problems = append(problems, "no region child written when the first open ran")
	}
	return problems
}
