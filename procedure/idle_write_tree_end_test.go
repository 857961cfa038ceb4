package procedure

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// treeEndGateStore is a MemStore that holds the root's write of ROLLEDBACK
// until released, and then a member's write until its tree's end has
// deleted the member's record: the order a write issued by an API call
// (persistIdle) and finishRoot's delete may reach the store in, when the
// call's goroutine is slow between its claim and the store (encoding a
// large state, say).
type treeEndGateStore struct {
	*store.MemStore
	member atomic.Uint64

	rootHeld, rootRelease    chan struct{}
	memberHeld, memberDelete chan struct{}
	rootOnce, memberOnce     sync.Once
	deleteOnce               sync.Once
}

func newTreeEndGateStore() *treeEndGateStore {
	return &treeEndGateStore{MemStore: store.NewMemStore(),
		rootHeld: make(chan struct{}), rootRelease: make(chan struct{}),
		memberHeld: make(chan struct{}), memberDelete: make(chan struct{})}
}

func (s *treeEndGateStore) gate(p store.Proc) {
	info, err := DecodeInfo(p.Data)
	if err != nil {
		return
	}
	switch {
	case info.ParentID == 0 && info.State == RolledBack: // the store's only tree
		first := false
		s.rootOnce.Do(func() { first = true; close(s.rootHeld) })
		if first {
			<-s.rootRelease
		}
	case info.ID == s.member.Load():
		first := false
		s.memberOnce.Do(func() { first = true; close(s.memberHeld) })
		if first {
			select {
			case <-s.memberDelete:
			case <-time.After(20 * time.Second): // a fix that orders them otherwise
			}
		}
	}
}

func (s *treeEndGateStore) Update(p store.Proc) error {
	s.gate(p)
	return s.MemStore.Update(p)
}

func (s *treeEndGateStore) UpdateAndMutate(p store.Proc, muts []store.Mutation) error {
	s.gate(p)
	return s.MemStore.UpdateAndMutate(p, muts)
}

func (s *treeEndGateStore) Delete(ids []uint64) error {
	err := s.MemStore.Delete(ids)
	if m := s.member.Load(); m != 0 && slices.Contains(ids, m) {
		s.deleteOnce.Do(func() { close(s.memberDelete) })
	}
	return err
}

// TestAPIWriteDuringTreeEndLeavesNoRecord: a member that never ran (its
// sibling failed first) is not terminal when its rolled-back tree ends,
// so an API call's persistIdle writes it. One that claimed it just before
// finishRoot forgot it wrote its record after finishRoot's delete: a record
// of a tree that no longer exists, which the next load holds as an orphan
// once the root's result is evicted.
func TestAPIWriteDuringTreeEndLeavesNoRecord(t *testing.T) {
	for name, call := range map[string]func(x *Executor, id uint64) error{
		"pause":  (*Executor).Pause,
		"abort":  (*Executor).Abort,
		"bypass": func(x *Executor, id uint64) error { return x.Bypass(id, BypassOptions{}) },
	} {
		t.Run(name, func(t *testing.T) { testAPIWriteDuringTreeEnd(t, call) })
	}
}

func testAPIWriteDuringTreeEnd(t *testing.T, call func(x *Executor, id uint64) error) {
	st := newTreeEndGateStore()
	mc := clock.NewManual(time.Unix(1e6, 0))
	h := startExecutor(t, st, newDomain(), func(c *Config) {
		c.Workers = 1
		c.Clock = mc
	})
	defer close(st.rootRelease)
	var idleRuns atomic.Int32
	rootFn, failFn, idleFn := uniq("te-root"), uniq("te-fail"), uniq("te-idle")
	funcs.Store(rootFn, func(ctx *Context) (Step, error) {
		if len(ctx.Children()) == 0 {
			// One worker runs them in order: the failure comes first, and
			// the idle one's turn finds its tree failed.
			return Spawn(&funcProc{ID: failFn}, &funcProc{ID: idleFn}), nil
		}
		return Done(), nil
	})
	funcs.Store(failFn, func(*Context) (Step, error) { return Step{}, errors.New("boom") })
	funcs.Store(idleFn, func(*Context) (Step, error) { idleRuns.Add(1); return Done(), nil })
	// Ids are handed out in order: the root, then its children.
	id := h.submit(&funcProc{ID: rootFn}, SubmitOptions{})
	idle := id + 2
	st.member.Store(idle)

	select {
	case <-st.rootHeld:
	case <-time.After(20 * time.Second):
		t.Fatal("the root's ROLLEDBACK write never came")
	}
	if info, err := h.x.Get(idle); err != nil || info.State.Terminal() || idleRuns.Load() != 0 {
		t.Fatalf("member %d: %+v, %v, %d runs: want one that never ran", idle, info.State, err, idleRuns.Load())
	}
	called := make(chan error, 1)
	go func() { called <- call(h.x, idle) }()
	select {
	case <-st.memberHeld:
	case <-time.After(20 * time.Second):
		t.Fatal("the call never wrote the member")
	}
	st.rootRelease <- struct{}{}
	if info := h.wait(id); info.State != RolledBack {
		t.Fatalf("root ended %v", info.State)
	}
	if err := <-called; err != nil {
		t.Fatalf("call: %v", err)
	}
	if _, ok := st.Proc(idle); ok {
		t.Errorf("member %d's record is in the store after its tree ended and deleted it", idle)
	}
	// Once the root's result is evicted, the member's record names a tree
	// that is gone.
	mc.Advance(time.Hour) // past ResultTTL and EvictInterval
	h.x.EvictExpired()
	testwait.For(t, 10*time.Second, "the root's result evicted", func() bool { _, ok := st.Proc(id); return !ok })
	if err := h.x.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, p := range startExecutor(t, st, newDomain(), nil).x.Problems() {
		t.Errorf("the next load holds proc %d: %s", p.ID, p.Reason)
	}
}
