package domain_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// liveRegionProcs counts the region procedures live at once, and the
// most it saw.
type liveRegionProcs struct {
	mu   sync.Mutex
	live map[uint64]uint64 // region procedure -> its table procedure
	most int
}

// node adds the count to the master's executor as a listener told before
// the leader's services (PrepareExecutor): an end is off the count
// before the budget lets another table's wave in.
func (c *liveRegionProcs) node(nc *cluster.Config) {
	nc.PrepareExecutor = func(x *procedure.Executor) error { x.AddListener(c.count); return nil }
}

func (c *liveRegionProcs) count(info procedure.Info) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live == nil {
		c.live = map[uint64]uint64{}
	}
	if info.Type != domain.TypeTransitRegionState {
		if info.ParentID == 0 && info.State.Terminal() {
			// A child that never ran (spawned suspended on the open its
			// parent sent, when a sibling's failure rolled the tree
			// back) ends with its tree, unheard.
			for id, parent := range c.live {
				if parent == info.ID {
					delete(c.live, id)
				}
			}
		}
		return
	}
	if info.State.Terminal() {
		delete(c.live, info.ID)
	} else {
		c.live[info.ID] = info.ParentID
	}
	c.most = max(c.most, len(c.live))
}

// Most is the most region procedures seen live at once.
func (c *liveRegionProcs) Most() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.most
}

// budgetWaitNote is what a table procedure's Why says while it waits for
// the region budget.
const budgetWaitNote = "waiting for the region budget"

// waitForBudgetWait waits until one of ids says it waits for the region
// budget.
func waitForBudgetWait(t *testing.T, x *procedure.Executor, ids []uint64, d time.Duration) {
	t.Helper()
	testwait.For(t, d, "a create waiting for the region budget", func() bool {
		for _, id := range ids {
			if w, err := x.Why(id); err == nil && strings.Contains(w.Note, budgetWaitNote) {
				return true
			}
		}
		return false
	})
}

// waitBudgetEmpty waits until the term's region budget holds nothing:
// no place in flight, no table queued, holding a place or keeping its
// ticket.
func waitBudgetEmpty(t *testing.T, svc *domain.Services, what string) {
	t.Helper()
	testwait.ForNil(t, 30*time.Second, what, func() error {
		inFlight, queued, holds, tickets := svc.RegionBudgetState()
		if inFlight != 0 || queued != 0 || holds != 0 || tickets != 0 {
			return fmt.Errorf("in flight %d, queued %d, holds %d, tickets %d", inFlight, queued, holds, tickets)
		}
		return nil
	})
}

// Many small tables created, disabled, enabled and deleted at once over a
// budget of 3 (waves of 2, so waves are cut and partial ones given back),
// on region servers that fail some opens (creates and enables roll back
// mid-wave), with some creates aborted while they wait for the budget:
// every procedure ends, never more region procedures of table procedures
// live than the budget, and the budget ends with nothing in flight, no
// table queued, holding a place or keeping its ticket.
func TestRegionBudgetReturnsEveryPlace(t *testing.T) {
	const tables, regions, wave, budget = 10, 5, 2, 3
	var live liveRegionProcs
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, failRate: 0.1,
		domain: func(c *domain.Config) { c.RegionWave, c.RegionBudget, c.MaxOpenAttempts = wave, budget, 2 },
		node:   live.node})
	lm, x := h.leader()
	ended := func(ids map[uint64]string) map[string]procedure.State {
		out := map[string]procedure.State{}
		for id, name := range ids {
			out[name] = h.wait(id, 2*time.Minute).State
		}
		return out
	}
	submit := func(mk func(ns, name string) (procedure.Procedure, error), name string) uint64 {
		p, err := mk("", name)
		if err != nil {
			t.Fatal(err)
		}
		return h.submit(p, "")
	}
	newDisable := func(ns, n string) (procedure.Procedure, error) { return domain.NewDisableTable(ns, n) }
	newEnable := func(ns, n string) (procedure.Procedure, error) { return domain.NewEnableTable(ns, n) }
	newDelete := func(ns, n string) (procedure.Procedure, error) { return domain.NewDeleteTable(ns, n) }

	// Creates, three of them aborted once they wait for the budget.
	creates := map[uint64]string{}
	for i := range tables {
		creates[h.createTable("", fmt.Sprintf("t%d", i), regions)] = fmt.Sprintf("t%d", i)
	}
	aborted := map[uint64]bool{}
	testwait.For(t, time.Minute, "three creates aborted while waiting for the budget", func() bool {
		for id := range creates {
			if len(aborted) == 3 || aborted[id] {
				continue
			}
			if w, err := x.Why(id); err == nil && strings.Contains(w.Note, budgetWaitNote) && x.Abort(id) == nil {
				aborted[id] = true
			}
		}
		return len(aborted) == 3
	})
	created := []string{}
	for name, st := range ended(creates) {
		if st == procedure.Success {
			created = append(created, name)
		}
	}
	t.Logf("%d of %d creates succeeded (%d aborted)", len(created), tables, len(aborted))

	// Disables of what was created, beside new creates.
	round := map[uint64]string{}
	for _, name := range created {
		round[submit(newDisable, name)] = name
	}
	for i := range tables {
		round[h.createTable("", fmt.Sprintf("u%d", i), regions)] = fmt.Sprintf("u%d", i)
	}
	disabled, enabled := []string{}, []string{}
	for name, st := range ended(round) {
		switch {
		case st == procedure.Success && strings.HasPrefix(name, "t"):
			disabled = append(disabled, name)
		case st == procedure.Success:
			enabled = append(enabled, name)
		}
	}
	// Enables of half the disabled, deletes of the rest, disables of the
	// new tables, all at once.
	round = map[uint64]string{}
	for i, name := range disabled {
		if i%2 == 0 {
			round[submit(newEnable, name)] = name
		} else {
			round[submit(newDelete, name)] = name
		}
	}
	for _, name := range enabled {
		round[submit(newDisable, name)] = name
	}
	ended(round)
	// Then every table left is disabled and deleted.
	for _, prefix := range []string{"t", "u"} {
		for i := range tables {
			name := fmt.Sprintf("%s%d", prefix, i)
			if _, ok, err := domain.GetTable(h.reader(), "default:"+name); err != nil || !ok {
				continue
			}
			h.wait(submit(newDisable, name), 2*time.Minute)
			h.wait(submit(newDelete, name), 2*time.Minute)
		}
	}

	svc := lm.dom.Services()
	waitBudgetEmpty(t, svc, "the region budget to hold nothing")
	if most := live.Most(); most > budget {
		t.Errorf("%d region procedures of table procedures live at once, budget %d", most, budget)
	}
}

// A leader dies with waves in flight and tables queued: the next leader's
// budget starts empty, the children the old one spawned end outside it
// (their parent's next wave asks the new budget), every create ends, and
// the new budget ends holding nothing.
func TestRegionBudgetAfterFailover(t *testing.T) {
	const tables, regions, wave, budget = 6, 6, 2, 2
	h := newHarness(t, harnessOpts{masters: 3, servers: 2, opLatency: 20 * time.Millisecond, domain: func(c *domain.Config) {
		c.RegionWave, c.RegionBudget = wave, budget
	}})
	old, x := h.leader()
	var ids []uint64
	for i := range tables {
		ids = append(ids, h.createTable("", fmt.Sprintf("t%d", i), regions))
	}
	waitForBudgetWait(t, x, ids, time.Minute)
	h.killMaster(old.index)
	for i, id := range ids {
		h.mustSucceed(id, 2*time.Minute)
		h.checkTableOpen(fmt.Sprintf("default:t%d", i), regions)
	}
	lm, _ := h.leader()
	svc := lm.dom.Services()
	waitBudgetEmpty(t, svc, "the new leader's region budget to hold nothing")
}

// A watch of a create that waits for the region budget (a suspension
// that writes nothing: its record does not change) shows the wait, and
// the stream ends with the create's final state.
func TestWatchShowsTheBudgetWait(t *testing.T) {
	// The first create's first wave is held at its opens, so it keeps the
	// whole budget until the watch has shown the second create waiting for
	// it (under load, a wave let run could end before the watch began).
	hold := newOpenHold(t)
	hold.arm()
	h := newHarness(t, harnessOpts{masters: 1, servers: 1, opLatency: 100 * time.Millisecond, domain: func(c *domain.Config) {
		c.RegionWave, c.RegionBudget = 2, 2
		c.FailPoint = hold.failPoint
	}})
	lm, _ := h.leader()
	first := h.createTable("", "a", 10)
	hold.waitReached(t, time.Minute)
	id := h.createTable("", "b", 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, err := lm.client.WatchProcedure(ctx, &adminpb.WatchProcedureRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	var last *adminpb.Procedure
	sawWait := false
	for {
		p, err := ws.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = p
		if strings.Contains(p.GetWaitingFor(), budgetWaitNote) {
			sawWait = true
			hold.release()
		}
	}
	hold.release() // the first create ends even when the wait went unseen
	if !sawWait {
		t.Error("the watch never showed the wait for the region budget")
	}
	if last == nil || last.GetState() != procedure.Success.String() {
		t.Fatalf("the watch ended with %v, want the create's success", last)
	}
	h.mustSucceed(first, time.Minute)
}
