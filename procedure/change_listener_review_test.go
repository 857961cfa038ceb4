package procedure

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// TestChangeListenerAfterListener: each transition a Listener hears
// a ChangeListener hears after it, as the same id, parent, root, type and
// state, over a pause, a resume, a bypass, an abort, a rollback of a
// spawned tree, a success and an Ack; and a ChangeListener registered
// alone (no Listener, so no Info built) hears as many.
func TestChangeListenerAfterListener(t *testing.T) {
	for _, withListener := range []bool{true, false} {
		t.Run(fmt.Sprintf("listener=%v", withListener), func(t *testing.T) {
			h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
			var mu sync.Mutex
			var unmatched, heard []Change
			var bad []string
			if withListener {
				h.x.AddListener(func(i Info) {
					mu.Lock()
					defer mu.Unlock()
					unmatched = append(unmatched, Change{ID: i.ID, ParentID: i.ParentID, RootID: i.RootID, Type: i.Type, State: i.State})
				})
			}
			h.x.AddChangeListener(func(c Change) {
				mu.Lock()
				defer mu.Unlock()
				heard = append(heard, c)
				if !withListener {
					return
				}
				i := slices.Index(unmatched, c)
				if i < 0 {
					bad = append(bad, fmt.Sprintf("%+v heard with no Listener's hearing of it before", c))
					return
				}
				unmatched = slices.Delete(unmatched, i, i+1)
			})
			heardState := func(id uint64, s State) func() bool {
				return func() bool {
					mu.Lock()
					defer mu.Unlock()
					return slices.ContainsFunc(heard, func(c Change) bool { return c.ID == id && c.State == s })
				}
			}

			gated := func() uint64 {
				p := newSteps(uniq("rvG"), 3)
				p.HoldAt, p.Gate = 1, newGate("rv")
				id := h.submit(p, SubmitOptions{})
				testwait.For(t, 10*time.Second, "the gated procedure to wait", heardState(id, Waiting))
				return id
			}
			paused := gated()
			if err := h.x.Pause(paused); err != nil {
				t.Fatal(err)
			}
			if err := h.x.Resume(paused); err != nil {
				t.Fatal(err)
			}
			if err := h.x.Bypass(paused, BypassOptions{}); err != nil {
				t.Fatal(err)
			}
			aborted := gated()
			if err := h.x.Abort(aborted); err != nil {
				t.Fatal(err)
			}
			failing := newSteps(uniq("rvF"), 3)
			failing.SpawnAt, failing.Children, failing.ChildSteps, failing.ChildFailAt = 1, 3, 2, 1
			rolled := h.submit(failing, SubmitOptions{})
			ok := h.submit(newSteps(uniq("rvOK"), 2), SubmitOptions{})
			for _, id := range []uint64{rolled, ok} {
				h.wait(id)
			}
			if err := h.x.Ack(ok); err != nil {
				t.Fatal(err)
			}
			for _, id := range []uint64{paused, aborted} {
				testwait.For(t, 10*time.Second, fmt.Sprintf("procedure %d to end", id), func() bool {
					info, err := h.x.Get(id)
					return err == nil && info.State.Terminal()
				})
			}
			testwait.For(t, 10*time.Second, "every hearing", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(unmatched) == 0 && slices.ContainsFunc(heard, func(c Change) bool { return c.ID == rolled && c.State == RolledBack }) &&
					slices.ContainsFunc(heard, func(c Change) bool { return c.ID == aborted && c.State.Terminal() })
			})
			mu.Lock()
			defer mu.Unlock()
			if len(bad) > 0 {
				t.Fatalf("%d mismatches, first %s", len(bad), bad[0])
			}
			acks := 0
			for _, c := range heard {
				if c.ID == ok && c.State == Success {
					acks++
				}
				if c.RootID == 0 || c.Type == "" {
					t.Errorf("change without its root or type: %+v", c)
				}
			}
			t.Logf("%d changes heard: paused/bypassed %v, aborted %v", len(heard), statesOf(heard, paused), statesOf(heard, aborted))
			if acks != 2 {
				t.Errorf("heard ok's success %d times, want its end and its Ack", acks)
			}
		})
	}
}

func statesOf(cs []Change, id uint64) []State {
	var out []State
	for _, c := range cs {
		if c.ID == id {
			out = append(out, c.State)
		}
	}
	return out
}
