package procedure

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// reviewHookStore is a MemStore whose writes of one child can be held, to
// place them around its tree's end as a slow worker would.
type reviewHookStore struct {
	*store.MemStore
	mu        sync.Mutex
	child     uint64
	updates   int
	done      int           // writes of the child the MemStore has taken
	firstIn   chan struct{} // closed when the child's first write arrives
	firstGo   chan struct{} // closed to let it through
	deleted   chan struct{} // closed once a Delete named the child
	delOnce   sync.Once
	firstOnce sync.Once
}

func (s *reviewHookStore) Insert(p store.Proc, kids []store.Proc) error {
	s.mu.Lock()
	if len(kids) == 1 && s.child == 0 {
		s.child = kids[0].ID
	}
	s.mu.Unlock()
	return s.MemStore.Insert(p, kids)
}

func (s *reviewHookStore) Update(p store.Proc) error {
	s.mu.Lock()
	n := 0
	if p.ID == s.child {
		s.updates++
		n = s.updates
	}
	s.mu.Unlock()
	switch {
	case n == 1:
		s.firstOnce.Do(func() { close(s.firstIn) })
		<-s.firstGo
	case n == 2:
		// A worker slow to make its next write: it reaches the store
		// after the tree's end, if the tree can end meanwhile.
		select {
		case <-s.deleted:
		case <-time.After(5 * time.Second):
		}
	}
	return s.MemStore.Update(p)
}

func (s *reviewHookStore) Delete(ids []uint64) error {
	err := s.MemStore.Delete(ids)
	s.mu.Lock()
	c := s.child
	s.mu.Unlock()
	for _, id := range ids {
		if id == c && c != 0 {
			s.delOnce.Do(func() { close(s.deleted) })
		}
	}
	return err
}

// TestResumeDuringChildEndLeavesNoRecord: 2450c84 keeps persistIdle
// from writing a child that has ended, since that write could land after
// the tree's end deleted the child's record and bring it back. The same
// write is still made through the dirty path: an API change (here Resume
// of a child paused during its last step) that lands while the worker
// writes the child's end sets dirty, and the worker's writeDirtyLocked
// writes the ended child again, after its parent may have finished the
// tree and deleted it.
func TestResumeDuringChildEndLeavesNoRecord(t *testing.T) {
	st := &reviewHookStore{MemStore: store.NewMemStore(), firstIn: make(chan struct{}),
		firstGo: make(chan struct{}), deleted: make(chan struct{})}
	h := startExecutor(t, st, newDomain(), nil)

	inStep, gate := make(chan struct{}), make(chan struct{})
	funcs.Store("rv-dirty-child", func(*Context) (Step, error) {
		close(inStep)
		<-gate
		return Done(), nil
	})
	spawned := false
	funcs.Store("rv-dirty-root", func(*Context) (Step, error) {
		if !spawned {
			spawned = true
			return Spawn(&funcProc{ID: "rv-dirty-child"}), nil
		}
		// The tree ends once the child's worker has let go of it or has
		// its next write under way, whichever it does.
		testwait.Until(5*time.Second, func() bool {
			st.mu.Lock()
			cid, n := st.child, st.updates
			st.mu.Unlock()
			h.x.mu.Lock()
			e := h.x.procs[cid]
			held := e != nil && e.running
			h.x.unlock()
			return n >= 2 || !held
		})
		return Done(), nil
	})
	t.Cleanup(func() { funcs.Delete("rv-dirty-child"); funcs.Delete("rv-dirty-root") })

	rid := h.submit(&funcProc{ID: "rv-dirty-root"}, SubmitOptions{})
	<-inStep
	st.mu.Lock()
	cid := st.child
	st.mu.Unlock()
	if err := h.x.Pause(cid); err != nil {
		t.Fatalf("pause child %d: %v", cid, err)
	}
	close(gate)
	<-st.firstIn // the child's SUCCESS is being written
	if err := h.x.Resume(cid); err != nil {
		t.Fatalf("resume child %d: %v", cid, err)
	}
	close(st.firstGo)
	if info := h.wait(rid); info.State != Success {
		t.Fatalf("root %d: %s", rid, info.State)
	}
	// Every write the executor makes is over once it stopped.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.x.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, found := st.Proc(cid); found {
		t.Fatalf("child %d's record is in the store after its root %d finished and deleted it: written back by the dirty write of its end", cid, rid)
	}
}
