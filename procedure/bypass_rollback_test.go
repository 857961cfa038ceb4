package procedure

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// TestBypassOfAMemberBeingRolledBack: a Bypass of the member whose step
// the rollback is undoing sets its flag while the rollback's worker holds
// it. The worker decides whether to undo the step from that flag, which it
// read without the executor's lock: the race detector caught the read
// against Bypass's write once in CI (TestLiveCountsFollowTransitions).
// Here the Bypass comes after the worker claimed the member for the
// rollback and before it lets go of it (its rollback waits for the test),
// with nothing in between that orders the two, so -race flags the read on
// every run if it is made without the lock.
func TestBypassOfAMemberBeingRolledBack(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), nil)
	rootName, childName := uniq("bypass-rb-root"), uniq("bypass-rb-child")
	var childRuns atomic.Int32
	funcs.Store(childName, func(*Context) (Step, error) {
		if childRuns.Add(1) == 1 {
			return More(), nil // a step on the rollback stack
		}
		return Step{}, errors.New("child fails") // the tree rolls back
	})
	funcs.Store(rootName, func(*Context) (Step, error) {
		return Spawn(&funcProc{ID: childName}), nil
	})
	gate := make(chan struct{})
	// Only the receive: a send here would order the worker's read of the
	// flag before the test's Bypass, and hide the race.
	rollbacks.Store(childName, func(*Context) error { <-gate; return nil })
	t.Cleanup(func() {
		funcs.Delete(rootName)
		funcs.Delete(childName)
		rollbacks.Delete(childName)
	})
	defer func() {
		select {
		case <-gate:
		default:
			close(gate) // a failed wait below must not strand the worker
		}
	}()

	root := h.submit(&funcProc{ID: rootName}, SubmitOptions{})
	var child uint64
	// The rollback holds the child once its tree is rolling back: only
	// the rollback's loop claims a member then (its first pass claims the
	// root alone, the top of the tree's one unit).
	testwait.For(t, 10*time.Second, "the rollback holding the failed child", func() bool {
		h.x.mu.Lock()
		defer h.x.unlock()
		r := h.x.roots[root]
		if r == nil || !r.rolling {
			return false
		}
		for id, m := range r.members {
			if id != root && m.running {
				child = id
				return true
			}
		}
		return false
	})
	if err := h.x.Bypass(child, BypassOptions{}); err != nil {
		t.Fatalf("bypass of the child being rolled back: %v", err)
	}
	close(gate)

	// The step under way is undone; the bypass spares the child's earlier
	// one, and the tree finishes rolled back.
	if info := h.wait(root); info.State != RolledBack {
		t.Fatalf("root ended %s (%s), want %s", info.State, info.Error, RolledBack)
	}
}
