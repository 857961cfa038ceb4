package procedure

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// rvParent is a state machine that locks Key exclusively for one step at a
// time (HoldLock Hold), and in its first state adds one rvChild for Key
// with AddLockedChild, records owner/<Key> in the child's name when its
// locks were taken, and then spawns it, or (Suspend) suspends instead.
type rvParent struct {
	StateMachine
	Key     string
	Hold    bool
	Suspend bool
	Gate    string
}

func (p *rvParent) Locks() []scheduler.Lock {
	return []scheduler.Lock{{Type: scheduler.LockRegion, Name: p.Key, Mode: scheduler.Exclusive}}
}
func (p *rvParent) HoldLock() bool                      { return p.Hold }
func (p *rvParent) InitialState() int32                 { return 1 }
func (p *rvParent) RollbackState(*Context, int32) error { return nil }

func (p *rvParent) ExecuteState(ctx *Context, state int32) (Flow, error) {
	if state != 1 {
		return NoMoreState, nil
	}
	c := &rvChild{Key: p.Key, Gate: p.Gate}
	id, locked, err := ctx.AddLockedChild(c)
	if err != nil {
		return NoMoreState, err
	}
	if locked {
		if err := ctx.Put("owner/"+p.Key, []byte(strconv.FormatUint(id, 10))); err != nil {
			return NoMoreState, err
		}
	}
	if p.Suspend {
		// Suspends instead of spawning, and moves on: the child is not
		// added again.
		p.SetNextState(2)
		ctx.Suspend(Timeout(time.Millisecond))
		return HasMoreState, nil
	}
	p.SetNextState(2)
	return HasMoreState, nil
}

// rvChild holds Key exclusively for its life, and waits at Gate in its
// only state.
type rvChild struct {
	StateMachine
	Key  string
	Gate string
}

func (c *rvChild) Locks() []scheduler.Lock {
	return []scheduler.Lock{{Type: scheduler.LockRegion, Name: c.Key, Mode: scheduler.Exclusive}}
}
func (c *rvChild) HoldLock() bool                      { return true }
func (c *rvChild) InitialState() int32                 { return 1 }
func (c *rvChild) RollbackState(*Context, int32) error { return nil }
func (c *rvChild) ExecuteState(ctx *Context, _ int32) (Flow, error) {
	ctx.Env.(*domain).do("child-in:" + c.Key)
	if c.Gate != "" {
		if err := waitGate(ctx, c.Gate); err != nil {
			return NoMoreState, err
		}
	}
	return NoMoreState, nil
}

func reviewRegistry(c *Config) {
	c.Registry = NewRegistry()
	c.Registry.MustRegister("rvParent", 1, func() Procedure { return &rvParent{} })
	c.Registry.MustRegister("rvChild", 1, func() Procedure { return &rvChild{} })
	c.Registry.MustRegister("lk", 1, func() Procedure { return &lkProc{} })
}

// A parent that holds a lock only while its step runs (HoldLock false)
// reserves a child needing the same lock: the child is told locked, as it
// inherits the lock from its parent during the step, but the parent lets
// go of the lock when its step ends, so the child, running, holds nothing.
// Added with AddChild, the child would take the lock itself when it runs.
// Expected: while the child runs (it holds its locks for life) nobody else
// takes the lock.
func TestAddLockedChildOfAStepLockingParentKeepsTheLock(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), reviewRegistry)
	gate := newGate("review-child")
	t.Cleanup(func() { openGate(gate) })
	parent := h.submit(&rvParent{Key: "a", Hold: false, Gate: gate}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "the child running", func() bool {
		h.d.mu.Lock()
		defer h.d.mu.Unlock()
		return h.d.effects["child-in:a"]
	})
	info, err := h.x.Get(parent)
	if err != nil || len(info.Children) != 1 {
		t.Fatalf("parent %+v, %v: want one child", info, err)
	}
	child := info.Children[0]
	if ci, _ := h.x.Get(child); !ci.Locked {
		t.Errorf("child %d not marked locked", child)
	}
	if !lockHeld(h.x, "a") {
		t.Errorf("nobody holds a while child %d, which holds its locks for life, runs (child holds %v, parent %v)",
			child, h.x.Scheduler().Held(child), h.x.Scheduler().Held(parent))
	}
	// Another procedure asking for a must wait for the child.
	intruder := h.submit(&lkProc{Name: "intruder", Hold: true,
		LockSpec: []scheduler.Lock{{Type: scheduler.LockRegion, Name: "a", Mode: scheduler.Exclusive}}}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "the intruder to run or park", func() bool {
		h.d.mu.Lock()
		in := h.d.effects["enter:intruder"]
		h.d.mu.Unlock()
		w, err := h.x.Why(intruder)
		return in || err == nil && w.Reason == "waiting for lock"
	})
	h.d.mu.Lock()
	in := h.d.effects["enter:intruder"]
	h.d.mu.Unlock()
	if in {
		t.Errorf("intruder %d took a while child %d, locked for life, was still running", intruder, child)
	}
	openGate(gate)
	h.wait(parent)
	h.wait(intruder)
}

// A step that reserves a child, writes in its name, and then suspends
// instead of spawning: committing the write would name a procedure that
// never exists (an id a restart can hand out again). AddLockedChild's
// contract refuses it: the step fails, its writes are not sent, and the
// reservation's lock is let go.
func TestAddLockedChildThenSuspendCommitsNoWriteForTheDroppedChild(t *testing.T) {
	mem := store.NewMemStore()
	h := startExecutor(t, mem, newDomain(), reviewRegistry)
	parent := h.submit(&rvParent{Key: "s", Hold: true, Suspend: true}, SubmitOptions{})
	got := h.wait(parent)
	if got.State == Success || !strings.Contains(got.Error, "must end by spawning") {
		t.Fatalf("parent ended %v (%q): want the step refused", got.State, got.Error)
	}
	if owner, ok := mem.Domain()["owner/s"]; ok {
		t.Errorf("owner/s = %q committed, naming a reserved child that was never spawned", owner)
	}
	if lockHeld(h.x, "s") {
		t.Errorf("s still held after the tree ended")
	}
}

// rvAbortParent reserves a child for Key, then waits at Gate inside the
// step (so an abort arrives while the reservation is held), and spawns it.
type rvAbortParent struct {
	StateMachine
	Key  string
	Gate string
}

func (p *rvAbortParent) HoldLock() bool                      { return true }
func (p *rvAbortParent) InitialState() int32                 { return 1 }
func (p *rvAbortParent) RollbackState(*Context, int32) error { return nil }
func (p *rvAbortParent) ExecuteState(ctx *Context, state int32) (Flow, error) {
	if state != 1 {
		return NoMoreState, nil
	}
	_, locked, err := ctx.AddLockedChild(&rvChild{Key: p.Key})
	if err != nil {
		return NoMoreState, err
	}
	if !locked {
		return NoMoreState, fmt.Errorf("%s not free", p.Key)
	}
	ctx.Env.(*domain).do("reserved:" + p.Key)
	if err := waitGate(ctx, p.Gate); err != nil {
		return NoMoreState, err
	}
	p.SetNextState(2)
	return HasMoreState, nil
}

// An abort that arrives while the step holds a reserved child's locks
// reaches the child (spawned aborted, failing before its first state):
// the tree rolls back and nothing keeps the child's lock; a procedure
// queued for it gets it.
func TestAddLockedChildOfAnAbortedParentLetsGoOfItsLocks(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) {
		reviewRegistry(c)
		c.Registry.MustRegister("rvAbortParent", 1, func() Procedure { return &rvAbortParent{} })
	})
	gate := newGate("review-abort")
	t.Cleanup(func() { openGate(gate) })
	parent := h.submit(&rvAbortParent{Key: "r", Gate: gate}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "the reservation", func() bool {
		h.d.mu.Lock()
		defer h.d.mu.Unlock()
		return h.d.effects["reserved:r"]
	})
	if err := h.x.Abort(parent); err != nil {
		t.Fatal(err)
	}
	waiter := h.submit(&lkProc{Name: "waiter", Hold: true,
		LockSpec: []scheduler.Lock{{Type: scheduler.LockRegion, Name: "r", Mode: scheduler.Exclusive}}}, SubmitOptions{})
	openGate(gate)
	got := h.wait(parent)
	if got.State != RolledBack {
		t.Errorf("parent ended %v (%s), want ROLLEDBACK", got.State, got.Error)
	}
	if w := h.wait(waiter); w.State != Success {
		t.Errorf("waiter ended %v (%s)", w.State, w.Error)
	}
	if lockHeld(h.x, "r") {
		t.Errorf("r still held after both trees ended: %v", h.x.Scheduler().Locks())
	}
	h.d.mu.Lock()
	defer h.d.mu.Unlock()
	if h.d.effects["child-in:r"] {
		t.Errorf("the aborted child ran its state")
	}
}

// The same race made certain: the worker that spawned the child is held
// in a Listener (after the spawn, before the step's lock is let go) until
// the child has either run or parked behind the lock. A child that shared
// its step-locking parent's lock would run now and hold nothing once the
// parent's step ended; it must wait for the lock instead, and hold it.
// Reintroducing the defect (ancestorsLocked counting every ancestor) makes
// this fail on every run.
func TestChildOfAStepLockingParentWaitsForTheStepsLock(t *testing.T) {
	gate := newGate("review-step-lock")
	t.Cleanup(func() { openGate(gate) })
	var parked atomic.Bool
	h := startExecutor(t, store.NewMemStore(), newDomain(), reviewRegistry)
	h.x.AddLockWaitListener(func(uint64) { parked.Store(true) })
	h.x.AddListener(func(in Info) {
		if in.Type != "rvParent" || in.State != Waiting {
			return
		}
		testwait.Until(10*time.Second, func() bool { return parked.Load() || h.d.has("child-in:w") })
	})
	parent := h.submit(&rvParent{Key: "w", Hold: false, Gate: gate}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "the child running", func() bool { return h.d.has("child-in:w") })
	if !lockHeld(h.x, "w") {
		t.Errorf("nobody holds w while the child, which holds its locks for life, runs")
	}
	openGate(gate)
	h.wait(parent)
}
