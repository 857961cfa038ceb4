package procedure

import (
	"cmp"
	"slices"
	"sync"
	"testing"

	"github.com/baton-dev/baton/store"
)

// TestChangeListenersHearWhatListenersHear: a ChangeListener hears every
// transition a Listener does, each as the same procedure, tree, type and
// state: a spawn, children forgotten as they succeed, a child that fails
// and the rollback of its tree, and the Ack of a finished root.
func TestChangeListenersHearWhatListenersHear(t *testing.T) {
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) { c.Registry = coverRegistry(t) })
	var mu sync.Mutex
	var fromInfo, changes []Change
	h.x.AddListener(func(i Info) {
		mu.Lock()
		defer mu.Unlock()
		fromInfo = append(fromInfo, Change{ID: i.ID, ParentID: i.ParentID, RootID: i.RootID, Type: i.Type, State: i.State})
	})
	h.x.AddChangeListener(func(c Change) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, c)
	})

	forgetting := h.submit(&cvParent{Name: uniq("CL"), Kids: 4, Steps: 2, FailKid: -1, GateKid: -1, Forget: true, Covers: true}, SubmitOptions{})
	if info := h.wait(forgetting); info.State != Success {
		t.Fatalf("forgetting parent: %v", info.State)
	}
	failing := newSteps(uniq("CLF"), 3)
	failing.SpawnAt, failing.Children, failing.ChildSteps, failing.ChildFailAt = 1, 3, 2, 1
	rolled := h.submit(failing, SubmitOptions{})
	if info := h.wait(rolled); info.State != RolledBack {
		t.Fatalf("failing tree: %v", info.State)
	}
	if err := h.x.Ack(forgetting); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	order := func(a, b Change) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.State, b.State), cmp.Compare(a.ParentID, b.ParentID))
	}
	slices.SortFunc(fromInfo, order)
	slices.SortFunc(changes, order)
	if !slices.Equal(fromInfo, changes) {
		t.Fatalf("change listener heard\n%+v\nlisteners heard\n%+v", changes, fromInfo)
	}
	// What the comparison covers: children that succeeded and were
	// forgotten, a rolled-back tree's members, and the Ack.
	// A child that ends before its spawner tells of its spawn is heard
	// SUCCESS twice (the spawner reads its state then): count children.
	forgottenKids := map[uint64]bool{}
	var rolledBack, acked int
	for _, c := range changes {
		switch {
		case c.RootID == forgetting && c.ParentID == forgetting && c.State == Success:
			forgottenKids[c.ID] = true
		case c.RootID == rolled && c.State == RolledBack:
			rolledBack++
		case c.ID == forgetting && c.State == Success:
			acked++
		}
	}
	if len(forgottenKids) != 4 || rolledBack == 0 || acked < 2 {
		t.Fatalf("heard %d forgotten children succeed (want 4), %d rollbacks, the forgetting root's success %d times (want its end and its Ack)",
			len(forgottenKids), rolledBack, acked)
	}
}
