package domain_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
)

// A create's region costs its TransitRegionState one write after the
// insert that rides in the parent's spawn, which did PREPARE's work
// (target picked, OPENING recorded) in its name: the last (OPEN
// recorded, the procedure done and forgotten: the write deletes its
// record, so its Runs, which count the record's writes, stop at the
// insert).
func TestCreateAssignsInOneWritePerRegion(t *testing.T) {
	const regions = 8
	h := newHarness(t, harnessOpts{masters: 1, servers: 2})
	_, x := h.leader()
	var mu sync.Mutex
	writes := map[uint64]uint32{}
	x.AddListener(func(info procedure.Info) {
		if info.Type != domain.TypeTransitRegionState || len(info.Runs) == 0 {
			return
		}
		n := info.Runs[len(info.Runs)-1].Last
		if info.State == procedure.Success {
			n++ // the forgetting write
		}
		mu.Lock()
		writes[info.ID] = max(writes[info.ID], n)
		mu.Unlock()
	})
	h.mustSucceed(h.createTable("", "t", regions), 20*time.Second)
	h.checkTableOpen("default:t", regions)
	mu.Lock()
	defer mu.Unlock()
	if len(writes) != regions {
		t.Fatalf("saw %d region procedures, want %d", len(writes), regions)
	}
	for id, n := range writes {
		if n != 2 {
			t.Errorf("region procedure %d made %d writes, want 2 (insert with OPENING, OPEN with its end)", id, n)
		}
	}
}

// The leader dies after each write of a create's assignment: after the
// spawn (the region OFFLINE, its procedure inserted), after PREPARE's
// (OPENING@S committed, the open not yet sent), and after the last (OPEN
// recorded, the procedure done, the create not yet ENABLED). The new
// leader finishes the create; the region is open once, where recorded.
func TestAssignSurvivesLeaderCrashAtEachWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		// point is the fail point held while the leader is killed ("":
		// none, the region servers start only after the kill).
		point string
		// reached reports that the write in question committed.
		reached func(rg domain.Region) bool
	}{
		{"after the spawn", "", func(rg domain.Region) bool { return rg.State == domain.RegionOffline }},
		{"after PREPARE", "region.open", func(rg domain.Region) bool { return rg.State == domain.RegionOpening && rg.ProcID != 0 }},
		{"after the last write", "create.enable", func(rg domain.Region) bool { return rg.State == domain.RegionOpen && rg.ProcID == 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var armed atomic.Bool
			armed.Store(tc.point != "")
			release := make(chan struct{})
			servers := 2
			if tc.point == "" {
				servers = 0 // PREPARE finds no server and waits, writing nothing
			}
			h := newHarness(t, harnessOpts{servers: servers, domain: func(c *domain.Config) {
				c.FailPoint = func(p string) error {
					if p == "region.first_open" && tc.point == "region.open" && armed.Load() {
						return errors.New("injected: the child sends its open itself") // and is held there
					}
					if p == tc.point && armed.Load() {
						<-release
					}
					return nil
				}
			}})
			checkDoubles := h.watchDoubles()
			id := h.createTable("", "t", 1)
			region := domain.RegionName("default:t", 0, id)
			_, x := h.leader()
			testwait.For(t, 20*time.Second, "the assignment to reach its write", func() bool {
				rg, ok, _ := domain.GetRegion(h.reader(), region)
				if !ok || !tc.reached(rg) {
					return false
				}
				// The region procedure exists (the spawn committed) and
				// is not finished, unless its last write is the point:
				// then it is finished, or gone (a create forgets each
				// child as it succeeds).
				live := false
				for _, p := range x.List(procedure.Filter{Type: domain.TypeTransitRegionState}) {
					live = live || !p.State.Terminal()
				}
				return live != (tc.point == "create.enable")
			})
			old := h.leaderIndex()
			// The kill does not wait for the held step for long (the
			// executor's stop is bounded); let go of it once the old
			// leader's Raft is down, so it can write nothing more.
			h.killMaster(old)
			armed.Store(false)
			close(release)
			if tc.point == "" {
				h.startRS("rs1", 0, 0)
			}
			h.mustSucceed(id, 30*time.Second)
			if h.leaderIndex() == old {
				t.Fatal("the old leader still leads")
			}
			checkDoubles()
			h.checkTableOpen("default:t", 1)
		})
	}
}

// Table procedures spawn their region children a wave (Config.RegionWave)
// at a time: never more of them live at once, and every region moves.
func TestTableProceduresSpawnInWaves(t *testing.T) {
	const regions, wave = 10, 3
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, domain: func(c *domain.Config) { c.RegionWave = wave }})
	_, x := h.leader()
	var mu sync.Mutex
	live := map[uint64]bool{}
	most := 0
	x.AddListener(func(info procedure.Info) {
		if info.Type != domain.TypeTransitRegionState {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if info.State.Terminal() {
			delete(live, info.ID)
		} else {
			live[info.ID] = true
		}
		most = max(most, len(live))
	})
	check := func(what string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if most == 0 || most > wave {
			t.Errorf("%s: %d region procedures live at once, want 1..%d", what, most, wave)
		}
		most = 0
	}
	h.mustSucceed(h.createTable("", "t", regions), 30*time.Second)
	check("create")
	h.checkTableOpen("default:t", regions)
	h.mustSucceed(h.submit(mustDisable(t, "", "t"), ""), 30*time.Second)
	check("disable")
	domain.ScanRegions(h.reader(), func(name string, rg domain.Region) bool {
		if rg.State != domain.RegionClosed {
			t.Errorf("region %s is %s after the disable", name, rg.State)
		}
		return true
	})
	enable, err := domain.NewEnableTable("", "t")
	if err != nil {
		t.Fatal(err)
	}
	h.mustSucceed(h.submit(enable, ""), 30*time.Second)
	check("enable")
	h.checkTableOpen("default:t", regions)
	h.mustSucceed(h.submit(mustDisable(t, "", "t"), ""), 30*time.Second)
	del, err := domain.NewDeleteTable("", "t")
	if err != nil {
		t.Fatal(err)
	}
	h.mustSucceed(h.submit(del, ""), 30*time.Second)
	h.checkTableGone("default:t")
}

// The leader dies right after a create's spawn wrote its regions
// OPENING on the targets it picked (the opens held, not yet sent), and
// one of those targets restarts meanwhile (a new incarnation: the
// recorded one is gone). The new leader resumes each child at
// OPEN_DISPATCH: the ones on the surviving target open there, the ones
// on the gone incarnation are planned again, and every region ends open
// once. Stopped for good, its regions wait for its lease to run out
// (it may serve them until then) and open on the other server.
func TestPreparedAssignmentsSurviveFailoverWithTheirTargetGone(t *testing.T) {
	for _, restart := range []bool{true, false} {
		t.Run(map[bool]string{true: "restarted", false: "stopped"}[restart], func(t *testing.T) {
			testPreparedFailoverTargetGone(t, restart)
		})
	}
}

func testPreparedFailoverTargetGone(t *testing.T, restart bool) {
	const regions = 6
	var armed atomic.Bool
	armed.Store(true)
	release := make(chan struct{})
	h := newHarness(t, harnessOpts{servers: 2, domain: func(c *domain.Config) {
		c.FailPoint = func(p string) error {
			if p == "region.first_open" && armed.Load() {
				return errors.New("injected: the child sends its open itself") // and is held there
			}
			if p == "region.open" && armed.Load() {
				<-release
			}
			return nil
		}
	}})
	checkDoubles := h.watchDoubles()
	id := h.createTable("", "t", regions)
	targets := map[string]int{}
	testwait.For(t, 20*time.Second, "the spawn to record every region OPENING", func() bool {
		clear(targets)
		n := 0
		domain.ScanRegions(h.reader(), func(_ string, rg domain.Region) bool {
			if rg.Table == "default:t" && rg.State == domain.RegionOpening && rg.ProcID != 0 {
				n++
				targets[rg.Server]++
			}
			return true
		})
		return n == regions
	})
	if len(targets) != 2 {
		t.Fatalf("the spawn placed the regions on %v, want both servers", targets)
	}
	old := h.leaderIndex()
	h.killMaster(old)
	h.stopRS("rs1")
	if restart {
		h.startRS("rs1", 0, 0)
	}
	armed.Store(false)
	close(release)
	h.mustSucceed(id, 60*time.Second)
	checkDoubles()
	h.checkTableOpen("default:t", regions)
}

// A create fails at its first region's open while its other regions,
// prepared in the spawn (OPENING recorded in their children's names),
// have not run (one worker): the rollback leaves nothing open, recorded
// or hosted, though those children never ran a step to undo.
func TestCreateRollsBackPreparedChildrenThatNeverRan(t *testing.T) {
	const regions = 40
	var opens atomic.Int64
	h := newHarness(t, harnessOpts{masters: 1, servers: 2,
		domain: func(c *domain.Config) {
			c.FailPoint = refuseOpens(func() { opens.Add(1) })
		},
		node: oneWorker})
	id := h.createTable("", "t", regions)
	info := h.wait(id, 60*time.Second)
	h.checkRolledBack(info, "default:t")
	if n := opens.Load(); n >= regions {
		t.Fatalf("all %d region procedures ran their first step: the case is not reached", n)
	}
	t.Logf("%d of %d region procedures ran a step", opens.Load(), regions)
}

// The table procedures of the cluster share one region budget
// (Config.RegionBudget): never more of their region procedures live at
// once, a table that finds no room says so in its Why, and every table
// gets its turn.
func TestTableProceduresShareTheRegionBudget(t *testing.T) {
	const tables, regions, wave, budget = 3, 5, 3, 4
	// No region server at first: the first wave cannot open, and holds
	// its places.
	var live liveRegionProcs
	h := newHarness(t, harnessOpts{masters: 1, servers: 0, domain: func(c *domain.Config) { c.RegionWave, c.RegionBudget = wave, budget },
		node: live.node})
	_, x := h.leader()
	var ids []uint64
	for i := range tables {
		ids = append(ids, h.createTable("", fmt.Sprintf("t%d", i), regions))
	}
	waitForBudgetWait(t, x, ids, 30*time.Second)
	h.startRS("rs1", 0, 0)
	for i, id := range ids {
		h.mustSucceed(id, 30*time.Second)
		h.checkTableOpen(fmt.Sprintf("default:t%d", i), regions)
	}
	if most := live.Most(); most == 0 || most > budget {
		t.Errorf("%d region procedures live at once, want 1..%d", most, budget)
	}
}
