package procedure

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// wvParent spawns Waves waves of Size wvChild each, the next once at most
// Size of the earlier ones are unfinished (WakeAtChildren), as a server
// crash overlaps its waves; then it waits for the rest (OnChildren) and
// ends. Left notes ChildrenLeft at each of its runs.
type wvParent struct {
	StateMachine
	Waves, Size int
	Spawned     int
	Left        []int
}

func (p *wvParent) InitialState() int32                 { return 1 }
func (p *wvParent) RetryUntilDone() bool                { return true }
func (p *wvParent) RollbackState(*Context, int32) error { return nil }

func (p *wvParent) ExecuteState(ctx *Context, _ int32) (Flow, error) {
	left := ctx.ChildrenLeft()
	p.Left = append(p.Left, left)
	if p.Spawned < p.Waves {
		for i := range p.Size {
			ctx.AddChild(&wvChild{Name: wvName(p.Spawned, i)})
		}
		p.Spawned++
		ctx.WakeAtChildren(p.Size)
		return HasMoreState, nil
	}
	if left > 0 {
		ctx.Suspend(OnChildren())
		return HasMoreState, nil
	}
	return NoMoreState, nil
}

func wvName(wave, i int) string { return string(rune('a'+wave)) + string(rune('0'+i)) }

// wvChild waits until the test finishes it (wvEnv.finish).
type wvChild struct {
	StateMachine
	Name string
}

func (c *wvChild) InitialState() int32                 { return 1 }
func (c *wvChild) RollbackState(*Context, int32) error { return nil }

func (c *wvChild) ExecuteState(ctx *Context, _ int32) (Flow, error) {
	env := ctx.Env.(*wvEnv)
	if env.finished(c.Name) {
		return NoMoreState, nil
	}
	ctx.Suspend(OnEvent(env.event(c.Name)))
	return HasMoreState, nil
}

// wvEnv holds the children's events, made anew by each executor (events
// do not survive a restart).
type wvEnv struct {
	x    func() *Executor
	mu   sync.Mutex
	evs  map[string]*scheduler.Event
	done map[string]bool
}

func (e *wvEnv) event(name string) *scheduler.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	ev := scheduler.NewEvent(name)
	e.evs[name] = ev
	return ev
}

func (e *wvEnv) finished(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.done[name]
}

func (e *wvEnv) waiting(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.evs[name] != nil
}

func (e *wvEnv) finish(name string) {
	e.mu.Lock()
	e.done[name] = true
	ev := e.evs[name]
	e.mu.Unlock()
	if ev != nil {
		e.x().Wake(ev)
	}
}

func startWaves(t *testing.T, st store.Store) (*harness, *wvEnv) {
	env := &wvEnv{evs: map[string]*scheduler.Event{}, done: map[string]bool{}}
	h := startWavesOn(t, st, env)
	return h, env
}

func startWavesOn(t *testing.T, st store.Store, env *wvEnv) *harness {
	// Anew before the executor starts: its children may suspend on their
	// events before it returns (events do not survive a restart).
	var hx *Executor
	env.mu.Lock()
	env.evs = map[string]*scheduler.Event{}
	env.x = func() *Executor { return hx }
	env.mu.Unlock()
	h := startExecutor(t, st, newDomain(), func(c *Config) {
		c.Registry = NewRegistry()
		c.Registry.MustRegister("wvParent", 1, func() Procedure { return &wvParent{} })
		c.Registry.MustRegister("wvChild", 1, func() Procedure { return &wvChild{} })
		c.Env = env
	})
	hx = h.x
	return h
}

// waitParent waits until the parent is waiting (its worker has let go of
// it) and ok, which reads its fields under the executor's lock.
func waitParent(t *testing.T, h *harness, id uint64, what string, ok func(p *wvParent, left int) bool) {
	t.Helper()
	testwait.For(t, 10*time.Second, what, func() bool {
		h.x.mu.Lock()
		defer h.x.mu.Unlock()
		e := h.x.procs[id]
		return e != nil && e.state == Waiting && !e.running && ok(e.proc.(*wvParent), e.childLatch)
	})
}

// A parent that asks WakeAtChildren(n) runs its next step once at most n
// of its children are unfinished, spawns the next wave beside them, and
// after its last wave waits for the rest with OnChildren.
func TestWakeAtChildrenOverlapsWavesOfChildren(t *testing.T) {
	h, env := startWaves(t, store.NewMemStore())
	id := h.submit(&wvParent{Waves: 3, Size: 2}, SubmitOptions{})
	// Wave a alone is within the watermark: wave b follows at once.
	waitParent(t, h, id, "waves a and b spawned", func(p *wvParent, left int) bool { return p.Spawned == 2 && left == 4 })
	for _, n := range []string{"a0", "a1", "b0", "b1"} {
		testwait.For(t, 10*time.Second, n+" waiting", func() bool { return env.waiting(n) })
	}
	env.finish("a0")
	// Three left: above the watermark, the parent waits.
	waitParent(t, h, id, "a0 done", func(p *wvParent, left int) bool { return left == 3 })
	if got := parentField(h, id, func(p *wvParent) int { return p.Spawned }); got != 2 {
		t.Fatalf("parent spawned wave %d with 3 children unfinished, watermark 2", got)
	}
	// a1 out of order with b's: two left, the third wave goes out.
	env.finish("b1")
	waitParent(t, h, id, "wave c spawned", func(p *wvParent, left int) bool { return p.Spawned == 3 && left == 4 })
	env.finish("a1")
	env.finish("c0")
	// The last wave spawned: the parent runs with two left and waits for
	// them.
	waitParent(t, h, id, "the parent waiting for the rest", func(p *wvParent, left int) bool { return len(p.Left) == 4 })
	for _, n := range []string{"b0", "c1"} {
		testwait.For(t, 10*time.Second, n+" waiting", func() bool { return env.waiting(n) })
		env.finish(n)
	}
	if info := h.wait(id); info.State != Success {
		t.Fatalf("parent ended %v (%s)", info.State, info.Error)
	}
}

// A restart finds the parent of live children stored WAITING, whatever it
// was doing, and loads the tree (a RUNNABLE parent of live children is
// taken for a broken spawn and held); the loaded parent waits for all of
// them: the watermark is not persisted.
func TestWakeAtChildrenParentReloadsWaitingForAll(t *testing.T) {
	mem := store.NewMemStore()
	h, env := startWaves(t, mem)
	id := h.submit(&wvParent{Waves: 3, Size: 2}, SubmitOptions{})
	waitParent(t, h, id, "waves a and b spawned", func(p *wvParent, left int) bool { return p.Spawned == 2 && left == 4 })
	for _, n := range []string{"a0", "a1", "b0", "b1"} {
		testwait.For(t, 10*time.Second, n+" waiting", func() bool { return env.waiting(n) })
	}
	env.finish("a0")
	env.finish("a1")
	waitParent(t, h, id, "wave c spawned", func(p *wvParent, left int) bool { return p.Spawned == 3 && left == 4 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.x.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	h2 := startWavesOn(t, mem, env)
	if probs := h2.x.Problems(); len(probs) > 0 {
		t.Fatalf("tree held at load: %+v", probs)
	}
	live := []string{"b0", "b1", "c0", "c1"}
	for _, n := range live {
		testwait.For(t, 10*time.Second, n+" waiting again", func() bool { return env.waiting(n) })
	}
	for _, n := range live[:3] {
		env.finish(n)
	}
	// One left: within the old watermark, but the loaded parent waits for
	// every child.
	waitParent(t, h2, id, "three of four finished", func(p *wvParent, left int) bool { return left == 1 })
	if got := parentField(h2, id, func(p *wvParent) []int { return slices.Clone(p.Left) }); !slices.Equal(got, []int{0, 2, 2}) {
		t.Fatalf("parent ran with %v children left, want [0 2 2]: not again until all four are done", got)
	}
	env.finish("c1")
	if info := h2.wait(id); info.State != Success {
		t.Fatalf("parent ended %v (%s)", info.State, info.Error)
	}
}

func parentField[T any](h *harness, id uint64, f func(p *wvParent) T) T {
	h.x.mu.Lock()
	defer h.x.mu.Unlock()
	return f(h.x.procs[id].proc.(*wvParent))
}

// The record of a procedure woken before its children finished says
// WAITING.
func TestStoredStateOfAnEarlyWokenParentIsWaiting(t *testing.T) {
	for _, c := range []struct {
		state State
		latch int
		want  State
	}{
		{Runnable, 2, Waiting},
		{Runnable, 0, Runnable},
		{Waiting, 2, Waiting},
		{WaitingTimeout, 1, Waiting},
		{WaitingTimeout, 0, WaitingTimeout},
		{Failed, 1, Failed},
		{Success, 0, Success},
	} {
		e := &entry{state: c.state, childLatch: c.latch}
		if got := storedState(e); got != c.want {
			t.Errorf("state %v with %d children unfinished stored %v, want %v", c.state, c.latch, got, c.want)
		}
	}
}
