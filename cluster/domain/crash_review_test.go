package domain_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/store"
)

// A crash wave meets a region of the dead server whose lock another
// procedure (an external region lock) holds: the wave cannot take it, so
// that region's child is written unprepared and not holding its locks,
// its record left on the dead server; it waits for the lock and then does
// its own PREPARE. The other regions of the wave are prepared as usual.
// Every region of the dead server ends open exactly once.
func TestCrashWaveLeavesALockedRegionToItsOwnPrepare(t *testing.T) {
	const regions = 12
	h := newHarness(t, harnessOpts{servers: 3, domain: func(c *domain.Config) { c.CrashWave = 4 }})
	h.mustSucceed(h.createTable("", "t", regions), 30*time.Second)
	per := h.checkTableOpen("default:t", regions)
	victim := busiestServer(per)
	var onVictim []string
	for rg, srvs := range h.hosted() {
		for _, s := range srvs {
			if s == victim {
				onVictim = append(onVictim, rg)
			}
		}
	}
	sort.Strings(onVictim)
	if len(onVictim) < 2 {
		t.Fatalf("%s hosts %v: want two regions at least", victim, onVictim)
	}
	held := onVictim[0]
	m, x := h.leader()
	lk, err := m.dom.AcquireLock(x, catalog.LockRequest{Kind: domain.LockKindRegion, Names: []string{held},
		Exclusive: true, Holder: "review", Nonce: "review-held"})
	if err != nil || lk.State != domain.LockAcquired {
		t.Fatalf("lock of %s: %+v, %v", held, lk, err)
	}
	h.stopRS(victim)

	// The held region's child: written, unprepared, waiting for the lock.
	var child procedure.Info
	var childProc domain.TransitRegionState
	testwait.For(t, time.Minute, "the held region's child waiting for its lock", func() bool {
		// The leader of the moment: on a loaded machine the leadership
		// moves, and the executor that held it answers nothing once stopped.
		m, x = h.leader()
		found := false
		_ = m.node.FSM().View().Procs(func(p store.Proc) error {
			info, err := procedure.DecodeInfo(p.Data)
			if err != nil || info.Type != domain.TypeTransitRegionState {
				return nil
			}
			var c domain.TransitRegionState
			if json.Unmarshal(info.Data, &c) == nil && c.Region == held && !c.From.IsZero() {
				child, childProc, found = info, c, true
			}
			return nil
		})
		if !found {
			return false
		}
		w, err := x.Why(child.ID)
		return err == nil && w.Reason == "waiting for lock"
	})
	if childProc.Prepared || child.Locked {
		t.Errorf("held region's child %d written prepared=%v locked=%v while another procedure held the region", child.ID, childProc.Prepared, child.Locked)
	}
	if rg, ok, err := domain.GetRegion(h.reader(), held); err != nil || !ok || rg.Server != victim {
		t.Errorf("region %s recorded %+v (%v) while its lock was held elsewhere: want it left on %s", held, rg, err, victim)
	}
	if _, err := m.dom.ReleaseLock(context.Background(), x, lk.ID); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, time.Minute, "the crash procedure to end", func() bool {
		_, x = h.leader()
		for _, c := range x.List(procedure.Filter{Type: domain.TypeServerCrash}) {
			if c.State == procedure.Success && strings.HasPrefix(string(c.Result), "server "+victim+"/") {
				if want := fmt.Sprintf(": %d regions reassigned", per[victim]); !strings.Contains(string(c.Result), want) {
					t.Errorf("crash result %q, want %q", c.Result, want)
				}
				return true
			}
		}
		return false
	})
	h.checkTableOpen("default:t", regions)
	h.checkNoDoubles()
}

// A table is disabled after a crash wave picked its regions and before it
// spawns them (at the wave's fail point, where nextWave has read them), or
// before a batch of them takes its locks (the batch's fail point, where
// the wave has grouped them by target): the wave, or the batch, re-reads
// each region under its lock, finds it closed by the disable, and neither
// records it OPENING nor opens it. When the crash procedure ends, the
// table's regions are all CLOSED and none is hosted. Disabled before the
// first batch's locks, the table leaves every batch empty: none is
// spawned.
func TestCrashWaveSpawnedAfterItsTableWasDisabledOpensNothing(t *testing.T) {
	for _, tc := range []struct {
		name, point string
		call        int  // the fail point's call that disables
		noBatch     bool // no AssignBatch in the crash's tree
	}{{"before the wave's spawn", "crash.assign", 2, false}, {"before a batch's locks", "crash.batch", 1, true}} {
		t.Run(tc.name, func(t *testing.T) { crashWaveAfterDisable(t, tc.point, tc.call, tc.noBatch) })
	}
}

func crashWaveAfterDisable(t *testing.T, point string, at int, noBatch bool) {
	const regions = 12
	var (
		mu      sync.Mutex
		h       *harness
		armed   bool
		calls   int
		disable error
	)
	h = newHarness(t, harnessOpts{servers: 3, domain: func(c *domain.Config) {
		c.CrashWave = 2
		c.FailPoint = func(name string) error {
			if name != point {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if !armed {
				return nil
			}
			calls++
			if calls != at {
				return nil
			}
			// The regions are read: disable the table before they are
			// spawned, or their batch locked.
			_, x := h.leader()
			p, err := domain.NewDisableTable("", "t")
			if err == nil {
				var id uint64
				if id, err = x.Submit(p, procedure.SubmitOptions{}); err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					var info procedure.Info
					info, err = x.Wait(ctx, id)
					cancel()
					if err == nil && info.State != procedure.Success {
						err = fmt.Errorf("disable ended %v: %s", info.State, info.Error)
					}
				}
			}
			disable = err
			return nil
		}
	}})
	h.mustSucceed(h.createTable("", "t", regions), 30*time.Second)
	per := h.checkTableOpen("default:t", regions)
	victim := busiestServer(per)
	if per[victim] <= 2 {
		t.Skipf("%s holds %d regions: one wave only", victim, per[victim])
	}
	var names []string
	for rg := range h.hosted() {
		names = append(names, rg)
	}
	mu.Lock()
	armed = true
	mu.Unlock()
	h.stopRS(victim)
	testwait.For(t, time.Minute, "the crash procedure to end", func() bool {
		_, x := h.leader() // of the moment: see TestCrashWaveLeavesALockedRegionToItsOwnPrepare
		for _, c := range x.List(procedure.Filter{Type: domain.TypeServerCrash}) {
			if c.State == procedure.Success && strings.HasPrefix(string(c.Result), "server "+victim+"/") {
				return true
			}
		}
		return false
	})
	mu.Lock()
	if calls < at || disable != nil {
		t.Fatalf("fail point %s reached %d times, disable: %v", point, calls, disable)
	}
	mu.Unlock()
	r := h.reader()
	if len(names) != regions {
		t.Fatalf("%d regions hosted before the crash, want %d", len(names), regions)
	}
	for _, name := range names {
		rg, ok, err := domain.GetRegion(r, name)
		if err != nil || !ok || rg.State != domain.RegionClosed || rg.Server != "" {
			t.Errorf("region %s recorded %+v (%v), want CLOSED nowhere", name, rg, err)
		}
	}
	for rg, srvs := range h.hosted() {
		if len(srvs) > 0 {
			t.Errorf("region %s of the disabled table hosted on %v", rg, srvs)
		}
	}
	if noBatch {
		crash, x := crashOf(t, h, victim, time.Minute)
		if types := crashTree(t, x, crash.ID); types[domain.TypeAssignBatch] != 0 {
			t.Errorf("the crash's tree %v: a batch spawned with nothing left to open", types)
		}
	}
	h.checkNoDoubles()
}

// The server a crash wave picked for its prepared regions dies before any
// open is sent to it (the opens are held at their fail point until it is
// down): the prepared children find their target gone, and open their
// regions elsewhere; the second crash's own wave finds them held by those
// children. Every region ends open exactly once, on the one server left.
func TestCrashWavePreparedTargetDiesBeforeTheOpen(t *testing.T) {
	const regions = 12
	var (
		mu      sync.Mutex
		armed   bool
		holding = true
	)
	reached := make(chan struct{})
	// At 0.1.0's format: a TransitRegionState per region, whose prepared
	// children this checks (a batch's are checked by
	// TestCrashBatchTargetDiesBeforeItsOpens).
	h := newHarness(t, harnessOpts{servers: 3, node: func(c *cluster.Config) { c.Build.MaxFormat = version.Format1 }, domain: func(c *domain.Config) {
		c.CrashWave = 4
		c.FailPoint = func(point string) error {
			if point != "region.open" && point != "region.first_open" {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if !armed || !holding {
				return nil
			}
			if point == "region.first_open" {
				// The crash's parent leaves each open to its child, whose
				// region.open holds it.
				return errors.New("injected: each child sends its own open")
			}
			select {
			case <-reached:
			default:
				close(reached)
			}
			return errors.New("injected: opens held until their target is down")
		}
	}})
	h.mustSucceed(h.createTable("", "t", regions), 30*time.Second)
	per := h.checkTableOpen("default:t", regions)
	victim := busiestServer(per)
	mu.Lock()
	armed = true
	mu.Unlock()
	h.stopRS(victim)
	select {
	case <-reached:
	case <-time.After(time.Minute):
		t.Fatal("no open reached its fail point")
	}
	m, x := h.leader()
	targets := map[string]int{}
	_ = m.node.FSM().View().Procs(func(p store.Proc) error {
		info, err := procedure.DecodeInfo(p.Data)
		if err != nil || info.Type != domain.TypeTransitRegionState {
			return nil
		}
		var c domain.TransitRegionState
		if json.Unmarshal(info.Data, &c) == nil && c.Prepared {
			targets[c.Server.ID]++
		}
		return nil
	})
	target := ""
	for id, n := range targets {
		if target == "" || n > targets[target] {
			target = id
		}
	}
	if target == "" {
		t.Fatal("no prepared child written by the first wave")
	}
	h.stopRS(target)
	// It is expired (its crash noticed and fenced) before the opens go.
	testwait.For(t, time.Minute, "the target expired", func() bool {
		srv, ok, err := domain.GetServer(h.reader(), target)
		return err == nil && ok && srv.State != domain.ServerLive
	})
	mu.Lock()
	holding = false
	mu.Unlock()
	testwait.For(t, 2*time.Minute, "both crash procedures to end", func() bool {
		done := map[string]bool{}
		for _, c := range x.List(procedure.Filter{Type: domain.TypeServerCrash}) {
			if c.State == procedure.Success {
				done[strings.SplitN(strings.TrimPrefix(string(c.Result), "server "), "/", 2)[0]] = true
			}
		}
		return done[victim] && done[target]
	})
	got := h.checkTableOpen("default:t", regions)
	if got[victim] > 0 || got[target] > 0 {
		t.Errorf("regions per server %v: some left on a dead one (%s, %s)", got, victim, target)
	}
	h.checkNoDoubles()
}
