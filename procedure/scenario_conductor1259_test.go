package procedure

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// TestScenarioCONDUCTOR1259MissedWakeUp replays Netflix Conductor #1259: a
// workflow waiting for a lock missed the notification of its release (it
// registered as a waiter after, or while, the release notified) and stayed
// parked until a sweeper's long poll found it minutes later. Nothing was
// lost for good, which is why it shipped: every waiter was eventually run,
// only minutes late, and under load many were. The requirement drawn from
// it: every wake-up within the dispatcher's delay (dispatch.DefaultDelay),
// never by the fallback timer.
//
// Baton's wake paths race the same way, and three places hold the line. A
// lock waiter parks in Scheduler.Acquire outside the executor's mutex, so
// a release can wake it before runProc has looked at the answer: runProc
// marks it waiting (setLockWaitLocked) before Acquire, so onSchedWake,
// serialised with runProc by x.mu, always finds a waiter to queue, and
// runProc, finding the wait already ended, queues it again itself (rerun).
// A step's locks are dropped in the scheduler before its worker lets go of
// the procedure (executor.go: releaseLocksBeforeUnclaimLocked), so no late
// Release of a finished turn meets the procedure's next turn. An event
// waiter parks in armWaitLocked after its step (and its write) ended, so
// the wake can come first: Scheduler.WaitEvent reports the event ready
// under the scheduler's mutex, and armWaitLocked runs the procedure again
// at once instead of parking it.
//
// This scenario found a real defect, now fixed: runProc queued a yielding
// procedure (and unclaimed it) in the critical section that queued its
// lock release, which x.unlock ran only after x.mu was let go. Another
// worker could take the procedure meanwhile: its Acquire was granted on
// the procedure's own old hold, and the late Release then dropped the
// locks under the running step (an exclusive lock held twice); or it
// parked the procedure behind another holder, and the late Release, which
// also takes an id out of any lock wait, removed it from the wait queue
// without a wake, parking it for good. The rollback's retry path had the
// same order and takes the same fix.
//
// The test contends thousands of times per lock and relays a thousand
// event wake-ups around a ring, each woken procedure often still in the
// step before its wait, and measures each wake from its release to the
// waiter's step. It runs in a synctest bubble: time moves only when every
// goroutine waits, so a wake-up that came from the release takes no time
// at all, and one that was missed takes at least the fallback that
// rescued it (an event waiter's suspension Timeout, ten minutes here,
// Conductor's long poll); a missed lock wake has no fallback in Baton and
// never comes, which the test's deadline reports. The bound is exact,
// whatever the load.
//
// Reintroducing the defects —
//
//   - the one found: in executor.go:runProc, releaseLocksLocked(e) for
//     releaseLocksBeforeUnclaimLocked(e) (and the same in
//     rollback.go:rollback), makes this test fail in most runs (25 of 30
//     with -count=30) with either of:
//
//     --- FAIL: TestScenarioCONDUCTOR1259MissedWakeUp/lock_release
//     exclusive locks shared: 6 steps, first lock t1: contender 4 ran
//     while 14 held it
//     procedure 1 not done after 1h0m0s: context deadline exceeded
//     (proc 1: not queued or waiting (running, done or unknown))
//
//   - in executor.go:runProc, marking the procedure lock-waiting only once
//     Acquire has refused it (so a release in between finds no waiter to
//     queue), makes it fail in half the runs (10 of 20) with the same
//     "not done after 1h0m0s" (the wake was dropped; nothing rescues it);
//
//   - in executor.go:armWaitLocked, parking on the event without the wake
//     when WaitEvent reports it ready already (a waiter registering after
//     the notification, #1259 itself), makes it fail every run with:
//
//     --- FAIL: TestScenarioCONDUCTOR1259MissedWakeUp/event_wake
//     a wake-up took 31m59.776869774s (ring 1 round 5, woken by the
//     fallback timer), want within dispatch.DefaultDelay 150ms (34
//     fallback timeouts)
func TestScenarioCONDUCTOR1259MissedWakeUp(t *testing.T) {
	bound := dispatch.DefaultDelay
	const (
		fallback = 10 * time.Minute // an event waiter's suspension timeout
		deadline = time.Hour        // lock waiters have no fallback
	)
	start := func(t *testing.T, rig *conductor1259Rig) *harness {
		h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) {
			c.Env = rig
			c.Workers = 16 // many more workers than locks: contenders park
			r := testRegistry(t)
			r.MustRegister("conductor1259/contend", 1, func() Procedure { return &conductor1259Contender{} })
			r.MustRegister("conductor1259/ring", 1, func() Procedure { return &conductor1259Ring{} })
			c.Registry = r
		})
		h.x.AddLockWaitListener(rig.parked)
		return h
	}
	// waitAll waits for every procedure; a wake-up measured late is
	// reported before a procedure that never finished, which is what a
	// missed lock wake leaves (it has no fallback).
	waitAll := func(t *testing.T, h *harness, rig *conductor1259Rig, ids []uint64, min int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		for _, id := range ids {
			if info, err := h.x.Wait(ctx, id); err != nil || info.State != Success {
				rig.check(t, bound, 0)
				why, _ := h.x.Why(id)
				if err == nil {
					err = fmt.Errorf("ended %s", info.State)
				}
				t.Fatalf("procedure %d not done after %v: %v (%s)", id, deadline, err, why.Sched)
			}
		}
		rig.check(t, bound, min)
	}

	t.Run("lock release", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const locks, perLock, rounds = 2, 12, 600
			rig := newConductor1259Rig()
			h := start(t, rig)
			var ids []uint64
			for i := range locks * perLock {
				ids = append(ids, h.submit(&conductor1259Contender{
					N: i, Lock: fmt.Sprintf("t%d", i%locks), Rounds: rounds}, SubmitOptions{}))
			}
			waitAll(t, h, rig, ids, locks*rounds)
		})
	})

	t.Run("event wake", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const size, rounds = 8, 150
			rig := newConductor1259Rig()
			h := start(t, rig)
			var ids []uint64
			for i := range size {
				ids = append(ids, h.submit(&conductor1259Ring{
					N: i, Size: size, Rounds: rounds, Fallback: fallback}, SubmitOptions{}))
			}
			waitAll(t, h, rig, ids, size*(rounds-1))
		})
	})
}

// conductor1259Rig measures wake-ups: from a release (a lock's holder
// ending its step, a Wake) to the waiter's next step.
type conductor1259Rig struct {
	mu       sync.Mutex
	released map[string]time.Time // lock -> when its holder's step ended
	holder   map[string]uint64    // lock -> the contender whose step runs
	overlaps []string             // steps that ran while another held their lock
	waiting  map[uint64]bool      // parked on a lock since its last step
	events   map[[2]int]*scheduler.Event
	wokenAt  map[[2]int]time.Time // (ring member, round) -> when woken
	wakes    int                  // wake-ups measured
	early    int                  // woken before it suspended
	timeouts int                  // fallback timers fired
	worst    time.Duration
	worstIs  string
}

func newConductor1259Rig() *conductor1259Rig {
	return &conductor1259Rig{released: map[string]time.Time{}, holder: map[string]uint64{}, waiting: map[uint64]bool{},
		events: map[[2]int]*scheduler.Event{}, wokenAt: map[[2]int]time.Time{}}
}

// parked is the executor's LockWaitListener.
func (r *conductor1259Rig) parked(id uint64) {
	r.mu.Lock()
	r.waiting[id] = true
	r.mu.Unlock()
}

func (r *conductor1259Rig) noteLocked(d time.Duration, what string) {
	r.wakes++
	if d > r.worst {
		r.worst, r.worstIs = d, what
	}
}

func (r *conductor1259Rig) eventLocked(k [2]int) *scheduler.Event {
	ev := r.events[k]
	if ev == nil {
		ev = scheduler.NewEvent(fmt.Sprintf("ring %d round %d", k[0], k[1]))
		r.events[k] = ev
	}
	return ev
}

// check asserts that at least min wake-ups were measured (the race was
// run, not skipped) and that each came within bound of its release.
func (r *conductor1259Rig) check(t *testing.T, bound time.Duration, min int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Logf("%d wake-ups (%d before the waiter suspended), worst %v", r.wakes, r.early, r.worst)
	if len(r.overlaps) > 0 {
		t.Errorf("exclusive locks shared: %d steps, first %s", len(r.overlaps), r.overlaps[0])
	}
	if r.worst > bound || r.timeouts > 0 {
		t.Fatalf("a wake-up took %v (%s), want within dispatch.DefaultDelay %v (%d fallback timeouts)",
			r.worst, r.worstIs, bound, r.timeouts)
	}
	if r.wakes < min {
		t.Fatalf("%d wake-ups measured, want at least %d: the contention the scenario needs did not happen", r.wakes, min)
	}
}

// conductor1259Contender takes an exclusive table lock for each of its
// Rounds steps and yields between them, so its lock is released and it
// queues for it again behind the others.
type conductor1259Contender struct {
	Base
	N, Rounds, Round int
	Lock             string
}

func (p *conductor1259Contender) QueueKey() scheduler.QueueKey {
	return scheduler.QueueKey{Kind: scheduler.KindTable, Name: fmt.Sprintf("conductor1259/%d", p.N)}
}

func (p *conductor1259Contender) Locks() []scheduler.Lock {
	return scheduler.TableLocks("default", p.Lock, scheduler.Exclusive)
}

func (p *conductor1259Contender) HoldLock() bool { return false }

func (p *conductor1259Contender) Execute(ctx *Context) (Step, error) {
	r := ctx.Env.(*conductor1259Rig)
	now := time.Now()
	r.mu.Lock()
	if h := r.holder[p.Lock]; h != 0 {
		r.overlaps = append(r.overlaps, fmt.Sprintf("lock %s: contender %d ran while %d held it", p.Lock, ctx.ID(), h))
	}
	r.holder[p.Lock] = ctx.ID()
	if r.waiting[ctx.ID()] {
		delete(r.waiting, ctx.ID())
		r.noteLocked(now.Sub(r.released[p.Lock]), fmt.Sprintf("lock %s, contender %d round %d", p.Lock, p.N, p.Round))
	}
	p.Round++
	r.mu.Unlock()
	// Holding the lock, let the other workers poll: they find it taken
	// and park, so that this step's release has waiters to wake.
	for range 20 {
		runtime.Gosched()
	}
	r.mu.Lock()
	r.holder[p.Lock] = 0
	// The lock is released right after this step returns (its write is
	// in memory): as a release time this errs late, so a measured delay
	// errs short of the true one by nothing a bubble can see.
	r.released[p.Lock] = time.Now()
	r.mu.Unlock()
	if p.Round >= p.Rounds {
		return Done(), nil
	}
	return Yield(), nil
}

func (p *conductor1259Contender) Rollback(*Context) error { return nil }

// conductor1259Ring is one of Size procedures in a ring: its step in round
// r wakes the next member's wait for round r+1, then suspends until the
// member before it wakes its own (or until Fallback, the long poll).
type conductor1259Ring struct {
	Base
	N, Size, Rounds, Round int
	Fallback               time.Duration
	TimedOut               bool
}

func (p *conductor1259Ring) QueueKey() scheduler.QueueKey {
	return scheduler.QueueKey{Kind: scheduler.KindTable, Name: fmt.Sprintf("conductor1259/%d", p.N)}
}

func (p *conductor1259Ring) OnTimeout(ctx *Context) error {
	r := ctx.Env.(*conductor1259Rig)
	r.mu.Lock()
	r.timeouts++
	r.mu.Unlock()
	p.TimedOut = true
	return nil
}

func (p *conductor1259Ring) Execute(ctx *Context) (Step, error) {
	r := ctx.Env.(*conductor1259Rig)
	now := time.Now()
	r.mu.Lock()
	if p.Round > 0 {
		what := fmt.Sprintf("ring %d round %d", p.N, p.Round)
		if p.TimedOut {
			what += ", woken by the fallback timer"
		}
		woken, ok := r.wokenAt[[2]int{p.N, p.Round}]
		if !ok {
			woken = now.Add(-p.Fallback) // ran without its wake: only the timer can have run it
		}
		r.noteLocked(now.Sub(woken), what)
	}
	p.TimedOut = false
	var wake *scheduler.Event
	if next := [2]int{(p.N + 1) % p.Size, p.Round + 1}; next[1] < p.Rounds {
		wake = r.eventLocked(next)
		r.wokenAt[next] = time.Now()
	}
	p.Round++
	var wait *scheduler.Event
	if p.Round < p.Rounds {
		wait = r.eventLocked([2]int{p.N, p.Round})
	}
	r.mu.Unlock()
	if wake != nil {
		ctx.Executor().Wake(wake)
	}
	if wait == nil {
		return Done(), nil
	}
	if wait.Ready() {
		// Woken before it waits: the wake comes first, as in #1259.
		r.mu.Lock()
		r.early++
		r.mu.Unlock()
	}
	return Suspend(OnEvent(wait), Timeout(p.Fallback)), nil
}

func (p *conductor1259Ring) Rollback(*Context) error { return nil }
