package domain_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/rspb"
)

// Review tests of firstOpens: a create's (and a crash's) prepared
// children start suspended on the open their parent sends once its spawn
// is written.

// openLog counts, by term and region, the OPENs the dispatchers send
// (ExecuteBatch, client side); its rule never fires.
type openLog struct {
	mu      sync.Mutex
	byTerm  map[uint64]map[string]int
	batches atomic.Int64
	rule    *rpcfault.Handle
}

func logOpens(t *testing.T, h *harness) *openLog {
	l := &openLog{byTerm: map[uint64]map[string]int{}}
	var err error
	l.rule, err = h.faults.Add(rpcfault.Rule{
		Name:    "review: count opens",
		Methods: []string{rspb.RegionServer_ExecuteBatch_FullMethodName},
		Fault:   rpcfault.DropRequest,
		When: func(c rpcfault.Call) bool {
			b, ok := c.Request.(*rspb.BatchRequest)
			if !ok || c.Side != rpcfault.Client {
				return false
			}
			l.batches.Add(1)
			l.mu.Lock()
			defer l.mu.Unlock()
			for _, op := range b.GetOps() {
				if op.GetKind() != rspb.OpKind_OP_KIND_OPEN {
					continue
				}
				m := l.byTerm[b.GetTerm()]
				if m == nil {
					m = map[string]int{}
					l.byTerm[b.GetTerm()] = m
				}
				m[op.GetRegion()]++
			}
			return false
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// resent lists the regions sent an OPEN more than once in one term.
func (l *openLog) resent() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for term, m := range l.byTerm {
		for rn, n := range m {
			if n > 1 {
				out = append(out, fmt.Sprintf("%s: %d opens in term %d", rn, n, term))
			}
		}
	}
	return out
}

func (l *openLog) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.byTerm {
		for _, c := range m {
			n += c
		}
	}
	return n
}

// regionProcs counts the leader's region procedures in state st.
func regionProcs(x *procedure.Executor, st procedure.State) int {
	n := 0
	for _, i := range x.List(procedure.Filter{Type: domain.TypeTransitRegionState}) {
		if i.State == st {
			n++
		}
	}
	return n
}

// openingOn counts table full's regions recorded OPENING, by server.
func (h *harness) openingOn(full string) map[string]int {
	out := map[string]int{}
	domain.ScanRegions(h.reader(), func(_ string, rg domain.Region) bool {
		if rg.Table == full && rg.State == domain.RegionOpening {
			out[rg.Server]++
		}
		return true
	})
	return out
}

// A create aborted the moment its prepared children's spawn is heard
// (before its AfterSpawn sends their opens, on the same worker): the
// children are flagged, parked after the opens went and woken at once;
// they fail without a step of their own to undo, and the create's
// rollback closes every region whose open its parent sent. The close
// follows the open on each server: nothing is left open or recorded.
func TestFirstOpenCreateAbortedAsItsPreparedChildrenSpawn(t *testing.T) {
	const regions = 16
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, opLatency: 200 * time.Millisecond})
	opens := logOpens(t, h)
	_, x := h.leader()
	var (
		fired    atomic.Bool
		abortAt  atomic.Uint64
		abortErr atomic.Value
	)
	x.AddChangeListener(func(c procedure.Change) {
		if c.Type != domain.TypeTransitRegionState || c.State != procedure.Runnable {
			return
		}
		if !fired.CompareAndSwap(false, true) {
			return
		}
		abortAt.Store(c.RootID)
		if err := x.Abort(c.RootID); err != nil {
			abortErr.Store(err)
		}
	})
	id := h.createTable("", "t", regions)
	info := h.wait(id, time.Minute)
	if err, _ := abortErr.Load().(error); err != nil {
		t.Fatalf("abort: %v", err)
	}
	if abortAt.Load() != id {
		t.Fatalf("aborted %d, want the create %d", abortAt.Load(), id)
	}
	h.checkRolledBack(info, "default:t")
	if opens.total() == 0 {
		t.Fatal("no open was sent: the case (opens sent for the aborted children) is not reached")
	}
}

// A create aborted while its prepared children wait for the answers to
// the opens their parent sent (slow servers): the rollback closes them
// all, and the leader keeps nothing of the children's waits once the
// create has ended (before the change, each child's own rollback took
// its wait; a child that never ran has none, and its parent's wait,
// armed in its name, was left for the rest of the term).
func TestFirstOpenCreateAbortedWhileItsOpensAreUnderWay(t *testing.T) {
	const regions = 16
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, opLatency: 500 * time.Millisecond})
	opens := logOpens(t, h)
	lm, x := h.leader()
	id := h.createTable("", "t", regions)
	testwait.For(t, 30*time.Second, "every region procedure suspended on its open", func() bool {
		return regionProcs(x, procedure.WaitingTimeout) == regions && opens.total() > 0
	})
	if err := x.Abort(id); err != nil {
		t.Fatal(err)
	}
	info := h.wait(id, time.Minute)
	h.checkRolledBack(info, "default:t")
	// Dropped once the create's end is heard (forgetFirstOpens).
	testwait.For(t, 10*time.Second, "no op wait left of the rolled-back create's children", func() bool {
		return lm.dom.Services().OpWaits() == 0
	})
}

// DispatchTimeout shorter than the servers' answers: each prepared child
// wakes on its timeout before the answer, finds the open its parent sent
// outstanding, and does not send it again; the table opens, each region
// once.
func TestFirstOpenPreparedChildTimesOutBeforeTheAnswer(t *testing.T) {
	const regions = 8
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, opLatency: 600 * time.Millisecond,
		domain: func(c *domain.Config) { c.DispatchTimeout = 100 * time.Millisecond }})
	opens := logOpens(t, h)
	before := regionSteps(t, h)
	h.mustSucceed(h.createTable("", "t", regions), time.Minute)
	h.checkTableOpen("default:t", regions)
	if steps := regionSteps(t, h) - before; steps < 2*regions {
		t.Fatalf("%v region steps for %d regions: the timeouts did not come before the answers (case not reached)", steps, regions)
	}
	if r := opens.resent(); len(r) > 0 {
		t.Fatalf("opens sent again within a term while outstanding: %v", r)
	}
	if n := opens.total(); n != regions {
		t.Fatalf("%d opens sent for %d regions", n, regions)
	}
}

// The target of some prepared children stops while their opens are under
// way: they learn it (an error answer, or their timeout), wait for it to
// be gone, and open elsewhere. The create ends with every region open
// once, none on the stopped server.
func TestFirstOpenPreparedTargetStopsWhileItsOpensAreUnderWay(t *testing.T) {
	const regions = 12
	h := newHarness(t, harnessOpts{masters: 1, servers: 3, opLatency: 400 * time.Millisecond,
		domain: func(c *domain.Config) { c.DispatchTimeout = time.Second }})
	opens := logOpens(t, h)
	_, x := h.leader()
	id := h.createTable("", "t", regions)
	testwait.For(t, 30*time.Second, "every region procedure suspended on its open", func() bool {
		return regionProcs(x, procedure.WaitingTimeout) == regions && opens.total() > 0
	})
	victim := busiestServer(h.openingOn("default:t"))
	if victim == "" {
		t.Fatal("no region recorded OPENING")
	}
	h.stopRS(victim)
	h.mustSucceed(id, 2*time.Minute)
	per := h.checkTableOpen("default:t", regions)
	if per[victim] > 0 {
		t.Fatalf("regions per server %v: some on the stopped %s", per, victim)
	}
}

// A server that refuses every open is among the targets the create's
// step prepared: its children are answered with the refusal, exclude it
// and open elsewhere.
func TestFirstOpenPreparedOnARefusingServer(t *testing.T) {
	const regions = 12
	h := newHarness(t, harnessOpts{masters: 1, servers: 2})
	h.startRS("rs3", 0, 1)
	testwait.For(t, 30*time.Second, "rs3 live", func() bool {
		srv, ok, err := domain.GetServer(h.reader(), "rs3")
		return err == nil && ok && srv.State == domain.ServerLive
	})
	h.mustSucceed(h.createTable("", "t", regions), time.Minute)
	per := h.checkTableOpen("default:t", regions)
	if per["rs3"] > 0 {
		t.Fatalf("regions per server %v: some on the refusing rs3", per)
	}
	if !strings.Contains(h.c.Logs("m1"), "region failed to open") {
		t.Fatal("no open refused: the case (a prepared child on rs3) is not reached")
	}
}

// Every server refuses every open: the children fail after
// MaxOpenAttempts, the create rolls back and leaves nothing.
func TestFirstOpenPreparedChildrenAllRefusedRollBack(t *testing.T) {
	const regions = 6
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, failRate: 1,
		domain: func(c *domain.Config) { c.MaxOpenAttempts = 2 }})
	info := h.wait(h.createTable("", "t", regions), time.Minute)
	h.checkRolledBack(info, "default:t")
}

// The leader is lost once the spawn is written and its opens sent, but
// before any is delivered (held back in the transport): the new leader
// loads the children runnable, they send their opens themselves, and the
// create succeeds with every region open once. A late copy of the old
// term's open changes nothing.
func TestFirstOpenLeaderLostBeforeTheFirstOpensArrive(t *testing.T) {
	const regions = 10
	h := newHarness(t, harnessOpts{masters: 3, servers: 2})
	var hold atomic.Bool
	hold.Store(true)
	held, err := h.faults.Add(rpcfault.Rule{
		Name:    "review: the first term's opens held",
		Methods: []string{rspb.RegionServer_ExecuteBatch_FullMethodName},
		Fault:   rpcfault.DelayRequest,
		Delay:   5 * time.Second,
		When: func(c rpcfault.Call) bool {
			b, ok := c.Request.(*rspb.BatchRequest)
			if !ok || !hold.Load() {
				return false
			}
			for _, op := range b.GetOps() {
				if op.GetKind() == rspb.OpKind_OP_KIND_OPEN {
					return true
				}
			}
			return false
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	li, x := h.leader()
	id := h.createTable("", "t", regions)
	testwait.For(t, 30*time.Second, "the children suspended and their opens held", func() bool {
		return regionProcs(x, procedure.WaitingTimeout) == regions && held.Matched() > 0
	})
	h.killMaster(li.index)
	hold.Store(false)
	h.c.WaitLeader(li.index)
	h.mustSucceed(id, 2*time.Minute)
	h.checkTableOpen("default:t", regions)
}

// Maintenance mode comes on between the step that prepared the children
// (dispatch not paused then: they are suspended, their opens to be sent
// by the parent) and the parent's AfterSpawn: the opens go to the paused
// dispatcher, which holds them. The children's timeouts find dispatch
// paused and wait for maintenance mode to end; once it ends the held
// opens go out, and no region is sent a second open in the term.
func TestFirstOpenMaintenanceOnBetweenThePrepareAndTheOpens(t *testing.T) {
	const regions = 8
	h := newHarness(t, harnessOpts{masters: 1, servers: 2,
		domain: func(c *domain.Config) { c.DispatchTimeout = 300 * time.Millisecond }})
	opens := logOpens(t, h)
	lm, x := h.leader()
	svc := lm.dom.Services()
	rops := catalog.RepairOptions{Caller: catalog.Caller{Name: "review", Peer: "test"}}
	var (
		once     sync.Once
		pausedOK atomic.Bool
		onErr    = make(chan error, 1)
		listened = make(chan struct{})
	)
	x.AddChangeListener(func(c procedure.Change) {
		if c.Type != domain.TypeTransitRegionState || c.State != procedure.Runnable {
			return
		}
		once.Do(func() {
			// Heard before the parent's AfterSpawn runs: maintenance on now.
			go func() {
				_, err := lm.dom.SetMaintenance(context.Background(), true, "review", rops)
				onErr <- err
			}()
			pausedOK.Store(testwait.Until(10*time.Second, svc.DispatchIsPaused))
			close(listened)
		})
	})
	before := opens.batches.Load()
	id := h.createTable("", "t", regions)
	if err := <-onErr; err != nil {
		t.Fatalf("maintenance on: %v", err)
	}
	<-listened
	if !pausedOK.Load() {
		t.Fatal("dispatch not paused before the opens")
	}
	testwait.For(t, 30*time.Second, "every region procedure waiting for maintenance mode", func() bool {
		n := 0
		for _, i := range x.List(procedure.Filter{Type: domain.TypeTransitRegionState}) {
			if w, err := x.Why(i.ID); err == nil && strings.Contains(w.Note, "maintenance") {
				n++
			}
		}
		return n == regions
	})
	if n := opens.batches.Load() - before; n != 0 {
		t.Fatalf("%d batches sent in maintenance mode", n)
	}
	if _, err := lm.dom.SetMaintenance(context.Background(), false, "", rops); err != nil {
		t.Fatal(err)
	}
	h.mustSucceed(id, time.Minute)
	h.checkTableOpen("default:t", regions)
	if r := opens.resent(); len(r) > 0 {
		t.Fatalf("opens sent again within the term: %v", r)
	}
}

// A crash's prepared children on slow servers with a short DispatchTimeout:
// each region of the crashed server opens once elsewhere, none sent twice
// in the term.
func TestFirstOpenCrashPreparedChildrenTimeOutBeforeTheAnswer(t *testing.T) {
	const regions = 12
	h := newHarness(t, harnessOpts{masters: 1, servers: 3, opLatency: 400 * time.Millisecond,
		domain: func(c *domain.Config) { c.CrashWave = 4; c.DispatchTimeout = 100 * time.Millisecond }})
	h.mustSucceed(h.createTable("", "t", regions), time.Minute)
	per := h.checkTableOpen("default:t", regions)
	victim := busiestServer(per)
	opens := logOpens(t, h)
	h.stopRS(victim)
	_, x := h.leader()
	testwait.For(t, 2*time.Minute, "the crash of "+victim+" handled", func() bool {
		for _, i := range x.List(procedure.Filter{Type: domain.TypeServerCrash}) {
			if i.State == procedure.Success && strings.Contains(string(i.Result), victim) {
				return true
			}
		}
		return false
	})
	got := h.checkTableOpen("default:t", regions)
	if got[victim] > 0 {
		t.Fatalf("regions per server %v: some on the dead %s", got, victim)
	}
	if r := opens.resent(); len(r) > 0 {
		t.Fatalf("opens sent again within the term: %v", r)
	}
	if opens.total() < per[victim] {
		t.Fatalf("%d opens sent for the %d regions of %s", opens.total(), per[victim], victim)
	}
}
