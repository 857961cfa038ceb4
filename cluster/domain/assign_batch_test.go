package domain_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// A crash's regions reopened in batches (AssignBatch, from format 2): the
// happy path, the regions a batch hands on (refused, its target gone), a
// leader lost while a batch's opens are under way, and a cluster still at
// 0.1.0's format, whose crash spawns a procedure per region.

// crashTree counts the types of the crash procedure's descendants,
// walking its children (a child the crash forgot as it succeeded is
// answered from the summary its tree keeps, at every moment).
func crashTree(t *testing.T, x *procedure.Executor, root uint64) map[string]int {
	t.Helper()
	types := map[string]int{}
	ids := []uint64{root}
	for len(ids) > 0 {
		info, err := x.Get(ids[0])
		ids = ids[1:]
		if err != nil {
			t.Fatalf("procedure of the crash tree: %v", err)
		}
		if info.ID != root {
			types[info.Type]++
		}
		ids = append(ids, info.Children...)
	}
	return types
}

// openTable creates table default:t of regions regions, waits until each
// is open once, and returns the regions per server and the server holding
// the most: the one a test crashes.
func openTable(t *testing.T, h *harness, regions int) (per map[string]int, victim string) {
	t.Helper()
	h.mustSucceed(h.createTable("", "t", regions), time.Minute)
	per = h.checkTableOpen("default:t", regions)
	return per, busiestServer(per)
}

// otherServer is a server of per other than victim (with two, the one
// left once victim is down).
func otherServer(per map[string]int, victim string) string {
	for id := range per {
		if id != victim {
			return id
		}
	}
	return ""
}

// crashOf waits for the crash procedure of victim to succeed, and returns
// it and the leader's executor that knows it.
func crashOf(t *testing.T, h *harness, victim string, d time.Duration) (procedure.Info, *procedure.Executor) {
	t.Helper()
	var crash procedure.Info
	var x *procedure.Executor
	testwait.For(t, d, "the crash of "+victim+" handled", func() bool {
		_, x = h.leader()
		for _, i := range x.List(procedure.Filter{Type: domain.TypeServerCrash}) {
			if i.State == procedure.Success && strings.HasPrefix(string(i.Result), "server "+victim+"/") {
				crash = i
				return true
			}
		}
		return false
	})
	return crash, x
}

// From format 2 a crash's regions are reopened by AssignBatch children, a
// batch per server picked and CrashBatch regions, with no procedure per
// region when every open succeeds; each region ends open once. At 0.1.0's
// format (a member's build capped at format 1: an upgrade under way) the
// crash spawns a TransitRegionState per region, as 0.1.0 does, and no
// batch, which 0.1.0 would not know: the records written are counted at
// the first open step (a summary of the finished tree is format 2's).
func TestCrashBatchesOnlyFromFormat2(t *testing.T) {
	for _, tc := range []struct {
		name    string
		format  version.Format
		batches bool
	}{{"format 2", 0, true}, {"format 1", version.Format1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			const regions = 30
			var (
				mu      sync.Mutex
				h       *harness
				armed   bool
				written map[string]int // the procedure records at the first open step
			)
			h = newHarness(t, harnessOpts{servers: 3,
				node: func(c *cluster.Config) {
					if tc.format != 0 {
						c.Build.MaxFormat = tc.format
					}
				},
				domain: func(c *domain.Config) {
					c.CrashWave, c.CrashBatch = 8, 3
					c.FailPoint = func(point string) error {
						mu.Lock()
						defer mu.Unlock()
						if point != "region.open" || !armed || written != nil {
							return nil
						}
						m, _ := h.leader()
						written = map[string]int{}
						_ = m.node.FSM().View().Procs(func(p store.Proc) error {
							if info, err := procedure.DecodeInfo(p.Data); err == nil {
								written[info.Type]++
							}
							return nil
						})
						return nil
					}
				}})
			per, victim := openTable(t, h, regions)
			mu.Lock()
			armed = true
			mu.Unlock()
			h.stopRS(victim)
			crash, x := crashOf(t, h, victim, 2*time.Minute)
			if want := fmt.Sprintf(": %d regions reassigned", per[victim]); !strings.Contains(string(crash.Result), want) {
				t.Errorf("crash result %q, want %q", crash.Result, want)
			}
			mu.Lock()
			w := written
			mu.Unlock()
			if tc.batches {
				// Two live servers, batches of at most 3: a batch per 3
				// regions at least, and nothing else.
				types := crashTree(t, x, crash.ID)
				if types[domain.TypeAssignBatch] < (per[victim]+2)/3 || types[domain.TypeTransitRegionState] != 0 {
					t.Errorf("the crash's tree %v: want a batch per 3 of %d regions at least, and no procedure per region", types, per[victim])
				}
				if w[domain.TypeAssignBatch] == 0 || w[domain.TypeTransitRegionState] != 0 {
					t.Errorf("records at the first open step %v: want batches only", w)
				}
			} else if w[domain.TypeAssignBatch] != 0 || w[domain.TypeTransitRegionState] == 0 {
				t.Errorf("records at the first open step %v at format 1: want a TransitRegionState per region and no batch", w)
			}
			got := h.checkTableOpen("default:t", regions)
			if got[victim] > 0 {
				t.Errorf("regions per server %v: some on the dead %s", got, victim)
			}
			h.checkNoDoubles()
		})
	}
}

// A batch whose server refuses every open hands each region to a
// TransitRegionState of its own, which opens it elsewhere.
func TestCrashBatchHandsRefusedOpensToTheirOwnAssignment(t *testing.T) {
	const regions = 12
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, domain: func(c *domain.Config) { c.CrashBatch = 4 }})
	_, victim := openTable(t, h, regions)
	// A server that refuses every open, holding nothing: the crash's
	// least loaded, so it gets batches.
	h.startRS("rs3", 0, 1)
	testwait.For(t, 30*time.Second, "rs3 live", func() bool {
		srv, ok, err := domain.GetServer(h.reader(), "rs3")
		return err == nil && ok && srv.State == domain.ServerLive
	})
	h.stopRS(victim)
	crash, x := crashOf(t, h, victim, 2*time.Minute)
	types := crashTree(t, x, crash.ID)
	if types[domain.TypeAssignBatch] == 0 || types[domain.TypeTransitRegionState] == 0 {
		t.Errorf("the crash's tree %v: want batches, and the regions rs3 refused each handed to its own assignment", types)
	}
	if !strings.Contains(h.c.Logs("m1"), "region failed to open in a batch") {
		t.Error("no batch saw an open refused: the case is not reached")
	}
	got := h.checkTableOpen("default:t", regions)
	if got["rs3"] > 0 || got[victim] > 0 {
		t.Errorf("regions per server %v: some on the refusing rs3 or the dead %s", got, victim)
	}
	h.checkNoDoubles()
}

// A batch's target dies after the batch was written and before its opens
// go out (they are held at their fail point until it is down): the batch
// finds it gone and hands every region to an assignment of its own, which
// opens it on the server left. Each region ends open once.
func TestCrashBatchTargetDiesBeforeItsOpens(t *testing.T) {
	const regions = 12
	hold := newOpenHold(t)
	h := newHarness(t, harnessOpts{servers: 3, domain: func(c *domain.Config) { c.FailPoint = hold.failPoint }})
	_, victim := openTable(t, h, regions)
	m, batches := hold.crashBatches(t, h, victim)
	// The batches written hold their regions OPENING on their target, in
	// their name; stop the target of the first.
	for _, p := range batchProblems(m.node.FSM(), batches) {
		t.Error(p)
	}
	second := batches[0].Target.ID
	h.stopRS(second)
	testwait.For(t, time.Minute, second+" expired", func() bool {
		srv, ok, err := domain.GetServer(h.reader(), second)
		return err == nil && ok && srv.State != domain.ServerLive
	})
	hold.release()
	crashOf(t, h, victim, 2*time.Minute)
	crashOf(t, h, second, 2*time.Minute)
	var left string
	for id := range h.liveRS() {
		left = id
	}
	testwait.For(t, 2*time.Minute, "every region open on "+left, func() bool {
		problems, got := h.tableOpenProblems("default:t", regions)
		return len(problems) == 0 && got[left] == regions
	})
	if logs := h.c.Logs("m1") + h.c.Logs("m2") + h.c.Logs("m3"); !strings.Contains(logs, "batch of crashed regions settled in part") {
		t.Error("no batch handed a region on: the case (its target gone) is not reached")
	}
	h.checkNoDoubles()
}

// The leader is lost three times while a crash's batches have their opens
// under way (at the fail point each batch's open step passes): each new
// leader sends the opens of every batch still OPEN again, and the crash
// ends with each region reassigned once and open once.
func TestCrashBatchSurvivesALeaderLostWhileItsOpensAreUnderWay(t *testing.T) {
	const wave, regions = 4, 24
	var (
		calls  int
		killAt = map[int]bool{1: true, 4: true, 7: true}
		seen   []string
	)
	w := startWaveFailover(t, wave, regions, "region.open", "the leader is lost while a batch's opens are under way", func(w *waveFailover, i int) bool {
		calls++
		if calls == 1 {
			f := w.h.masters[i].node.FSM()
			bs := batchesIn(f)
			if len(bs) == 0 {
				seen = append(seen, "no batch written when the first open ran")
			}
			seen = append(seen, batchProblems(f, bs)...)
		}
		return killAt[calls]
	})
	failovers := w.failovers("the crash procedure to end through failovers mid-batch")
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

// batchRecord is an AssignBatch's stored record.
type batchRecord struct {
	id uint64
	domain.AssignBatch
}

// batchesIn lists the AssignBatch records in f.
func batchesIn(f *raftfsm.FSM) []batchRecord {
	var out []batchRecord
	_ = f.View().Procs(func(p store.Proc) error {
		info, err := procedure.DecodeInfo(p.Data)
		if err != nil || info.Type != domain.TypeAssignBatch {
			return nil
		}
		var b domain.AssignBatch
		if json.Unmarshal(info.Data, &b) == nil {
			out = append(out, batchRecord{info.ID, b})
		}
		return nil
	})
	return out
}

// batchProblems checks each batch's regions are recorded OPENING on its
// target in its name, as the spawn's write left them, and that no region
// is in two batches.
func batchProblems(f *raftfsm.FSM, bs []batchRecord) []string {
	var problems []string
	r := domain.NewReader(f.Get, f.Scan)
	owner := map[string]uint64{}
	for _, b := range bs {
		if len(b.Regions) == 0 {
			problems = append(problems, fmt.Sprintf("batch %d holds no region", b.id))
		}
		for _, br := range b.Regions {
			if o, dup := owner[br.Name]; dup {
				problems = append(problems, fmt.Sprintf("region %s in batches %d and %d", br.Name, o, b.id))
			}
			owner[br.Name] = b.id
			rg, ok, err := domain.GetRegion(r, br.Name)
			if err != nil || !ok || rg.State != domain.RegionOpening || rg.Server != b.Target.ID || rg.StartCode != b.Target.StartCode || rg.ProcID != b.id {
				problems = append(problems, fmt.Sprintf("batch %d's region %s recorded %+v (%v), want OPENING on %s in its name", b.id, br.Name, rg, err, b.Target))
			}
		}
	}
	return problems
}

// A crash's step fails between two of its batches (at the crash.batch
// fail point, after an earlier batch of the same wave was reserved, its
// locks taken, and prepared, its regions' OPENING records pending in the
// step's write). The failed step's reservations and writes go with it;
// the step run again reassigns every region once, and leaves no lock held
// and no empty batch.
func TestCrashStepFailingBetweenItsBatchesLeavesNothingBehind(t *testing.T) {
	const regions = 12
	var (
		mu    sync.Mutex
		armed bool
		calls int
		fails int
	)
	h := newHarness(t, harnessOpts{masters: 1, servers: 3, domain: func(c *domain.Config) {
		c.CrashBatch = 1 // a batch per region: several flushes in one step
		c.FailPoint = func(point string) error {
			if point != "crash.batch" {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if !armed {
				return nil
			}
			calls++
			if calls == 2 || calls == 5 { // the first attempt's second batch, and again in the retry
				fails++
				return errors.New("injected: crash.batch")
			}
			return nil
		}
	}})
	per, victim := openTable(t, h, regions)
	if per[victim] < 3 {
		t.Skipf("%s holds %d regions", victim, per[victim])
	}
	mu.Lock()
	armed = true
	mu.Unlock()
	h.stopRS(victim)
	_, x := crashOf(t, h, victim, 2*time.Minute)
	mu.Lock()
	if fails < 2 {
		t.Fatalf("crash.batch failed %d times (%d calls): the case is not reached", fails, calls)
	}
	mu.Unlock()
	h.checkTableOpen("default:t", regions)
	h.checkNoDoubles()
	m, _ := h.leader()
	for _, p := range batchProblems(m.node.FSM(), batchesIn(m.node.FSM())) {
		t.Error(p)
	}
	var left []string
	testwait.Until(10*time.Second, func() bool {
		left = nil
		for _, l := range x.Scheduler().Locks() {
			left = append(left, fmt.Sprintf("%+v", l))
		}
		return len(left) == 0
	})
	for _, l := range left {
		t.Errorf("lock left held after the crash ended: %s", l)
	}
}

// openHold holds every open at the region.open fail point, once armed,
// until released: the step waits there (its worker held, nothing sent),
// and goes on at once when released. A test changes the world between a
// crash's batches being written and their opens going out.
type openHold struct {
	reached chan struct{} // closed at the first open held
	resume  chan struct{} // closed by release

	mu    sync.Mutex
	armed bool
	once  sync.Once
}

func newOpenHold(t *testing.T) *openHold {
	o := &openHold{reached: make(chan struct{}), resume: make(chan struct{})}
	t.Cleanup(o.release) // no step left waiting when the test ends
	return o
}

// failPoint is the domain's Config.FailPoint.
func (o *openHold) failPoint(point string) error {
	if point != "region.open" {
		return nil
	}
	o.mu.Lock()
	armed := o.armed
	if armed {
		select {
		case <-o.reached:
		default:
			close(o.reached)
		}
	}
	o.mu.Unlock()
	if armed {
		<-o.resume
	}
	return nil
}

func (o *openHold) release() { o.once.Do(func() { close(o.resume) }) }

// arm holds every open from now on, until released.
func (o *openHold) arm() {
	o.mu.Lock()
	o.armed = true
	o.mu.Unlock()
}

// waitReached fails the test unless an open is held within d.
func (o *openHold) waitReached(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-o.reached:
	case <-time.After(d):
		t.Fatal("no open reached its fail point")
	}
}

// crashBatches arms the hold, stops victim, and returns the leader and
// the batches its crash wrote once their first open is held.
func (o *openHold) crashBatches(t *testing.T, h *harness, victim string) (*masterNode, []batchRecord) {
	t.Helper()
	o.arm()
	h.stopRS(victim)
	o.waitReached(t, time.Minute)
	m, _ := h.leader()
	batches := batchesIn(m.node.FSM())
	if len(batches) == 0 {
		t.Fatal("no batch written by the crash's wave")
	}
	return m, batches
}
