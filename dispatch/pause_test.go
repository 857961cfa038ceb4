package dispatch

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A paused dispatcher sends nothing: not what is dispatched while paused
// (however many, however long it waits), nor the retry of a call that
// failed, nor what a call in flight when it paused would let go next; the
// call in flight itself is answered. Resume sends what is due at once, in
// dispatch order.
func TestPauseHoldsEverySend(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.RetryBase, c.MaxFailures = 100*time.Millisecond, 100 })
	a, b := target("a", 1), target("b", 1)
	inflight := h.dispatch(a, 33) // over MinBatch: sent at once
	c := h.nextCall()

	h.d.Pause("maintenance")
	h.d.Pause("maintenance") // pausing twice is harmless
	if !h.d.Paused() {
		t.Fatal("Paused() = false after Pause")
	}
	queued := h.dispatch(a, 40)
	other := h.dispatch(b, 2)
	h.answer(c, nil) // the call on the wire finishes
	if rs := h.collect(len(inflight)); !rs[0].OK {
		t.Fatalf("in-flight result %+v", rs[0])
	}
	h.clk.Advance(time.Hour) // far past every delay
	h.wantBatches(1)
	h.noResults()

	h.d.Resume("maintenance")
	if h.d.Paused() {
		t.Fatal("Paused() = true after Resume")
	}
	h.wantBatches(3)
	got := map[string][]string{}
	for range 2 {
		c := h.nextCall()
		got[c.req.GetServerId()] = regions(c.req)
		h.answer(c, nil)
	}
	if !slices.Equal(got["a"], opRegions(queued)) || !slices.Equal(got["b"], opRegions(other)) {
		t.Fatalf("after Resume a got %v, b got %v; want what was dispatched while paused", got["a"], got["b"])
	}
	h.collect(len(queued) + len(other))

	// A retry that falls due while paused waits for Resume too.
	h.dispatch(a, 33)
	c = h.nextCall()
	h.d.Pause("maintenance")
	h.answer(c, status.Error(codes.Unavailable, "connection reset"))
	h.clk.Advance(time.Hour)
	before := h.batches()
	h.noResults()
	h.d.Resume("maintenance")
	if h.batches() != before+1 {
		t.Fatalf("batches %d after Resume, want the retry (%d)", h.batches(), before+1)
	}
	h.answer(h.nextCall(), nil)
	h.collect(33)
	h.d.Resume("maintenance") // resuming a running dispatcher is harmless
}

// Each reason is resumed on its own: maintenance mode going off during a
// restored cluster's hold leaves the hold in place, and the other way
// round.
func TestPauseReasonsResumeSeparately(t *testing.T) {
	h := newHarness(t, nil)
	a := target("a", 1)
	h.d.Pause("restore hold")
	h.d.Pause("maintenance")
	queued := h.dispatch(a, 33)
	h.d.Resume("maintenance")
	h.d.Resume("nothing paused for this") // harmless
	if !h.d.Paused() {
		t.Fatal("Paused() = false with the restore hold still on")
	}
	h.clk.Advance(time.Hour)
	h.wantBatches(0)
	h.d.Resume("restore hold")
	if h.d.Paused() {
		t.Fatal("Paused() = true after every reason resumed")
	}
	h.wantBatches(1)
	h.answer(h.nextCall(), nil)
	h.collect(len(queued))
}
