package procedure

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// TestSuspensionIsShownOnlyOnceWritten: Get and List answered WAITING from
// the moment the worker suspended a procedure, before the write carrying
// the suspension reached the store. Had the leader died then, the next
// one would have found the procedure RUNNABLE and run the step again, and
// a reader told WAITING saw it go back. The procedure is shown RUNNABLE,
// as its record says, until the write commits.
func TestSuspensionIsShownOnlyOnceWritten(t *testing.T) {
	for _, waitState := range []State{WaitingTimeout, Waiting} {
		t.Run(waitState.String(), func(t *testing.T) {
			st := newWriteGateStore(func(i Info) bool { return i.State == waitState })
			h := startExecutor(t, st, newDomain(), nil)
			t.Cleanup(st.open) // before the executor's Stop, which waits for the held write
			var p Procedure
			if waitState == WaitingTimeout {
				s := newSteps("sleeper", 3)
				s.SuspendAt, s.Suspend = 0, time.Hour
				p = s
			} else {
				name := uniq(t.Name())
				var runs atomic.Int32
				funcs.Store(name, suspendOnce(eventFor(name), &runs))
				t.Cleanup(func() { funcs.Delete(name) })
				p = &funcProc{ID: name}
			}
			id := h.submit(p, SubmitOptions{})
			st.waitHeld(t)
			if info, err := h.x.Get(id); err != nil || info.State != Runnable {
				t.Fatalf("get %d while its suspension is being written: %v %v, want RUNNABLE", id, info.State, err)
			}
			for _, l := range h.x.List(Filter{States: []State{Waiting, WaitingTimeout}}) {
				if l.ID == id {
					t.Fatalf("List of waiting procedures has %d, whose suspension is not written", id)
				}
			}
			st.open()
			testwait.For(t, 20*time.Second, "the procedure shown "+waitState.String()+" once written", func() bool {
				info, err := h.x.Get(id)
				return err == nil && info.State == waitState
			})
		})
	}
}

// TestUnwrittenSuspensionIsShownAtOnce: a suspension that skips its write
// (SkipPersistence, no domain changes) has no write to wait for: it is
// shown WAITING at once and stays so.
func TestUnwrittenSuspensionIsShownAtOnce(t *testing.T) {
	st := newWriteGateStore(func(i Info) bool { return i.State == Waiting })
	h := startExecutor(t, st, newDomain(), nil)
	t.Cleanup(st.open)
	name := uniq(t.Name())
	ev := eventFor(name)
	var runs atomic.Int32
	funcs.Store(name, func(*Context) (Step, error) {
		if runs.Add(1) == 1 {
			return Suspend(OnEvent(ev), SkipPersistence()), nil
		}
		return Done(), nil
	})
	t.Cleanup(func() { funcs.Delete(name) })
	id := h.submit(&funcProc{ID: name}, SubmitOptions{})
	testwait.For(t, 20*time.Second, "the procedure shown WAITING", func() bool {
		info, err := h.x.Get(id)
		return err == nil && info.State == Waiting
	})
	select {
	case <-st.in:
		t.Fatal("a suspension that skips its write was written")
	default:
	}
	h.x.Wake(ev)
	if got := h.wait(id); got.State != Success {
		t.Fatalf("after the wake: %v, want SUCCESS", got.State)
	}
}

// TestSpawningParentIsShownWaitingOnceWritten: a spawn sets its parent
// WAITING, and the parent and its children are written in one Insert;
// until it commits the parent is shown RUNNABLE, as a restart would find
// it (running the spawning step again).
func TestSpawningParentIsShownWaitingOnceWritten(t *testing.T) {
	gs := &gatedInsertStore{MemStore: store.NewMemStore(), entered: make(chan struct{}), release: make(chan struct{})}
	h := startExecutor(t, gs, newDomain(), nil)
	t.Cleanup(gs.open) // before the executor's Stop, which waits for the held Insert
	name, kid := uniq(t.Name()), uniq(t.Name()+"/kid")
	var runs atomic.Int32
	funcs.Store(kid, func(*Context) (Step, error) { return Done(), nil })
	funcs.Store(name, func(*Context) (Step, error) {
		if runs.Add(1) == 1 {
			gs.armed.Store(true) // the spawn's Insert, not the root's own
			return Spawn(&funcProc{ID: kid}), nil
		}
		return Done(), nil
	})
	t.Cleanup(func() { funcs.Delete(name); funcs.Delete(kid) })
	id := h.submit(&funcProc{ID: name}, SubmitOptions{})
	gs.waitEntered(t)
	info, err := h.x.Get(id)
	gs.open()
	if err != nil || info.State != Runnable {
		t.Fatalf("get %d while its spawn's Insert is held: %v %v, want RUNNABLE", id, info.State, err)
	}
	if got := h.wait(id); got.State != Success {
		t.Fatalf("end: %v, want SUCCESS", got.State)
	}
}

// TestAbortDuringTheSuspensionsWrite: an Abort that comes while the
// suspension is being written wakes the procedure, which is shown RUNNABLE
// throughout and rolls back once the write is done.
func TestAbortDuringTheSuspensionsWrite(t *testing.T) {
	st := newWriteGateStore(func(i Info) bool { return i.State == Waiting })
	h := startExecutor(t, st, newDomain(), nil)
	t.Cleanup(st.open)
	name := uniq(t.Name())
	var runs atomic.Int32
	funcs.Store(name, suspendOnce(eventFor(name), &runs))
	t.Cleanup(func() { funcs.Delete(name) })
	id := h.submit(&funcProc{ID: name}, SubmitOptions{})
	st.waitHeld(t)
	if err := h.x.Abort(id); err != nil {
		t.Fatal(err)
	}
	if info, _ := h.x.Get(id); info.State != Runnable || !info.AbortRequested {
		t.Fatalf("after an abort during the write: %v (abort requested %v), want RUNNABLE", info.State, info.AbortRequested)
	}
	st.open()
	if got := h.wait(id); got.State != RolledBack {
		t.Fatalf("end: %v, want ROLLEDBACK", got.State)
	}
}
