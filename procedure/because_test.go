package procedure

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// TestSuspendBecause: Why reports a suspension's Because as Note while the
// procedure waits, and forgets it once a later suspension gives none.
func TestSuspendBecause(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	first, second := scheduler.NewEvent("first"), scheduler.NewEvent("second")
	var runs atomic.Int32
	funcs.Store("because", func(ctx *Context) (Step, error) {
		switch runs.Add(1) {
		case 1:
			return Suspend(OnEvent(first), Because("no live region server; waiting")), nil
		case 2:
			return Suspend(OnEvent(second)), nil
		}
		return Done(), nil
	})
	id := h.submit(&funcProc{ID: "because"}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "the first suspension", func() bool {
		w, _ := h.x.Why(id)
		return w.Reason == "waiting for event" && w.Note == "no live region server; waiting"
	})
	h.x.Wake(first)
	testwait.For(t, 10*time.Second, "the second suspension, without a note", func() bool {
		w, _ := h.x.Why(id)
		return runs.Load() == 2 && w.Reason == "waiting for event" && w.Note == ""
	})
	h.x.Wake(second)
	if info := h.wait(id); info.State != Success {
		t.Fatalf("state %s", info.State)
	}
}
