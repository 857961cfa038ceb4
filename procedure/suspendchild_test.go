package procedure

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// scEnv is what the SuspendChild tests' procedures share: each child's
// event by key, what AfterSpawn was told, and each child's first runs.
type scEnv struct {
	*domain
	mu       sync.Mutex
	events   map[string]*scheduler.Event
	after    []bool
	ran      map[string]int
	sentAt   map[string]int // len(after) when the child first ran
	x        *Executor
	mode     scMode
	timeout  time.Duration
	problems []string
}

// checkNoneCanRun notes a problem if any of ids is queued or parked, or
// has run: while its parent's AfterSpawn calls are made, none may.
func (env *scEnv) checkNoneCanRun(ids []uint64) {
	x := env.x
	x.mu.Lock()
	var bad []string
	for _, id := range ids {
		if k := x.procs[id]; k == nil || k.state != Runnable || k.event != nil || k.timer != nil {
			bad = append(bad, "a child parked or gone during its parent's AfterSpawn")
		}
	}
	if q := x.sched.Sizes().Queued; q != 0 {
		bad = append(bad, "procedures queued during AfterSpawn")
	}
	x.mu.Unlock()
	env.mu.Lock()
	env.problems = append(env.problems, bad...)
	if len(env.ran) > 0 {
		env.problems = append(env.problems, "a child ran during its parent's AfterSpawn")
	}
	env.mu.Unlock()
}

type scMode int

const (
	scWakeAfterSpawn scMode = iota // AfterSpawn wakes every child's event
	scWakeInStep                   // the step wakes them before its spawn is written
	scNeverWake                    // only the timeout wakes them
	scFailStep                     // the step fails after suspending them
	scAbortInAfter                 // AfterSpawn checks no child can run yet, then aborts the parent
)

func newSCEnv(mode scMode, timeout time.Duration) *scEnv {
	return &scEnv{domain: newDomain(), events: map[string]*scheduler.Event{}, ran: map[string]int{}, sentAt: map[string]int{},
		mode: mode, timeout: timeout}
}

// scParent reserves a locked scChild per key, suspends each on its own
// event (SuspendChild) and spawns them.
type scParent struct {
	StateMachine
	Keys []string
}

func (p *scParent) InitialState() int32                 { return 1 }
func (p *scParent) RollbackState(*Context, int32) error { return nil }

func (p *scParent) ExecuteState(ctx *Context, state int32) (Flow, error) {
	if state != 1 {
		return NoMoreState, nil
	}
	env := ctx.Env.(*scEnv)
	parent := ctx.ID()
	var ids []uint64
	for _, k := range p.Keys {
		id, locked, err := ctx.AddLockedChild(&scChild{Key: k})
		ids = append(ids, id)
		if err != nil || !locked {
			return NoMoreState, errors.Join(err, errors.New("child not locked"))
		}
		ev := scheduler.NewEvent("sc " + k)
		env.mu.Lock()
		env.events[k] = ev
		env.mu.Unlock()
		opts := []SuspendOption{OnEvent(ev)}
		if env.timeout > 0 {
			opts = append(opts, Timeout(env.timeout))
		}
		if err := ctx.SuspendChild(id, opts...); err != nil {
			return NoMoreState, err
		}
		if env.mode == scWakeInStep {
			env.x.Wake(ev)
		}
	}
	ctx.AfterSpawn(func(out SpawnOutcome) {
		committed := out.Committed
		env.mu.Lock()
		evs := make([]*scheduler.Event, 0, len(env.events))
		for _, ev := range env.events {
			evs = append(evs, ev)
		}
		env.mu.Unlock()
		if committed && env.mode == scWakeAfterSpawn {
			for _, ev := range evs {
				env.x.Wake(ev)
			}
		}
		if committed && env.mode == scAbortInAfter {
			env.checkNoneCanRun(ids)
			if err := env.x.Abort(parent); err != nil {
				env.mu.Lock()
				env.problems = append(env.problems, "abort: "+err.Error())
				env.mu.Unlock()
			}
			env.checkNoneCanRun(ids)
		}
		env.mu.Lock()
		env.after = append(env.after, committed) // last: a child that ran before it returned sees 0
		env.mu.Unlock()
	})
	if env.mode == scFailStep {
		return NoMoreState, errors.New("injected: the spawning step fails")
	}
	p.SetNextState(2)
	return HasMoreState, nil
}

type scChild struct {
	StateMachine
	Key string
}

func (c *scChild) Locks() []scheduler.Lock {
	return []scheduler.Lock{{Type: scheduler.LockRegion, Name: c.Key, Mode: scheduler.Exclusive}}
}
func (c *scChild) HoldLock() bool                      { return true }
func (c *scChild) InitialState() int32                 { return 1 }
func (c *scChild) RollbackState(*Context, int32) error { return nil }

func (c *scChild) ExecuteState(ctx *Context, state int32) (Flow, error) {
	env := ctx.Env.(*scEnv)
	env.mu.Lock()
	if env.ran[c.Key] == 0 {
		env.sentAt[c.Key] = len(env.after)
	}
	env.ran[c.Key]++
	env.mu.Unlock()
	return NoMoreState, ctx.Put("ran/"+c.Key, nil)
}

func startSC(t *testing.T, st store.Store, env *scEnv) *harness {
	h := startExecutor(t, st, env.domain, func(c *Config) {
		c.Env = env
		c.Registry = NewRegistry()
		c.Registry.MustRegister("scParent", 1, func() Procedure { return &scParent{} })
		c.Registry.MustRegister("scChild", 1, func() Procedure { return &scChild{} })
	})
	env.x = h.x
	return h
}

// TestSuspendChildWaitsForItsEvent: a child suspended by its parent's step
// does not run before its event is woken; AfterSpawn runs once, told the
// spawn was written, before any child runs; each child then runs its first
// state once, and the tree ends.
func TestSuspendChildWaitsForItsEvent(t *testing.T) {
	env := newSCEnv(scWakeAfterSpawn, time.Hour)
	h := startSC(t, store.NewMemStore(), env)
	keys := []string{"a", "b", "c", "d"}
	if info := h.wait(h.submit(&scParent{Keys: keys}, SubmitOptions{})); info.State != Success {
		t.Fatalf("parent %v: %s", info.State, info.Error)
	}
	env.mu.Lock()
	defer env.mu.Unlock()
	if len(env.after) != 1 || !env.after[0] {
		t.Fatalf("AfterSpawn told %v, want [true]", env.after)
	}
	for _, k := range keys {
		if env.ran[k] != 1 || env.sentAt[k] != 1 {
			t.Errorf("child %s ran %d times, first after %d AfterSpawn calls; want once, after 1", k, env.ran[k], env.sentAt[k])
		}
	}
}

// TestSuspendChildStaysSuspended: with its event never woken and no
// timeout, a child waits (WAITING, not queued) for good; its timeout alone
// wakes it.
func TestSuspendChildStaysSuspended(t *testing.T) {
	env := newSCEnv(scNeverWake, 0)
	h := startSC(t, store.NewMemStore(), env)
	parent := h.submit(&scParent{Keys: []string{"a"}}, SubmitOptions{})
	var child uint64
	testwait.For(t, 10*time.Second, "the child spawned and waiting", func() bool {
		for _, i := range h.x.List(Filter{Type: "scChild"}) {
			if i.ParentID == parent && i.State == Waiting {
				child = i.ID
				return true
			}
		}
		return false
	})
	// Every other procedure ended or waits: nothing can run it but its
	// event.
	testwait.For(t, 10*time.Second, "the parent waiting for its child", func() bool {
		i, err := h.x.Get(parent)
		return err == nil && i.State == Waiting
	})
	env.mu.Lock()
	ran := env.ran["a"]
	env.mu.Unlock()
	if ran != 0 {
		t.Fatalf("the suspended child ran %d times before its event", ran)
	}
	h.x.Wake(env.events["a"])
	if info := h.wait(parent); info.State != Success {
		t.Fatalf("parent %v", info.State)
	}
	if i, _ := h.x.Get(child); i.State != Success {
		t.Fatalf("child %v", i.State)
	}

	timed := newSCEnv(scNeverWake, 20*time.Millisecond)
	h = startSC(t, store.NewMemStore(), timed)
	if info := h.wait(h.submit(&scParent{Keys: []string{"t"}}, SubmitOptions{})); info.State != Success {
		t.Fatalf("parent with a timeout %v", info.State)
	}
}

// TestSuspendChildWokenBeforeItParks: an event woken while the parent's
// step still runs (an answer faster than the spawn's write) still runs the
// child.
func TestSuspendChildWokenBeforeItParks(t *testing.T) {
	env := newSCEnv(scWakeInStep, time.Hour)
	h := startSC(t, store.NewMemStore(), env)
	if info := h.wait(h.submit(&scParent{Keys: []string{"a", "b"}}, SubmitOptions{})); info.State != Success {
		t.Fatalf("parent %v: %s", info.State, info.Error)
	}
}

// TestSuspendChildOfAFailedStep: a step that fails after suspending its
// children tells AfterSpawn false, once, and no child exists or runs.
func TestSuspendChildOfAFailedStep(t *testing.T) {
	env := newSCEnv(scFailStep, time.Hour)
	h := startSC(t, store.NewMemStore(), env)
	if info := h.wait(h.submit(&scParent{Keys: []string{"a"}}, SubmitOptions{})); info.State != Failed && info.State != RolledBack {
		t.Fatalf("parent %v", info.State)
	}
	env.mu.Lock()
	defer env.mu.Unlock()
	if len(env.after) != 1 || env.after[0] {
		t.Fatalf("AfterSpawn told %v, want [false]", env.after)
	}
	if len(env.ran) != 0 {
		t.Fatalf("children ran: %v", env.ran)
	}
	if l := h.x.List(Filter{Type: "scChild"}); len(l) != 0 {
		t.Fatalf("children exist: %+v", l)
	}
}

// TestSuspendChildRunsAtOnceAfterARestart: the child's record is written
// runnable, so an executor that loads it (a restart, a new leader) runs it
// without its event.
func TestSuspendChildRunsAtOnceAfterARestart(t *testing.T) {
	mem := store.NewMemStore()
	env := newSCEnv(scNeverWake, 0)
	h := startSC(t, mem, env)
	parent := h.submit(&scParent{Keys: []string{"a", "b"}}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "both children waiting", func() bool {
		n := 0
		for _, i := range h.x.List(Filter{Type: "scChild"}) {
			if i.State == Waiting {
				n++
			}
		}
		return n == 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.x.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	env2 := newSCEnv(scNeverWake, 0)
	h2 := startSC(t, mem, env2)
	if info := h2.wait(parent); info.State != Success {
		t.Fatalf("parent after the restart %v", info.State)
	}
	env2.mu.Lock()
	defer env2.mu.Unlock()
	if env2.ran["a"] != 1 || env2.ran["b"] != 1 {
		t.Fatalf("after the restart the children ran %v, want each once", env2.ran)
	}
}

// TestSuspendChildRefusesBadUse: a child not reserved by the step, or one
// with nothing to wake it, is refused with ErrInvalid.
func TestSuspendChildRefusesBadUse(t *testing.T) {
	c := &Context{}
	if err := c.SuspendChild(7, Timeout(time.Second)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unreserved child: %v", err)
	}
	c.reserved = []*entry{{id: 7, locked: true}, {id: 8}}
	if err := c.SuspendChild(7); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no event, no timeout: %v", err)
	}
	if err := c.SuspendChild(7, Timeout(time.Second), OnChildren()); !errors.Is(err, ErrInvalid) {
		t.Fatalf("OnChildren: %v", err)
	}
	if err := c.SuspendChild(8, Timeout(time.Second)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a child whose locks were not free: %v", err)
	}
	if err := c.SuspendChild(7, Timeout(time.Second)); err != nil || c.reserved[0].startSuspended == nil {
		t.Fatalf("a reserved, locked child: %v", err)
	}
}

// TestSuspendChildRunsOnlyAfterItsParentsCalls: while a parent's
// AfterSpawn calls are made, none of its suspended children is queued or
// parked, even once aborted: a child woken by an abort must not run (its
// rollback closing what the parent's call is about to open) before the
// call is made. The abort then ends the tree.
func TestSuspendChildRunsOnlyAfterItsParentsCalls(t *testing.T) {
	env := newSCEnv(scAbortInAfter, time.Hour)
	h := startSC(t, store.NewMemStore(), env)
	info := h.wait(h.submit(&scParent{Keys: []string{"a", "b", "c"}}, SubmitOptions{}))
	env.mu.Lock()
	defer env.mu.Unlock()
	if len(env.problems) > 0 {
		t.Fatal(env.problems)
	}
	if info.State != RolledBack || len(env.after) != 1 || !env.after[0] {
		t.Fatalf("parent %v, AfterSpawn told %v: want the aborted tree rolled back after one written spawn", info.State, env.after)
	}
}
