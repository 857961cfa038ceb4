package domain

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/rspb"
)

// A batch's wait takes exactly its op's answer (same procedure,
// incarnation, region and kind), the first one only; the batch is done
// once every op sent has one, runs out on the domain's clock, and, once
// forgotten, leaves nothing behind for a late answer to find.
func TestBatchWaitsTakeOnlyTheirOwnAnswers(t *testing.T) {
	mc := clock.NewManual(time.Unix(0, 0))
	s := &services{d: &Domain{cfg: Config{Clock: mc}}, waits: map[uint64]*opWait{}, stopCh: make(chan struct{})}
	r1, r2 := ServerRef{"rs1", 1}, ServerRef{"rs1", 2}
	closeKind, openKind := rspb.OpKind_OP_KIND_CLOSE, rspb.OpKind_OP_KIND_OPEN
	answer := func(proc uint64, ref ServerRef, region string, kind rspb.OpKind, ok bool) {
		s.onResult(dispatch.Result{Target: dispatch.Target{ServerID: ref.ID, StartCode: ref.StartCode},
			Op: dispatch.Op{Kind: kind, Region: region, ProcID: proc}, OK: ok, Err: map[bool]error{false: errors.New("refused")}[ok]})
	}

	// An earlier single wait of the procedure is stale once it batches:
	// it must not take the batch's answers.
	s.arm(7, r1, "a", closeKind)
	b := s.newBatch(7, closeKind)
	if s.waits[7] != nil {
		t.Fatal("the procedure's single wait survived its batch")
	}
	b.arm(r1, "a")
	b.arm(r1, "b")

	answer(8, r1, "a", closeKind, true) // another procedure's
	answer(7, r2, "a", closeKind, true) // another incarnation's
	answer(7, r1, "a", openKind, true)  // another kind
	answer(7, r1, "c", closeKind, true) // a region not in the batch
	if res := b.result("a"); res != nil {
		t.Fatalf("region a took an answer not its own: %+v", res)
	}
	answer(7, r1, "a", closeKind, true)
	answer(7, r1, "a", closeKind, false) // a second answer: the first stands
	if res := b.result("a"); res == nil || !res.OK {
		t.Fatalf("region a's answer: %+v, want its first (ok)", res)
	}

	// b has no answer: the wait runs out on the domain's clock.
	errc := make(chan error, 1)
	go func() { errc <- b.wait(context.Background(), time.Second) }()
	testwait.For(t, 10*time.Second, "the wait's timer", func() bool { return mc.Pending() == 1 })
	select {
	case err := <-errc:
		t.Fatalf("the wait ended (%v) with region b unanswered and the clock still", err)
	default:
	}
	mc.Advance(time.Second)
	if err := <-errc; err == nil {
		t.Fatal("the wait ended without error with region b unanswered")
	}
	if b.result("b") != nil {
		t.Fatal("region b has an answer it never got")
	}

	// The retry sends b again; its answer completes the batch.
	b.arm(r1, "b")
	answer(7, r1, "b", closeKind, true)
	if err := b.wait(context.Background(), time.Second); err != nil {
		t.Fatalf("every op answered, the wait says %v", err)
	}
	b.forget()
	if len(s.batches) != 0 {
		t.Errorf("batches left after forget: %v", s.batches)
	}
	answer(7, r1, "a", closeKind, true) // late: nobody waits, nothing breaks
}
