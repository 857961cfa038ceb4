package scheduler

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
)

func tbl(name string) QueueKey      { return QueueKey{Kind: KindTable, Name: name} }
func srv(name string) QueueKey      { return QueueKey{Kind: KindServer, Name: name} }
func peer(name string) QueueKey     { return QueueKey{Kind: KindPeer, Name: name} }
func meta() QueueKey                { return QueueKey{Kind: KindMeta, Name: "hbase:meta"} }
func tblP(n string, p int) QueueKey { return QueueKey{Kind: KindTable, Name: n, Priority: p} }

type op struct {
	front bool
	id    uint64
	key   QueueKey
}

func back(id uint64, k QueueKey) op  { return op{false, id, k} }
func front(id uint64, k QueueKey) op { return op{true, id, k} }

// drain polls until empty.
func drain(t *testing.T, s *Scheduler) []uint64 {
	t.Helper()
	var got []uint64
	for {
		id, ok := s.Poll(0)
		if !ok {
			return got
		}
		got = append(got, id)
	}
}

func TestPollOrder(t *testing.T) {
	tests := []struct {
		name string
		ops  []op
		want []uint64
	}{
		{"fifo in one entity", []op{back(1, tbl("a")), back(2, tbl("a")), back(3, tbl("a"))}, []uint64{1, 2, 3}},
		{"kinds meta server peer table",
			[]op{back(1, tbl("a")), back(2, peer("p")), back(3, srv("s")), back(4, meta()), back(5, tbl("a"))},
			[]uint64{4, 3, 2, 1, 5}},
		{"priority within kind",
			[]op{back(1, tblP("u", 0)), back(2, tblP("sys", PrioritySystem)), back(3, tblP("m", PriorityMeta)), back(4, tblP("u2", PriorityUser))},
			[]uint64{3, 2, 1, 4}},
		{"priority does not cross kinds",
			[]op{back(1, tblP("m", PriorityMeta)), back(2, QueueKey{Kind: KindServer, Name: "s", Priority: 0})},
			[]uint64{2, 1}},
		{"custom server priority",
			[]op{back(1, srv("a")), back(2, QueueKey{Kind: KindServer, Name: "carrying-meta", Priority: 100})},
			[]uint64{2, 1}},
		{"round robin across entities",
			[]op{back(1, tbl("a")), back(2, tbl("a")), back(3, tbl("a")), back(4, tbl("b")), back(5, tbl("c")), back(6, tbl("c"))},
			[]uint64{1, 4, 5, 2, 6, 3}},
		{"round robin per priority level",
			[]op{back(1, tbl("a")), back(2, tbl("a")), back(3, tbl("b")),
				back(10, tblP("s1", 2)), back(11, tblP("s1", 2)), back(12, tblP("s2", 2))},
			[]uint64{10, 12, 11, 1, 3, 2}},
		{"front of entity",
			[]op{back(1, tbl("a")), back(2, tbl("a")), front(3, tbl("a"))},
			[]uint64{3, 1, 2}},
		{"front moves entity to head of rotation",
			[]op{back(1, tbl("a")), back(2, tbl("b")), back(3, tbl("c")), front(4, tbl("c"))},
			[]uint64{4, 1, 2, 3}},
		{"front on new entity goes first",
			[]op{back(1, tbl("a")), back(2, tbl("b")), front(3, tbl("c"))},
			[]uint64{3, 1, 2}},
		{"dedupe back", []op{back(1, tbl("a")), back(1, tbl("a")), back(1, tbl("b")), back(2, tbl("a"))}, []uint64{1, 2}},
		{"dedupe front", []op{back(1, tbl("a")), back(2, tbl("a")), front(2, tbl("a"))}, []uint64{1, 2}},
		{"empty name allowed", []op{back(1, tbl("")), back(2, srv(""))}, []uint64{2, 1}},
		{"priority change moves entity",
			[]op{back(1, tbl("a")), back(2, tbl("b")), back(3, tblP("a", PrioritySystem))},
			[]uint64{1, 3, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Config{})
			for _, o := range tc.ops {
				if o.front {
					s.AddFront(o.id, o.key)
				} else {
					s.AddBack(o.id, o.key)
				}
			}
			if got := drain(t, s); !slices.Equal(got, tc.want) {
				t.Fatalf("poll order %v, want %v", got, tc.want)
			}
			checkEmpty(t, s)
		})
	}
}

// checkEmpty asserts nothing is left over in the run queues.
func checkEmpty(t *testing.T, s *Scheduler) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queued) != 0 {
		t.Errorf("queued map has %d ids", len(s.queued))
	}
	for k := range s.kinds {
		kq := &s.kinds[k]
		if kq.n != 0 || len(kq.byName) != 0 || len(kq.levels) != 0 {
			t.Errorf("kind %v not empty: n=%d queues=%d levels=%d", Kind(k), kq.n, len(kq.byName), len(kq.levels))
		}
	}
}

func TestAddReturnsAndLen(t *testing.T) {
	s := New(Config{})
	if !s.AddBack(1, tbl("a")) {
		t.Fatal("first AddBack returned false")
	}
	if s.AddBack(1, tbl("a")) || s.AddFront(1, tbl("b")) {
		t.Fatal("re-adding a queued id returned true")
	}
	if !s.AddFront(2, tbl("b")) {
		t.Fatal("AddFront returned false")
	}
	if n := s.Len(); n != 2 {
		t.Fatalf("Len = %d, want 2", n)
	}
	if !s.Queued(1) || s.Queued(3) {
		t.Fatal("Queued wrong")
	}
	if id, ok := s.Poll(0); !ok || id != 2 {
		t.Fatalf("Poll = %d,%v want 2", id, ok)
	}
	// Once polled, an id may be queued again.
	if !s.AddBack(2, tbl("a")) {
		t.Fatal("re-adding a polled id returned false")
	}
	if got := drain(t, s); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("got %v", got)
	}
}

func TestRemove(t *testing.T) {
	s := New(Config{})
	for i := uint64(1); i <= 5; i++ {
		s.AddBack(i, tbl("a"))
	}
	s.AddBack(6, tbl("b"))
	if !s.Remove(3) || s.Remove(3) || s.Remove(99) {
		t.Fatal("Remove results wrong")
	}
	if !s.Remove(6) {
		t.Fatal("Remove(6) false")
	}
	if s.Len() != 4 {
		t.Fatalf("Len %d", s.Len())
	}
	if got := drain(t, s); !slices.Equal(got, []uint64{1, 2, 4, 5}) {
		t.Fatalf("got %v", got)
	}
	checkEmpty(t, s)
}

func TestRingWrapAround(t *testing.T) {
	// Mix fronts, backs, removes and polls past several ring growths and
	// compare with a plain slice model.
	s := New(Config{})
	var model []uint64
	next := uint64(1)
	for step := 0; step < 2000; step++ {
		switch step % 7 {
		case 0, 1, 2:
			s.AddBack(next, tbl("x"))
			model = append(model, next)
			next++
		case 3:
			s.AddFront(next, tbl("x"))
			model = append([]uint64{next}, model...)
			next++
		case 4:
			if len(model) > 3 {
				victim := model[len(model)/2]
				s.Remove(victim)
				model = slices.DeleteFunc(model, func(x uint64) bool { return x == victim })
			}
		default:
			id, ok := s.Poll(0)
			if len(model) == 0 {
				if ok {
					t.Fatalf("step %d: polled %d from empty", step, id)
				}
				continue
			}
			if !ok || id != model[0] {
				t.Fatalf("step %d: polled %d,%v want %d", step, id, ok, model[0])
			}
			model = model[1:]
		}
	}
	if got := drain(t, s); !slices.Equal(got, model) {
		t.Fatalf("rest %v, want %v", got, model)
	}
}

func TestManyTablesNoLeak(t *testing.T) {
	s := New(Config{})
	for round := 0; round < 3; round++ {
		for i := 0; i < 5000; i++ {
			s.AddBack(uint64(i+1), tbl(string(rune('a'+i%26))+string(rune(i))))
		}
		if got := len(drain(t, s)); got != 5000 {
			t.Fatalf("drained %d", got)
		}
		checkEmpty(t, s)
	}
	if n := len(s.freeQueues); n > maxFreeQueues {
		t.Fatalf("free list %d", n)
	}
}

func TestPollTimeout(t *testing.T) {
	s := New(Config{})
	start := time.Now()
	if id, ok := s.Poll(30 * time.Millisecond); ok {
		t.Fatalf("Poll on empty returned %d", id)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("Poll returned after %v, before its timeout", d)
	}
	if _, ok := s.Poll(0); ok {
		t.Fatal("Poll(0) on empty returned ok")
	}
	s.AddBack(7, tbl("a"))
	if id, ok := s.Poll(time.Second); !ok || id != 7 {
		t.Fatalf("Poll = %d,%v", id, ok)
	}
}

// waitBlockedPolls waits until n Polls are blocked for want of work (on
// s.idle, where AddBack and Close find them), so that a test wakes a
// blocked Poll and not one that has yet to look at the queue.
func waitBlockedPolls(t *testing.T, s *Scheduler, n int) {
	t.Helper()
	testwait.ForNil(t, 5*time.Second, fmt.Sprintf("%d Polls blocked", n), func() error {
		s.mu.Lock()
		blocked := len(s.idle)
		s.mu.Unlock()
		if blocked != n {
			return fmt.Errorf("%d blocked", blocked)
		}
		return nil
	})
}

func TestPollWakesOnAdd(t *testing.T) {
	s := New(Config{})
	for _, timeout := range []time.Duration{-1, 10 * time.Second} {
		got := make(chan uint64)
		go func() {
			id, _ := s.Poll(timeout)
			got <- id
		}()
		waitBlockedPolls(t, s, 1)
		s.AddBack(42, tbl("a"))
		select {
		case id := <-got:
			if id != 42 {
				t.Fatalf("got %d", id)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Poll not woken by AddBack")
		}
	}
}

func TestCloseWakesAllPolls(t *testing.T) {
	s := New(Config{})
	const n = 8
	var wg sync.WaitGroup
	results := make(chan bool, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			timeout := time.Duration(-1)
			if i%2 == 0 {
				timeout = time.Minute
			}
			_, ok := s.Poll(timeout)
			results <- ok
		}(i)
	}
	waitBlockedPolls(t, s, n)
	s.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake every Poll")
	}
	close(results)
	for ok := range results {
		if ok {
			t.Fatal("Poll returned ok after Close")
		}
	}
	s.AddBack(1, tbl("a"))
	if _, ok := s.Poll(-1); ok {
		t.Fatal("Poll after Close returned ok")
	}
	s.Close() // idempotent
}

// TestConcurrentPollers checks that every added id is polled exactly once
// by competing pollers with short timeouts (exercising the timeout/signal
// race).
func TestConcurrentPollers(t *testing.T) {
	s := New(Config{})
	const total = 20000
	var (
		mu   sync.Mutex
		seen = make(map[uint64]int)
		wg   sync.WaitGroup
	)
	stop := make(chan struct{})
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				id, ok := s.Poll(time.Duration(i%3) * 50 * time.Microsecond)
				if ok {
					mu.Lock()
					seen[id]++
					mu.Unlock()
					continue
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	for i := uint64(1); i <= total; i++ {
		s.AddBack(i, tbl(string(rune('a'+i%50))))
		if i%1000 == 0 {
			// Let the pollers empty the queue, so that the next adds
			// meet pollers that find nothing and time out.
			testwait.Until(5*time.Second, func() bool { return s.Len() == 0 })
		}
	}
	// Not testwait.For: on a failure the pollers must still be stopped;
	// the count below says what went wrong.
	testwait.Until(5*time.Second, func() bool { return s.Len() == 0 })
	close(stop)
	s.Close()
	wg.Wait()
	if len(seen) != total {
		t.Fatalf("polled %d distinct ids, want %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("id %d polled %d times", id, n)
		}
	}
}

func TestInvalidKindPanics(t *testing.T) {
	s := New(Config{})
	bad := QueueKey{Kind: 9}
	for name, f := range map[string]func(){
		"AddBack":   func() { s.AddBack(1, bad) },
		"AddFront":  func() { s.AddFront(1, bad) },
		"Acquire":   func() { s.Acquire(1, bad, nil, ServerLocks("a", Shared)) },
		"WaitEvent": func() { s.WaitEvent(NewEvent("e"), 1, bad) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
	// The scheduler is still usable.
	if !s.AddBack(1, tbl("a")) || s.Len() != 1 {
		t.Fatal("scheduler unusable after a rejected key")
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{KindMeta.String(), "meta"}, {KindTable.String(), "table"}, {Kind(7).String(), "kind(7)"},
		{tbl("ns:t").String(), "table/ns:t@1"},
		{Lock{LockRegion, "r1", Exclusive}.String(), "region r1 (exclusive)"},
		{LockPeer.String(), "peer"}, {Shared.String(), "shared"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q want %q", tc.got, tc.want)
		}
	}
}
