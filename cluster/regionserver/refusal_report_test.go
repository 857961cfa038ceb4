package regionserver

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/baton-dev/baton/proto/rspb"
)

// TestRefusalQueueIsBounded: a flood of refusals keeps at most
// refusalBuffer of them, the newest, counting those dropped; a heartbeat
// carries at most refusalBatch, and an answered one takes them off.
func TestRefusalQueueIsBounded(t *testing.T) {
	q := newRefusalQueue()
	const flood = refusalBuffer + 100
	for i := range flood {
		q.add(&rspb.RefusalReport{Method: fmt.Sprint(i)})
	}
	reps, dropped, mark := q.batch()
	if len(reps) != refusalBatch || dropped != 100 || reps[0].GetMethod() != "100" {
		t.Fatalf("batch: %d refusals from %q, %d dropped; want %d from the 101st, 100 dropped", len(reps), reps[0].GetMethod(), dropped, refusalBatch)
	}
	if n := testutil.ToFloat64(q.droppedTotal); n != 100 {
		t.Fatalf("dropped metric %v, want 100", n)
	}
	q.add(&rspb.RefusalReport{Method: "late"}) // drops one more, already batched
	q.sent(mark, dropped)
	reps, dropped, _ = q.batch()
	if len(q.queue) != refusalBuffer-refusalBatch+1 || dropped != 1 || reps[0].GetMethod() != fmt.Sprint(100+refusalBatch) {
		t.Fatalf("after a heartbeat: %d waiting from %q, %d dropped", len(q.queue), reps[0].GetMethod(), dropped)
	}
}
