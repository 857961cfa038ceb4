package procedure

import (
	"testing"

	"github.com/baton-dev/baton/store"
)

// A caller that answers "waiting" to its own client (the domain's
// AcquireLock) learns of the parking from the listener, at the moment it
// happens, instead of polling Why.
func TestLockWaitListenerHearsParking(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	parked := make(chan uint64, 4)
	h.x.AddLockWaitListener(func(id uint64) { parked <- id })
	gate := make(chan struct{})
	running := make(chan struct{}, 1)
	funcs.Store("lockwait", func(ctx *Context) (Step, error) {
		if ctx.ID() == 1 {
			running <- struct{}{}
			<-gate
		}
		return Done(), nil
	})
	first := h.submit(&lockedProc{funcProc{ID: "lockwait"}}, SubmitOptions{})
	<-running
	second := h.submit(&lockedProc{funcProc{ID: "lockwait"}}, SubmitOptions{})
	if id := <-parked; id != second {
		t.Fatalf("listener heard procedure %d parked, want %d", id, second)
	}
	if w, err := h.x.Why(second); err != nil || w.Reason != "waiting for lock" {
		t.Fatalf("after the listener fired, Why(%d) = %+v, %v; want waiting for lock", second, w, err)
	}
	close(gate)
	h.wait(first)
	h.wait(second)
	select {
	case id := <-parked:
		t.Fatalf("listener heard procedure %d parked with no conflict left", id)
	default:
	}
}
