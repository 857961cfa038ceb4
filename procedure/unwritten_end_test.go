package procedure

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/store"
)

// writeGateStore is a MemStore that holds the first record write (Update
// or UpdateAndMutate) whose decoded record matches hold, until release is
// closed: the write of an end, caught while it is on its way.
type writeGateStore struct {
	*store.MemStore
	hold    func(Info) bool
	in      chan struct{}
	release chan struct{}
	once    sync.Once
	held    Info
}

func newWriteGateStore(hold func(Info) bool) *writeGateStore {
	return &writeGateStore{MemStore: store.NewMemStore(), hold: hold,
		in: make(chan struct{}), release: make(chan struct{})}
}

func (s *writeGateStore) gate(p store.Proc) {
	info, err := DecodeInfo(p.Data)
	if err != nil || !s.hold(info) {
		return
	}
	first := false
	s.once.Do(func() { first = true; s.held = info; close(s.in) })
	if first {
		<-s.release
	}
}

func (s *writeGateStore) Update(p store.Proc) error {
	s.gate(p)
	return s.MemStore.Update(p)
}

func (s *writeGateStore) UpdateAndMutate(p store.Proc, muts []store.Mutation) error {
	s.gate(p)
	return s.MemStore.UpdateAndMutate(p, muts)
}

func (s *writeGateStore) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-s.in:
	case <-time.After(20 * time.Second):
		t.Fatal("the awaited write never came")
	}
}

func (s *writeGateStore) open() {
	select {
	case <-s.release:
	default:
		close(s.release)
	}
}

// TestEndIsShownOnlyOnceWritten: Get and List answered SUCCESS (and
// ROLLEDBACK) from the moment the worker set the state in memory, before
// the write that carries the end and its last step's effect reached the
// store. A caller that saw SUCCESS and then read what the step wrote
// found it not there yet (the HBASE-29386 scenario's "table after enable
// then disable is DISABLING" under load), and, had the write failed, a
// restart would have run the step again after SUCCESS was reported.
func TestEndIsShownOnlyOnceWritten(t *testing.T) {
	cases := []struct {
		name string
		proc func() Procedure
		want State
	}{
		{"root succeeds", func() Procedure { return newSteps("ok", 1) }, Success},
		{"child succeeds", func() Procedure {
			p := newSteps("parent", 2)
			p.SpawnAt, p.Children, p.ChildSteps = 0, 1, 1
			return p
		}, Success},
		{"root rolls back", func() Procedure {
			p := newSteps("fails", 2)
			p.FailAt = 1
			return p
		}, RolledBack},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newWriteGateStore(func(i Info) bool { return i.State.Terminal() })
			h := startExecutor(t, st, newDomain(), nil)
			t.Cleanup(st.open) // before the executor's Stop, which waits for the held write
			id := h.submit(c.proc(), SubmitOptions{})
			st.waitHeld(t)
			held := st.held.ID
			info, err := h.x.Get(held)
			if err != nil {
				t.Fatalf("get %d: %v", held, err)
			}
			if info.State.Terminal() || !info.Finished.IsZero() {
				t.Fatalf("procedure %d shown %v (finished %v) while its end is not written", held, info.State, info.Finished)
			}
			for _, l := range h.x.List(Filter{States: []State{Success, RolledBack}}) {
				if l.ID == held {
					t.Fatalf("List of ended procedures has %d, whose end is not written", held)
				}
			}
			st.open()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			got, err := h.x.Wait(ctx, id)
			if err != nil || got.State != c.want {
				t.Fatalf("wait %d: %v %v, want %v", id, got.State, err, c.want)
			}
			if info, _ := h.x.Get(held); !info.State.Terminal() {
				t.Fatalf("procedure %d shown %v once its end is written", held, info.State)
			}
		})
	}
}
