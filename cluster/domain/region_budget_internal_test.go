package domain

import (
	"strings"
	"testing"
)

// TestRegionBudgetTakesTurns: tables asking more than the budget holds
// wait in the order they asked, each granted its whole wave as room comes
// back, a big wave at the head is not passed over by smaller ones behind
// it, and every region procedure's end gives its place back.
func TestRegionBudgetTakesTurns(t *testing.T) {
	b := newRegionBudget(10)
	if g, _, _ := b.take(1, 6); g != 6 {
		t.Fatalf("table 1 granted %d, want 6", g)
	}
	// 4 left: table 2 wants 6, so it waits, and table 3 (2 would fit)
	// queues behind it rather than going first.
	g, ev2, note := b.take(2, 6)
	if g != 0 || ev2 == nil || !strings.Contains(note, "6 of 10 region procedures in flight, 0 table procedures ahead") {
		t.Fatalf("table 2: granted %d, event %v, note %q; want a wait", g, ev2, note)
	}
	g, ev3, note := b.take(3, 2)
	if g != 0 || !strings.Contains(note, "1 table procedure ahead") {
		t.Fatalf("table 3: granted %d, note %q; want a wait behind table 2", g, note)
	}
	// Two of table 1's regions end: 6 free, table 2 is let in; table 3
	// still waits (nothing left).
	if evs := b.onEnded(100, 1); len(evs) != 0 {
		t.Fatalf("one end let %d in with 5 free", len(evs))
	}
	evs := b.onEnded(101, 1)
	if len(evs) != 1 || evs[0] != ev2 {
		t.Fatalf("two ends woke %v, want table 2's event", evs)
	}
	if g, _, _ := b.take(2, 6); g != 6 {
		t.Fatalf("table 2 woken, granted %d, want 6", g)
	}
	// Table 1's wave is done: settle gives back the other 4, which lets
	// table 3 in (it was waiting); table 1, asking again, finds 2 free
	// and waits, ahead of every table that first asked after it.
	if evs := b.settle(1); len(evs) != 1 || evs[0] != ev3 {
		t.Fatalf("table 1's settle woke %v, want table 3's event", evs)
	}
	if g, _, _ := b.take(1, 6); g != 0 {
		t.Fatalf("table 1 granted %d while table 3 has its grant and 2 are free", g)
	}
	if g, _, _ := b.take(3, 2); g != 2 {
		t.Fatalf("table 3 granted %d, want 2", g)
	}
	// Table 3's wave needed one child: the other place goes back at
	// once. Table 2 ends (rolled back, say): all it held goes back.
	b.giveBack(3, 1)
	if in, waiting := b.stats(); in != 7 || waiting != 1 {
		t.Fatalf("in flight %d, waiting %d; want 7 and 1", in, waiting)
	}
	if evs := b.onEnded(2, 0); len(evs) != 1 {
		t.Fatalf("table 2's end woke %d, want table 1", len(evs))
	}
	if g, _, _ := b.take(1, 6); g != 6 {
		t.Fatalf("table 1 granted %d, want 6", g)
	}
	// A table that ends while it waits leaves the queue.
	if g, _, _ := b.take(4, 5); g != 0 {
		t.Fatalf("table 4 granted %d with 3 free", g)
	}
	b.onEnded(4, 0)
	if _, waiting := b.stats(); waiting != 0 {
		t.Fatalf("%d waiting after the waiter ended", waiting)
	}
	// Tables finish first come, first served: a table asking for its next
	// wave goes before one that has not started, even one that asked
	// before it did this time.
	b3 := newRegionBudget(4)
	if g, _, _ := b3.take(1, 4); g != 4 {
		t.Fatalf("table 1 granted %d, want 4", g)
	}
	_, ev2, _ = b3.take(2, 4) // waits: nothing free
	b3.settle(1)              // table 1's wave done: 4 free, table 2 let in
	if g, _, _ := b3.take(2, 4); g != 4 {
		t.Fatalf("table 2 granted %d, want 4", g)
	}
	_, ev3, _ = b3.take(3, 4) // table 3 waits first...
	_, ev1, note := b3.take(1, 4)
	if !strings.Contains(note, "0 table procedures ahead") {
		t.Fatalf("table 1's next wave: note %q, want it at the head, before table 3", note)
	}
	if evs := b3.settle(2); len(evs) != 1 || evs[0] != ev1 {
		t.Fatalf("room for one wave woke %v, want table 1 (%v), not table 3 (%v)", evs, ev1, ev3)
	}
	// A table that ends lets go of its place in the order.
	b3.onEnded(1, 0)
	if len(b3.tickets) != 2 {
		t.Fatalf("tickets %v after table 1 ended, want tables 2 and 3 only", b3.tickets)
	}
	_ = ev2

	// A wave bigger than the whole budget is cut to it, not refused.
	b2 := newRegionBudget(3)
	if g, _, _ := b2.take(1, 5000); g != 3 {
		t.Fatalf("a wave of 5000 in a budget of 3 granted %d", g)
	}
}

// A region procedure's end is heard more than once when its table
// procedure rolls back mid-wave: each of its steps undone writes it
// again, still SUCCESS, and the last one ROLLEDBACK. Only the first end
// gives its place back: the others would give back the places of its
// siblings still in flight, and the budget would grant them again.
func TestRegionBudgetCountsAnEndOnce(t *testing.T) {
	b := newRegionBudget(2)
	if g, _, _ := b.take(1, 2); g != 2 {
		t.Fatalf("table 1 granted %d, want 2", g)
	}
	b.onEnded(100, 1) // SUCCESS
	b.onEnded(100, 1) // SUCCESS again: a step of it undone
	b.onEnded(100, 1) // ROLLEDBACK
	if inFlight, _ := b.stats(); inFlight != 1 {
		t.Fatalf("%d in flight after one of two children ended (three times), want 1", inFlight)
	}
	if g, _, _ := b.take(2, 2); g != 0 {
		t.Fatalf("table 2 granted %d while child 101 of table 1 still runs", g)
	}
	b.onEnded(101, 1)
	if g, _, _ := b.take(2, 2); g != 2 {
		t.Fatalf("table 2 granted %d once table 1's wave ended, want 2", g)
	}
	// Table 1's next wave counts its own children afresh.
	b.onEnded(102, 1) // a child of table 1 with no place held: nothing
	if inFlight, _ := b.stats(); inFlight != 2 {
		t.Fatalf("%d in flight, want table 2's 2", inFlight)
	}
}
