package domain_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/rspb"
)

// TestScenarioHBASE29386EnableTableOpAndCrashNoDeadlock replays
// HBASE-29386 (HBase ProcV2, "SnapshotProcedure and EnableTableProcedure
// can cause a deadlock"). EnableTableProcedure let go of its table lock
// between its steps, so a second table procedure (a snapshot, holding the
// table's lock for its life) got in while the table was ENABLING, waited
// there for a state only the enable could bring, and kept the lock the
// enable needed to take again for its last step: neither moved again. A
// crash of the server the enable's regions were opening on adds a third
// party: the ServerCrashProcedure needs those regions (their table shared)
// and waits for its children while they wait behind the table's holders.
//
// Here an enable of a 12-region table runs with its opens on the victim
// region server held in flight (its answers delayed), a disable of the
// same table is queued behind it, and the victim is killed, so its crash
// procedure reassigns regions the enable is opening; each round orders
// the disable and the kill differently. All three must finish, the
// disable after the enable (it asked after it, so it sees ENABLED), and a
// final enable must leave every region open exactly once.
//
// What holds the line in Baton: table procedures hold their table lock for
// life (tableProc.HoldLock in table.go), so nothing runs on a table
// between the steps of another's operation on it; a child shares what its
// ancestor holds for life (Executor.ancestorsLocked in
// procedure/executor.go), so the enable's region children run under its
// exclusive lock instead of waiting on it; ServerCrash holds only the
// server's lock, spawns its region children with AddLockedChild (locks
// taken only if free, never half-held), and RemoveServer fails the
// enable's opens on the dead server before any of that waits, so the
// enable never waits on the crash procedure; and nothing in Baton holds a
// table lock while it waits for a table state: a transition that finds
// the wrong state is refused at once (tableTransition.execute).
//
// Reintroducing the defect — tableProc.HoldLock returning false
// (cluster/domain/table.go), the enable letting go of its lock between
// steps as HBase's did — makes this test fail, within its first rounds
// (four runs of four), with:
//
//	round 0: disable 14 (queued behind enable 1) ended ROLLEDBACK: table
//	default:t is ENABLING (want [ENABLED]): it ran in the middle of the enable
//
// Baton has no table procedure that, having got in, waits for a state
// while holding the lock, so that defect alone shows as the interleaving,
// not as a hang. Reintroducing the other half — Executor.ancestorsLocked
// returning nil (procedure/executor.go), children not sharing their
// parent's lock — makes it a real deadlock, and the test fails with the
// waits and the lock table it prints:
//
//	not done within 20s: round 0: 1 of the enable's opens done on rs3, unanswered
//	  1 EnableTable (parent 0) WAITING: waiting for children; proc 1: not queued
//	    or waiting (running, done or unknown); holds namespace default (shared),
//	    table default:t (exclusive); children [2 3 4 5 6 7 8 9]
//	  2 TransitRegionState (parent 1) RUNNABLE: waiting for lock; proc 2: waiting
//	    for lock table default:t (shared), held exclusive by 1; children []
//	  ...
//	locks:
//	  table default:t: exclusive=true holder=1 shared=[] waiters=[2 3 ... 13]
func TestScenarioHBASE29386EnableTableOpAndCrashNoDeadlock(t *testing.T) {
	const (
		regions  = 12
		victim   = "rs3"
		full     = "default:t"
		deadline = 20 * time.Second
	)
	h := newHarness(t, harnessOpts{masters: 1, servers: 3})
	// The table is written in its DISABLED state, not created: a create
	// runs the very parent-and-children locking this test is about, and a
	// broken one would hang there, before the scenario and its dump.
	recs := map[string][]byte{domain.TableKey(full): domain.MustJSON(domain.Table{State: domain.TableDisabled, RegionCount: regions, ProcID: 7})}
	for i := range regions {
		recs[domain.RegionKey(domain.RegionName(full, i, 7))] = domain.MustJSON(domain.Region{Table: full, State: domain.RegionClosed})
	}
	h.c.SeedRecords(recs)

	// Each round: when the disable is submitted relative to the kill, and
	// how many of the victim's opens are in flight when the kill comes.
	rounds := []struct {
		disableFirst bool
		inFlight     int
	}{
		{disableFirst: true, inFlight: 1},
		{disableFirst: false, inFlight: 1},
		{disableFirst: true, inFlight: 2},
		{disableFirst: false, inFlight: 2},
		{disableFirst: true, inFlight: 3},
		{disableFirst: false, inFlight: 3},
	}
	seenCrash := map[uint64]bool{}
	for ri, rd := range rounds {
		// Answers from the victim come late: its opens stay in flight,
		// the regions recorded OPENING there under the enable's children.
		late := h.c.Faults().MustAdd(rpcfault.Rule{Name: "late opens on " + victim,
			Methods: []string{"/baton.rs.v1.RegionServer/ExecuteBatch"}, Fault: rpcfault.DelayAnswer,
			Delay: 2 * time.Second, DelayMax: 4 * time.Second,
			When: func(c rpcfault.Call) bool {
				r, ok := c.Request.(*rspb.BatchRequest)
				return ok && c.Side == rpcfault.Client && r.GetServerId() == victim
			}})
		enable, err := domain.NewEnableTable("", "t")
		if err != nil {
			t.Fatal(err)
		}
		en := h.submit(enable, "")
		// In flight: opened on the victim (its own answer), the answer
		// held back, the region recorded OPENING there.
		_, x := h.leader()
		waitOrDump(t, x, fmt.Sprintf("round %d: %d of the enable's opens done on %s, unanswered", ri, rd.inFlight, victim), deadline, func() bool {
			if late.Fired() == 0 {
				return false
			}
			n := 0
			r := h.reader()
			for rn, on := range h.hostedQuiet() {
				rg, ok, _ := domain.GetRegion(r, rn)
				if ok && len(on) == 1 && on[0] == victim && rg.State == domain.RegionOpening && rg.Server == victim {
					n++
				}
			}
			return n >= rd.inFlight
		})
		var dis uint64
		submitDisable := func() { dis = h.submit(mustDisable(t, "", "t"), "") }
		if rd.disableFirst {
			submitDisable()
		}
		h.stopRS(victim)
		late.Remove()
		if !rd.disableFirst {
			submitDisable()
		}
		var scp uint64
		h.c.WaitFor(fmt.Sprintf("round %d: the crash procedure of %s", ri, victim), func() bool {
			for _, info := range x.List(procedure.Filter{Type: domain.TypeServerCrash}) {
				if !seenCrash[info.ID] {
					scp = info.ID
					return true
				}
			}
			return false
		})
		seenCrash[scp] = true

		ids := map[string]uint64{"enable": en, "disable": dis, "crash": scp}
		waitAllOrDump(t, x, ri, ids, deadline)
		for what, id := range ids {
			info, err := x.Get(id)
			if err != nil {
				t.Fatalf("round %d: %s %d: %v", ri, what, id, err)
			}
			if info.State != procedure.Success {
				hint := ""
				if strings.Contains(info.Error, domain.TableEnabling) {
					hint = ": it ran in the middle of the enable"
				}
				t.Fatalf("round %d: %s %d (queued behind enable %d) ended %v: %s%s", ri, what, id, en, info.State, info.Error, hint)
			}
		}
		crash, _ := x.Get(scp)
		t.Logf("round %d: %d late answers from %s; crash %d: %s", ri, late.Fired(), victim, scp, crash.Result)
		if tb, ok, err := domain.GetTable(h.reader(), full); err != nil || !ok || tb.State != domain.TableDisabled {
			t.Fatalf("round %d: table %s after enable then disable: %+v found=%v err=%v, want DISABLED", ri, full, tb, ok, err)
		}

		// The victim comes back as a new incarnation; an enable then
		// opens every region exactly once.
		h.startRS(victim, 0, 0)
		again, err := domain.NewEnableTable("", "t")
		if err != nil {
			t.Fatal(err)
		}
		h.mustSucceed(h.submit(again, ""), deadline)
		h.checkTableOpen(full, regions)
		h.mustSucceed(h.submit(mustDisable(t, "", "t"), ""), deadline)
	}
}

// waitAllOrDump waits for every procedure of ids to end, dumping the
// executor's waits and locks past d (waitOrDump).
func waitAllOrDump(t *testing.T, x *procedure.Executor, round int, ids map[string]uint64, d time.Duration) {
	t.Helper()
	waitOrDump(t, x, fmt.Sprintf("round %d: %v to finish", round, ids), d, func() bool {
		for _, id := range ids {
			info, err := x.Get(id)
			if err != nil || !info.State.Terminal() {
				return false
			}
		}
		return true
	})
}

// waitOrDump waits up to d for cond; past d it fails the test with what a
// deadlock needs to be read: every unfinished procedure's wait (lock,
// holders, queue ahead) and the lock table.
func waitOrDump(t *testing.T, x *procedure.Executor, what string, d time.Duration, cond func() bool) {
	t.Helper()
	if testwait.Until(d, cond) {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "not done within %v: %s\n", d, what)
	for _, info := range x.List(procedure.Filter{}) {
		if info.State.Terminal() {
			continue
		}
		w, err := x.WhyUpTo(info.ID, 8)
		if err != nil {
			fmt.Fprintf(&b, "  %d %s: %v\n", info.ID, info.Type, err)
			continue
		}
		fmt.Fprintf(&b, "  %d %s (parent %d) %s: %s; %s; children %v\n", info.ID, info.Type, info.ParentID, info.State, w.Reason, w.Sched, w.Children)
	}
	b.WriteString("locks:\n")
	for _, l := range x.Scheduler().Locks() {
		fmt.Fprintf(&b, "  %s %s: exclusive=%v holder=%d shared=%v waiters=%v modes=%v\n",
			l.Type, l.Name, l.Exclusive, l.Holder, l.Shared, l.Waiters, l.Modes)
	}
	t.Fatal(b.String())
}
