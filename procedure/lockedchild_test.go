package procedure

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// lcParent spawns one lcChild per key with AddLockedChild and, for each
// child whose locks it got, writes "owner/<key>" = the child's id in its
// own step, in the child's name (as a crash procedure records a region
// OPENING for the child that opens it). FailFirst fails its first run
// after reserving, to show the reservations let go.
type lcParent struct {
	StateMachine
	Keys      []string
	FailFirst bool
	Runs      int
	Prepared  int
	// Withdraw: the children of these keys are withdrawn once reserved
	// (Withdrawn, their ids).
	Withdraw  []string
	Withdrawn []uint64
}

func (p *lcParent) InitialState() int32                 { return 1 }
func (p *lcParent) RetryUntilDone() bool                { return true }
func (p *lcParent) RollbackState(*Context, int32) error { return nil }

func (p *lcParent) ExecuteState(ctx *Context, state int32) (Flow, error) {
	if state != 1 {
		return NoMoreState, nil
	}
	p.Runs++
	if g, ok := ctx.Env.(*lcEnv); ok && p.FailFirst && p.Runs == 2 {
		g.retrying <- struct{}{}
		<-g.resume
	}
	prepared := 0
	for _, k := range p.Keys {
		c := &lcChild{Key: k}
		id, locked, err := ctx.AddLockedChild(c)
		if err != nil {
			return NoMoreState, err
		}
		if slices.Contains(p.Withdraw, k) {
			if err := ctx.WithdrawChild(id); err != nil {
				return NoMoreState, err
			}
			p.Withdrawn = append(p.Withdrawn, id)
			continue
		}
		if !locked {
			continue
		}
		if err := ctx.Put("owner/"+k, []byte(strconv.FormatUint(id, 10))); err != nil {
			return NoMoreState, err
		}
		c.Prepared = true
		prepared++
	}
	if p.FailFirst && p.Runs == 1 {
		if g, ok := ctx.Env.(*lcEnv); ok {
			g.failed <- struct{}{}
			<-g.resume
		}
		return NoMoreState, errors.New("injected: the spawning step fails")
	}
	p.Prepared = prepared
	p.SetNextState(2)
	return HasMoreState, nil
}

// lcChild owns key: exclusively locked for its life. Unprepared, its first
// state writes owner/<key> itself; either way its last state checks that
// the record names it, under its lock.
type lcChild struct {
	StateMachine
	Key      string
	Prepared bool
	Ran      []int32
}

func (c *lcChild) Locks() []scheduler.Lock {
	return []scheduler.Lock{{Type: scheduler.LockRegion, Name: c.Key, Mode: scheduler.Exclusive}}
}
func (c *lcChild) HoldLock() bool { return true }
func (c *lcChild) InitialState() int32 {
	if c.Prepared {
		return 2
	}
	return 1
}
func (c *lcChild) RollbackState(*Context, int32) error { return nil }

func (c *lcChild) ExecuteState(ctx *Context, state int32) (Flow, error) {
	c.Ran = append(c.Ran, state)
	switch state {
	case 1:
		if err := ctx.Put("ran1/"+c.Key, nil); err != nil {
			return NoMoreState, err
		}
		if err := ctx.Put("owner/"+c.Key, []byte(strconv.FormatUint(ctx.ID(), 10))); err != nil {
			return NoMoreState, err
		}
		c.SetNextState(2)
		return HasMoreState, nil
	}
	v, _, err := ctx.Get("owner/" + c.Key)
	if err != nil {
		return NoMoreState, err
	}
	if string(v) != strconv.FormatUint(ctx.ID(), 10) {
		return NoMoreState, fmt.Errorf("owner/%s = %q, want this child %d", c.Key, v, ctx.ID())
	}
	return NoMoreState, ctx.Put("checked/"+c.Key, v)
}

// lcEnv lets a test hold a failing parent step.
type lcEnv struct {
	domain
	failed   chan struct{}
	retrying chan struct{}
	resume   chan struct{}
}

func lockedChildRegistry(c *Config) {
	c.Registry = NewRegistry()
	c.Registry.MustRegister("lcParent", 1, func() Procedure { return &lcParent{} })
	c.Registry.MustRegister("lcChild", 1, func() Procedure { return &lcChild{} })
	c.Registry.MustRegister("lk", 1, func() Procedure { return &lkProc{} })
}

// spawnSpy keeps the children records and the domain changes of the
// writes that spawned children.
type spawnSpy struct {
	*store.MemStore
	mu       sync.Mutex
	children map[uint64]record
	muts     map[string][]byte
}

func (s *spawnSpy) InsertAndMutate(p store.Proc, children []store.Proc, muts []store.Mutation) error {
	s.mu.Lock()
	for _, c := range children {
		var r record
		if err := r.unmarshal(c.Data); err == nil {
			s.children[c.ID] = r
		}
	}
	for _, m := range muts {
		s.muts[m.Key] = m.Value
	}
	s.mu.Unlock()
	return s.MemStore.InsertAndMutate(p, children, muts)
}

func childrenOf(t *testing.T, h *harness, parent uint64) map[string]*lcChild {
	t.Helper()
	out := map[string]*lcChild{}
	h.x.mu.Lock()
	defer h.x.mu.Unlock()
	for _, e := range h.x.procs {
		if c, ok := e.proc.(*lcChild); ok && e.parent == parent {
			out[c.Key] = c
		}
	}
	return out
}

// Children added with AddLockedChild hold their locks from the parent's
// step on: what the parent wrote in their name commits with the spawn, and
// a child whose lock was taken by someone else runs its own first state
// once it gets it.
func TestAddLockedChildHoldsItsLocksFromTheParentsStep(t *testing.T) {
	mem := store.NewMemStore()
	spy := &spawnSpy{MemStore: mem, children: map[uint64]record{}, muts: map[string][]byte{}}
	h := startExecutor(t, spy, newDomain(), lockedChildRegistry)
	// b is held by another procedure until its gate opens.
	gate := newGate("lockedchild")
	blocker := h.submit(&lkProc{Name: "blocker", Gate: gate,
		LockSpec: []scheduler.Lock{{Type: scheduler.LockRegion, Name: "b", Mode: scheduler.Exclusive}}, Hold: true}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "the blocker holding b", func() bool {
		return len(h.x.Scheduler().Held(blocker)) == 1
	})
	parent := h.submit(&lcParent{Keys: []string{"a", "b", "c"}}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "the parent's children spawned", func() bool {
		return len(childrenOf(t, h, parent)) == 3
	})
	// The spawn's write holds owner/a and owner/c, written by the parent
	// for the children whose locks it got, and records them holding them.
	spy.mu.Lock()
	if _, ok := spy.muts["owner/b"]; ok {
		t.Errorf("owner/b written while another procedure held b's lock")
	}
	if len(spy.children) != 3 {
		t.Fatalf("%d children written by the spawn, want 3", len(spy.children))
	}
	for id, r := range spy.children {
		var c lcChild
		if err := json.Unmarshal(r.data, &c); err != nil {
			t.Fatal(err)
		}
		if c.Key == "b" {
			if c.Prepared || r.locked {
				t.Errorf("child of b written prepared=%v locked=%v although another procedure held its lock", c.Prepared, r.locked)
			}
			continue
		}
		if got, want := string(spy.muts["owner/"+c.Key]), strconv.FormatUint(id, 10); got != want {
			t.Errorf("owner/%s = %q in the spawn's write, want the child's id %s", c.Key, got, want)
		}
		if !c.Prepared || !r.locked {
			t.Errorf("child of %s written prepared=%v locked=%v, want both", c.Key, c.Prepared, r.locked)
		}
	}
	spy.mu.Unlock()
	openGate(gate)
	h.wait(blocker)
	if got := h.wait(parent); got.State != Success {
		t.Fatalf("parent ended %v (%s)", got.State, got.Error)
	}
	dom := mem.Domain()
	for _, k := range []string{"a", "b", "c"} {
		if dom["checked/"+k] == nil {
			t.Errorf("child of %s did not find the record in its name", k)
		}
	}
}

// A step that reserved children and then fails lets go of their locks
// (another procedure can take them meanwhile), and its retry reserves
// again.
func TestAddLockedChildLocksAreReleasedWhenTheStepFails(t *testing.T) {
	mem := store.NewMemStore()
	env := &lcEnv{domain: domain{effects: map[string]bool{}, execs: map[string]int{}},
		failed: make(chan struct{}), retrying: make(chan struct{}), resume: make(chan struct{})}
	cfg := func(c *Config) {
		lockedChildRegistry(c)
		c.Env = env
	}
	x := startExecutor(t, mem, newDomain(), cfg).x
	parent, err := x.Submit(&lcParent{Keys: []string{"a"}, FailFirst: true}, SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-env.failed
	// Inside the failing step: a is held for the reserved child.
	if !lockHeld(x, "a") {
		t.Errorf("a not held for the reserved child during the step")
	}
	env.resume <- struct{}{}
	<-env.retrying
	// Between the failed run and its retry, nothing holds a: the failed
	// run's reservation let go of it.
	if lockHeld(x, "a") {
		t.Errorf("a still held after the step that reserved it failed")
	}
	close(env.resume)
	testwait.For(t, 10*time.Second, "the parent to finish", func() bool {
		info, err := x.Get(parent)
		return err == nil && info.State == Success
	})
	if lockHeld(x, "a") {
		t.Errorf("a still held after the tree finished")
	}
	if got := mem.Domain()["checked/a"]; got == nil {
		t.Errorf("the retried spawn's child did not check its record")
	}
	// The failed run's reservation was never written: the child that ran
	// is the retry's, and the record names it.
	info, _ := x.Get(parent)
	if len(info.Children) != 1 || string(mem.Domain()["owner/a"]) != strconv.FormatUint(info.Children[0], 10) {
		t.Errorf("children %v, owner/a %q: want one child, named by the record", info.Children, mem.Domain()["owner/a"])
	}
}

// A crash right after the spawn's write: the next executor loads the
// children holding their locks (their records say so) and resumes them
// where the parent left them; each finds the record the parent wrote in
// its name, and none runs the first state the parent did for it.
func TestAddLockedChildSurvivesACrashAfterTheSpawn(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	for budget := 1; budget <= 4; budget++ {
		t.Run(fmt.Sprint("writes-", budget), func(t *testing.T) {
			mem := store.NewMemStore()
			cs := &crashStore{inner: mem, budget: budget}
			h1 := startExecutor(t, cs, newDomain(), lockedChildRegistry)
			parent, err := h1.x.Submit(&lcParent{Keys: keys}, SubmitOptions{Nonce: "p"})
			if err != nil {
				t.Fatal(err)
			}
			testwait.For(t, 10*time.Second, "the crash", func() bool { return h1.x.Err() != nil })
			_ = h1.x.Stop(context.Background())

			h2 := startExecutor(t, mem, newDomain(), lockedChildRegistry)
			if got := h2.wait(parent); got.State != Success {
				t.Fatalf("parent ended %v (%s)", got.State, got.Error)
			}
			dom := mem.Domain()
			for _, k := range keys {
				if dom["checked/"+k] == nil {
					t.Errorf("child of %s never checked its record", k)
				}
				if _, ran := dom["ran1/"+k]; ran {
					t.Errorf("child of %s ran the first state its parent did for it", k)
				}
			}
		})
	}
}

func lockHeld(x *Executor, name string) bool {
	for _, l := range x.Scheduler().Locks() {
		if l.Name == name && (l.Exclusive || len(l.Shared) > 0) {
			return true
		}
	}
	return false
}

// A child withdrawn after AddLockedChild is never spawned, and the locks
// its reservation took are free at once: another procedure takes them
// while the parent waits for its other children.
func TestWithdrawnChildIsNotSpawnedAndLetsGoOfItsLocks(t *testing.T) {
	mem := store.NewMemStore()
	spy := &spawnSpy{MemStore: mem, children: map[uint64]record{}, muts: map[string][]byte{}}
	h := startExecutor(t, spy, newDomain(), lockedChildRegistry)
	gate := newGate("withdraw")
	// b's child holds the parent in its waiting state until the gate
	// opens; a's is withdrawn.
	blocker := h.submit(&lkProc{Name: "blocker", Gate: gate,
		LockSpec: []scheduler.Lock{{Type: scheduler.LockRegion, Name: "b", Mode: scheduler.Exclusive}}, Hold: true}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "the blocker holding b", func() bool {
		return len(h.x.Scheduler().Held(blocker)) == 1
	})
	lp := &lcParent{Keys: []string{"a", "b", "c"}, Withdraw: []string{"a"}}
	parent := h.submit(lp, SubmitOptions{})
	testwait.For(t, 10*time.Second, "the parent's two children spawned", func() bool {
		return len(childrenOf(t, h, parent)) == 2
	})
	kids := childrenOf(t, h, parent)
	if _, ok := kids["a"]; ok {
		t.Errorf("the withdrawn child of a was spawned: %v", kids)
	}
	spy.mu.Lock()
	if len(spy.children) != 2 {
		t.Errorf("%d children written by the spawn, want 2", len(spy.children))
	}
	if _, ok := spy.muts["owner/a"]; ok {
		t.Errorf("owner/a written for a withdrawn child")
	}
	spy.mu.Unlock()
	// a is free while the parent still waits (b's child waits for the
	// blocker): another procedure takes it and ends.
	other := h.submit(&lkProc{Name: "other",
		LockSpec: []scheduler.Lock{{Type: scheduler.LockRegion, Name: "a", Mode: scheduler.Exclusive}}, Hold: true}, SubmitOptions{})
	if got := h.wait(other); got.State != Success {
		t.Fatalf("a's other procedure ended %v (%s)", got.State, got.Error)
	}
	if info, err := h.x.Get(parent); err != nil || info.State.Terminal() {
		t.Fatalf("the parent ended before b's child could: %v, %v", info.State, err)
	}
	openGate(gate)
	h.wait(blocker)
	info := h.wait(parent)
	if info.State != Success {
		t.Fatalf("parent ended %v (%s)", info.State, info.Error)
	}
	if len(lp.Withdrawn) != 1 {
		t.Fatalf("withdrawn %v, want one child", lp.Withdrawn)
	}
	if _, err := h.x.Get(lp.Withdrawn[0]); err == nil {
		t.Errorf("the withdrawn child's id %d names a procedure", lp.Withdrawn[0])
	}
	if err := (&Context{x: h.x}).WithdrawChild(lp.Withdrawn[0]); !errors.Is(err, ErrInvalid) {
		t.Errorf("withdrawing a child no step reserved: %v, want ErrInvalid", err)
	}
}
