package procedure

import (
	"context"
	"errors"
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
