package procedure

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// stepsWith makes a stepsProc "a" of n steps, as set adjusts it.
func stepsWith(n int, set func(p *stepsProc)) func() Procedure {
	return func() Procedure { p := newSteps("a", n); set(p); return p }
}

// smWith makes an smProc "m" of n states, as set adjusts it.
func smWith(n int32, set func(p *smProc)) func() Procedure {
	return func() Procedure { p := newSM("m", n); set(p); return p }
}

func TestOutcomes(t *testing.T) {
	tests := []struct {
		name      string
		proc      func() Procedure
		wantState State
		effects   []string // effects left in the domain
		undone    []string // undo order
	}{
		{"done in one step", func() Procedure { return newSteps("a", 1) }, Success, []string{"a/0"}, nil},
		{"more steps", func() Procedure { return newSteps("a", 4) }, Success, []string{"a/0", "a/1", "a/2", "a/3"}, nil},
		{"children then parent", stepsWith(3, func(p *stepsProc) { p.SpawnAt, p.Children, p.ChildSteps = 1, 2, 2 }), Success, []string{"a/0", "a/1", "a/2", "a/c0/0", "a/c0/1", "a/c1/0", "a/c1/1"}, nil},
		{"suspend with timeout", stepsWith(3, func(p *stepsProc) { p.SuspendAt, p.Suspend = 0, 2*time.Millisecond }), Success, []string{"a/0", "a/1", "a/2"}, nil},
		{"failure rolls back in reverse", stepsWith(4, func(p *stepsProc) { p.FailAt = 2 }), RolledBack, nil, []string{"a/2", "a/1", "a/0"}},
		{"child failure rolls back the root", stepsWith(3, func(p *stepsProc) { p.SpawnAt, p.Children, p.ChildSteps, p.ChildFailAt = 1, 1, 3, 0 }), RolledBack, nil, []string{"a/c0/1", "a/c0/0", "a/1", "a/0"}},
		{"state machine", func() Procedure { return newSM("m", 3) }, Success, []string{"m/s0", "m/s1", "m/s2"}, nil},
		{"state machine failure", smWith(4, func(p *smProc) { p.FailAt = 2 }), RolledBack, nil, []string{"m/s2", "m/s1", "m/s0"}},
		{"state machine with failing child", smWith(3, func(p *smProc) { p.SpawnAt, p.Children, p.ChildSteps, p.ChildFailAt = 1, 1, 2, 0 }), RolledBack, nil, []string{"m/c0/1", "m/c0/0", "m/s1", "m/s0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDomain()
			h := startExecutor(t, store.NewMemStore(), d, func(c *Config) { c.Workers = 1 })
			id := h.submit(tc.proc(), SubmitOptions{})
			info := h.wait(id)
			if info.State != tc.wantState {
				t.Fatalf("state %s, want %s (error %q)", info.State, tc.wantState, info.Error)
			}
			got := d.effectsUnder("")
			sort.Strings(got)
			want := append([]string(nil), tc.effects...)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Fatalf("effects %v, want %v", got, want)
			}
			if undone := d.order("undo", ""); !slices.Equal(undone, tc.undone) {
				t.Fatalf("undo order %v, want %v", undone, tc.undone)
			}
			if tc.wantState == RolledBack && info.Error == "" {
				t.Fatal("rolled back root keeps no error")
			}
		})
	}
}

func TestStateMachineHistoryAndResult(t *testing.T) {
	st := store.NewMemStore()
	h := startExecutor(t, st, newDomain(), nil)
	funcs.Store("result", func(ctx *Context) (Step, error) {
		ctx.SetResult([]byte("42"))
		return Done(), nil
	})
	id := h.submit(&funcProc{ID: "result"}, SubmitOptions{Owner: "me"})
	info := h.wait(id)
	if string(info.Result) != "42" || info.Owner != "me" || info.Finished.IsZero() {
		t.Fatalf("info %+v", info)
	}
	m := newSM("m", 3)
	mid := h.submit(m, SubmitOptions{})
	h.wait(mid)
	if got := m.History(); !slices.Equal(got, []int32{0, 1, 2}) {
		t.Fatalf("history %v", got)
	}
}

func TestStateRepeatGuard(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	id := h.submit(&loopSM{}, SubmitOptions{})
	info := h.wait(id)
	if info.State != RolledBack || !errorsContain(info.Error, ErrStateLoop.Error()) {
		t.Fatalf("state %s error %q", info.State, info.Error)
	}
}

// loopSM never leaves state 0.
type loopSM struct {
	StateMachine
	Runs int
}

func (p *loopSM) InitialState() int32 { return 0 }
func (p *loopSM) ExecuteState(ctx *Context, s int32) (Flow, error) {
	p.Runs++
	p.MaxRepeats = 5
	return HasMoreState, nil
}
func (p *loopSM) RollbackState(*Context, int32) error { return nil }

func errorsContain(s, sub string) bool { return len(sub) > 0 && contains(s, sub) }
func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestSuspendOnEvent(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	ev := scheduler.NewEvent("test event")
	var runs atomic.Int32
	funcs.Store("event", suspendOnce(ev, &runs))
	id := h.submit(&funcProc{ID: "event"}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "suspended", func() bool {
		w, _ := h.x.Why(id)
		return w.Reason == "waiting for event"
	})
	if info, _ := h.x.Get(id); info.State != Waiting {
		t.Fatalf("state %s", info.State)
	}
	h.x.Wake(ev)
	if info := h.wait(id); info.State != Success || runs.Load() != 2 {
		t.Fatalf("state %s runs %d", info.State, runs.Load())
	}
}

// A step suspended with a timeout whose OnTimeout fails is rolled back when
// the timer fires: at exactly the time Why reports, which is the timeout
// plus at most 10% jitter. The executor runs on clock.Real inside a
// synctest bubble, where that clock is fake and a step takes no time.
func TestTimeoutHandlerFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
		const wait = time.Minute
		start := time.Now()
		id := h.submit(&timeoutProc{For: wait}, SubmitOptions{})
		synctest.Wait()
		w, _ := h.x.Why(id)
		if w.Reason != "waiting for timer" || w.Until.Before(start.Add(wait)) || w.Until.After(start.Add(wait+wait/10)) {
			t.Fatalf("suspended: %q until +%v, want +%v plus at most 10%%", w.Reason, w.Until.Sub(start), wait)
		}
		fires := w.Until.Sub(start)
		testwait.FakeTimeTo(start, fires-time.Nanosecond)
		if info, _ := h.x.Get(id); info.State != WaitingTimeout {
			t.Fatalf("before the timer: state %s error %q", info.State, info.Error)
		}
		testwait.FakeTimeTo(start, fires)
		info, _ := h.x.Get(id)
		if info.State != RolledBack || !errorsContain(info.Error, ErrTimeout.Error()) {
			t.Fatalf("when the timer fires: state %s error %q", info.State, info.Error)
		}
	})
}

type timeoutProc struct {
	Base
	Started bool
	// For is the step's suspend timeout; 1 ms if zero.
	For time.Duration
}

func (p *timeoutProc) Execute(*Context) (Step, error) {
	if !p.Started {
		p.Started = true
		return Suspend(Timeout(cmp.Or(p.For, time.Millisecond))), nil
	}
	return Done(), nil
}
func (p *timeoutProc) Rollback(*Context) error { return nil }
func (p *timeoutProc) OnTimeout(*Context) error {
	return errors.New("remote side never answered")
}

func TestNonce(t *testing.T) {
	st := store.NewMemStore()
	h := startExecutor(t, st, newDomain(), nil)
	opts := SubmitOptions{Nonce: "n1", Owner: "client"}
	var wg sync.WaitGroup
	ids := make([]uint64, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := h.x.Submit(newSteps(fmt.Sprint("n", i), 2), opts)
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("ids %v: a duplicate nonce made a second procedure", ids)
		}
	}
	other := h.submit(newSteps("o", 1), SubmitOptions{Nonce: "n1", Owner: "other"})
	if other == ids[0] {
		t.Fatal("nonce of another owner matched")
	}
	h.wait(ids[0])
	_ = h.x.Stop(context.Background())

	h2 := startExecutor(t, st, newDomain(), nil)
	again, err := h2.x.Submit(newSteps("again", 1), opts)
	if err != nil || again != ids[0] {
		t.Fatalf("after restart: id %d err %v, want %d", again, err, ids[0])
	}
}

func TestIDsMonotonicAcrossRestarts(t *testing.T) {
	st := store.NewMemStore()
	mc := clock.NewManual(time.Unix(1000, 0))
	h := startExecutor(t, st, newDomain(), func(c *Config) { c.Clock = mc })
	var last uint64
	for i := 0; i < 3; i++ {
		last = h.submit(newSteps(fmt.Sprint(i), 1), SubmitOptions{})
		h.wait(last)
	}
	mc.Advance(time.Hour)
	h.x.EvictExpired()
	if st.Len() != 0 {
		t.Fatalf("store keeps %d procedures after eviction", st.Len())
	}
	_ = h.x.Stop(context.Background())
	h2 := startExecutor(t, st, newDomain(), nil)
	if id := h2.submit(newSteps("x", 1), SubmitOptions{}); id <= last {
		t.Fatalf("id %d after restart, last was %d", id, last)
	}
}

// ackedAndKept runs two one-step roots to their end and acknowledges the
// first: the two kinds of finished result the eviction tests age.
func (h *harness) ackedAndKept() (acked, kept uint64) {
	h.t.Helper()
	acked = h.submit(newSteps("a", 1), SubmitOptions{Nonce: "a"})
	kept = h.submit(newSteps("k", 1), SubmitOptions{Nonce: "k"})
	h.wait(acked)
	h.wait(kept)
	if err := h.x.Ack(acked); err != nil {
		h.t.Fatal(err)
	}
	return acked, kept
}

func TestKeptResults(t *testing.T) {
	mc := clock.NewManual(time.Unix(1000, 0))
	st := store.NewMemStore()
	h := startExecutor(t, st, newDomain(), func(c *Config) {
		c.Clock = mc
		c.ResultTTL = 15 * time.Minute
		c.AckedResultTTL = 5 * time.Minute
		c.EvictInterval = 24 * time.Hour // evicted by hand below
	})
	acked, kept := h.ackedAndKept()
	mc.Advance(4 * time.Minute)
	if n := h.x.EvictExpired(); n != 0 {
		t.Fatalf("evicted %d before any TTL", n)
	}
	mc.Advance(2 * time.Minute)
	if n := h.x.EvictExpired(); n != 1 {
		t.Fatalf("evicted %d, want the acked one", n)
	}
	if _, err := h.x.Get(acked); !errors.Is(err, ErrNotFound) {
		t.Fatalf("acked result still there: %v", err)
	}
	if _, err := h.x.Get(kept); err != nil {
		t.Fatal(err)
	}
	mc.Advance(10 * time.Minute)
	if n := h.x.EvictExpired(); n != 1 {
		t.Fatalf("evicted %d, want the unacked one", n)
	}
	// The nonce went with the result: the same nonce is a new submission.
	if id := h.submit(newSteps("a2", 1), SubmitOptions{Nonce: "a"}); id == acked {
		t.Fatal("evicted nonce still maps to the old id")
	}
	if err := h.x.Ack(12345); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ack of unknown id: %v", err)
	}
}

func TestAbort(t *testing.T) {
	d := newDomain()
	h := startExecutor(t, store.NewMemStore(), d, nil)
	ev := scheduler.NewEvent("never")
	funcs.Store("wait-forever", func(ctx *Context) (Step, error) {
		ctx.Env.(*domain).do(fmt.Sprint("w", ctx.ID()))
		return Suspend(OnEvent(ev)), nil
	})
	id := h.submit(&funcProc{ID: "wait-forever"}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "suspended", func() bool { w, _ := h.x.Why(id); return w.Reason == "waiting for event" })
	if err := h.x.Abort(id); err != nil {
		t.Fatal(err)
	}
	info := h.wait(id)
	if info.State != RolledBack || !errorsContain(info.Error, "aborted") {
		t.Fatalf("state %s error %q", info.State, info.Error)
	}
	if err := h.x.Abort(id); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("abort of finished: %v", err)
	}
	if err := h.x.Abort(999999); !errors.Is(err, ErrNotFound) {
		t.Fatalf("abort of unknown: %v", err)
	}
}

func TestAbortWaitsForRollbackSupport(t *testing.T) {
	d := newDomain()
	h := startExecutor(t, store.NewMemStore(), d, nil)
	gate, entered := make(chan struct{}), make(chan struct{})
	p := &gatedSM{Gate: "g1"}
	gates.Store("g1", gate)
	gates.Store("g1/entered", entered)
	id := h.submit(p, SubmitOptions{})
	<-entered // inside state 0: the abort must wait for a boundary
	if err := h.x.Abort(id); err != nil {
		t.Fatal(err)
	}
	close(gate)
	info := h.wait(id)
	// State 1 has no rollback support, so the abort lands at state 2.
	if info.State != RolledBack || !slices.Equal(p.Ran, []int32{0, 1}) {
		t.Fatalf("state %s ran %v", info.State, p.Ran)
	}
}

var gates sync.Map

type gatedSM struct {
	StateMachine
	Gate string
	Ran  []int32
}

func (p *gatedSM) InitialState() int32 { return 0 }
func (p *gatedSM) ExecuteState(ctx *Context, s int32) (Flow, error) {
	if s == 0 {
		if e, ok := gates.LoadAndDelete(p.Gate + "/entered"); ok {
			close(e.(chan struct{}))
		}
		g, _ := gates.Load(p.Gate)
		<-g.(chan struct{})
	}
	p.Ran = append(p.Ran, s)
	if s == 3 {
		return NoMoreState, nil
	}
	p.SetNextState(s + 1)
	return HasMoreState, nil
}
func (p *gatedSM) RollbackState(*Context, int32) error { return nil }
func (p *gatedSM) IsRollbackSupported(s int32) bool    { return s != 1 }
func (p *gatedSM) Locks() []scheduler.Lock             { return nil }
func (p *gatedSM) QueueKey() scheduler.QueueKey {
	return scheduler.QueueKey{Kind: scheduler.KindTable, Name: "gated"}
}
func (p *gatedSM) HoldLock() bool { return false }

// A procedure's deadline (SubmitOptions.Timeout) aborts it at exactly the
// deadline, not a nanosecond before: clock.Real in a synctest bubble.
func TestDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
		ev := scheduler.NewEvent("never")
		funcs.Store("slow", func(ctx *Context) (Step, error) { return Suspend(OnEvent(ev)), nil })
		const deadline = time.Minute
		start := time.Now()
		id := h.submit(&funcProc{ID: "slow"}, SubmitOptions{Timeout: deadline})
		testwait.FakeTimeTo(start, deadline-time.Nanosecond)
		if info, _ := h.x.Get(id); info.State != Waiting {
			t.Fatalf("before the deadline: state %s error %q", info.State, info.Error)
		}
		testwait.FakeTimeTo(start, deadline)
		info, _ := h.x.Get(id)
		if info.State != RolledBack || !errorsContain(info.Error, "timed out") {
			t.Fatalf("at the deadline: state %s error %q", info.State, info.Error)
		}
	})
}

func TestPauseResume(t *testing.T) {
	st := store.NewMemStore()
	d := newDomain()
	h := startExecutor(t, st, d, nil)
	ev := scheduler.NewEvent("go")
	funcs.Store("pausable", func(ctx *Context) (Step, error) {
		if !ev.Ready() {
			return Suspend(OnEvent(ev)), nil
		}
		return Done(), nil
	})
	id := h.submit(&funcProc{ID: "pausable"}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "suspended", func() bool { w, _ := h.x.Why(id); return w.Reason == "waiting for event" })
	if err := h.x.Pause(id); err != nil {
		t.Fatal(err)
	}
	h.x.Wake(ev)
	testwait.For(t, 10*time.Second, "parked as paused", func() bool {
		i, _ := h.x.Get(id)
		return i.Paused && i.State == Runnable
	})
	// Paused survives a restart.
	_ = h.x.Stop(context.Background())
	h = startExecutor(t, st, d, nil)
	if w, _ := h.x.Why(id); w.Reason != "paused" {
		t.Fatalf("after restart: %q", w.Reason)
	}
	if err := h.x.Resume(id); err != nil {
		t.Fatal(err)
	}
	// The event did not survive the restart, but the step runs again and
	// sees the ready event only through ev, which is this process's.
	testwait.For(t, 10*time.Second, "finished or suspended", func() bool {
		i, _ := h.x.Get(id)
		return i.State == Success || i.State == Waiting
	})
}

func TestBypassGuards(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	ev := scheduler.NewEvent("never")
	funcs.Store("stuck", func(ctx *Context) (Step, error) { return Suspend(OnEvent(ev)), nil })
	funcs.Store("parent", func(ctx *Context) (Step, error) {
		if len(ctx.Children()) == 0 {
			return Spawn(&funcProc{ID: "stuck"}), nil
		}
		return Done(), nil
	})
	id := h.submit(&funcProc{ID: "parent"}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "waiting for children", func() bool { w, _ := h.x.Why(id); return w.Reason == "waiting for children" })
	if err := h.x.Bypass(id, BypassOptions{}); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("bypass of a parent with live children: %v", err)
	}
	if err := h.x.Bypass(id, BypassOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	info := h.wait(id)
	if info.State != Success || !info.Bypassed {
		t.Fatalf("state %s bypassed %v", info.State, info.Bypassed)
	}
}

// A bypass with KeepRollbacks is refused while the tree rolls back, and
// the rollback goes on to its end.
func TestBypassKeepRollbacks(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	var hold atomic.Bool
	hold.Store(true)
	funcs.Store("fails", func(*Context) (Step, error) { return Step{}, errBoom })
	rollbacks.Store("fails", func(*Context) error {
		if hold.Load() {
			return errors.New("rollback held by the test")
		}
		return nil
	})
	id := h.submit(&funcProc{ID: "fails"}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "rolling back", func() bool { w, _ := h.x.Why(id); return w.Reason == "rolling back" })
	if err := h.x.Bypass(id, BypassOptions{Force: true, KeepRollbacks: true}); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("bypass of a procedure rolling back, keeping rollbacks: %v", err)
	}
	hold.Store(false)
	if info := h.wait(id); info.State != RolledBack || info.Bypassed {
		t.Fatalf("state %s bypassed %v, want ROLLEDBACK by its own rollback", info.State, info.Bypassed)
	}
}

// LookupNonce finds what a submission with the owner and nonce created,
// and nothing for another owner or a new nonce.
func TestLookupNonce(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	if id, ok := h.x.LookupNonce("nightly", "n1"); ok {
		t.Fatalf("before any submission: %d", id)
	}
	id := h.submit(newSteps("ln", 1), SubmitOptions{Owner: "nightly", Nonce: "n1"})
	if got, ok := h.x.LookupNonce("nightly", "n1"); !ok || got != id {
		t.Fatalf("lookup after submission %d: %d, %v", id, got, ok)
	}
	for _, k := range [][2]string{{"other", "n1"}, {"nightly", "n2"}, {"nightly", ""}} {
		if got, ok := h.x.LookupNonce(k[0], k[1]); ok {
			t.Errorf("lookup of owner %q nonce %q: %d", k[0], k[1], got)
		}
	}
}

func TestLocksSerialiseAndWhy(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	gate := make(chan struct{})
	gates.Store("lockgate", gate)
	var inside, maxInside atomic.Int32
	funcs.Store("locked", func(ctx *Context) (Step, error) {
		n := inside.Add(1)
		defer inside.Add(-1)
		for {
			m := maxInside.Load()
			if n <= m || maxInside.CompareAndSwap(m, n) {
				break
			}
		}
		if ctx.ID() == 1 {
			<-gate
		}
		return Done(), nil
	})
	first := h.submit(&lockedProc{funcProc{ID: "locked"}}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "first running", func() bool { w, _ := h.x.Why(first); return w.Reason == "running" })
	second := h.submit(&lockedProc{funcProc{ID: "locked"}}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "second waits for lock", func() bool {
		w, _ := h.x.Why(second)
		return w.Reason == "waiting for lock" && slices.Contains(w.Sched.Holders, first)
	})
	close(gate)
	h.wait(first)
	h.wait(second)
	if maxInside.Load() != 1 {
		t.Fatalf("%d procedures inside an exclusive lock at once", maxInside.Load())
	}
}

type lockedProc struct{ funcProc }

type badKeyProc struct{ funcProc }

func (p *badKeyProc) QueueKey() scheduler.QueueKey { return scheduler.QueueKey{Kind: 99} }

func (p *lockedProc) Locks() []scheduler.Lock {
	return scheduler.TableLocks("default", "t1", scheduler.Exclusive)
}
func (p *lockedProc) HoldLock() bool { return true }

func TestChildrenInheritLocks(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	funcs.Store("leaf", func(ctx *Context) (Step, error) { return Done(), nil })
	funcs.Store("lockparent", func(ctx *Context) (Step, error) {
		if len(ctx.Children()) == 0 {
			return Spawn(&lockedProc{funcProc{ID: "leaf"}}, &lockedProc{funcProc{ID: "leaf"}}), nil
		}
		return Done(), nil
	})
	id := h.submit(&lockedProc{funcProc{ID: "lockparent"}}, SubmitOptions{})
	if info := h.wait(id); info.State != Success {
		t.Fatalf("state %s: children could not take their parent's exclusive lock", info.State)
	}
}

func TestGracefulStopResumes(t *testing.T) {
	st := store.NewMemStore()
	d := newDomain()
	h := startExecutor(t, st, d, nil)
	started := make(chan struct{}, 1)
	funcs.Store("long", func(ctx *Context) (Step, error) {
		if ctx.Attempt() == 1 && !d.has("long-started") {
			d.do("long-started")
			started <- struct{}{}
			<-ctx.Done()
			return Step{}, ctx.Err()
		}
		return Done(), nil
	})
	id := h.submit(&funcProc{ID: "long"}, SubmitOptions{})
	<-started
	if err := h.x.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	h2 := startExecutor(t, st, d, nil)
	if info := h2.wait(id); info.State != Success {
		t.Fatalf("state %s after restart: the shutdown failed the procedure", info.State)
	}
}

func TestStoreFailureStopsExecutor(t *testing.T) {
	cs := &crashStore{inner: store.NewMemStore(), budget: 3}
	h := startExecutor(t, cs, newDomain(), nil)
	if _, err := h.x.Submit(newSteps("a", 10), SubmitOptions{}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "executor stopped", func() bool { return h.x.Err() != nil })
	if !errors.Is(h.x.Err(), ErrStoreFailed) {
		t.Fatalf("Err %v", h.x.Err())
	}
	if _, err := h.x.Submit(newSteps("b", 1), SubmitOptions{}); !errors.Is(err, ErrStoreFailed) {
		t.Fatalf("submit after failure: %v", err)
	}
}

func TestStuckWorkerMonitor(t *testing.T) {
	mc := clock.NewManual(time.Unix(1000, 0))
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) {
		c.Clock = mc
		c.Workers = 2
		c.StuckThreshold = time.Millisecond
		c.StuckCheckInterval = time.Hour // driven by hand below
	})
	release := make(chan struct{})
	var blocked sync.WaitGroup
	blocked.Add(2)
	funcs.Store("block", func(ctx *Context) (Step, error) {
		blocked.Done()
		<-release
		return Done(), nil
	})
	h.submit(&funcProc{ID: "block"}, SubmitOptions{})
	h.submit(&funcProc{ID: "block"}, SubmitOptions{})
	blocked.Wait()
	mc.Advance(5 * time.Millisecond) // past StuckThreshold
	if n := h.x.CheckStuckWorkers(); n != 2 {
		t.Fatalf("stuck %d, want 2", n)
	}
	if h.x.Workers() != 3 {
		t.Fatalf("workers %d, want 3 (one keep-alive added)", h.x.Workers())
	}
	// The added worker runs what the stuck ones can't.
	funcs.Store("quick", func(ctx *Context) (Step, error) { return Done(), nil })
	if info := h.wait(h.submit(&funcProc{ID: "quick"}, SubmitOptions{})); info.State != Success {
		t.Fatal(info.State)
	}
	close(release)
}

// The stuck-worker monitor on its own timer, with the defaults (check every
// 5 s, stuck after 10 s) on clock.Real in a synctest bubble. A step counts
// as stuck only once it has run strictly longer than StuckThreshold, so
// two workers blocked from the start are first seen stuck by the check at
// 15 s, not the one at 10 s; each later check adds one more keep-alive
// worker until MaxExtraWorkers (the core count).
func TestStuckWorkerMonitorOnItsTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) { c.Workers = 2 })
		release := make(chan struct{})
		defer close(release)
		funcs.Store("block-bubble", func(ctx *Context) (Step, error) {
			<-release
			return Done(), nil
		})
		start := time.Now()
		h.submit(&funcProc{ID: "block-bubble"}, SubmitOptions{})
		h.submit(&funcProc{ID: "block-bubble"}, SubmitOptions{})
		for _, c := range []struct {
			at      time.Duration
			workers int
		}{
			{15*time.Second - time.Nanosecond, 2},
			{15 * time.Second, 3},
			{20*time.Second - time.Nanosecond, 3},
			{20 * time.Second, 4},
			{time.Minute, 4}, // capped
		} {
			testwait.FakeTimeTo(start, c.at)
			if got := h.x.Workers(); got != c.workers {
				t.Fatalf("at +%v: %d workers, want %d", c.at, got, c.workers)
			}
		}
	})
}

// Finished results are evicted by the executor's own timer (every 30 s by
// default) once their TTL has passed: an acknowledged one 5 min after the
// Ack, another 15 min after it finished; both are multiples of the
// interval, so each goes at exactly its TTL. clock.Real in a synctest
// bubble.
func TestResultsEvictedOnTheirTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
		start := time.Now()
		acked, kept := h.ackedAndKept()
		if !time.Now().Equal(start) {
			t.Fatalf("finishing took %v of the bubble's time", time.Since(start))
		}
		present := func(id uint64) bool {
			_, err := h.x.Get(id)
			if err != nil && !errors.Is(err, ErrNotFound) {
				t.Fatal(err)
			}
			return err == nil
		}
		for _, c := range []struct {
			at          time.Duration
			acked, kept bool
		}{
			{5*time.Minute - time.Nanosecond, true, true},
			{5 * time.Minute, false, true},
			{15*time.Minute - time.Nanosecond, false, true},
			{15 * time.Minute, false, false},
		} {
			testwait.FakeTimeTo(start, c.at)
			if a, k := present(acked), present(kept); a != c.acked || k != c.kept {
				t.Fatalf("at +%v: acked present %v, kept present %v; want %v, %v", c.at, a, k, c.acked, c.kept)
			}
		}
	})
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) { c.Metrics = reg })
	p := newSteps("f", 2)
	p.FailAt = 1
	h.wait(h.submit(p, SubmitOptions{}))
	h.wait(h.submit(newSteps("ok", 1), SubmitOptions{}))
	if v := testutil.ToFloat64(h.x.metrics.submitted.WithLabelValues("steps")); v != 2 {
		t.Fatalf("submitted %v", v)
	}
	if v := testutil.ToFloat64(h.x.metrics.failed.WithLabelValues("steps")); v != 1 {
		t.Fatalf("failed %v", v)
	}
	if n := testutil.CollectAndCount(reg, "baton_procedure_duration_seconds"); n != 2 {
		t.Fatalf("duration series %d, want 2 (SUCCESS, ROLLEDBACK)", n)
	}
}

func TestListeners(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	var mu sync.Mutex
	var states []State
	h.x.AddListener(func(i Info) {
		mu.Lock()
		states = append(states, i.State)
		mu.Unlock()
	})
	h.wait(h.submit(newSteps("l", 2), SubmitOptions{}))
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(states, []State{Runnable, Runnable, Success}) {
		t.Fatalf("states %v", states)
	}
}

func TestListFilters(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	a := h.submit(newSteps("a", 1), SubmitOptions{})
	b := h.submit(newSM("b", 1), SubmitOptions{})
	h.wait(a)
	h.wait(b)
	if l := h.x.List(Filter{Type: "sm"}); len(l) != 1 || l[0].ID != b {
		t.Fatalf("by type: %+v", l)
	}
	if l := h.x.List(Filter{States: []State{Success}, Limit: 1}); len(l) != 1 || l[0].ID != a {
		t.Fatalf("paged: %+v", l)
	}
	if l := h.x.List(Filter{AfterID: a}); len(l) != 1 || l[0].ID != b {
		t.Fatalf("after: %+v", l)
	}
}

func TestBadInput(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	type unregistered struct{ stepsProc }
	if _, err := h.x.Submit(&unregistered{}, SubmitOptions{}); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("unregistered: %v", err)
	}
	if _, err := h.x.Submit(nil, SubmitOptions{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("nil: %v", err)
	}
	if _, err := h.x.Submit(newSteps("x", 1), SubmitOptions{Timeout: -1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative timeout: %v", err)
	}
	if _, err := h.x.Submit(&badKeyProc{}, SubmitOptions{Nonce: "bad"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid queue kind: %v", err)
	}
	if _, err := h.x.Submit(&badKeyProc{}, SubmitOptions{Nonce: "bad"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid queue kind, same nonce again: %v", err)
	}
	r := NewRegistry()
	for _, tc := range []struct {
		name    string
		version int
		f       func() Procedure
	}{
		{"", 1, func() Procedure { return &stepsProc{} }},
		{"v0", 0, func() Procedure { return &stepsProc{} }},
		{"nilf", 1, nil},
		{"nonptr", 1, func() Procedure { return stepsProc{} }},
		{"nothing", 1, func() Procedure {
			return &struct {
				Base
				A int
			}{}
		}},
	} {
		if err := r.Register(tc.name, tc.version, tc.f); !errors.Is(err, ErrInvalid) {
			t.Errorf("Register(%q, %d): %v", tc.name, tc.version, err)
		}
	}
	if err := r.Register("dup", 1, func() Procedure { return &stepsProc{} }); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("dup", 1, func() Procedure { return &smProc{} }); !errors.Is(err, ErrInvalid) {
		t.Fatalf("duplicate name: %v", err)
	}
	for _, cfg := range []Config{{}, {Store: store.NewMemStore()}, {Store: store.NewMemStore(), Registry: r, Workers: -1}} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%+v): %v", cfg, err)
		}
	}
}

// panicSM panics in state 1 on its second run of it (a repeat), which must
// leave history and rollback stack consistent across a restart.
type panicSM struct {
	StateMachine
	Runs int
}

func (p *panicSM) InitialState() int32 { return 0 }
func (p *panicSM) ExecuteState(ctx *Context, s int32) (Flow, error) {
	if s == 0 {
		p.SetNextState(1)
		return HasMoreState, nil
	}
	p.Runs++
	if p.Runs == 2 {
		panic("second run of state 1")
	}
	return HasMoreState, nil
}
func (p *panicSM) RollbackState(*Context, int32) error { return nil }

func TestPanicInRepeatedStateKeepsStackConsistent(t *testing.T) {
	reg := func(c *Config) {
		c.Registry = NewRegistry()
		c.Registry.MustRegister("panic", 1, func() Procedure { return &panicSM{} })
	}
	// Writes: insert, state 0, state 1, the FAILED image; then "crash"
	// before the rollback writes anything.
	mem := store.NewMemStore()
	cs := &crashStore{inner: mem, budget: 4}
	h := startExecutor(t, cs, newDomain(), reg)
	id := h.submit(&panicSM{}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "crash", func() bool { return h.x.Err() != nil })
	_ = h.x.Stop(context.Background())

	h2 := startExecutor(t, mem, newDomain(), reg)
	if p := h2.x.Problems(); len(p) != 0 {
		t.Fatalf("reload found problems: %+v", p)
	}
	info := h2.wait(id)
	if info.State != RolledBack || !errorsContain(info.Error, "panicked") {
		t.Fatalf("state %s error %q", info.State, info.Error)
	}
}

// TestMetricsSurviveANewExecutor: a master builds one executor per
// leadership term on the same registry; the series carry on.
func TestMetricsSurviveANewExecutor(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := store.NewMemStore()
	h := startExecutor(t, st, newDomain(), func(c *Config) { c.Metrics = reg })
	h.wait(h.submit(newSteps("a", 1), SubmitOptions{}))
	_ = h.x.Stop(context.Background())
	h2 := startExecutor(t, st, newDomain(), func(c *Config) { c.Metrics = reg })
	h2.wait(h2.submit(newSteps("b", 1), SubmitOptions{}))
	if v := testutil.ToFloat64(h2.x.metrics.submitted.WithLabelValues("steps")); v != 2 {
		t.Fatalf("submitted %v across two executors, want 2", v)
	}
}

// TestWhyUpToListsTheOldestUnfinishedChildren checks that WhyUpTo names at
// most n unfinished children, the oldest first, and Why all of them.
func TestWhyUpToListsTheOldestUnfinishedChildren(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	ev := scheduler.NewEvent("never")
	funcs.Store("whyupto-stuck", func(ctx *Context) (Step, error) { return Suspend(OnEvent(ev)), nil })
	funcs.Store("whyupto-quick", func(ctx *Context) (Step, error) { return Done(), nil })
	funcs.Store("whyupto-parent", func(ctx *Context) (Step, error) {
		if len(ctx.Children()) == 0 {
			// The quick ones finish; the parent still waits for the rest.
			return Spawn(&funcProc{ID: "whyupto-quick"}, &funcProc{ID: "whyupto-stuck"}, &funcProc{ID: "whyupto-quick"},
				&funcProc{ID: "whyupto-stuck"}, &funcProc{ID: "whyupto-stuck"}), nil
		}
		return Done(), nil
	})
	id := h.submit(&funcProc{ID: "whyupto-parent"}, SubmitOptions{})
	var all Why
	testwait.For(t, 10*time.Second, "the quick children finished", func() bool {
		all, _ = h.x.Why(id)
		return all.Reason == "waiting for children" && len(all.Children) == 3
	})
	for _, n := range []int{0, 1, 2, 3, 10, -1} {
		w, err := h.x.WhyUpTo(id, n)
		if err != nil {
			t.Fatal(err)
		}
		want := all.Children
		if n >= 0 && n < len(want) {
			want = want[:n]
		}
		wantInfo := 0 // WhyUpTo leaves Info's children out; Why lists them
		if n < 0 {
			wantInfo = 5
		}
		if !slices.Equal(w.Children, want) || w.Reason != all.Reason || len(w.Info.Children) != wantInfo {
			t.Errorf("WhyUpTo(%d): children %v reason %q (%d in Info), want %v %q (%d)", n, w.Children, w.Reason, len(w.Info.Children), want, all.Reason, wantInfo)
		}
	}
	if !slices.IsSorted(all.Children) {
		t.Errorf("Why's unfinished children %v are not oldest first", all.Children)
	}
}

// gatedInsertStore holds Insert while armed: the window in which a spawn's
// children are in their parent's list but not yet in the executor's table.
type gatedInsertStore struct {
	*store.MemStore
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *gatedInsertStore) Insert(p store.Proc, children []store.Proc) error {
	if s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-s.release
	}
	return s.MemStore.Insert(p, children)
}

// waitEntered waits for the armed Insert to be held.
func (s *gatedInsertStore) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-s.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the armed Insert never came")
	}
}

// open lets the held Insert (and any later) through; it may be called
// more than once.
func (s *gatedInsertStore) open() {
	select {
	case <-s.release:
	default:
		close(s.release)
	}
}

// TestWhyUpToAcrossSpawnWaves: WhyUpTo skips a parent's finished children
// from where the last call stopped (a watch polls a parent of thousands),
// yet never skips children of a spawn whose write is still in flight,
// which are not in the executor's table yet and so look like finished
// ones: once written and running, they are listed.
func TestWhyUpToAcrossSpawnWaves(t *testing.T) {
	gs := &gatedInsertStore{MemStore: store.NewMemStore(), entered: make(chan struct{}), release: make(chan struct{})}
	h := startExecutor(t, gs, newDomain(), nil)
	ev := scheduler.NewEvent("stuck children")
	var done atomic.Bool
	funcs.Store("waves-stuck", func(ctx *Context) (Step, error) {
		if done.Load() {
			return Done(), nil
		}
		return Suspend(OnEvent(ev)), nil
	})
	funcs.Store("waves-quick", func(ctx *Context) (Step, error) { return Done(), nil })
	var waves atomic.Int32
	funcs.Store("waves-parent", func(ctx *Context) (Step, error) {
		switch waves.Add(1) {
		case 1:
			return Spawn(&funcProc{ID: "waves-quick"}, &funcProc{ID: "waves-quick"}, &funcProc{ID: "waves-quick"}), nil
		case 2:
			gs.armed.Store(true) // this wave's write waits
			return Spawn(&funcProc{ID: "waves-stuck"}, &funcProc{ID: "waves-stuck"}), nil
		}
		return Done(), nil
	})
	id := h.submit(&funcProc{ID: "waves-parent"}, SubmitOptions{})
	select {
	case <-gs.entered:
	case <-time.After(time.Minute):
		t.Fatal("the second wave was never written")
	}
	// Wave 1 is done, wave 2 is being written: nothing to list yet, and
	// the calls walk over wave 1 for good. Info lists the children whose
	// spawn committed: wave 1's three.
	for range 3 {
		if w, err := h.x.Why(id); err != nil || len(w.Children) != 0 || len(w.Info.Children) != 3 {
			t.Fatalf("during the second wave's write: %+v of %v, %v; want no unfinished child of wave 1's 3", w.Children, w.Info.Children, err)
		}
		if w, err := h.x.WhyUpTo(id, 64); err != nil || len(w.Children) != 0 {
			t.Fatalf("during the second wave's write: %+v, %v; want no unfinished child", w.Children, err)
		}
	}
	close(gs.release)
	var w Why
	testwait.For(t, 10*time.Second, "the second wave listed", func() bool {
		w, _ = h.x.WhyUpTo(id, 64)
		return len(w.Children) == 2
	})
	all, err := h.x.Why(id)
	if err != nil || !slices.Equal(w.Children, all.Children) || !slices.Equal(w.Children, all.Info.Children[3:]) {
		t.Fatalf("WhyUpTo %v, Why %v (%v), Info %v: want the second wave's two", w.Children, all.Children, err, all.Info.Children)
	}
	done.Store(true)
	h.x.Scheduler().WakeEvent(ev)
	if info := h.wait(id); info.State != Success {
		t.Fatalf("parent ended %v", info.State)
	}
}
