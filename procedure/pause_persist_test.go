package procedure

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// A Pause that lands while a step's write is in the store is written once
// the step is done: a restart (a failover) keeps the procedure paused.
func TestPauseDuringAStepWriteIsPersisted(t *testing.T) {
	st, d := store.NewMemStore(), newDomain()
	h := startExecutor(t, st, d, nil)
	for round := range 100 {
		name := fmt.Sprintf("p%d", round)
		id := h.submit(newSteps(name, 400), SubmitOptions{})
		// Under way: paused between (or during) its steps' writes.
		testwait.For(t, 5*time.Second, "a first step", func() bool { return d.has(name + "/1") })
		if err := h.x.Pause(id); errors.Is(err, ErrNotAllowed) {
			continue // finished first
		} else if err != nil {
			t.Fatal(err)
		}
		ok := testwait.Until(5*time.Second, func() bool {
			data, found := st.Proc(id)
			if !found {
				return false
			}
			info, err := DecodeInfo(data)
			return err == nil && (info.Paused || info.State.Terminal())
		})
		if !ok {
			mem, _ := h.x.Get(id)
			data, _ := st.Proc(id)
			rec, _ := DecodeInfo(data)
			t.Fatalf("round %d: procedure %d paused in memory (%v, %s) but its record says paused=%v (%s): a restart would run it",
				round, id, mem.Paused, mem.State, rec.Paused, rec.State)
		}
	}
}
