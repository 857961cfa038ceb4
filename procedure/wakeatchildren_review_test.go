package procedure

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/locked"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// wvFailParent spawns one wave of two wvChild, asks to run again beside
// them (WakeAtChildren), and then fails its step while any is live: it
// retries until done, so it waits out a backoff with its children live,
// as a server crash's ASSIGN does when a read fails mid-overlap.
type wvFailParent struct {
	StateMachine
	Spawned bool
	Runs    int
}

func (p *wvFailParent) InitialState() int32                 { return 1 }
func (p *wvFailParent) RetryUntilDone() bool                { return true }
func (p *wvFailParent) RollbackState(*Context, int32) error { return nil }

func (p *wvFailParent) ExecuteState(ctx *Context, _ int32) (Flow, error) {
	p.Runs++
	if !p.Spawned {
		ctx.AddChild(&wvChild{Name: "a0"})
		ctx.AddChild(&wvChild{Name: "a1"})
		p.Spawned = true
		ctx.WakeAtChildren(2)
		return HasMoreState, nil
	}
	if ctx.ChildrenLeft() > 0 {
		return HasMoreState, errors.New("injected: the step fails with its children live")
	}
	return NoMoreState, nil
}

func startFailWavesOn(t *testing.T, st store.Store, env *wvEnv, backoff time.Duration) *harness {
	// Anew before the executor starts: its children may suspend on their
	// events before it returns (events do not survive a restart).
	var hx *Executor
	env.mu.Lock()
	env.evs = map[string]*scheduler.Event{}
	env.x = func() *Executor { return hx }
	env.mu.Unlock()
	h := startExecutor(t, st, newDomain(), func(c *Config) {
		c.Registry = NewRegistry()
		c.Registry.MustRegister("wvFailParent", 1, func() Procedure { return &wvFailParent{} })
		c.Registry.MustRegister("wvChild", 1, func() Procedure { return &wvChild{} })
		c.Env = env
		c.RollbackBackoff, c.RollbackBackoffMax = backoff, backoff
	})
	hx = h.x
	return h
}

// A parent woken early whose step then fails waits out its backoff
// WAITING_TIMEOUT with its children live; a write of it then (here a
// Pause's) must still store it WAITING: a load, this release's or
// 0.1.0's, takes a WAITING_TIMEOUT parent for one that runs once its
// timer passes, children or not, and 0.1.0's server crash, run with its
// children live, scans every region, finds theirs still on the crashed
// server and spawns them again, or ends with them running.
func TestWakeAtChildrenParentRetryingWithLiveChildrenIsStoredWaiting(t *testing.T) {
	mem := store.NewMemStore()
	env := &wvEnv{evs: map[string]*scheduler.Event{}, done: map[string]bool{}}
	h := startFailWavesOn(t, mem, env, time.Hour)
	id := h.submit(&wvFailParent{}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "the parent retrying with its children live", func() bool {
		h.x.mu.Lock()
		defer h.x.mu.Unlock()
		e := h.x.procs[id]
		return e != nil && e.state == WaitingTimeout && !e.running && e.childLatch == 2
	})
	if err := h.x.Pause(id); err != nil {
		t.Fatal(err)
	}
	r, ok := storedRecord(t, mem, id)
	if !ok {
		t.Fatal("parent's record missing")
	}
	if r.state != Waiting {
		t.Fatalf("parent retrying with 2 children live stored %v, want WAITING", r.state)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.x.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// Loaded, it waits for both children, then runs its step again.
	h2 := startFailWavesOn(t, mem, env, time.Millisecond)
	if probs := h2.x.Problems(); len(probs) > 0 {
		t.Fatalf("tree held at load: %+v", probs)
	}
	if err := h2.x.Resume(id); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a0", "a1"} {
		testwait.For(t, 10*time.Second, n+" waiting again", func() bool { return env.waiting(n) })
	}
	runs := locked.Call(&h2.x.mu, func() int { return h2.x.procs[id].proc.(*wvFailParent).Runs })
	if runs != 2 {
		t.Fatalf("loaded parent ran %d times with its children live (stored with 2 runs)", runs-2)
	}
	env.finish("a0")
	env.finish("a1")
	if info := h2.wait(id); info.State != Success {
		t.Fatalf("parent ended %v (%s)", info.State, info.Error)
	}
}

// wvGateParent spawns wave a (two wvFailChild), runs again beside them
// (WakeAtChildren), and in that run waits at the gate before spawning
// wave b, then waits for every child (OnChildren) and ends.
type wvGateParent struct {
	StateMachine
	Waves int
}

func (p *wvGateParent) InitialState() int32                 { return 1 }
func (p *wvGateParent) RetryUntilDone() bool                { return true }
func (p *wvGateParent) RollbackState(*Context, int32) error { return nil }
func (p *wvGateParent) ForgetChildrenOnSuccess() bool       { return true }

func (p *wvGateParent) ExecuteState(ctx *Context, _ int32) (Flow, error) {
	env := ctx.Env.(*wvGateEnv)
	env.mu.Lock()
	env.left = append(env.left, ctx.ChildrenLeft())
	env.mu.Unlock()
	switch p.Waves {
	case 0:
		ctx.AddChild(&wvFailChild{Name: "a0"})
		ctx.AddChild(&wvFailChild{Name: "a1"})
		p.Waves++
		ctx.WakeAtChildren(2)
		return HasMoreState, nil
	case 1:
		env.entered <- struct{}{}
		<-env.gate
		ctx.AddChild(&wvFailChild{Name: "b0"})
		p.Waves++
		return HasMoreState, nil
	}
	if ctx.ChildrenLeft() > 0 {
		ctx.Suspend(OnChildren())
		return HasMoreState, nil
	}
	return NoMoreState, nil
}

// wvFailChild ends at once, or, if its name is in fail, waits for
// release and fails its step.
type wvFailChild struct {
	StateMachine
	Name string
}

func (c *wvFailChild) InitialState() int32                 { return 1 }
func (c *wvFailChild) RollbackState(*Context, int32) error { return nil }

func (c *wvFailChild) ExecuteState(ctx *Context, _ int32) (Flow, error) {
	env := ctx.Env.(*wvGateEnv)
	if env.fail[c.Name] {
		<-env.release
		return NoMoreState, errors.New("injected child failure")
	}
	return NoMoreState, nil
}

type wvGateEnv struct {
	entered, gate, release chan struct{}
	fail                   map[string]bool
	mu                     sync.Mutex
	left                   []int // ChildrenLeft at each of the parent's runs
}

// A child of a parent woken early fails while the parent's step runs and
// spawns the next wave: its subtree rolls back alone once the step has
// ended, and the parent goes on, counts the rolled-back child and the one
// that succeeded (and was forgotten) as finished, waits for the new wave,
// and ends.
func TestWakeAtChildrenChildFailsWhileParentSteps(t *testing.T) {
	env := &wvGateEnv{entered: make(chan struct{}, 1), gate: make(chan struct{}), release: make(chan struct{}),
		fail: map[string]bool{"a1": true}}
	mem := store.NewMemStore()
	h := startExecutor(t, mem, newDomain(), func(c *Config) {
		c.Registry = NewRegistry()
		c.Registry.MustRegister("wvGateParent", 1, func() Procedure { return &wvGateParent{} })
		c.Registry.MustRegister("wvFailChild", 1, func() Procedure { return &wvFailChild{} })
		c.Env = env
	})
	id := h.submit(&wvGateParent{}, SubmitOptions{})
	select {
	case <-env.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the parent's second step never ran")
	}
	close(env.release)
	testwait.For(t, 10*time.Second, "a1 failed while the parent's step runs", func() bool {
		h.x.mu.Lock()
		defer h.x.mu.Unlock()
		for _, m := range h.x.roots[id].members {
			if m.id != id && m.state == Failed {
				return true
			}
		}
		return false
	})
	if r, _ := storedRecord(t, mem, id); r.state != Waiting {
		t.Fatalf("parent stored %v with its children live, want WAITING", r.state)
	}
	close(env.gate)
	info := h.wait(id)
	if info.State != Success {
		t.Fatalf("parent ended %v (%s)", info.State, info.Error)
	}
	// The second run with a1 (and perhaps a0) live, the last with none.
	env.mu.Lock()
	left := slices.Clone(env.left)
	env.mu.Unlock()
	if len(left) < 3 || left[0] != 0 || left[1] < 1 || left[len(left)-1] != 0 {
		t.Fatalf("parent ran with %v children left, want [0 ≥1 … 0]", left)
	}
}
