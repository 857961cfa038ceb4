package procedure

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// udSM retries until done. State 0 records Name/s0; its first FailRuns
// runs pick state 9 and then fail (or panic); after them it spawns the
// children Kids names and goes to state 1. State 1 notes the children that
// ended ROLLEDBACK and, the first time there is one, spawns Name/again (a
// held-for-life lkProc on table Name) and runs again; then it finishes.
// State 9 and every rollback are never meant to run.
type udSM struct {
	StateMachine
	Name       string
	FailRuns   int
	Panic      bool
	Kids       string // "", "pair": a stepsProc and a failing locked one; "flaky": an rbFlakyProc whose rollback fails once
	Runs       int
	Respawned  bool
	RolledBack []uint64
}

func (p *udSM) RetryUntilDone() bool { return true }
func (p *udSM) InitialState() int32  { return 0 }

func (p *udSM) ExecuteState(ctx *Context, s int32) (Flow, error) {
	d := ctx.Env.(*domain)
	switch s {
	case 0:
		p.Runs++
		d.do(p.Name + "/s0")
		if ctx.Attempt() != p.Runs {
			return NoMoreState, fmt.Errorf("run %d counted as attempt %d", p.Runs, ctx.Attempt())
		}
		if n := p.Runs; n <= p.FailRuns {
			p.SetNextState(9)
			if p.Panic {
				panic("state 0 panics")
			}
			return NoMoreState, fmt.Errorf("state 0, run %d: %w", n, errBoom)
		}
		switch p.Kids {
		case "pair":
			ctx.AddChild(newSteps(p.Name+"/c1", 2))
			bad := &failLk{stepsProc: *newSteps(p.Name+"/c2", 3), Lock: p.Name}
			bad.FailAt = 1
			ctx.AddChild(bad)
		case "flaky":
			ctx.AddChild(&rbFlakyProc{Name: p.Name + "/f", Steps: 2, FailAt: 1, FlakyAt: 1, FlakyTimes: 1})
		}
		p.SetNextState(1)
		return HasMoreState, nil
	case 1:
		d.do(p.Name + "/s1")
		for _, id := range ctx.Children() {
			if info, err := ctx.x.Get(id); err == nil && info.State == RolledBack && !slices.Contains(p.RolledBack, id) {
				p.RolledBack = append(p.RolledBack, id)
			}
		}
		if len(p.RolledBack) > 0 && !p.Respawned {
			p.Respawned = true
			ctx.AddChild(&lkProc{Name: p.Name + "/again", LockSpec: scheduler.TableLocks("default", p.Name, scheduler.Exclusive), Hold: true})
			return HasMoreState, nil
		}
		return NoMoreState, nil
	}
	d.do(fmt.Sprintf("%s/ran-s%d", p.Name, s))
	return NoMoreState, fmt.Errorf("state %d must never run", s)
}

func (p *udSM) RollbackState(ctx *Context, s int32) error {
	ctx.Env.(*domain).do(p.Name + "/rolled-back")
	return errors.New("cannot roll back")
}

// failLk is a stepsProc holding table Lock for its life.
type failLk struct {
	stepsProc
	Lock string
}

func (p *failLk) Locks() []scheduler.Lock {
	return scheduler.TableLocks("default", p.Lock, scheduler.Exclusive)
}
func (p *failLk) HoldLock() bool { return true }

func untilDoneRegistry(t testing.TB) *Registry {
	r := lifecycleRegistry(t)
	r.MustRegister("udsm", 1, func() Procedure { return &udSM{} })
	r.MustRegister("faillk", 1, func() Procedure { return &failLk{} })
	return r
}

// TestRetryUntilDoneRunsAFailedStepAgain: a step of a procedure that
// retries until done fails (by an error, then by a panic): it is not rolled
// back but parked, shown as retrying with its error, and run again after
// the backoff; the state the failed runs picked is forgotten, Attempt
// counts the runs, and Abort is refused.
func TestRetryUntilDoneRunsAFailedStepAgain(t *testing.T) {
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprintf("panic=%v", panics), func(t *testing.T) {
			d := newDomain()
			mc := clock.NewManual(time.Unix(1e6, 0))
			h := startExecutor(t, store.NewMemStore(), d, func(c *Config) {
				c.Registry, c.Clock = untilDoneRegistry(t), mc
				c.RollbackBackoff, c.RollbackBackoffMax = time.Second, time.Minute
			})
			p := &udSM{Name: uniq("R"), FailRuns: 3, Panic: panics}
			id := h.submit(p, SubmitOptions{})
			for run := 1; run <= 3; run++ {
				testwait.For(t, 10*time.Second, fmt.Sprintf("failed run %d parked for a retry", run), func() bool {
					w, _ := h.x.Why(id)
					return w.Reason == "retrying after an error" && d.count("do", p.Name+"/s0") == run
				})
				w, _ := h.x.Why(id)
				if w.Error == "" || w.State != WaitingTimeout {
					t.Fatalf("run %d: retrying procedure shows state %s, error %q", run, w.State, w.Error)
				}
				if err := h.x.Abort(id); !errors.Is(err, ErrNotAllowed) {
					t.Fatalf("Abort of a procedure that retries until done: %v, want ErrNotAllowed", err)
				}
				mc.Advance(time.Minute)
			}
			info := h.wait(id)
			if info.State != Success || info.Error != "" {
				t.Fatalf("ended %s (%q), want SUCCESS without error", info.State, info.Error)
			}
			if got := p.History(); !slices.Equal(got, []int32{0, 1}) {
				t.Fatalf("history %v, want [0 1]: failed runs must leave none", got)
			}
			if d.has(p.Name+"/ran-s9") || d.has(p.Name+"/rolled-back") {
				t.Fatalf("a failed run's next state ran, or a rollback did: %v", d.log)
			}
		})
	}
}

// TestFailingChildOfRetryUntilDoneRollsBackAlone: a child of a procedure
// that retries until done fails: only that child is rolled back (and lets
// go of its lock), its sibling finishes, and the parent goes on, sees the
// child ROLLEDBACK, spawns again (taking the lock the failed child held)
// and ends SUCCESS. Nothing of the parent is rolled back.
func TestFailingChildOfRetryUntilDoneRollsBackAlone(t *testing.T) {
	d := newDomain()
	h := startExecutor(t, store.NewMemStore(), d, func(c *Config) { c.Registry = untilDoneRegistry(t) })
	p := &udSM{Name: uniq("R"), Kids: "pair"}
	id := h.submit(p, SubmitOptions{})
	info := h.wait(id)
	if info.State != Success {
		t.Fatalf("parent ended %s (%s)", info.State, info.Error)
	}
	if len(p.RolledBack) != 1 {
		t.Fatalf("parent saw rolled-back children %v, want the failing one", p.RolledBack)
	}
	if c2 := d.effectsUnder(p.Name + "/c2"); len(c2) > 0 {
		t.Fatalf("the failed child's effects were not undone: %v", c2)
	}
	for _, k := range []string{"/s0", "/s1", "/c1/0", "/c1/1", "exit:" + p.Name + "/again"} {
		key := p.Name + k
		if k[0] != '/' {
			key = k
		}
		if !d.has(key) {
			t.Fatalf("effect %s missing: the rollback reached beyond the failed child (%v)", key, d.log)
		}
	}
	if d.has(p.Name + "/rolled-back") {
		t.Fatal("the parent was rolled back")
	}
	testwait.For(t, 10*time.Second, "no lock left", func() bool { return len(h.x.Scheduler().Locks()) == 0 })
}

// TestChildRollbackBelowRetryUntilDoneResumesAfterRestart: the rollback of
// a failed child of a procedure that retries until done is interrupted
// (its rollback step fails and waits for its retry) by a restart; the new
// executor finishes that rollback alone and the parent goes on to SUCCESS.
func TestChildRollbackBelowRetryUntilDoneResumesAfterRestart(t *testing.T) {
	mem := store.NewMemStore()
	d := newDomain()
	mod := func(c *Config) {
		c.Registry, c.Clock = untilDoneRegistry(t), clock.NewManual(time.Unix(1e6, 0))
		c.RollbackBackoff, c.RollbackBackoffMax = time.Hour, time.Hour
	}
	h := startExecutor(t, mem, d, mod)
	p := &udSM{Name: uniq("R"), Kids: "flaky"}
	id := h.submit(p, SubmitOptions{})
	testwait.For(t, 10*time.Second, "child's rollback failed once", func() bool { return rbAttempt(p.Name+"/f/1").Load() == 1 })
	testwait.For(t, 10*time.Second, "rollback waits for its retry", func() bool {
		w, _ := h.x.Why(id)
		return w.Reason == "rolling back"
	})
	if err := h.x.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	h = startExecutor(t, mem, d, mod)
	if pr := h.x.Problems(); len(pr) > 0 {
		t.Fatalf("load problems: %+v", pr)
	}
	info := h.wait(id)
	if info.State != Success {
		t.Fatalf("parent ended %s (%s)", info.State, info.Error)
	}
	if f := d.effectsUnder(p.Name + "/f"); len(f) > 0 {
		t.Fatalf("the failed child's effects were not undone: %v", f)
	}
	if !d.has(p.Name+"/s1") || !d.has("exit:"+p.Name+"/again") || d.has(p.Name+"/rolled-back") {
		t.Fatalf("parent did not go on after its child's rollback: %v", d.log)
	}
}

// TestRetryUntilDoneTakesNoTimeout: a submission asking for a timeout is
// refused, since the timeout would be an abort.
func TestRetryUntilDoneTakesNoTimeout(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) { c.Registry = untilDoneRegistry(t) })
	if _, err := h.x.Submit(&udSM{Name: uniq("R")}, SubmitOptions{Timeout: time.Minute}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("submit with a timeout: %v, want ErrInvalid", err)
	}
}

// TestCrashDuringChildRollbackBelowRetryUntilDone drops the executor at
// each write of a tree whose failing child is rolled back alone under a
// procedure that retries until done, reloads, and checks that the root
// ends SUCCESS exactly once with the effects of a clean run.
func TestCrashDuringChildRollbackBelowRetryUntilDone(t *testing.T) {
	run := func(t *testing.T, budget int, seed *crashStore, mem *store.MemStore, dom *domain) (*crashStore, *harness) {
		cs := &crashStore{inner: mem, budget: budget}
		if seed != nil {
			cs.seedFrom(&seed.endCounts)
		}
		return cs, startExecutor(t, cs, dom, func(c *Config) { c.Registry, c.Workers = untilDoneRegistry(t), 1 })
	}
	cleanDom := newDomain()
	cleanStore, h := run(t, -1, nil, store.NewMemStore(), cleanDom)
	if info := h.wait(h.submit(&udSM{Name: "U", Kids: "pair"}, SubmitOptions{Nonce: "U"})); info.State != Success {
		t.Fatalf("clean run ended %s (%s)", info.State, info.Error)
	}
	_ = h.x.Stop(context.Background())
	total := cleanStore.writes
	want := cleanDom.effectsUnder("")
	slices.Sort(want)
	for n := 0; n <= total; n++ {
		t.Run(fmt.Sprint("crash-after-", n), func(t *testing.T) {
			mem, dom := store.NewMemStore(), newDomain()
			cs, h1 := run(t, n, nil, mem, dom)
			id, err := h1.x.Submit(&udSM{Name: "U", Kids: "pair"}, SubmitOptions{Nonce: "U"})
			if err == nil {
				testwait.For(t, 10*time.Second, "crash or completion", func() bool {
					i, err := h1.x.Get(id)
					return h1.x.Err() != nil || err == nil && i.State.Terminal()
				})
			}
			_ = h1.x.Stop(context.Background())
			cs2, h2 := run(t, -1, cs, mem, dom)
			id = h2.resubmitAfterCrash(&udSM{Name: "U", Kids: "pair"}, "U", cs2.terminals)
			got := dom.effectsUnder("")
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("effects %v, want %v", got, want)
			}
		})
	}
}
