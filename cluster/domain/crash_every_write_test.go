package domain_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
)

// The domain's procedures through a leader lost at each of their writes
// (clustertest.WriteFaults): proceduretest's RecoveryAndDoubleExecution
// and RollbackAndDoubleExecution, at the cluster's scale. The
// leader's executor store fails the chosen write as a leader cut off at
// that moment would, the leader is cut off, another takes over from the
// replicated log and finishes the procedure, and the outcome must be the
// one a run without the fault has: the table's regions each open on one
// server, or closed, or gone.

// maxCrashPoints bounds the runs of one procedure: its writes in a clean
// run, unless background work inflated them.
const maxCrashPoints = 30

// TestDomainProceduresSurviveALeaderLostAtEveryWrite runs create, disable,
// enable, move and delete of a table once without a fault, then once per
// write the clean run made (every other one in -short), with the leader
// lost at that write.
func TestDomainProceduresSurviveALeaderLostAtEveryWrite(t *testing.T) {
	fault := clustertest.NewWriteFaults()
	h := newHarness(t, harnessOpts{servers: 3, node: func(nc *cluster.Config) { fault.Hook(0, nc) }})
	const regions = 3
	table := 0
	type op struct {
		name string
		// prepare brings a fresh table to where the procedure starts, and
		// returns the procedure; check asserts the outcome; undone, if
		// set, what a rollback leaves (the procedure can be aborted).
		prepare func(name string) procedure.Procedure
		check   func(name string)
		undone  func(name string)
	}
	must := func(p procedure.Procedure, err error) procedure.Procedure {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	created := func(name string) {
		h.mustSucceed(h.createTable("", name, regions), 30*time.Second)
	}
	disabled := func(name string) {
		created(name)
		h.mustSucceed(h.submit(mustDisable(t, "", name), ""), 30*time.Second)
	}
	closed := func(name string) {
		r := h.reader()
		domain.ScanRegions(r, func(region string, rg domain.Region) bool {
			if rg.Table == "default:"+name && rg.State != domain.RegionClosed && rg.State != domain.RegionOffline {
				t.Errorf("%s: region %s %s after the disable", name, region, rg.State)
			}
			return true
		})
	}
	isOpen := func(name string) { h.checkTableOpen("default:"+name, regions) }
	gone := func(name string) { h.checkTableGone("default:" + name) }
	ops := []op{
		{"create", func(name string) procedure.Procedure { return must(domain.NewCreateTable("", name, regions)) }, isOpen, gone},
		{"disable", func(name string) procedure.Procedure { created(name); return mustDisable(t, "", name) }, closed, isOpen},
		{"enable", func(name string) procedure.Procedure { disabled(name); return must(domain.NewEnableTable("", name)) }, isOpen, closed},
		{"move", func(name string) procedure.Procedure {
			created(name)
			var region string
			domain.ScanRegions(h.reader(), func(r string, rg domain.Region) bool {
				if rg.Table == "default:"+name {
					region = r
					return false
				}
				return true
			})
			lm, _ := h.leader()
			return must(lm.dom.MoveRegionProcedure(region, ""))
		}, isOpen, nil},
		{"delete", func(name string) procedure.Procedure { disabled(name); return must(domain.NewDeleteTable("", name)) }, gone, nil},
		{"balance", func(name string) procedure.Procedure {
			created(name)
			lm, _ := h.leader()
			return must(lm.dom.BalanceProcedure())
		}, isOpen, nil},
	}
	rolledBack := 0
	step := 1
	if testing.Short() {
		step = 2
	}
	// run runs o on a fresh table with the leader lost at write `at` of the
	// procedure (0: none), and returns the writes it made. With abortAt,
	// the procedure is aborted after that write instead, and the leader is
	// lost two writes later, in its rollback.
	run := func(o op, at int, abortAt ...int) int {
		table++
		name := fmt.Sprintf("%s%d", o.name, table)
		p := o.prepare(name)
		before := fault.Writes()
		aborting := len(abortAt) > 0
		if aborting {
			fault.AbortAfter(abortAt[0])
			fault.Arm(abortAt[0] + 1)
		} else if at > 0 {
			fault.Arm(at - 1)
		}
		id := h.submit(p, name)
		var info procedure.Info
		testwait.For(t, 2*time.Minute, fmt.Sprintf("%s with the leader lost at write %d (aborted: %v)", name, at, abortAt), func() bool {
			fault.Settle(t, h.c, id)
			li, x := h.c.LeaderNow()
			if x == nil {
				return false
			}
			var err error
			if info, err = x.Get(id); err != nil || !info.State.Terminal() {
				return false
			}
			// Ended in the replicated log, not only in the memory of an
			// executor whose last write was the one that failed.
			data, ok := h.masters[li].node.FSM().Proc(id)
			if !ok {
				return false
			}
			stored, err := procedure.DecodeInfo(data)
			return err == nil && stored.State.Terminal()
		})
		fault.Disarm() // if the procedure ended before that write
		switch {
		case info.State == procedure.Success:
			o.check(name)
		case aborting && info.State == procedure.RolledBack:
			rolledBack++
			o.undone(name)
		default:
			t.Fatalf("%s with the leader lost at write %d (aborted: %v): %s (%s)", name, at, abortAt, info.State, info.Error)
		}
		h.checkNoDoubles()
		return fault.Writes() - before
	}
	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			// Writes are counted across the cluster: a background
			// procedure (a crash recovery after a lease lost on a loaded
			// machine) adds to them, and a later run may end before the
			// write it is armed for. Every run's outcome is checked; the
			// log says how many of the faults took effect.
			writes := run(o, 0)
			before, runs := fault.Cuts(), 0
			for at := 1; at <= min(writes, maxCrashPoints); at += step {
				run(o, at)
				runs++
			}
			cuts := fault.Cuts() - before
			t.Logf("%s: %d writes in a clean run; the leader lost at %d of %d runs", o.name, writes, cuts, runs)
			if writes < 2 || cuts == 0 {
				t.Fatalf("%s: %d writes, no leader lost: the faults did not take effect", o.name, writes)
			}
			if o.undone == nil {
				return
			}
			// Aborted after each write, the leader lost in the rollback.
			rb := rolledBack
			for k := 1; k < min(writes, maxCrashPoints); k += step {
				run(o, 0, k)
			}
			t.Logf("%s: aborted after each of its writes: %d rolled back, the rest too late to", o.name, rolledBack-rb)
		})
	}

	// An abort lands after the write it follows, as soon as the test sees
	// it: on a loaded machine later than asked, which may be past the
	// states that can roll back. Some must have.
	if rolledBack == 0 {
		t.Fatal("no abort rolled a procedure back")
	}

	// A region server's crash: its ServerCrash procedure (and the region
	// moves it spawns) with the leader lost at each of their writes.
	t.Run("server crash", func(t *testing.T) {
		crash := func(at int) int {
			table++
			name := fmt.Sprintf("crash%d", table)
			created(name)
			per := h.checkTableOpen("default:"+name, regions)
			victim := busiestServer(per)
			before := fault.Writes()
			if at > 0 {
				fault.Arm(at - 1)
			}
			h.stopRS(victim)
			testwait.For(t, 2*time.Minute, fmt.Sprintf("%s's regions reopened with the leader lost at write %d", victim, at), func() bool {
				fault.Settle(t, h.c, 0)
				problems, _ := h.tableOpenProblems("default:"+name, regions)
				return len(problems) == 0 && h.crashesDone()
			})
			fault.Disarm()
			h.checkNoDoubles()
			writes := fault.Writes() - before
			h.startRS(victim, 0, 0)
			testwait.For(t, time.Minute, victim+" back", func() bool { _, ok := h.liveRS()[victim]; return ok })
			return writes
		}
		writes := crash(0)
		before := fault.Cuts()
		for at := 1; at <= min(writes, maxCrashPoints); at += max(step, writes/12) {
			crash(at)
		}
		cuts := fault.Cuts() - before
		t.Logf("server crash: %d writes in a clean run; the leader lost at %d of them", writes, cuts)
		if writes < 2 || cuts == 0 {
			t.Fatalf("server crash: %d writes, no leader lost", writes)
		}
	})
}

// crashesDone says no ServerCrash procedure is unfinished on the leader.
func (h *harness) crashesDone() bool {
	_, x := h.c.LeaderNow()
	if x == nil {
		return false
	}
	for _, c := range x.List(procedure.Filter{Type: domain.TypeServerCrash}) {
		if !c.State.Terminal() {
			return false
		}
	}
	return true
}

// A crash's overlapping waves (waves of 2, up to 4 regions in flight, so
// a wave is spawned while the one before still runs) with the leader lost
// at each of their writes: the new leader resumes every child written and
// the sweep after the cursor, and every region ends open once, none
// reassigned twice or left behind.
func TestOverlappingCrashWavesSurviveALeaderLostAtEveryWrite(t *testing.T) {
	fault := clustertest.NewWriteFaults()
	h := newHarness(t, harnessOpts{servers: 3, node: func(nc *cluster.Config) { fault.Hook(0, nc) },
		domain: func(c *domain.Config) { c.CrashWave, c.CrashInFlight = 2, 4 }})
	const regions = 18
	table := 0
	crash := func(at int) int {
		table++
		name := fmt.Sprintf("waves%d", table)
		h.mustSucceed(h.createTable("", name, regions), 30*time.Second)
		per := h.checkTableOpen("default:"+name, regions)
		victim := busiestServer(per)
		before := fault.Writes()
		if at > 0 {
			fault.Arm(at - 1)
		}
		h.stopRS(victim)
		testwait.For(t, 2*time.Minute, fmt.Sprintf("%s's %d regions reopened with the leader lost at write %d", victim, per[victim], at), func() bool {
			fault.Settle(t, h.c, 0)
			problems, _ := h.tableOpenProblems("default:"+name, regions)
			return len(problems) == 0 && h.crashesDone()
		})
		fault.Disarm()
		h.checkNoDoubles()
		writes := fault.Writes() - before
		h.startRS(victim, 0, 0)
		testwait.For(t, time.Minute, victim+" back", func() bool { _, ok := h.liveRS()[victim]; return ok })
		return writes
	}
	writes := crash(0)
	before := fault.Cuts()
	for at := 1; at <= min(writes, maxCrashPoints); at += max(1, writes/12) {
		crash(at)
	}
	cuts := fault.Cuts() - before
	t.Logf("overlapping crash waves: %d writes in a clean run; the leader lost at %d of them", writes, cuts)
	if writes < 4 || cuts == 0 {
		t.Fatalf("overlapping crash waves: %d writes, no leader lost", writes)
	}
}
