package procedure

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// storedData is procedure id's persisted record in st, copied out of the
// load.
func storedData(t testing.TB, st store.Store, id uint64) (data []byte, found bool) {
	t.Helper()
	if _, err := st.Load(func(p store.Proc) error {
		if p.ID == id {
			data, found = append([]byte(nil), p.Data...), true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return data, found
}

// storedRecord reads procedure id's persisted record back from st.
func storedRecord(t testing.TB, st store.Store, id uint64) (record, bool) {
	t.Helper()
	var out record
	data, found := storedData(t, st, id)
	if found {
		if err := out.unmarshal(data); err != nil {
			t.Fatal(err)
		}
	}
	return out, found
}

// TestFinishedChildsLockIsNotRestoredOnLoad: a tree whose finished child
// was persisted still flagged as holding its lock (as older binaries wrote
// it) is loaded; the sibling that needs that lock must get it and the tree
// must finish, instead of the finished child holding the lock until its
// root ends.
func TestFinishedChildsLockIsNotRestoredOnLoad(t *testing.T) {
	mem := store.NewMemStore()
	t1 := scheduler.TableLocks("default", "t1", scheduler.Exclusive)
	put := func(r record, p Procedure) {
		t.Helper()
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		r.typeName, r.typeVersion, r.data = "lk", 1, data
		if err := mem.Update(store.Proc{ID: r.id, Data: r.marshal()}); err != nil {
			t.Fatal(err)
		}
	}
	// The root spawned both children (stack 0); child 2 ran both its steps
	// (1, 2) and finished; child 3 has not run yet.
	put(record{id: 1, root: 1, state: Waiting, stack: []int32{0}}, &lkProc{Name: "R", Phase: 1})
	put(record{id: 2, parent: 1, root: 1, state: Success, stack: []int32{1, 2}, locked: true},
		&lkProc{Name: "C2", LockSpec: t1, Hold: true, Phase: 1})
	put(record{id: 3, parent: 1, root: 1, state: Runnable}, &lkProc{Name: "C3", LockSpec: t1, Hold: true})

	d := newDomain()
	h := startExecutor(t, mem, d, func(c *Config) { c.Registry = lifecycleRegistry(t) })
	if p := h.x.Problems(); len(p) > 0 {
		t.Fatalf("load problems: %+v", p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := h.x.Wait(ctx, 1)
	if err != nil {
		w, _ := h.x.Why(3)
		t.Fatalf("tree never finished: sibling 3 is %q on %v held by %v", w.Reason, w.Sched.Lock, w.Sched.Holders)
	}
	if info.State != Success || !d.has("exit:C3") {
		t.Fatalf("root ended %s (%s); sibling exited: %v", info.State, info.Error, d.has("exit:C3"))
	}
	// The finishing child's worker hands its release to the scheduler just
	// after letting go of the executor's mutex.
	testwait.For(t, 10*time.Second, "no lock left after the tree finished", func() bool { return len(h.x.Scheduler().Locks()) == 0 })
}

// TestFinishedChildIsPersistedWithoutItsLock: the write that records a
// held-for-life child's SUCCESS does not record its lock as held.
func TestFinishedChildIsPersistedWithoutItsLock(t *testing.T) {
	mem := store.NewMemStore()
	d := newDomain()
	h := startExecutor(t, mem, d, func(c *Config) { c.Registry = lifecycleRegistry(t) })
	type seen struct {
		rec   record
		found bool
	}
	got := make(chan seen, 1)
	var childID uint64
	var first sync.Once
	h.x.AddListener(func(i Info) {
		// Listeners run right after the write, before the lock is let go.
		// A listener reads the procedure as it is when it runs: the spawn's
		// own notice of the child may come after the child finished, and
		// tell SUCCESS again.
		if i.ParentID != 0 && i.State == Success {
			first.Do(func() {
				childID = i.ID
				r, ok := storedRecord(t, mem, i.ID)
				got <- seen{r, ok}
			})
		}
	})
	name := uniq("P")
	id := h.submit(&lkProc{Name: name, Child: &lkProc{Name: name + "/c",
		LockSpec: scheduler.TableLocks("default", name, scheduler.Exclusive), Hold: true}}, SubmitOptions{})
	if info := h.wait(id); info.State != Success {
		t.Fatalf("root ended %s (%s)", info.State, info.Error)
	}
	s := <-got
	if !s.found || s.rec.state != Success {
		t.Fatalf("child %d's record at its finish: found %v, state %s", childID, s.found, s.rec.state)
	}
	if s.rec.locked {
		t.Fatal("a finished child was persisted as holding its lock")
	}
}

// TestRolledBackChildLetsGoOfItsLock: a held-for-life child whose steps
// are all rolled back is finished: it lets go of its lock then, and is
// persisted without it, while the rest of its tree still rolls back.
func TestRolledBackChildLetsGoOfItsLock(t *testing.T) {
	mem := store.NewMemStore()
	h := startExecutor(t, mem, newDomain(), func(c *Config) { c.Registry = lifecycleRegistry(t) })
	type seen struct {
		rec   record
		held  []scheduler.Lock
		found bool
	}
	got := make(chan seen, 1)
	h.x.AddListener(func(i Info) {
		if i.ParentID != 0 && i.State == RolledBack {
			r, ok := storedRecord(t, mem, i.ID)
			got <- seen{r, h.x.Scheduler().Held(i.ID), ok}
		}
	})
	name := uniq("F")
	var steps int
	funcs.Store(name, func(ctx *Context) (Step, error) {
		steps++
		if steps == 1 {
			return Spawn(&lkProc{Name: name + "/c", LockSpec: scheduler.TableLocks("default", name, scheduler.Exclusive), Hold: true}), nil
		}
		return Step{}, errBoom
	})
	id := h.submit(&funcProc{ID: name}, SubmitOptions{})
	if info := h.wait(id); info.State != RolledBack {
		t.Fatalf("root ended %s (%s)", info.State, info.Error)
	}
	s := <-got
	if !s.found || s.rec.state != RolledBack {
		t.Fatalf("child's record when rolled back: found %v, state %s", s.found, s.rec.state)
	}
	if s.rec.locked || len(s.held) > 0 {
		t.Fatalf("rolled-back child: persisted locked=%v, still holds %v", s.rec.locked, s.held)
	}
}
