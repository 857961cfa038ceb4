package procedure

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/store"
)

// endGateStore is a MemStore that holds every write carrying a terminal
// state until released, so a test can look at the executor while a
// procedure's end is on its way to the store.
type endGateStore struct {
	*store.MemStore
	arrived chan uint64   // the id of each held write, as it arrives
	release chan struct{} // closed to let the held writes through
	once    sync.Once
}

func newEndGateStore() *endGateStore {
	return &endGateStore{MemStore: store.NewMemStore(), arrived: make(chan uint64, 16), release: make(chan struct{})}
}

func (s *endGateStore) hold(data []byte) {
	var r record
	if r.unmarshal(data) == nil && r.state.Terminal() {
		s.arrived <- r.id
		<-s.release
	}
}

func (s *endGateStore) Update(p store.Proc) error {
	s.hold(p.Data)
	return s.MemStore.Update(p)
}

func (s *endGateStore) UpdateAndMutate(p store.Proc, m []store.Mutation) error {
	s.hold(p.Data)
	return s.MemStore.UpdateAndMutate(p, m)
}

func (s *endGateStore) letGo() { s.once.Do(func() { close(s.release) }) }

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
			st := newEndGateStore()
			h := startExecutor(t, st, newDomain(), nil)
			t.Cleanup(st.letGo) // before the executor's Stop, which waits for the held write
			id := h.submit(c.proc(), SubmitOptions{})
			var held uint64
			select {
			case held = <-st.arrived:
			case <-time.After(20 * time.Second):
				t.Fatal("no terminal write reached the store")
			}
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
			st.letGo()
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
