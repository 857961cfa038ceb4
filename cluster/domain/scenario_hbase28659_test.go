package domain_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/rspb"
)

// TestScenarioHBASE28659CrashRecoveryNeverRollsBack replays HBASE-28659
// (HBase ProcV2, "ServerCrashProcedure ... UnsupportedOperationException:
// unhandled state"). A ServerCrashProcedure resumed after a master restart
// met a state its code did not expect (a region whose TRSP was mid-flight,
// a region already reassigned), threw, and the framework set the
// procedure's failure and tried to roll it back; SCP supports no
// rollback, so the rollback itself threw, and the procedure, with the
// dead server's regions, was stuck for good.
//
// Baton's contract (procedure.RetriesUntilDone; procedure/executor.go:
// fail, which hands an untilDone procedure's error to retryLater instead
// of marking it FAILED, and procedure/rollback.go, which a RetriesUntilDone
// root therefore never enters) is that a procedure with no meaningful
// rollback never rolls back: a failing step is retried with backoff until
// it is done, and a failing child is rolled back alone. ServerCrash
// (server_crash.go) says RetryUntilDone, and its region children (assignments with
// From, not Bounded) too; and ServerCrash's steps read the region records
// afresh each time, so a resumed one handles whatever it finds (a region
// some move holds, one already reassigned: its child waits for the lock,
// then finds the region moved on).
//
// The test crashes a region server while its regions are in transition of
// several kinds: one being moved away with its close lost (CLOSING on the
// victim), one being moved onto the victim with its open lost (OPENING
// there), the others plainly OPEN; and it loses the leader at each write
// the recovery makes (clustertest.WriteFaults; every second one in
// -short), while the crash procedure's ASSIGN step throws at every other
// run on each master, the first on a new leader included
// (domain.Config.FailPoint "crash.assign"): the resumed procedure meeting
// what it cannot handle. Each run, the crash procedure
// and the moves must end SUCCESS with no transition in their history
// FAILED, ROLLEDBACK or rolling back, and every region of the table must
// be open exactly once, on a live server, the record matching the
// servers.
//
// Reintroducing the defect — ServerCrash rolled back on a step's error
// (server_crash.go: ServerCrash.RetryUntilDone returning false, so the framework
// marks it FAILED and runs its (empty) rollback) — makes this test fail
// with: "clean run: crash procedure of rs1/8589934593: ROLLEDBACK (fail
// point crash.assign: injected: a state the resumed crash procedure cannot
// handle), want SUCCESS": recovery abandoned, the dead server's regions
// left on it.
func TestScenarioHBASE28659CrashRecoveryNeverRollsBack(t *testing.T) {
	fault := clustertest.NewWriteFaults()
	var (
		mu    sync.Mutex
		runs  = map[int]int{} // crash.assign runs per master
		armed bool
	)
	h := newHarness(t, harnessOpts{servers: 3,
		node: func(nc *cluster.Config) { fault.Hook(0, nc) },
		domainAt: func(i int, c *domain.Config) {
			// One process, one clock: the margin for clock drift need not
			// be a second, which every failover would wait out again.
			c.FenceMargin = 100 * time.Millisecond
			c.FailPoint = func(point string) error {
				if point != "crash.assign" {
					return nil
				}
				mu.Lock()
				defer mu.Unlock()
				if !armed {
					return nil
				}
				runs[i]++
				if runs[i]%2 == 1 {
					return errors.New("injected: a state the resumed crash procedure cannot handle")
				}
				return nil
			}
		}})
	const regions = 6
	table := 0
	// crash runs one crash of the busiest server with the leader lost at
	// write `at` of the recovery (0: none), and returns the writes made.
	crash := func(at int) int {
		table++
		name := fmt.Sprintf("rb%d", table)
		full := "default:" + name
		what := fmt.Sprintf("run %d (leader lost at write %d)", table, at)
		if at == 0 {
			what = "clean run"
		}
		h.mustSucceed(h.createTable("", name, regions), 30*time.Second)
		per := h.checkTableOpen(full, regions)
		victim := busiestServer(per)
		ref := domain.ServerRef{ID: victim, StartCode: h.rs(victim).StartCode()}
		// A region moved off the victim, and one moved onto it: of an
		// earlier table if this one's are all on the victim (a restarted
		// victim, the least loaded, takes a new table's regions).
		var away, onto, ontoTable string
		domain.ScanRegions(h.reader(), func(rn string, rg domain.Region) bool {
			switch {
			case rg.Table == full && rg.Server == victim && away == "":
				away = rn
			case rg.State == domain.RegionOpen && rg.Server != victim && (onto == "" || rg.Table == full):
				onto, ontoTable = rn, rg.Table
			}
			return true
		})
		if away == "" || onto == "" {
			t.Fatalf("%s: no region to move off %s (%q) or onto it (%q)", what, victim, away, onto)
		}
		// Every batch to the victim is lost: its close of the region
		// moved away and its open of the one moved onto it (the dispatcher
		// sends them in one batch, one call at a time).
		lost := h.faults.MustAdd(rpcfault.Rule{
			Name:    "batch to " + ref.String() + " lost",
			Methods: []string{rspb.RegionServer_ExecuteBatch_FullMethodName},
			Fault:   rpcfault.DropRequest,
			When: func(c rpcfault.Call) bool {
				req, ok := c.Request.(*rspb.BatchRequest)
				return ok && req.GetServerId() == ref.ID && req.GetStartCode() == ref.StartCode
			},
		})
		lm, _ := h.leader()
		moveAway, err := lm.dom.MoveRegionProcedure(away, "")
		if err != nil {
			t.Fatal(err)
		}
		moveOnto, err := lm.dom.MoveRegionProcedure(onto, victim)
		if err != nil {
			t.Fatal(err)
		}
		moves := []uint64{h.submit(moveAway, name+"-away"), h.submit(moveOnto, name+"-onto")}
		// Both in transition on the victim, then a batch lost after that:
		// the one carrying their ops.
		inFlight := -1
		testwait.For(t, 20*time.Second, what+": the close and the open sent to "+ref.String()+" lost", func() bool {
			if inFlight >= 0 {
				return lost.Fired() > inFlight
			}
			r := h.reader()
			a, aok, _ := domain.GetRegion(r, away)
			o, ook, _ := domain.GetRegion(r, onto)
			if aok && ook && a.State == domain.RegionClosing && a.OnServer(ref) && o.State == domain.RegionOpening && o.OnServer(ref) {
				inFlight = lost.Fired()
			}
			return false
		})

		before := fault.Writes()
		mu.Lock()
		armed = true
		mu.Unlock()
		if at > 0 {
			fault.Arm(at - 1)
		}
		h.stopRS(victim)
		var scp uint64
		testwait.For(t, time.Minute, what+": the crash procedure of "+ref.String()+" and the moves to end", func() bool {
			fault.Settle(t, h.c, 0)
			li, x := h.c.LeaderNow()
			if x == nil {
				return false
			}
			if scp == 0 {
				scp = crashProcOf(h, li, x, ref)
			}
			if scp == 0 {
				return false
			}
			for _, id := range append([]uint64{scp}, moves...) {
				if info, err := x.Get(id); err != nil || !info.State.Terminal() {
					return false
				}
			}
			return true
		})
		fault.Disarm()
		mu.Lock()
		armed = false
		mu.Unlock()
		lost.Remove()
		writes := fault.Writes() - before

		_, x := h.leader()
		for _, id := range append([]uint64{scp}, moves...) {
			info, err := x.Get(id)
			if err != nil {
				t.Fatalf("%s: procedure %d: %v", what, id, err)
			}
			kind := "move " + fmt.Sprint(id)
			if id == scp {
				kind = "crash procedure of " + ref.String()
			}
			if info.State != procedure.Success {
				t.Fatalf("%s: %s: %s (%s), want SUCCESS", what, kind, info.State, info.Error)
			}
			for _, tr := range info.History {
				if tr.RollingBack || tr.State == procedure.Failed || tr.State == procedure.RolledBack {
					t.Errorf("%s: %s went through %+v: a procedure that may not roll back entered a rollback", what, kind, tr)
				}
			}
		}
		h.checkTableOpen(full, regions)
		if ontoTable != full {
			h.checkTableOpen(ontoTable, regions)
		}
		domain.ScanRegions(h.reader(), func(rn string, rg domain.Region) bool {
			if rg.Table == full && rg.Server == victim {
				t.Errorf("%s: region %s still recorded on the dead %s: %+v", what, rn, victim, rg)
			}
			return true
		})
		h.startRS(victim, 0, 0)
		return writes
	}

	writes := crash(0)
	if writes < 3 {
		t.Fatalf("clean run: %d writes: the recovery did not run", writes)
	}
	step := 1
	if testing.Short() {
		step = 2
	}
	cuts := fault.Cuts()
	for at := 1; at <= writes; at += step {
		crash(at)
	}
	t.Logf("%d writes in a clean run; the leader lost at %d of them", writes, fault.Cuts()-cuts)
	if fault.Cuts() == cuts {
		t.Fatal("no leader lost: the write faults did not take effect")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs) == 0 {
		t.Fatal("the crash procedure's ASSIGN never ran")
	}
}

// crashProcOf is the id of the ServerCrash procedure of incarnation ref on
// leader li's executor x, 0 if there is none yet.
func crashProcOf(h *harness, li int, x *procedure.Executor, ref domain.ServerRef) uint64 {
	for _, c := range x.List(procedure.Filter{Type: domain.TypeServerCrash}) {
		data, ok := h.masters[li].node.FSM().Proc(c.ID)
		if !ok {
			continue
		}
		info, err := procedure.DecodeInfo(data)
		if err != nil {
			continue
		}
		var p domain.ServerCrash
		if json.Unmarshal(info.Data, &p) == nil && p.Server == ref {
			return c.ID
		}
	}
	return 0
}
