package procedure

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// scEnv is what the SuspendChild tests' procedures share: scParent
// reserves a locked scChild per key, suspends each on its own event
// (SuspendChild) and spawns them; scChild records its runs.
type scEnv struct {
	*domain
	x *Executor
	// timeout is the children's (0: an hour; noTimeout: none); wakeInStep
	// wakes their events in the step, before its spawn is written;
	// failStep fails the step after suspending them.
	timeout    time.Duration
	noTimeout  bool
	wakeInStep bool
	failStep   bool
	// told is what AfterSpawn was told (Committed), appended once the
	// after hook returned.
	told []bool

	mu      sync.Mutex
	events  map[string]*scheduler.Event
	ran     map[string]int  // child runs (ExecuteState calls), by key
	ranAt   map[string]bool // a child ran while AfterSpawn was running
	inAfter bool
	// parentSawUnrun lists, at the parent's state 2, the children that
	// had not run yet: a parent past its children must see none.
	parentSawUnrun []string
	// after is called from the parent's AfterSpawn with the children's
	// ids by key.
	after func(out SpawnOutcome, ids map[string]uint64)
	// changes heard (ChangeListener), in order.
	changes []Change
	// ids are the children's, by key, once their spawn is written.
	ids map[string]uint64
	// windowProblems are noteIfRunnable's.
	windowProblems []string
}

// childIDs waits for the spawn of children a and b and returns their ids.
func (env *scEnv) childIDs(t *testing.T) (a, b uint64) {
	t.Helper()
	testwait.For(t, 10*time.Second, "the children spawned", func() bool {
		env.mu.Lock()
		defer env.mu.Unlock()
		a, b = env.ids["a"], env.ids["b"]
		return a != 0 && b != 0
	})
	return a, b
}

func newSCEnv() *scEnv {
	return &scEnv{domain: newDomain(), events: map[string]*scheduler.Event{}, ran: map[string]int{}, ranAt: map[string]bool{}}
}

type scParent struct {
	StateMachine
	Keys []string
}

func (p *scParent) InitialState() int32                 { return 1 }
func (p *scParent) RollbackState(*Context, int32) error { return nil }

func (p *scParent) ExecuteState(ctx *Context, state int32) (Flow, error) {
	env := ctx.Env.(*scEnv)
	if state != 1 {
		env.mu.Lock()
		for _, k := range p.Keys {
			if env.ran[k] == 0 {
				env.parentSawUnrun = append(env.parentSawUnrun, k)
			}
		}
		env.mu.Unlock()
		return NoMoreState, nil
	}
	ids := map[string]uint64{}
	for _, k := range p.Keys {
		id, locked, err := ctx.AddLockedChild(&scChild{Key: k})
		if err != nil || !locked {
			return NoMoreState, errors.Join(err, errors.New("child not locked"))
		}
		ids[k] = id
		ev := scheduler.NewEvent("rv " + k)
		env.mu.Lock()
		env.events[k] = ev
		env.mu.Unlock()
		opts := []SuspendOption{OnEvent(ev)}
		if !env.noTimeout {
			opts = append(opts, Timeout(cmp.Or(env.timeout, time.Hour)))
		}
		if err := ctx.SuspendChild(id, opts...); err != nil {
			return NoMoreState, err
		}
		if env.wakeInStep {
			env.x.Wake(ev)
		}
	}
	ctx.AfterSpawn(func(out SpawnOutcome) {
		env.mu.Lock()
		env.inAfter = true
		if out.Committed {
			env.ids = ids
		}
		f := env.after
		env.mu.Unlock()
		if f != nil {
			f(out, ids)
		}
		env.mu.Lock()
		env.inAfter = false
		env.told = append(env.told, out.Committed)
		env.mu.Unlock()
	})
	if env.failStep {
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
	env.ran[c.Key]++
	if env.inAfter {
		env.ranAt[c.Key] = true
	}
	env.mu.Unlock()
	return NoMoreState, nil
}

func startSC(t *testing.T, env *scEnv) *harness { return startSCOn(t, store.NewMemStore(), env) }

func startSCOn(t *testing.T, st store.Store, env *scEnv) *harness {
	h := startExecutor(t, st, env.domain, func(c *Config) {
		c.Env = env
		c.Registry = NewRegistry()
		c.Registry.MustRegister("scParent", 1, func() Procedure { return &scParent{} })
		c.Registry.MustRegister("scChild", 1, func() Procedure { return &scChild{} })
	})
	env.x = h.x
	h.x.AddChangeListener(func(c Change) {
		env.mu.Lock()
		env.changes = append(env.changes, c)
		env.mu.Unlock()
	})
	return h
}

// wakeAll wakes every child's event.
func (env *scEnv) wakeAll() {
	env.mu.Lock()
	evs := make([]*scheduler.Event, 0, len(env.events))
	for _, ev := range env.events {
		evs = append(evs, ev)
	}
	env.mu.Unlock()
	for _, ev := range evs {
		env.x.Wake(ev)
	}
}

// checkNoneCanRun notes a problem if any of ids is queued or parked, or
// has run: while its parent's AfterSpawn calls are made, none may.
func (env *scEnv) checkNoneCanRun(ids map[string]uint64) {
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
	env.windowProblems = append(env.windowProblems, bad...)
	if len(env.ran) > 0 {
		env.windowProblems = append(env.windowProblems, "a child ran during its parent's AfterSpawn")
	}
	env.mu.Unlock()
}

// TestSuspendChildWaitsForItsEvent: a child suspended by its parent's step
// does not run before its event is woken; AfterSpawn runs once, told the
// spawn was written, before any child runs; each child then runs its first
// state once, and the tree ends.
func TestSuspendChildWaitsForItsEvent(t *testing.T) {
	env := newSCEnv()
	env.after = func(out SpawnOutcome, _ map[string]uint64) {
		if out.Committed {
			env.wakeAll()
		}
	}
	h := startSC(t, env)
	keys := []string{"a", "b", "c", "d"}
	if info := h.wait(h.submit(&scParent{Keys: keys}, SubmitOptions{})); info.State != Success {
		t.Fatalf("parent %v: %s", info.State, info.Error)
	}
	env.mu.Lock()
	defer env.mu.Unlock()
	if len(env.told) != 1 || !env.told[0] {
		t.Fatalf("AfterSpawn told %v, want [true]", env.told)
	}
	for _, k := range keys {
		if env.ran[k] != 1 || env.ranAt[k] {
			t.Errorf("child %s ran %d times (during AfterSpawn: %v); want once, after it", k, env.ran[k], env.ranAt[k])
		}
	}
}

// TestSuspendChildStaysSuspended: with its event never woken and no
// timeout, a child waits (WAITING, not queued) for good; its timeout alone
// wakes it.
func TestSuspendChildStaysSuspended(t *testing.T) {
	env := newSCEnv()
	env.noTimeout = true
	h := startSC(t, env)
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
	env.wakeAll()
	if info := h.wait(parent); info.State != Success {
		t.Fatalf("parent %v", info.State)
	}
	if i, _ := h.x.Get(child); i.State != Success {
		t.Fatalf("child %v", i.State)
	}

	timed := newSCEnv()
	timed.timeout = 20 * time.Millisecond
	h = startSC(t, timed)
	if info := h.wait(h.submit(&scParent{Keys: []string{"t"}}, SubmitOptions{})); info.State != Success {
		t.Fatalf("parent with a timeout %v", info.State)
	}
}

// TestSuspendChildWokenBeforeItParks: an event woken while the parent's
// step still runs (an answer faster than the spawn's write) still runs the
// child.
func TestSuspendChildWokenBeforeItParks(t *testing.T) {
	env := newSCEnv()
	env.wakeInStep = true
	h := startSC(t, env)
	if info := h.wait(h.submit(&scParent{Keys: []string{"a", "b"}}, SubmitOptions{})); info.State != Success {
		t.Fatalf("parent %v: %s", info.State, info.Error)
	}
}

// TestSuspendChildOfAFailedStep: a step that fails after suspending its
// children tells AfterSpawn false, once, and no child exists or runs.
func TestSuspendChildOfAFailedStep(t *testing.T) {
	env := newSCEnv()
	env.failStep = true
	h := startSC(t, env)
	if info := h.wait(h.submit(&scParent{Keys: []string{"a"}}, SubmitOptions{})); info.State != Failed && info.State != RolledBack {
		t.Fatalf("parent %v", info.State)
	}
	env.mu.Lock()
	defer env.mu.Unlock()
	if len(env.told) != 1 || env.told[0] {
		t.Fatalf("AfterSpawn told %v, want [false]", env.told)
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
	env := newSCEnv()
	env.noTimeout = true
	h := startSCOn(t, mem, env)
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
	env2 := newSCEnv()
	env2.noTimeout = true
	h2 := startSCOn(t, mem, env2)
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
	env := newSCEnv()
	var abortErr error
	env.after = func(out SpawnOutcome, ids map[string]uint64) {
		if !out.Committed {
			return
		}
		env.checkNoneCanRun(ids)
		env.x.mu.Lock()
		parent := env.x.procs[ids["a"]].parent
		env.x.mu.Unlock()
		abortErr = env.x.Abort(parent)
		env.checkNoneCanRun(ids)
	}
	h := startSC(t, env)
	info := h.wait(h.submit(&scParent{Keys: []string{"a", "b", "c"}}, SubmitOptions{}))
	env.mu.Lock()
	defer env.mu.Unlock()
	if abortErr != nil || len(env.windowProblems) > 0 {
		t.Fatal(abortErr, env.windowProblems)
	}
	if info.State != RolledBack || len(env.told) != 1 || !env.told[0] {
		t.Fatalf("parent %v, AfterSpawn told %v: want the aborted tree rolled back after one written spawn", info.State, env.told)
	}
}
