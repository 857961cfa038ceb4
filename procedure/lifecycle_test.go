package procedure

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

func logIndex(d *domain, entry string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Index(d.log, entry)
}

// TestLockRules drives the lock rules through the executor: who waits for
// whom, who runs side by side, and locks held across a restart.
func TestLockRules(t *testing.T) {
	table := func(tb string) []scheduler.Lock { return scheduler.TableLocks("default", tb, scheduler.Exclusive) }
	tableShared := func(tb string) []scheduler.Lock { return scheduler.TableLocks("default", tb, scheduler.Shared) }
	region := func(tb, r string) []scheduler.Lock { return scheduler.RegionLocks("default", tb, r) }
	tests := []struct {
		name string
		// first is submitted and brought to its blocking point (gate,
		// timer, or a child in a gate) before second is submitted.
		first, second *lkProc
		// blocked is the lkProc whose "enter" marks first as in place.
		blocked string
		restart bool // restart the executor between first and second
		// concurrent: second runs while first is blocked; otherwise second
		// waits for first's lock and enters only after first exited.
		concurrent bool
	}{
		{name: "table exclusive serialises one table",
			first: &lkProc{Name: "A", LockSpec: table("t1"), Gate: "A"}, second: &lkProc{Name: "B", LockSpec: table("t1")}, blocked: "A"},
		{name: "tables differ run concurrently",
			first: &lkProc{Name: "A", LockSpec: table("t1"), Gate: "A"}, second: &lkProc{Name: "B", LockSpec: table("t2")}, blocked: "A", concurrent: true},
		{name: "regions of one table run concurrently",
			first: &lkProc{Name: "A", LockSpec: region("t1", "r1"), Gate: "A"}, second: &lkProc{Name: "B", LockSpec: region("t1", "r2"), Gate: "B"}, blocked: "A", concurrent: true},
		{name: "one region serialises",
			first: &lkProc{Name: "A", LockSpec: region("t1", "r1"), Gate: "A"}, second: &lkProc{Name: "B", LockSpec: region("t1", "r1")}, blocked: "A"},
		{name: "table exclusive blocks a region of that table",
			first: &lkProc{Name: "A", LockSpec: table("t1"), Gate: "A"}, second: &lkProc{Name: "B", LockSpec: region("t1", "r1")}, blocked: "A"},
		{name: "a region blocks table exclusive",
			first: &lkProc{Name: "A", LockSpec: region("t1", "r1"), Gate: "A"}, second: &lkProc{Name: "B", LockSpec: table("t1")}, blocked: "A"},
		{name: "table shared runs with table shared",
			first: &lkProc{Name: "A", LockSpec: tableShared("t1"), Gate: "A"}, second: &lkProc{Name: "B", LockSpec: tableShared("t1"), Gate: "B"}, blocked: "A", concurrent: true},
		{name: "child inherits its parent's exclusive lock",
			first: &lkProc{Name: "A", LockSpec: table("t1"), Hold: true,
				Child: &lkProc{Name: "A/child", LockSpec: table("t1"), Gate: "A/child"}},
			second: &lkProc{Name: "B", LockSpec: region("t1", "r9")}, blocked: "A/child"},
		{name: "grandchild inherits too",
			first: &lkProc{Name: "A", LockSpec: table("t1"), Hold: true,
				Child: &lkProc{Name: "A/child", LockSpec: region("t1", "r1"), Hold: true,
					Child: &lkProc{Name: "A/child/child", LockSpec: table("t1"), Gate: "A/child/child"}}},
			second: &lkProc{Name: "B", LockSpec: region("t1", "r2")}, blocked: "A/child/child"},
		{name: "held-for-life lock is re-acquired after restart",
			first: &lkProc{Name: "A", LockSpec: table("t1"), Hold: true, TimerFor: time.Hour}, second: &lkProc{Name: "B", LockSpec: table("t1")},
			blocked: "A", restart: true},
		{name: "held-for-life child lock is re-acquired after restart",
			first: &lkProc{Name: "A", LockSpec: region("t1", "r1"), Hold: true,
				Child: &lkProc{Name: "A/child", LockSpec: table("t1"), Hold: true, TimerFor: time.Hour}},
			// r1 is A's own lock: B waits for the child (t1), then for A (r1).
			second: &lkProc{Name: "B", LockSpec: region("t1", "r1")}, blocked: "A/child", restart: true},
		{name: "per-step lock is not held while suspended",
			first: &lkProc{Name: "A", LockSpec: table("t1"), TimerFor: time.Hour}, second: &lkProc{Name: "B", LockSpec: table("t1")},
			blocked: "A", restart: true, concurrent: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Gate names are made unique per run.
			sfx := uniq("")
			var rename func(p *lkProc)
			rename = func(p *lkProc) {
				if p.Gate != "" {
					p.Gate += sfx
				}
				if p.Child != nil {
					rename(p.Child)
				}
			}
			rename(tc.first)
			rename(tc.second)
			var gates []string
			for p := tc.first; p != nil; p = p.Child {
				if p.Gate != "" {
					gates = append(gates, p.Gate)
				}
			}
			st := store.NewMemStore()
			d := newDomain()
			mc := clock.NewManual(time.Unix(1e6, 0))
			mod := func(c *Config) {
				c.Registry, c.Clock, c.Workers = lifecycleRegistry(t), mc, 4
				c.ResultTTL, c.EvictInterval = 24*time.Hour, 24*time.Hour
			}
			h := startExecutor(t, st, d, mod)
			first := h.submit(tc.first, SubmitOptions{})
			testwait.For(t, 10*time.Second, "first in place", func() bool {
				if !d.has("enter:" + tc.blocked) {
					return false
				}
				w, _ := h.x.Why(first)
				return w.Reason == "running" || w.Reason == "waiting for timer" || w.Reason == "waiting for children"
			})
			if tc.restart {
				if err := h.x.Stop(context.Background()); err != nil {
					t.Fatal(err)
				}
				h = startExecutor(t, st, d, mod)
				if p := h.x.Problems(); len(p) > 0 {
					t.Fatalf("load problems %+v", p)
				}
			}
			second := h.submit(tc.second, SubmitOptions{})
			if tc.concurrent {
				testwait.For(t, 10*time.Second, "second runs while first is blocked", func() bool { return d.has("enter:" + tc.second.Name) })
				if d.has("exit:" + tc.first.Name) {
					t.Fatal("first finished before second entered: not concurrent")
				}
			} else {
				testwait.For(t, 10*time.Second, "second waits for first's lock", func() bool {
					w, _ := h.x.Why(second)
					return w.Reason == "waiting for lock" && len(w.Sched.Holders) > 0
				})
				w, _ := h.x.Why(second)
				// The holder is first or one of its descendants.
				holder, _ := h.x.Get(w.Sched.Holders[0])
				if holder.RootID != first {
					t.Fatalf("second waits for %v held by %v, want a member of tree %d", w.Sched.Lock, w.Sched.Holders, first)
				}
				if d.has("enter:" + tc.second.Name) {
					t.Fatal("second entered while first holds the lock")
				}
			}
			if tc.second.Gate != "" {
				openGate(tc.second.Gate)
			}
			for _, g := range gates {
				openGate(g)
			}
			mc.Advance(2 * time.Hour)
			for _, id := range []uint64{first, second} {
				if info := h.wait(id); info.State != Success {
					t.Fatalf("%d ended %s (%s)", id, info.State, info.Error)
				}
			}
			if !tc.concurrent && logIndex(d, "do:exit:"+tc.first.Name) > logIndex(d, "do:enter:"+tc.second.Name) {
				t.Fatalf("second entered before first exited: %v", d.log)
			}
			// A root's Wait may return just before its last lock release
			// reaches the scheduler: wait for the release, then check.
			testwait.For(t, 10*time.Second, "both to let go of their locks", func() bool { return len(h.x.Scheduler().Locks()) == 0 })
		})
	}
}

// apiCase is one operation on a procedure in one state.
type apiCase struct {
	state, op string
	wantErr   error // nil: success
	want      State
}

// TestAPIInEveryState applies Abort, Pause, Bypass and Ack to a procedure in
// each state it can be in and checks the error class, the final state and
// the effects; none of the calls may block.
func TestAPIInEveryState(t *testing.T) {
	states := []string{"queued", "running", "suspend-after", "event", "timer", "children", "lockwait", "rollingback", "finished"}
	var cases []apiCase
	for _, s := range states {
		final := Success
		if s == "rollingback" {
			final = RolledBack
		}
		// Abort.
		switch s {
		case "finished":
			cases = append(cases, apiCase{s, "abort", ErrNotAllowed, Success})
		default:
			cases = append(cases, apiCase{s, "abort", nil, RolledBack})
		}
		// Pause (then Resume).
		if s == "finished" {
			cases = append(cases, apiCase{s, "pause", ErrNotAllowed, Success})
		} else {
			cases = append(cases, apiCase{s, "pause", nil, final})
		}
		// Bypass.
		switch s {
		case "finished":
			cases = append(cases, apiCase{s, "bypass", ErrNotAllowed, Success})
		case "children":
			cases = append(cases, apiCase{s, "bypass", ErrNotAllowed, Success},
				apiCase{s, "bypass-recursive", nil, Success})
		case "lockwait":
			cases = append(cases, apiCase{s, "bypass", ErrNotAllowed, Success},
				apiCase{s, "bypass-force", nil, Success})
		default:
			cases = append(cases, apiCase{s, "bypass", nil, final})
		}
		// Ack.
		if s == "finished" {
			cases = append(cases, apiCase{s, "ack", nil, Success})
		} else {
			cases = append(cases, apiCase{s, "ack", ErrNotTerminal, final})
		}
	}
	for _, tc := range cases {
		t.Run(tc.state+"/"+tc.op, func(t *testing.T) { runAPICase(t, tc) })
	}

	t.Run("unknown id", func(t *testing.T) {
		h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) { c.Registry = lifecycleRegistry(t) })
		for name, op := range map[string]func() error{
			"abort":  func() error { return h.x.Abort(424242) },
			"pause":  func() error { return h.x.Pause(424242) },
			"resume": func() error { return h.x.Resume(424242) },
			"bypass": func() error { return h.x.Bypass(424242, BypassOptions{}) },
			"ack":    func() error { return h.x.Ack(424242) },
		} {
			if err := op(); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: %v, want ErrNotFound", name, err)
			}
		}
	})
}

func runAPICase(t *testing.T, tc apiCase) {
	name := uniq("T")
	d := newDomain()
	mc := clock.NewManual(time.Unix(1e6, 0))
	workers := 2
	if tc.state == "queued" || tc.state == "rollingback" {
		workers = 1
	}
	h := startExecutor(t, store.NewMemStore(), d, func(c *Config) {
		c.Registry, c.Clock, c.Workers = lifecycleRegistry(t), mc, workers
		c.RollbackBackoff, c.RollbackBackoffMax = time.Minute, 2*time.Minute
		c.ResultTTL, c.EvictInterval = 24*time.Hour, 24*time.Hour
		// The steps' time runs on mc too: advancing it past a running
		// blocker must not look like a stuck worker.
		c.StuckCheckInterval = 24 * time.Hour
	})
	why := func(id uint64) string { w, _ := h.x.Why(id); return w.Reason }
	basePending := mc.Pending()
	blocker := uniq("blocker")
	var release func()
	var target uint64
	switch tc.state {
	case "queued":
		b := h.submit(&lkProc{Name: blocker, Gate: blocker}, SubmitOptions{})
		testwait.For(t, 10*time.Second, "blocker running", func() bool { return why(b) == "running" })
		target = h.submit(&abProc{Name: name, Mode: "plain"}, SubmitOptions{})
		if why(target) != "queued" {
			t.Fatalf("target %q, want queued", why(target))
		}
		release = func() { openGate(blocker) }
	case "running", "suspend-after":
		target = h.submit(&abProc{Name: name, Mode: tc.state}, SubmitOptions{})
		testwait.For(t, 10*time.Second, "running", func() bool { return why(target) == "running" && d.has(name+"/0") })
		release = func() { openGate(name) }
	case "event":
		target = h.submit(&abProc{Name: name, Mode: "event"}, SubmitOptions{})
		testwait.For(t, 10*time.Second, "waiting for event", func() bool { return why(target) == "waiting for event" })
		release = func() { h.x.Wake(eventFor(name)) }
	case "timer":
		target = h.submit(&abProc{Name: name, Mode: "timer"}, SubmitOptions{})
		testwait.For(t, 10*time.Second, "waiting for timer", func() bool { return why(target) == "waiting for timer" })
		release = func() { mc.Advance(2 * time.Hour) }
	case "children":
		target = h.submit(&abProc{Name: name, Mode: "children"}, SubmitOptions{})
		testwait.For(t, 10*time.Second, "waiting for children", func() bool {
			w, _ := h.x.Why(target)
			return w.Reason == "waiting for children" && len(w.Children) == 1 && why(w.Children[0]) == "waiting for event"
		})
		release = func() { h.x.Wake(eventFor(name + "/child")) }
	case "lockwait":
		b := h.submit(&lkProc{Name: blocker, Gate: blocker, Hold: true,
			LockSpec: scheduler.TableLocks("default", name, scheduler.Exclusive)}, SubmitOptions{})
		testwait.For(t, 10*time.Second, "blocker running", func() bool { return why(b) == "running" })
		target = h.submit(&abProc{Name: name, Mode: "locked", Lock: name}, SubmitOptions{})
		testwait.For(t, 10*time.Second, "waiting for lock", func() bool { return why(target) == "waiting for lock" })
		release = func() { openGate(blocker) }
	case "rollingback":
		// Failed, its first rollback attempt failed, and its retry is
		// queued behind a blocker on the only worker.
		target = h.submit(&abProc{Name: name, Mode: "fail"}, SubmitOptions{})
		testwait.For(t, 10*time.Second, "first rollback attempt failed", func() bool {
			c, ok := abRollbackFailures.Load(name)
			return ok && c.(*atomic.Int32).Load() == 1
		})
		b := h.submit(&lkProc{Name: blocker, Gate: blocker}, SubmitOptions{})
		testwait.For(t, 10*time.Second, "blocker running", func() bool { return why(b) == "running" })
		testwait.For(t, 10*time.Second, "retry timer armed", func() bool { return mc.Pending() == basePending+1 })
		mc.Advance(2 * time.Minute)
		if !h.x.Scheduler().Queued(target) || why(target) != "rolling back" {
			t.Fatalf("target %q queued=%v, want rolling back and queued", why(target), h.x.Scheduler().Queued(target))
		}
		release = func() { openGate(blocker) }
	case "finished":
		target = h.submit(&abProc{Name: name, Mode: "plain"}, SubmitOptions{})
		h.wait(target)
		release = func() {}
	}

	err := runBounded(t, tc.op, func() error {
		switch tc.op {
		case "abort":
			return h.x.Abort(target)
		case "pause":
			return h.x.Pause(target)
		case "bypass":
			return h.x.Bypass(target, BypassOptions{})
		case "bypass-recursive":
			return h.x.Bypass(target, BypassOptions{Recursive: true})
		case "bypass-force":
			return h.x.Bypass(target, BypassOptions{Force: true})
		case "ack":
			return h.x.Ack(target)
		}
		panic(tc.op)
	})
	if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
		t.Fatalf("%s: error %v, want %v", tc.op, err, tc.wantErr)
	}
	if tc.op == "bypass-force" {
		// The repairer asked to finish it without the lock: it must not
		// wait for the holder.
		if info := h.wait(target); info.State != Success {
			t.Fatalf("forced bypass of a lock waiter ended %s", info.State)
		}
	}
	release()
	if tc.state == "suspend-after" {
		// Its step suspends on an event nobody wakes: an abort or bypass
		// that came during the step must still reach it. It shows WAITING
		// while its suspension is written, and is woken once it is: so it
		// must end without the event, not merely be seen awake at once.
		if (tc.op == "abort" || strings.HasPrefix(tc.op, "bypass")) && err == nil {
			testwait.For(t, 10*time.Second, tc.op+" during the step to reach it (not left asleep on its event)", func() bool {
				i, _ := h.x.Get(target)
				return i.State.Terminal()
			})
		} else {
			testwait.For(t, 10*time.Second, "suspended or finished", func() bool {
				i, _ := h.x.Get(target)
				return i.State.Terminal() || i.State == Waiting
			})
			if i, _ := h.x.Get(target); i.State == Waiting {
				h.x.Wake(eventFor(name))
			}
		}
	}
	if tc.op == "pause" && err == nil {
		testwait.For(t, 10*time.Second, "parked or finished", func() bool {
			i, _ := h.x.Get(target)
			return i.State.Terminal() || why(target) == "paused" && i.State == Runnable
		})
		// Let the worker(s) go round once more: a paused procedure stays put.
		h.wait(h.submit(&noopProc{}, SubmitOptions{}))
		if i, _ := h.x.Get(target); !i.State.Terminal() {
			if why(target) != "paused" || d.count("do", name+"/1") != 0 {
				t.Fatalf("paused procedure moved on: %q, step 1 ran %d times", why(target), d.count("do", name+"/1"))
			}
			if err := h.x.Resume(target); err != nil {
				t.Fatal(err)
			}
		}
	}
	info := h.wait(target)
	if info.State != tc.want {
		t.Fatalf("ended %s (%q), want %s", info.State, info.Error, tc.want)
	}
	fx := d.effectsUnder(name + "/")
	switch {
	case strings.HasPrefix(tc.op, "bypass") && tc.state == "rollingback" && err == nil:
		// A bypassed procedure's steps are never rolled back.
		if !slices.Contains(fx, name+"/0") {
			t.Fatalf("bypassed steps were rolled back: %v", fx)
		}
	case info.State == RolledBack:
		if len(fx) != 0 {
			t.Fatalf("rolled back, effects left: %v", fx)
		}
	case strings.HasPrefix(tc.op, "bypass") && err == nil:
		if d.has(name + "/1") {
			t.Fatalf("bypassed procedure ran its last step: %v", fx)
		}
		if (tc.state == "queued" || tc.state == "lockwait") && d.has(name+"/0") {
			t.Fatalf("bypassed procedure ran its first step: %v", fx)
		}
	default:
		if !d.has(name+"/0") || !d.has(name+"/1") {
			t.Fatalf("finished without its effects: %v", fx)
		}
	}
	if tc.op == "ack" && tc.wantErr != nil {
		if err := h.x.Ack(target); err != nil {
			t.Fatalf("ack once finished: %v", err)
		}
	}
}

// TestAckOfChild: only roots have results to acknowledge.
func TestAckOfChild(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) { c.Registry = lifecycleRegistry(t) })
	name := uniq("ack")
	root := h.submit(&abProc{Name: name, Mode: "children"}, SubmitOptions{})
	var child uint64
	testwait.For(t, 10*time.Second, "child waiting", func() bool {
		w, _ := h.x.Why(root)
		if len(w.Children) == 1 {
			child = w.Children[0]
		}
		return child != 0
	})
	if err := h.x.Ack(child); !errors.Is(err, ErrNotTerminal) {
		t.Fatalf("ack of a child: %v", err)
	}
	h.x.Wake(eventFor(name + "/child"))
	h.wait(root)
}

// TestRollbackRetriedWithBackoff: a rollback step that fails twice is
// retried after the backoff, doubling (plus at most 10% jitter), and the
// effects are undone once. The executor runs on clock.Real in a synctest
// bubble, where that clock is fake and steps take no time, so the moment
// of each attempt is exact: no retry comes a nanosecond early.
func TestRollbackRetriedWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDomain()
		h := startExecutor(t, store.NewMemStore(), d, func(c *Config) {
			c.Registry, c.Workers = lifecycleRegistry(t), 2
			c.RollbackBackoff, c.RollbackBackoffMax = time.Minute, 10*time.Minute
			c.ResultTTL, c.EvictInterval = 24*time.Hour, 24*time.Hour
		})
		name := uniq("flaky")
		id := h.submit(&rbFlakyProc{Name: name, Steps: 4, FailAt: 3, FlakyAt: 1, FlakyTimes: 2}, SubmitOptions{})
		// h.wait's deadline would be reached first on this clock; a hang
		// fails the bubble as a deadlock instead.
		info, err := h.x.Wait(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		at := rbTimes(name + "/1").times()
		if len(at) != 3 {
			t.Fatalf("%d rollback attempts of step 1, want 3", len(at))
		}
		for i, wait := range []time.Duration{time.Minute, 2 * time.Minute} {
			if gap := at[i+1].Sub(at[i]); gap < wait || gap > wait+wait/10 {
				t.Fatalf("retry %d came %v after the failure, want %v plus at most 10%%", i+1, gap, wait)
			}
		}
		if info.State != RolledBack || !errorsContain(info.Error, "boom") {
			t.Fatalf("state %s error %q", info.State, info.Error)
		}
		if fx := d.effectsUnder(name + "/"); len(fx) != 0 {
			t.Fatalf("effects left: %v", fx)
		}
		for k := 0; k < 4; k++ {
			key := fmt.Sprintf("%s/%d", name, k)
			if n := d.count("undo", key); n != 1 {
				t.Fatalf("%s undone %d times", key, n)
			}
			want := int32(1)
			if k == 1 {
				want = 3
			}
			if n := rbAttempt(key).Load(); n != want {
				t.Fatalf("%s rollback attempted %d times, want %d", key, n, want)
			}
		}
		if got, want := d.order("undo", name+"/"), []string{name + "/3", name + "/2", name + "/1", name + "/0"}; !slices.Equal(got, want) {
			t.Fatalf("undo order %v, want %v", got, want)
		}
	})
}

// TestFlakyRollbacksConcurrent: many trees whose rollbacks fail twice, on
// the real clock with a 1 ms backoff and several workers, so retries race
// with the end of the failed attempt. Every tree must finish.
func TestFlakyRollbacksConcurrent(t *testing.T) {
	d := newDomain()
	h := startExecutor(t, store.NewMemStore(), d, func(c *Config) {
		c.Registry, c.Workers = lifecycleRegistry(t), 4
		c.RollbackBackoff, c.RollbackBackoffMax = 50*time.Microsecond, 200*time.Microsecond
	})
	prefix := uniq("cf")
	var ids []uint64
	for i := 0; i < 40; i++ {
		ids = append(ids, h.submit(&rbFlakyProc{Name: fmt.Sprintf("%s-%d", prefix, i), Steps: 3, FailAt: 2, FlakyAt: i % 3, FlakyTimes: 2}, SubmitOptions{}))
	}
	for _, id := range ids {
		if info := h.wait(id); info.State != RolledBack {
			t.Fatalf("%d ended %s", id, info.State)
		}
	}
	if fx := d.effectsUnder(prefix); len(fx) != 0 {
		t.Fatalf("effects left: %v", fx)
	}
}

// TestPauseResumeRace toggles Pause and Resume while a procedure steps; once
// resumed for good it must finish (a Resume that lands while the worker is
// parking it must not be lost).
func TestPauseResumeRace(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) { c.Registry = lifecycleRegistry(t) })
	for round := 0; round < 30; round++ {
		id := h.submit(newSteps(uniq("pr"), 40), SubmitOptions{})
		for i := 0; i < 40; i++ {
			_ = h.x.Pause(id)
			_ = h.x.Resume(id)
		}
		_ = h.x.Resume(id)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		info, err := h.x.Wait(ctx, id)
		cancel()
		if err != nil || info.State != Success {
			w, _ := h.x.Why(id)
			t.Fatalf("round %d: %v, state %s, why %q paused=%v", round, err, info.State, w.Reason, w.Paused)
		}
	}
}

// TestStackGapThenNewStepNoDuplicate: a loaded tree with a gap in its stack
// positions (a step whose write was lost) runs a new step, and is restarted
// while another member's image still carries its old position: the new step
// must not reuse that position, or the next load finds the tree corrupt.
func TestStackGapThenNewStepNoDuplicate(t *testing.T) {
	mem := store.NewMemStore()
	put := func(r record) {
		if err := mem.Update(store.Proc{ID: r.id, Data: r.marshal()}); err != nil {
			t.Fatal(err)
		}
	}
	js := func(p *stepsProc) []byte { b, _ := marshalState(p); return b }
	root := newSteps("G", 2)
	root.SpawnAt, root.Children, root.ChildSteps, root.Next = 0, 2, 2, 1
	c0 := newSteps("G/c0", 2)
	c0.Next = 1
	c1 := newSteps("G/c1", 2)
	// Position 1 (c1's first step) was lost in a crash: c1 runs it again.
	put(record{id: 1, root: 1, typeName: "steps", typeVersion: 1, state: Waiting, stack: []int32{0}, data: js(root)})
	put(record{id: 2, parent: 1, root: 1, typeName: "steps", typeVersion: 1, state: Runnable, stack: []int32{2}, paused: true, data: js(c0)})
	put(record{id: 3, parent: 1, root: 1, typeName: "steps", typeVersion: 1, state: Runnable, data: js(c1)})
	d := newDomain()
	h := startExecutor(t, mem, d, nil)
	if p := h.x.Problems(); len(p) > 0 {
		t.Fatalf("a gap was reported: %+v", p)
	}
	testwait.For(t, 10*time.Second, "c1 finished", func() bool { i, _ := h.x.Get(3); return i.State == Success })
	if err := h.x.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	h = startExecutor(t, mem, d, nil)
	if p := h.x.Problems(); len(p) > 0 {
		t.Fatalf("after restart: %+v", p)
	}
	if err := h.x.Resume(2); err != nil {
		t.Fatal(err)
	}
	if info := h.wait(1); info.State != Success {
		t.Fatalf("root ended %s", info.State)
	}
}

// TestAbortParentThenLateChildren: Abort of a running parent that then
// spawns children reaches those children: they are aborted before their
// first step (which would block on its gate for ever) and the tree rolls
// back.
func TestAbortParentThenLateChildren(t *testing.T) {
	d := newDomain()
	h := startExecutor(t, store.NewMemStore(), d, func(c *Config) { c.Registry = lifecycleRegistry(t) })
	gate := uniq("late")
	child := &lkProc{Name: gate + "/child", Gate: gate + "/child"}
	p := &lkProc{Name: gate, Gate: gate, Child: child}
	id := h.submit(p, SubmitOptions{})
	testwait.For(t, 10*time.Second, "parent running", func() bool { w, _ := h.x.Why(id); return w.Reason == "running" })
	if err := h.x.Abort(id); err != nil {
		t.Fatal(err)
	}
	openGate(gate)
	if info := h.wait(id); info.State != RolledBack {
		t.Fatalf("aborted parent ended %s", info.State)
	}
	if d.has("enter:" + child.Name) {
		t.Fatal("a child spawned after the abort ran a step")
	}
}
