package scheduler

import (
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestEvent(t *testing.T) {
	var woken []uint64
	s := New(Config{Wake: func(id uint64) { woken = append(woken, id) }})
	ev := NewEvent("open region r1 on rs1")
	if ev.Ready() || ev.String() != "open region r1 on rs1 (not ready)" || ev.Description() != "open region r1 on rs1" {
		t.Fatalf("new event: ready=%v %q", ev.Ready(), ev)
	}
	for _, id := range []uint64{3, 1, 2} {
		if !s.WaitEvent(ev, id, tbl("t")) {
			t.Fatalf("%d not parked on a not-ready event", id)
		}
	}
	if !s.WaitEvent(ev, 1, tbl("t")) {
		t.Fatal("re-wait returned false")
	}
	if !s.RemoveWaiter(ev, 2) || s.RemoveWaiter(ev, 2) || s.RemoveWaiter(ev, 42) {
		t.Fatal("RemoveWaiter results wrong")
	}
	s.WaitEvent(ev, 4, tbl("t"))
	s.WakeEvent(ev)
	if want := []uint64{3, 1, 4}; !slices.Equal(woken, want) {
		t.Fatalf("woken %v, want %v", woken, want)
	}
	if !ev.Ready() || !strings.HasSuffix(ev.String(), "(ready)") {
		t.Fatal("woken event not ready")
	}
	if s.WaitEvent(ev, 5, tbl("t")) {
		t.Fatal("parked on a ready event")
	}
	if wi := s.Why(5); wi.Event != "" {
		t.Fatalf("not parked but Why says %q", wi.Event)
	}
	s.WakeEvent(ev) // no waiters, no-op
	if len(woken) != 3 {
		t.Fatalf("woken again: %v", woken)
	}
	s.SuspendEvent(ev)
	if ev.Ready() || !s.WaitEvent(ev, 5, tbl("t")) {
		t.Fatal("suspended event does not park")
	}
	if wi := s.Why(5); wi.Event != "open region r1 on rs1" {
		t.Fatalf("Why event %q", wi.Event)
	}
	s.WakeEvent(ev)
	if woken[len(woken)-1] != 5 {
		t.Fatalf("woken %v", woken)
	}
	if wi := s.Why(5); wi.Event != "" {
		t.Fatalf("woken but Why says %q", wi.Event)
	}
}

func TestEventMovesWaiter(t *testing.T) {
	var woken []uint64
	s := New(Config{Wake: func(id uint64) { woken = append(woken, id) }})
	a, b := NewEvent("a"), NewEvent("b")
	s.WaitEvent(a, 1, tbl("t"))
	s.WaitEvent(b, 1, tbl("t"))
	s.WakeEvent(a)
	if len(woken) != 0 {
		t.Fatalf("moved waiter woken by old event: %v", woken)
	}
	if s.RemoveWaiter(a, 1) {
		t.Fatal("still on a")
	}
	s.WakeEvent(b)
	if !slices.Equal(woken, []uint64{1}) {
		t.Fatalf("woken %v", woken)
	}
}

func TestEventWakeWithoutCallback(t *testing.T) {
	s := New(Config{})
	ev := NewEvent("server rs1 online")
	s.AddBack(10, srv("rs2"))
	s.WaitEvent(ev, 1, srv("rs1"))
	s.WaitEvent(ev, 2, tbl("t"))
	s.WaitEvent(ev, 3, srv("rs1"))
	s.WakeEvent(ev)
	// rs1 goes to the head of the server rotation with 1 first; after one
	// poll the rotation moves on to rs2, as round-robin requires.
	if got, want := drain(t, s), []uint64{1, 10, 3, 2}; !slices.Equal(got, want) {
		t.Fatalf("poll order %v, want %v", got, want)
	}
}

// TestEventConcurrent parks and wakes from many goroutines; every parked
// procedure must be woken exactly once.
func TestEventConcurrent(t *testing.T) {
	var mu sync.Mutex
	count := map[uint64]int{}
	s := New(Config{Wake: func(id uint64) {
		mu.Lock()
		count[id]++
		mu.Unlock()
	}})
	ev := NewEvent("e")
	var wg sync.WaitGroup
	parked := make([]bool, 1000)
	for g := 0; g < 10; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < len(parked); i += 10 {
				parked[i] = s.WaitEvent(ev, uint64(i), tbl("t"))
				if i%97 == 0 {
					s.WakeEvent(ev)
					s.SuspendEvent(ev)
				}
				_ = ev.Ready()
			}
		}(g)
	}
	wg.Wait()
	s.WakeEvent(ev)
	for i, p := range parked {
		want := 0
		if p {
			want = 1
		}
		if count[uint64(i)] != want {
			t.Fatalf("id %d parked=%v woken %d times", i, p, count[uint64(i)])
		}
	}
}

// An Event can outlive its Scheduler: the next one wakes only what it
// parked itself, and Close leaves nothing of the closed one's on it.
func TestEventAcrossSchedulers(t *testing.T) {
	var oldWoken, newWoken []uint64
	old := New(Config{Wake: func(id uint64) { oldWoken = append(oldWoken, id) }})
	cur := New(Config{Wake: func(id uint64) { newWoken = append(newWoken, id) }})
	shared, other := NewEvent("shared"), NewEvent("other")
	old.WaitEvent(shared, 1, tbl("t"))
	cur.WaitEvent(other, 1, tbl("t"))
	cur.WaitEvent(shared, 2, tbl("t"))
	cur.WakeEvent(shared)
	if !slices.Equal(newWoken, []uint64{2}) || len(oldWoken) != 0 {
		t.Fatalf("waking shared through the new scheduler woke %v there and %v in the old", newWoken, oldWoken)
	}
	if wi := cur.Why(1); wi.Event != "other" {
		t.Fatalf("1 in the new scheduler: waits on %q, want other", wi.Event)
	}
	old.Close()
	if n := len(shared.waiters); n != 0 || old.Sizes().EventWaiters != 0 {
		t.Fatalf("after Close: %d waiters on shared, %d in the closed scheduler", n, old.Sizes().EventWaiters)
	}
	shared.ready.Store(false)
	if !old.WaitEvent(shared, 3, tbl("t")) || len(shared.waiters) != 0 {
		t.Fatal("a closed scheduler parked a waiter")
	}
	cur.WakeEvent(other)
	if !slices.Equal(newWoken, []uint64{2, 1}) || cur.Sizes().EventWaiters != 0 {
		t.Fatalf("woken %v, %d event waiters left", newWoken, cur.Sizes().EventWaiters)
	}
}
