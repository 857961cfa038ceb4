package procedure

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// domain records the side effects of test procedures: effects is the
// current state, execs counts how often each step ran, log is the order.
type domain struct {
	mu      sync.Mutex
	effects map[string]bool
	execs   map[string]int
	log     []string
}

func newDomain() *domain {
	return &domain{effects: map[string]bool{}, execs: map[string]int{}}
}

func (d *domain) do(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.execs[key]++
	d.effects[key] = true
	d.log = append(d.log, "do:"+key)
}

func (d *domain) undo(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.effects, key)
	d.log = append(d.log, "undo:"+key)
}

func (d *domain) has(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.effects[key]
}

// effectsUnder lists current effects whose key starts with prefix.
func (d *domain) effectsUnder(prefix string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for k := range d.effects {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// order returns keys of kind ("do" or "undo") under prefix, first
// occurrence only, in log order.
func (d *domain) order(kind, prefix string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, l := range d.log {
		k, key, _ := strings.Cut(l, ":")
		if k == kind && strings.HasPrefix(key, prefix) && !seen[key] {
			seen[key] = true
			out = append(out, key)
		}
	}
	return out
}

var errBoom = errors.New("boom")

// stepsProc is a Stepper covering children, failures and suspensions. It
// runs Steps steps; step k does the effect Name/k, then:
//   - k == FailAt: fails (after its effect);
//   - k == SpawnAt: spawns Children children (stepsProc of ChildSteps steps,
//     the ChildFailAt-th failing at its step 1, each suspending for
//     ChildSuspend after its step 0 if > 0);
//   - k == SuspendAt: suspends for Suspend (a timer);
//   - k == HoldAt and Gate is set: until gate Gate is open, suspends on event
//     Gate and runs the step again when woken (a restart also runs it again).
//
// Its Rollback undoes the newest executed step and also the step after it if
// that one left an effect: it may have run without its outcome being
// persisted (a crash, or a sibling failing while it ran), and rolling back
// must leave no effect of it. Rolling back its spawn step sweeps what its
// children left (see domain.sweep).
type stepsProc struct {
	Base
	Name         string
	Steps        int
	FailAt       int // -1: never
	SpawnAt      int // -1: never
	Children     int
	ChildSteps   int
	ChildFailAt  int // child index whose step 1 fails, -1: none
	ChildSuspend time.Duration
	SuspendAt    int // -1: never
	Suspend      time.Duration
	HoldAt       int // only with Gate: records written without it hold nowhere
	Gate         string
	Next         int
	Failed       bool
}

func newSteps(name string, steps int) *stepsProc {
	return &stepsProc{Name: name, Steps: steps, FailAt: -1, SpawnAt: -1, ChildFailAt: -1, SuspendAt: -1, HoldAt: -1}
}

func (p *stepsProc) key(k int) string { return fmt.Sprintf("%s/%d", p.Name, k) }

func (p *stepsProc) Execute(ctx *Context) (Step, error) {
	d := ctx.Env.(*domain)
	k := p.Next
	d.do(p.key(k))
	if k == p.HoldAt && p.Gate != "" && !gateOpen(p.Gate) {
		return Suspend(OnEvent(eventFor(p.Gate))), nil
	}
	if k == p.FailAt {
		p.Failed = true
		return Step{}, fmt.Errorf("%s step %d: %w", p.Name, k, errBoom)
	}
	p.Next++
	if k == p.SpawnAt {
		var kids []Procedure
		for i := 0; i < p.Children; i++ {
			c := newSteps(fmt.Sprintf("%s/c%d", p.Name, i), p.ChildSteps)
			if i == p.ChildFailAt {
				c.FailAt = 1
			}
			if p.ChildSuspend > 0 {
				c.SuspendAt, c.Suspend = 0, p.ChildSuspend
			}
			kids = append(kids, c)
		}
		return Spawn(kids...), nil
	}
	if k == p.SuspendAt {
		return Suspend(Timeout(p.Suspend)), nil
	}
	if p.Next >= p.Steps {
		return Done(), nil
	}
	return More(), nil
}

func (p *stepsProc) Rollback(ctx *Context) error {
	d := ctx.Env.(*domain)
	if p.Failed {
		p.Failed = false
		d.undo(p.key(p.Next))
		return nil
	}
	if p.Next < p.Steps && d.has(p.key(p.Next)) {
		d.undo(p.key(p.Next)) // run, never persisted
	}
	if p.Next > 0 {
		p.Next--
	}
	d.undo(p.key(p.Next))
	if p.Next == p.SpawnAt {
		d.sweep(p.Name + "/c")
	}
	return nil
}

// smProc is the tests' state machine: States states with effects
// Name/s<k>, spawning Children stepsProc children (of ChildSteps steps, the
// ChildFailAt-th failing at its step 1) at SpawnAt, failing at FailAt,
// and refusing to roll back state NoRollback.
//
// Rolling back its newest state also undoes the state that would have run
// next, if that one left an effect: it may have run without its outcome
// being persisted (a crash). Rolling back its spawn state sweeps what its
// children left (see domain.sweep).
type smProc struct {
	StateMachine
	Name        string
	States      int32
	FailAt      int32
	SpawnAt     int32
	Children    int
	ChildSteps  int
	ChildFailAt int
	NoRollback  int32 // a state without rollback support, -1: none
}

func newSM(name string, states int32) *smProc {
	return &smProc{Name: name, States: states, FailAt: -1, SpawnAt: -1, ChildFailAt: -1, NoRollback: -1}
}

func (p *smProc) key(s int32) string { return fmt.Sprintf("%s/s%d", p.Name, s) }

func (p *smProc) InitialState() int32 { return 0 }

func (p *smProc) ExecuteState(ctx *Context, s int32) (Flow, error) {
	d := ctx.Env.(*domain)
	d.do(p.key(s))
	if s == p.FailAt {
		return NoMoreState, errBoom
	}
	if s == p.SpawnAt {
		for i := 0; i < p.Children; i++ {
			c := newSteps(fmt.Sprintf("%s/c%d", p.Name, i), p.ChildSteps)
			if i == p.ChildFailAt {
				c.FailAt = 1
			}
			ctx.AddChild(c)
		}
	}
	if s+1 >= p.States {
		return NoMoreState, nil
	}
	p.SetNextState(s + 1)
	return HasMoreState, nil
}

func (p *smProc) RollbackState(ctx *Context, s int32) error {
	d := ctx.Env.(*domain)
	if n := p.CurrentState(); n > s && n < p.States && d.has(p.key(n)) {
		d.undo(p.key(n)) // run, never persisted
	}
	d.undo(p.key(s))
	if s == p.SpawnAt {
		d.sweep(p.Name + "/c")
	}
	return nil
}

func (p *smProc) IsRollbackSupported(s int32) bool { return s != p.NoRollback }

// funcProc runs a test-provided function per step; not persisted state.
type funcProc struct {
	Base
	ID string
}

var funcs sync.Map // ID -> func(*Context) (Step, error)

func (p *funcProc) Execute(ctx *Context) (Step, error) {
	f, ok := funcs.Load(p.ID)
	if !ok {
		return Step{}, fmt.Errorf("no func %q", p.ID)
	}
	return f.(func(*Context) (Step, error))(ctx)
}

// suspendOnce is a funcProc step that suspends on ev the first time it
// runs and is done the next; runs counts its runs.
func suspendOnce(ev *scheduler.Event, runs *atomic.Int32) func(*Context) (Step, error) {
	return func(*Context) (Step, error) {
		if runs.Add(1) == 1 {
			return Suspend(OnEvent(ev)), nil
		}
		return Done(), nil
	}
}

// rollbacks holds, by funcProc ID, a rollback to run instead of none.
var rollbacks sync.Map // ID -> func(*Context) error

func (p *funcProc) Rollback(ctx *Context) error {
	if f, ok := rollbacks.Load(p.ID); ok {
		return f.(func(*Context) error)(ctx)
	}
	return nil
}

func testRegistry(t testing.TB) *Registry {
	r := NewRegistry()
	r.MustRegister("steps", 1, func() Procedure { return &stepsProc{} })
	r.MustRegister("sm", 1, func() Procedure { return &smProc{} })
	r.MustRegister("func", 1, func() Procedure { return &funcProc{} })
	r.MustRegister("loop", 1, func() Procedure { return &loopSM{} })
	r.MustRegister("timeout", 1, func() Procedure { return &timeoutProc{} })
	r.MustRegister("gated", 1, func() Procedure { return &gatedSM{} })
	r.MustRegister("locked", 1, func() Procedure { return &lockedProc{} })
	r.MustRegister("badkey", 1, func() Procedure { return &badKeyProc{} })
	return r
}

// startBare starts an executor of cfg as it is (no test registry, domain or
// count check, unlike startExecutor), stopped when the test ends.
func startBare(t testing.TB, cfg Config) *Executor {
	t.Helper()
	x, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Stop(context.Background()) })
	return x
}

type harness struct {
	t   testing.TB
	x   *Executor
	st  store.Store
	d   *domain
	reg *Registry
}

func startExecutor(t testing.TB, st store.Store, d *domain, mod func(*Config)) *harness {
	t.Helper()
	cfg := Config{RecordFormat: version.Newest, Store: st, Registry: testRegistry(t), Env: d, Workers: 4,
		RollbackBackoff: time.Millisecond, RollbackBackoffMax: 10 * time.Millisecond,
		Metrics: prometheus.NewRegistry()}
	if mod != nil {
		mod(&cfg)
	}
	x, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Every test's transitions, whatever they were, left the counts
		// the scrape reports equal to a walk of the table.
		if m := liveCountsMismatch(x); m != "" {
			t.Errorf("procedure counts: %s", m)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := x.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
			return
		}
		if n := x.inFlight.Load(); n != 0 {
			t.Errorf("%d steps in flight after Stop", n)
		}
	})
	return &harness{t: t, x: x, st: st, d: d, reg: cfg.Registry}
}

func (h *harness) submit(p Procedure, opts SubmitOptions) uint64 {
	h.t.Helper()
	id, err := h.x.Submit(p, opts)
	if err != nil {
		h.t.Fatalf("submit: %v", err)
	}
	return id
}

func (h *harness) wait(id uint64) Info {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	info, err := h.x.Wait(ctx, id)
	if err != nil {
		h.t.Fatalf("wait %d: %v", id, err)
	}
	return info
}

// waitCrashOrEnd waits until the executor crashed (an injected store
// fault) or every procedure in acked is terminal.
func (h *harness) waitCrashOrEnd(acked map[string]uint64) {
	h.t.Helper()
	testwait.For(h.t, 10*time.Second, "crash or completion", func() bool {
		if h.x.Err() != nil {
			return true
		}
		for _, id := range acked {
			if i, err := h.x.Get(id); err != nil || !i.State.Terminal() {
				return false
			}
		}
		return true
	})
}

// resubmitAfterCrash checks that h, restarted on what a crashed executor
// left, loaded it all, then submits p again with nonce: it must succeed,
// and terminals (the store's count) must see its root end exactly once.
func (h *harness) resubmitAfterCrash(p Procedure, nonce string, terminals func(uint64) int) uint64 {
	h.t.Helper()
	if p := h.x.Problems(); len(p) > 0 {
		h.t.Fatalf("load problems: %+v", p)
	}
	id, err := h.x.Submit(p, SubmitOptions{Nonce: nonce})
	if err != nil {
		h.t.Fatal(err)
	}
	if info := h.wait(id); info.State != Success {
		h.t.Fatalf("ended %s (%s)", info.State, info.Error)
	}
	if got := terminals(id); got != 1 {
		h.t.Fatalf("root reached a terminal state %d times", got)
	}
	return id
}
