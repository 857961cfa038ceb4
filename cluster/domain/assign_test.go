package domain_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
)

// A create's region costs its TransitRegionState two writes after the
// insert that rides in the parent's spawn: PREPARE's (target picked,
// OPENING recorded) and the last (OPEN recorded, the procedure done).
func TestCreateAssignsInTwoWritesPerRegion(t *testing.T) {
	const regions = 8
	h := newHarness(t, harnessOpts{masters: 1, servers: 2})
	_, x := h.leader()
	var mu sync.Mutex
	writes := map[uint64]uint32{}
	x.AddListener(func(info procedure.Info) {
		if info.Type != domain.TypeTransitRegionState || len(info.Runs) == 0 {
			return
		}
		mu.Lock()
		writes[info.ID] = max(writes[info.ID], info.Runs[len(info.Runs)-1].Last)
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
		if n != 3 {
			t.Errorf("region procedure %d made %d writes, want 3 (insert, OPENING, OPEN with its end)", id, n)
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
				// is not finished, unless its last write is the point.
				for _, p := range x.List(procedure.Filter{Type: domain.TypeTransitRegionState}) {
					if p.State.Terminal() == (tc.point == "create.enable") {
						return true
					}
				}
				return false
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

// The table procedures of the cluster share one region budget
// (Config.RegionBudget): never more of their region procedures live at
// once, a table that finds no room says so in its Why, and every table
// gets its turn.
func TestTableProceduresShareTheRegionBudget(t *testing.T) {
	const tables, regions, wave, budget = 3, 5, 3, 4
	// No region server at first: the first wave cannot open, and holds
	// its places.
	h := newHarness(t, harnessOpts{masters: 1, servers: 0, domain: func(c *domain.Config) { c.RegionWave, c.RegionBudget = wave, budget }})
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
	var ids []uint64
	for i := range tables {
		ids = append(ids, h.createTable("", fmt.Sprintf("t%d", i), regions))
	}
	testwait.For(t, 30*time.Second, "a create waiting for the region budget", func() bool {
		for _, id := range ids {
			if w, err := x.Why(id); err == nil && strings.Contains(w.Note, "waiting for the region budget") {
				return true
			}
		}
		return false
	})
	h.startRS("rs1", 0, 0)
	for i, id := range ids {
		h.mustSucceed(id, 30*time.Second)
		h.checkTableOpen(fmt.Sprintf("default:t%d", i), regions)
	}
	mu.Lock()
	defer mu.Unlock()
	if most == 0 || most > budget {
		t.Errorf("%d region procedures live at once, want 1..%d", most, budget)
	}
}
