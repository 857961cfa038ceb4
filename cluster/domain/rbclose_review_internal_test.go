package domain

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/store"
)

func reviewServices() *services {
	return &services{d: &Domain{cfg: Config{Clock: clock.NewManual(time.Unix(0, 0))}}, waits: map[uint64]*opWait{},
		stopCh: make(chan struct{}), budget: newRegionBudget(0)}
}

func reviewAnswer(s *services, proc uint64, ref ServerRef, region string, kind rspb.OpKind) {
	s.onResult(dispatch.Result{Target: dispatch.Target{ServerID: ref.ID, StartCode: ref.StartCode},
		Op: dispatch.Op{Kind: kind, Region: region, ProcID: proc}, OK: true})
}

// What a create's failed rollback attempts saw closed is dropped when the
// create ends by any way, not only by its rollback step succeeding (a
// bypass of a create stuck rolling back ends it without that step): it
// would otherwise stay for the rest of the term. Other procedures' and a
// running create's memory stays.
func TestRollbackMemoryEndsWithTheCreate(t *testing.T) {
	s := reviewServices()
	ref := ServerRef{"rs1", 1}
	s.noteClosed(7, "a", ref)
	s.noteClosed(8, "b", ref)
	s.onTransition(procedure.Change{ID: 7, Type: TypeCreateTable, State: procedure.Runnable})
	s.onTransition(procedure.Change{ID: 8, Type: TypeTransitRegionState, State: procedure.Success})
	if !s.closedBefore(7, "a", ref) || !s.closedBefore(8, "b", ref) {
		t.Fatal("a running create's (or another type's) memory was dropped")
	}
	s.onTransition(procedure.Change{ID: 7, Type: TypeCreateTable, State: procedure.RolledBack})
	testwait.For(t, 10*time.Second, "the ended create's memory to be dropped", func() bool {
		return !s.closedBefore(7, "a", ref)
	})
	if !s.closedBefore(8, "b", ref) {
		t.Fatal("another procedure's memory was dropped")
	}
}

// A single wait and a batch of the same procedure live at once (not done
// by any step today: newBatch drops the single wait, and a step arms none
// while its batch lives): each takes only its own op's answers, the single
// wait first for the op it waits for, and forgetting the batch leaves the
// single wait alone.
func TestSingleWaitBesideBatch(t *testing.T) {
	s := reviewServices()
	// The single wait's answer wakes its event: an executor, never started.
	x, err := procedure.New(procedure.Config{RecordFormat: version.Newest, Store: store.NewMemStore(), Registry: procedure.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	s.x = x
	r1 := ServerRef{"rs1", 1}
	closeKind, openKind := rspb.OpKind_OP_KIND_CLOSE, rspb.OpKind_OP_KIND_OPEN
	b := s.newBatch(7, closeKind)
	b.arm(r1, "a")
	b.arm(r1, "b")
	single := s.arm(7, r1, "x", openKind)

	reviewAnswer(s, 7, r1, "a", closeKind)
	reviewAnswer(s, 7, r1, "x", openKind)
	if b.result("a") == nil {
		t.Fatal("the batch's answer was lost beside a single wait")
	}
	if single.res == nil || b.result("x") != nil {
		t.Fatal("the single wait's answer went astray")
	}
	reviewAnswer(s, 7, r1, "b", closeKind)
	if err := b.wait(context.Background(), time.Second); err != nil {
		t.Fatalf("every op answered, the batch's wait says %v", err)
	}
	b.forget()
	if s.waits[7] != single {
		t.Fatal("forgetting the batch dropped the single wait")
	}
}

// A late answer to a previous batch of the same procedure (its step gave
// up on DispatchTimeout) is taken by the retry's batch when it is for the
// same op on the same incarnation: it is a close that incarnation did,
// sent after anything sent it before (one call in flight per server, in
// order), so the region is closed there either way. One for an older
// incarnation of the server is not taken.
func TestLateAnswerOfPreviousBatch(t *testing.T) {
	s := reviewServices()
	old, cur := ServerRef{"rs1", 1}, ServerRef{"rs1", 2}
	closeKind := rspb.OpKind_OP_KIND_CLOSE
	b1 := s.newBatch(7, closeKind)
	b1.arm(old, "a")
	b1.forget()
	b2 := s.newBatch(7, closeKind)
	b2.arm(cur, "a")
	reviewAnswer(s, 7, old, "a", closeKind)
	if b2.result("a") != nil {
		t.Fatal("the retry's batch took an answer from an older incarnation")
	}
	reviewAnswer(s, 7, cur, "a", closeKind)
	if res := b2.result("a"); res == nil || !res.OK {
		t.Fatal("the retry's batch did not take the close's answer")
	}
	b2.forget()
}
