package procedure

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// An Event that outlives an executor (a master that loses and regains
// leadership builds a new executor in the same process) must not carry the
// stopped executor's waiters into the new one: waking it through the new
// executor would wake whatever procedure has the stale waiter's id there,
// though it waits on another event, and drop the new scheduler's record of
// that other wait.
func TestStaleEventWaiterAcrossExecutors(t *testing.T) {
	st := store.NewMemStore()
	shared := scheduler.NewEvent("shared: outlives the first executor")
	other := scheduler.NewEvent("other: the second executor's wait")
	var runs atomic.Int32
	funcs.Store("stale-event", func(*Context) (Step, error) {
		switch runs.Add(1) {
		case 1: // the first executor
			return Suspend(OnEvent(shared)), nil
		case 2: // the second one, after its load runs the step again
			return Suspend(OnEvent(other)), nil
		}
		return Done(), nil
	})

	first := startExecutor(t, st, newDomain(), nil)
	id := first.submit(&funcProc{ID: "stale-event"}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "suspended on shared in the first executor", func() bool {
		w, _ := first.x.Why(id)
		return w.Reason == "waiting for event"
	})
	if err := first.x.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	second := startExecutor(t, st, newDomain(), nil)
	testwait.For(t, 10*time.Second, "suspended on other in the second executor", func() bool {
		w, _ := second.x.Why(id)
		return w.Reason == "waiting for event" && runs.Load() == 2
	})
	// The wake callbacks run before Wake returns: what it did is visible now.
	second.x.Wake(shared)
	if info, _ := second.x.Get(id); info.State != Waiting || runs.Load() != 2 {
		t.Fatalf("waking shared, which no procedure of this executor waits on, woke %d: state %s, %d runs", id, info.State, runs.Load())
	}
	if n := second.x.Scheduler().Sizes().EventWaiters; n != 1 {
		t.Fatalf("%d event waiters after waking shared, want 1 (%d on other)", n, id)
	}
	second.x.Wake(other)
	if info := second.wait(id); info.State != Success || runs.Load() != 3 {
		t.Fatalf("after waking other: state %s, %d runs", info.State, runs.Load())
	}
}
