package admin

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/store"
)

// stallingStore holds back the write of every finished procedure until
// release is closed, as a leader whose last entry has not committed yet.
type stallingStore struct {
	*store.MemStore
	release  chan struct{}
	once     sync.Once
	held     chan struct{} // closed when the first such write is held
	heldOnce sync.Once
}

func (s *stallingStore) stall(p store.Proc) {
	if info, err := procedure.DecodeInfo(p.Data); err == nil && info.State.Terminal() {
		s.heldOnce.Do(func() { close(s.held) })
		<-s.release
	}
}

func (s *stallingStore) Update(p store.Proc) error {
	s.stall(p)
	return s.MemStore.Update(p)
}

func (s *stallingStore) UpdateAndMutate(p store.Proc, muts []store.Mutation) error {
	s.stall(p)
	return s.MemStore.UpdateAndMutate(p, muts)
}

func (s *stallingStore) open() { s.once.Do(func() { close(s.release) }) }

// TestProcedureReadsAnswerWhatCommitted: the executor marks a procedure
// SUCCESS in memory before the write commits; reads (get, list, watch)
// answer what is committed (from the FSM's records here; the executor's
// own Get also shows an end only once written), so nobody is told SUCCESS of a completion a
// crash could still take back.
func TestProcedureReadsAnswerWhatCommitted(t *testing.T) {
	reg := procedure.NewRegistry()
	if err := diag.Register(reg); err != nil {
		t.Fatal(err)
	}
	st := &stallingStore{MemStore: store.NewMemStore(), release: make(chan struct{}), held: make(chan struct{})}
	defer st.open()
	x, err := procedure.New(procedure.Config{RecordFormat: version.Newest, Store: st, Registry: reg, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		st.open()
		x.Stop(context.Background())
	}()
	b := &fakeBackend{id: "m0", leaderID: "m0", procs: x, kv: map[string][]byte{}, mem: st.MemStore}
	s, err := New(b, Config{WatchInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := diag.New("sleep", map[string]string{"steps": "1", "delay": "1ms"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := x.Submit(p, procedure.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// SUCCESS in the executor's memory, its write held.
	select {
	case <-st.held:
	case <-ctx.Done():
		t.Fatal("the SUCCESS write never reached the store")
	}
	for _, c := range []adminpb.Consistency{adminpb.Consistency_LINEARIZABLE, adminpb.Consistency_STALE} {
		got, err := s.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: id, Consistency: c})
		if err != nil {
			t.Fatal(err)
		}
		if got.GetState() == "SUCCESS" {
			t.Fatalf("%v get answered SUCCESS before it committed", c)
		}
		list, err := s.ListProcedures(ctx, &adminpb.ListProceduresRequest{Consistency: c})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.GetProcedures()) != 1 || list.GetProcedures()[0].GetState() == "SUCCESS" {
			t.Fatalf("%v list answered %v before the SUCCESS committed", c, list.GetProcedures())
		}
	}
	st.open()
	testwait.ForNil(t, 10*time.Second, "SUCCESS from a get after the commit", func() error {
		got, err := s.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: id})
		if err != nil {
			return err
		}
		if got.GetState() != "SUCCESS" {
			return fmt.Errorf("state %s", got.GetState())
		}
		return nil
	})
}
