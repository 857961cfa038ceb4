package procedure

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// Review tests of Context.SuspendChild / AfterSpawn: the window between
// the spawn's commit (children in the table, visible to the API) and
// their parking (parkNewLocked), during which AfterSpawn runs.

// noteIfRunnable notes, from the parent's AfterSpawn, a child that an API
// call just made runnable: queued, running or ended before the spawn
// parked it.
func (env *scEnv) noteIfRunnable(id uint64, how string) {
	x := env.x
	x.mu.Lock()
	e := x.procs[id]
	bad := x.sched.Sizes().Queued != 0 || e == nil || e.running || e.state.Terminal()
	x.mu.Unlock()
	if bad {
		env.mu.Lock()
		env.windowProblems = append(env.windowProblems, fmt.Sprintf("child %d, %s during its parent's AfterSpawn, was queued, ran or ended there", id, how))
		env.mu.Unlock()
	}
}

// quiescent: nothing queued, no step running, no member of the tree held.
func (env *scEnv) quiescent(ids ...uint64) bool {
	x := env.x
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sched.Sizes().Queued != 0 || x.inFlight.Load() != 0 {
		return false
	}
	for _, id := range ids {
		if e := x.procs[id]; e != nil && e.running {
			return false
		}
	}
	return true
}

func (env *scEnv) successes(id uint64) int {
	env.mu.Lock()
	defer env.mu.Unlock()
	n := 0
	for _, c := range env.changes {
		if c.ID == id && c.State == Success {
			n++
		}
	}
	return n
}

// TestBypassOfASuspendedChildInTheAfterSpawnWindow: Bypass is an
// API call; the child is in the procedure table (holdLocked) from the
// spawn's commit, but is neither queued nor parked until AfterSpawn has
// returned. A Bypass then finds it RUNNABLE and not running, and queues
// it (api.go, Bypass): it completes before AfterSpawn returns. Then
// parkNewLocked parks the finished child again (it does not look at its
// state), sees k.bypass and wakes it: it completes a second time, and its
// parent's child latch is decremented twice. The parent then runs on
// while its other child never ran: the parent ends with a child
// unfinished.
func TestSuspendChildBypassedInTheAfterSpawnWindow(t *testing.T) {
	env := newSCEnv()
	h := startSC(t, env)
	var bypassErr error
	env.after = func(out SpawnOutcome, ids map[string]uint64) {
		if !out.Committed {
			return
		}
		a := ids["a"]
		bypassErr = env.x.Bypass(a, BypassOptions{})
		env.noteIfRunnable(a, "bypassed")
	}
	parent := h.submit(&scParent{Keys: []string{"a", "b"}}, SubmitOptions{})
	a, b := env.childIDs(t)
	testwait.For(t, 10*time.Second, "the tree quiescent", func() bool { return env.quiescent(parent, a, b) })
	if bypassErr != nil {
		t.Fatalf("bypass: %v", bypassErr)
	}
	env.mu.Lock()
	problems := slices.Clone(env.windowProblems)
	env.mu.Unlock()
	if n := env.successes(a); n != 1 {
		problems = append(problems, fmt.Sprintf("bypassed child %d heard SUCCESS %d times, want once", a, n))
	}
	h.x.mu.Lock()
	if e := h.x.procs[a]; e != nil && !e.state.Terminal() {
		problems = append(problems, fmt.Sprintf("bypassed child %d, finished, is %v again", a, e.state))
	}
	if e := h.x.procs[parent]; e != nil && e.childLatch != 1 {
		problems = append(problems, fmt.Sprintf("parent's child latch %d with child b still waiting, want 1", e.childLatch))
	}
	h.x.mu.Unlock()
	if i, _ := h.x.Get(parent); i.State.Terminal() {
		problems = append(problems, fmt.Sprintf("parent %s while child b never ran", i.State))
	}
	// Let the tree end.
	env.mu.Lock()
	evB := env.events["b"]
	env.mu.Unlock()
	h.x.Wake(evB)
	h.wait(parent)
	env.mu.Lock()
	if slices.Contains(env.parentSawUnrun, "b") { // a, bypassed, runs no step
		problems = append(problems, "the parent ran past its children while b had not run")
	}
	env.mu.Unlock()
	if len(problems) > 0 {
		t.Fatal(problems)
	}
}

// TestResumeOfASuspendedChildInTheAfterSpawnWindow: Pause then
// Resume of a child during its parent's AfterSpawn queues it (Resume
// queues a pausedParked RUNNABLE entry): the child runs its first step
// before AfterSpawn returns, which the change promises cannot happen (a
// child's first step would then not find its parent's call made); and
// parkNewLocked parks it again afterwards, so its event (the answer)
// runs it a second time.
func TestSuspendChildResumedInTheAfterSpawnWindow(t *testing.T) {
	env := newSCEnv()
	h := startSC(t, env)
	var apiErr error
	env.after = func(out SpawnOutcome, ids map[string]uint64) {
		if !out.Committed {
			return
		}
		a := ids["a"]
		apiErr = errors.Join(env.x.Pause(a), env.x.Resume(a))
		env.noteIfRunnable(a, "paused and resumed")
	}
	parent := h.submit(&scParent{Keys: []string{"a", "b"}}, SubmitOptions{})
	a, b := env.childIDs(t)
	testwait.For(t, 10*time.Second, "the tree quiescent", func() bool { return env.quiescent(parent, a, b) })
	if apiErr != nil {
		t.Fatalf("pause/resume: %v", apiErr)
	}
	env.mu.Lock()
	problems := slices.Clone(env.windowProblems)
	env.mu.Unlock()
	env.mu.Lock()
	if env.ranAt["a"] {
		problems = append(problems, "the child ran its first step while its parent's AfterSpawn was running")
	}
	evA, evB := env.events["a"], env.events["b"]
	env.mu.Unlock()
	h.x.mu.Lock()
	// Resumed in the window, it is parked on the answer as its sibling
	// is: nothing ran it yet.
	if e := h.x.procs[a]; e == nil {
		problems = append(problems, "child a, resumed in the window, is gone")
	} else if e.state != WaitingTimeout {
		problems = append(problems, fmt.Sprintf("child a, resumed in the window, is %v, want WAITING_TIMEOUT on its answer", e.state))
	}
	h.x.mu.Unlock()
	// The answer to the parent's call in a's name comes.
	h.x.Wake(evA)
	testwait.For(t, 10*time.Second, "the tree quiescent", func() bool { return env.quiescent(parent, a, b) })
	if n := env.successes(a); n > 1 {
		problems = append(problems, fmt.Sprintf("child a was heard SUCCESS %d times", n))
	}
	if i, _ := h.x.Get(parent); i.State.Terminal() {
		problems = append(problems, fmt.Sprintf("parent %s while child b never ran", i.State))
	}
	h.x.Wake(evB)
	h.wait(parent)
	env.mu.Lock()
	if slices.Contains(env.parentSawUnrun, "b") {
		problems = append(problems, "the parent ran past its children while b had not run")
	}
	env.mu.Unlock()
	if len(problems) > 0 {
		t.Fatal(problems)
	}
}

// TestAbortOfAChildInTheWindow: Abort of a suspended child itself
// (not its parent) during AfterSpawn flags it; it is woken only once
// parked, after AfterSpawn returned, and fails without a rollback-stack
// entry of its own; the tree rolls back and ends. No child runs a step.
func TestSuspendChildAbortedInTheAfterSpawnWindow(t *testing.T) {
	env := newSCEnv()
	h := startSC(t, env)
	var abortErr error
	env.after = func(out SpawnOutcome, ids map[string]uint64) {
		if out.Committed {
			abortErr = env.x.Abort(ids["b"])
		}
	}
	parent := h.submit(&scParent{Keys: []string{"a", "b"}}, SubmitOptions{})
	info := h.wait(parent)
	if abortErr != nil {
		t.Fatal(abortErr)
	}
	if info.State != RolledBack {
		t.Fatalf("parent %v, want ROLLEDBACK", info.State)
	}
	env.mu.Lock()
	defer env.mu.Unlock()
	if len(env.ran) != 0 {
		t.Fatalf("children ran: %v", env.ran)
	}
	// Listener order: a child's spawn heard before anything else of it.
	seen := map[uint64]bool{}
	for _, c := range env.changes {
		if c.ParentID == parent && !seen[c.ID] {
			seen[c.ID] = true
			if c.State != Runnable {
				t.Errorf("child %d first heard %v, want its spawn (RUNNABLE)", c.ID, c.State)
			}
		}
	}
}

// TestStopInTheWindow: Stop while AfterSpawn runs: the children are
// queued, not parked (parkNewLocked while stopping), nothing runs, and a
// restart runs them (their records are RUNNABLE).
func TestSuspendChildStopInTheAfterSpawnWindow(t *testing.T) {
	mem := store.NewMemStore()
	env := newSCEnv()
	h := startExecutor(t, mem, env.domain, func(c *Config) {
		c.Env = env
		c.Registry = NewRegistry()
		c.Registry.MustRegister("scParent", 1, func() Procedure { return &scParent{} })
		c.Registry.MustRegister("scChild", 1, func() Procedure { return &scChild{} })
	})
	env.x = h.x
	stopped := make(chan error, 1)
	env.after = func(out SpawnOutcome, ids map[string]uint64) {
		if !out.Committed {
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stopped <- env.x.Stop(ctx)
		}()
		// Widen the window until Stop began.
		testwait.Until(10*time.Second, func() bool {
			env.x.mu.Lock()
			defer env.x.mu.Unlock()
			return env.x.stopping
		})
	}
	parent := h.submit(&scParent{Keys: []string{"a", "b"}}, SubmitOptions{})
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	env.mu.Lock()
	if len(env.ran) != 0 {
		t.Errorf("children ran: %v", env.ran)
	}
	env.mu.Unlock()
	env2 := newSCEnv()
	h2 := startExecutor(t, mem, env2.domain, func(c *Config) {
		c.Env = env2
		c.Registry = NewRegistry()
		c.Registry.MustRegister("scParent", 1, func() Procedure { return &scParent{} })
		c.Registry.MustRegister("scChild", 1, func() Procedure { return &scChild{} })
	})
	env2.x = h2.x
	if info := h2.wait(parent); info.State != Success {
		t.Fatalf("parent after restart %v", info.State)
	}
	env2.mu.Lock()
	defer env2.mu.Unlock()
	if env2.ran["a"] != 1 || env2.ran["b"] != 1 || len(env2.parentSawUnrun) != 0 {
		t.Fatalf("after restart ran %v, parent saw unrun %v", env2.ran, env2.parentSawUnrun)
	}
}

// TestRolledBackTreeReleasesSuspendedChildren: a tree failed by a
// sibling while children are parked (never ran) ends; their event and
// timer are released (finishRoot), and waking the event later runs
// nothing.
func TestSuspendChildRolledBackTreeReleasesThem(t *testing.T) {
	env := newSCEnv()
	h := startSC(t, env)
	parent := h.submit(&scParent{Keys: []string{"a", "b"}}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "both children waiting", func() bool {
		n := 0
		for _, i := range h.x.List(Filter{Type: "scChild"}) {
			if i.State == WaitingTimeout || i.State == Waiting {
				n++
			}
		}
		return n == 2
	})
	if err := h.x.Abort(parent); err != nil {
		t.Fatal(err)
	}
	if info := h.wait(parent); info.State != RolledBack {
		t.Fatalf("parent %v", info.State)
	}
	env.mu.Lock()
	evs := []*scheduler.Event{env.events["a"], env.events["b"]}
	env.mu.Unlock()
	h.x.mu.Lock()
	for id := range h.x.procs {
		if e := h.x.procs[id]; e != nil && e.ti.name == "scChild" {
			t.Errorf("child %d still in the table", id)
		}
	}
	h.x.mu.Unlock()
	for _, ev := range evs {
		h.x.Wake(ev)
	}
	testwait.For(t, 10*time.Second, "quiescent", func() bool { return env.quiescent() })
	env.mu.Lock()
	defer env.mu.Unlock()
	if len(env.ran) != 0 {
		t.Fatalf("children ran: %v", env.ran)
	}
}
