package procedure

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/scheduler"
)

// Test procedures and helpers shared by the lifecycle tests
// (lifecycle_test.go, wal_restart_test.go, crash_concurrent_test.go,
// fuzz_load_test.go). All of them keep their effects in the *domain passed as
// Config.Env and identify gates and events by name, so a procedure reloaded
// from a store in a new executor finds them again.

// lifecycleRegistry is testRegistry plus the lifecycle types.
func lifecycleRegistry(t testing.TB) *Registry {
	r := testRegistry(t)
	r.MustRegister("lk", 1, func() Procedure { return &lkProc{} })
	r.MustRegister("ab", 1, func() Procedure { return &abProc{} })
	r.MustRegister("rbflaky", 1, func() Procedure { return &rbFlakyProc{} })
	r.MustRegister("noop", 1, func() Procedure { return &noopProc{} })
	return r
}

// ---- gates and events, by name ----

type hGate struct {
	once sync.Once
	ch   chan struct{}
}

var hGates sync.Map // name -> *hGate

func gateFor(name string) *hGate {
	g, _ := hGates.LoadOrStore(name, &hGate{ch: make(chan struct{})})
	return g.(*hGate)
}

// gateSeq makes each newGate name unused before: gates are package-wide
// and stay open, so a name reused by a later run (-count) would be open
// from the start.
var gateSeq atomic.Uint64

// newGate returns a gate name no test has used yet.
func newGate(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, gateSeq.Add(1))
}

func openGate(name string) {
	g := gateFor(name)
	g.once.Do(func() { close(g.ch) })
}

func gateOpen(name string) bool {
	select {
	case <-gateFor(name).ch:
		return true
	default:
		return false
	}
}

// waitGate blocks until the gate opens or ctx ends (a stopping executor).
func waitGate(ctx context.Context, name string) error {
	select {
	case <-gateFor(name).ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var hEvents sync.Map // name -> *scheduler.Event

// eventFor returns the current event of that name. An event belongs to one
// scheduler: tests call resetEvent when a new executor takes over.
func eventFor(name string) *scheduler.Event {
	ev, _ := hEvents.LoadOrStore(name, scheduler.NewEvent(name))
	return ev.(*scheduler.Event)
}

func resetEvent(name string) { hEvents.Store(name, scheduler.NewEvent(name)) }

var hUniq atomic.Int64

// uniq makes gate and event names unique per test run (tests run -count=3).
func uniq(s string) string { return fmt.Sprintf("%s#%d", s, hUniq.Add(1)) }

// ---- lkProc: locks ----

// lkProc takes LockSpec (held for its life if Hold). Its first step records
// "enter:Name", then blocks until Gate opens (if set), or suspends on a
// timer of TimerFor (if set), or spawns Child (if set); its last step
// records "exit:Name".
type lkProc struct {
	Base
	Name     string
	LockSpec []scheduler.Lock
	Hold     bool
	Gate     string
	TimerFor time.Duration
	Child    *lkProc
	Phase    int
}

func (p *lkProc) Locks() []scheduler.Lock { return p.LockSpec }
func (p *lkProc) HoldLock() bool          { return p.Hold }

func (p *lkProc) Execute(ctx *Context) (Step, error) {
	d := ctx.Env.(*domain)
	switch p.Phase {
	case 0:
		d.do("enter:" + p.Name)
		if p.Gate != "" {
			if err := waitGate(ctx, p.Gate); err != nil {
				return Step{}, err
			}
		}
		p.Phase = 1
		if p.TimerFor > 0 {
			return Suspend(Timeout(p.TimerFor)), nil
		}
		if p.Child != nil {
			// A copy: p.Child stays part of p's own persisted state.
			b, err := json.Marshal(p.Child)
			if err != nil {
				return Step{}, err
			}
			c := &lkProc{}
			if err := json.Unmarshal(b, c); err != nil {
				return Step{}, err
			}
			return Spawn(c), nil
		}
		return More(), nil
	default:
		d.do("exit:" + p.Name)
		return Done(), nil
	}
}

func (p *lkProc) Rollback(*Context) error { return nil }

// ---- abProc: a target for Abort/Pause/Bypass/Ack ----

// abProc has two steps, effects Name/0 and Name/1. Mode shapes step 0:
// "running" blocks on gate Name; "event" suspends on event Name until it is
// ready; "timer" suspends for an hour; "children" spawns an "event" child
// Name/child; "suspend-after" blocks on gate Name, then suspends on event
// Name; "fail" makes step 1 fail, and the first rollback of it fail too;
// "locked" takes table lock Lock exclusively. Did is its own rollback stack.
type abProc struct {
	Base
	Name  string
	Mode  string
	Lock  string
	Phase int
	Did   []string
}

var abRollbackFailures sync.Map // name -> *atomic.Int32

func (p *abProc) Locks() []scheduler.Lock {
	if p.Mode == "locked" {
		return scheduler.TableLocks("default", p.Lock, scheduler.Exclusive)
	}
	return nil
}
func (p *abProc) HoldLock() bool { return false }

func (p *abProc) Execute(ctx *Context) (Step, error) {
	d := ctx.Env.(*domain)
	key := fmt.Sprintf("%s/%d", p.Name, p.Phase)
	d.do(key)
	p.Did = append(p.Did, key)
	if p.Phase == 1 {
		if p.Mode == "fail" {
			return Step{}, errBoom
		}
		p.Phase = 2
		return Done(), nil
	}
	switch p.Mode {
	case "running", "suspend-after":
		if err := waitGate(ctx, p.Name); err != nil {
			return Step{}, err
		}
		if p.Mode == "suspend-after" {
			p.Phase = 1
			return Suspend(OnEvent(eventFor(p.Name))), nil
		}
	case "event":
		if ev := eventFor(p.Name); !ev.Ready() {
			return Suspend(OnEvent(ev)), nil
		}
	case "timer":
		p.Phase = 1
		return Suspend(Timeout(time.Hour)), nil
	case "children":
		p.Phase = 1
		return Spawn(&abProc{Name: p.Name + "/child", Mode: "event"}), nil
	}
	p.Phase = 1
	return More(), nil
}

func (p *abProc) Rollback(ctx *Context) error {
	if p.Mode == "fail" {
		c, _ := abRollbackFailures.LoadOrStore(p.Name, new(atomic.Int32))
		if c.(*atomic.Int32).Add(1) == 1 {
			return errors.New("rollback refused once")
		}
	}
	if n := len(p.Did); n > 0 {
		ctx.Env.(*domain).undo(p.Did[n-1])
		p.Did = p.Did[:n-1]
	}
	return nil
}

// ---- rbFlakyProc: a rollback that fails before it succeeds ----

// rbFlakyProc runs steps 0..Steps-1 (effects Name/k) and fails at FailAt.
// Rolling back step FlakyAt fails FlakyTimes times, then works.
type rbFlakyProc struct {
	Base
	Name       string
	Steps      int
	FailAt     int
	FlakyAt    int
	FlakyTimes int
	Done       []int
}

var rbAttempts sync.Map // "name/k" -> *atomic.Int32

func rbAttempt(key string) *atomic.Int32 {
	c, _ := rbAttempts.LoadOrStore(key, new(atomic.Int32))
	return c.(*atomic.Int32)
}

// rbAttemptTimes records when each rollback attempt of "name/k" ran, for
// tests whose clock is exact (a synctest bubble).
var rbAttemptTimes sync.Map // "name/k" -> *timeLog

type timeLog struct {
	mu sync.Mutex
	at []time.Time
}

func rbTimes(key string) *timeLog {
	c, _ := rbAttemptTimes.LoadOrStore(key, new(timeLog))
	return c.(*timeLog)
}

func (l *timeLog) add(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at = append(l.at, at)
}

func (l *timeLog) times() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.at)
}

func (p *rbFlakyProc) Execute(ctx *Context) (Step, error) {
	k := len(p.Done)
	ctx.Env.(*domain).do(fmt.Sprintf("%s/%d", p.Name, k))
	p.Done = append(p.Done, k)
	if k == p.FailAt {
		return Step{}, errBoom
	}
	if k+1 >= p.Steps {
		return Done(), nil
	}
	return More(), nil
}

func (p *rbFlakyProc) Rollback(ctx *Context) error {
	k := p.Done[len(p.Done)-1]
	key := fmt.Sprintf("%s/%d", p.Name, k)
	rbTimes(key).add(time.Now())
	if n := rbAttempt(key).Add(1); k == p.FlakyAt && int(n) <= p.FlakyTimes {
		return fmt.Errorf("rollback of %s: attempt %d: transient", key, n)
	}
	ctx.Env.(*domain).undo(key)
	p.Done = p.Done[:len(p.Done)-1]
	return nil
}

// ---- noopProc: finishes at once whatever its state says ----

type noopProc struct {
	Base
	A string
	B int
}

func (p *noopProc) Execute(*Context) (Step, error) { return Done(), nil }
func (p *noopProc) Rollback(*Context) error        { return nil }

// ---- domain helpers ----

// sweep removes every effect under prefix, logging "sweep:key" for each.
// A parent rolling back its spawn step sweeps its children: a child whose
// first step ran but was never persisted (a crash while a sibling's failure
// was already durable) has nothing on the rollback stack, so the framework
// cannot roll it back. Tests bound how often a sweep finds anything.
func (d *domain) sweep(prefix string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k := range d.effects {
		if strings.HasPrefix(k, prefix) {
			delete(d.effects, k)
			d.log = append(d.log, "sweep:"+k)
		}
	}
}

// sweeps counts the effects removed by sweeps.
func (d *domain) sweeps() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, l := range d.log {
		if strings.HasPrefix(l, "sweep:") {
			n++
		}
	}
	return n
}

// count counts log entries kind:key of key in the domain log.
func (d *domain) count(kind, key string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, l := range d.log {
		if l == kind+":"+key {
			n++
		}
	}
	return n
}

// procOf is the procedure name of an effect key "Name/step".
func procOf(key string) string {
	if i := strings.LastIndex(key, "/"); i >= 0 {
		return key[:i]
	}
	return key
}

// checkUndoOrder checks, per procedure under prefix, that the effects that
// were undone were undone in the reverse of the order they were first done
// (ignoring undos of effects that never happened).
func checkUndoOrder(t testing.TB, d *domain, prefix string) {
	t.Helper()
	done := d.order("do", prefix)
	wasDone := map[string]bool{}
	for _, k := range done {
		wasDone[k] = true
	}
	perDo, perUndo := map[string][]string{}, map[string][]string{}
	for _, k := range done {
		perDo[procOf(k)] = append(perDo[procOf(k)], k)
	}
	for _, k := range d.order("undo", prefix) {
		if wasDone[k] {
			perUndo[procOf(k)] = append(perUndo[procOf(k)], k)
		}
	}
	for p, undone := range perUndo {
		want := perDo[p]
		if len(undone) != len(want) {
			continue // partly rolled back: only a failed tree undoes everything, checked by effects
		}
		for i := range undone {
			if undone[i] != want[len(want)-1-i] {
				t.Fatalf("%s: undo order %v, want reverse of %v", p, undone, want)
			}
		}
	}
}

// runBounded runs f and fails the test if it does not return within 5 s: an
// API call must never block on a procedure.
func runBounded[T any](t testing.TB, what string, f func() T) T {
	t.Helper()
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s blocked", what)
		panic("unreachable")
	}
}
