package procedure

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// heldLockTree is a root that takes its table exclusive for each of its
// steps and spawns two children on regions of it: the first holds its
// locks for life, the second fails its first step.
type heldLockTree struct {
	Base
	Table string
	Role  string // "root", "holder", "failer"
	Next  int
}

func (p *heldLockTree) Locks() []scheduler.Lock {
	if p.Role == "root" {
		return scheduler.TableLocks("ns", p.Table, scheduler.Exclusive)
	}
	return scheduler.RegionLocks("ns", p.Table, p.Table+"."+p.Role)
}

func (p *heldLockTree) HoldLock() bool { return p.Role == "holder" }

func (p *heldLockTree) Execute(*Context) (Step, error) {
	k := p.Next
	p.Next++
	switch {
	case p.Role == "root" && k == 0:
		return Spawn(&heldLockTree{Table: p.Table, Role: "holder"}, &heldLockTree{Table: p.Table, Role: "failer"}), nil
	case p.Role == "failer":
		return Step{}, errBoom
	}
	return Done(), nil
}

func (p *heldLockTree) Rollback(*Context) error { return nil }

// TestHeldLockOfAMemberThatNeverRanIsLetGo: a member that holds its locks
// for life had them granted as a sibling failed, and then ran no step (its
// tree had failed). It kept them: the rollback undoes only the steps on
// the tree's stack, none of them its, and the root's step, which needs
// the table exclusive, waited on the member's shared hold for good (the
// stall of TestScenarioHBASE28876SchedulerStateOfFinishedTrees in CI:
// "waiting for lock table ns2:t5833 (exclusive), held shared by 29169").
// The member lets go of locks its turn took when it finds its tree
// failed before its step began. The hook makes that interleaving every
// run, so one run tells.
func TestHeldLockOfAMemberThatNeverRanIsLetGo(t *testing.T) {
	table := uniq("t")
	var x *Executor
	// Unset after the executor's Stop: cleanups run last first.
	t.Cleanup(func() { testHookLocksTaken = nil })
	testHookLocksTaken = func(e *entry) {
		if p, ok := e.proc.(*heldLockTree); !ok || p.Table != table || p.Role != "holder" {
			return
		}
		// Hold the member here, its locks granted, until its
		// sibling's failure has failed the tree (on a worker's
		// goroutine: Until, not For; the Wait below tells).
		testwait.Until(20*time.Second, func() bool {
			x.mu.Lock()
			defer x.mu.Unlock()
			r := x.roots[e.root]
			return r == nil || r.failed
		})
	}
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) {
		c.Registry.MustRegister("held-lock-tree", 1, func() Procedure { return &heldLockTree{} })
	})
	x = h.x
	id := h.submit(&heldLockTree{Table: table, Role: "root"}, SubmitOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	info, err := x.Wait(ctx, id)
	if err != nil {
		w, _ := x.Why(id)
		t.Fatalf("wait %d: %v; why: %s: %+v; scheduler %+v", id, err, w.Reason, w.Sched, x.Scheduler().Sizes())
	}
	if info.State != RolledBack {
		t.Fatalf("tree ended %v, want ROLLEDBACK", info.State)
	}
	if z := x.Scheduler().Sizes(); z != (scheduler.Sizes{}) {
		t.Fatalf("the scheduler holds state of the finished tree: %+v", z)
	}
}
