package scheduler

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
)

// checkLockInvariants verifies the lock table against itself.
func checkLockInvariants(t testing.TB, s *Scheduler) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.locks {
		if e.key != k {
			t.Fatalf("entry %v filed under %v", e.key, k)
		}
		if e.idle() {
			t.Fatalf("idle entry %v kept", k)
		}
		if e.hasExcl {
			if _, ok := e.shared[e.excl]; ok {
				t.Fatalf("%v: %d holds both modes", k, e.excl)
			}
		}
		for _, w := range e.waiters {
			if s.lockWait[w.id] != e {
				t.Fatalf("%v: waiter %d not indexed", k, w.id)
			}
		}
	}
	for id, hs := range s.holds {
		for _, h := range hs {
			e := s.locks[lockKey{h.Type, h.Name}]
			if e == nil {
				t.Fatalf("%d holds %v, absent from table", id, h)
			}
			_, sh := e.shared[id]
			if h.Mode == Exclusive && !(e.hasExcl && e.excl == id) || h.Mode == Shared && !sh {
				t.Fatalf("%d holds %v, table disagrees", id, h)
			}
		}
	}
}

func TestLockHelpers(t *testing.T) {
	tests := []struct {
		got, want []Lock
	}{
		{NamespaceLocks("ns", Exclusive), []Lock{{LockNamespace, "ns", Exclusive}}},
		{TableLocks("ns", "t", Exclusive), []Lock{{LockNamespace, "ns", Shared}, {LockTable, "ns:t", Exclusive}}},
		{TableLocks("ns", "t", Shared), []Lock{{LockNamespace, "ns", Shared}, {LockTable, "ns:t", Shared}}},
		{RegionLocks("ns", "t", "r2", "r1", "r2"), []Lock{{LockNamespace, "ns", Shared}, {LockTable, "ns:t", Shared},
			{LockRegion, "r1", Exclusive}, {LockRegion, "r2", Exclusive}}},
		{ServerLocks("rs1", Exclusive), []Lock{{LockServer, "rs1", Exclusive}}},
		{PeerLocks("p1", Shared), []Lock{{LockPeer, "p1", Shared}}},
	}
	for i, tc := range tests {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%d: got %v want %v", i, tc.got, tc.want)
		}
	}
}

func TestNormalize(t *testing.T) {
	got := normalize([]Lock{
		{LockRegion, "b", Shared}, {LockTable, "t", Shared}, {LockRegion, "a", Exclusive},
		{LockTable, "t", Exclusive}, {LockRegion, "b", Shared}, {LockNamespace, "n", Shared},
	})
	want := []Lock{{LockNamespace, "n", Shared}, {LockTable, "t", Exclusive}, {LockRegion, "a", Exclusive}, {LockRegion, "b", Shared}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
}

// TestLockCompatibility: procedure 1 takes the first request, procedure 2
// (unrelated) asks for the second.
func TestLockCompatibility(t *testing.T) {
	type req struct {
		name  string
		locks []Lock
	}
	nsX := req{"ns X", NamespaceLocks("ns", Exclusive)}
	nsS := req{"ns S", NamespaceLocks("ns", Shared)}
	tX := req{"table X", TableLocks("ns", "t", Exclusive)}
	tS := req{"table S", TableLocks("ns", "t", Shared)}
	t2X := req{"other table X", TableLocks("ns", "t2", Exclusive)}
	r1 := req{"region r1", RegionLocks("ns", "t", "r1")}
	r2 := req{"region r2", RegionLocks("ns", "t", "r2")}
	r12 := req{"regions r1 r2", RegionLocks("ns", "t", "r1", "r2")}
	o1 := req{"other table region", RegionLocks("ns", "t2", "o1")}
	otherNsX := req{"other ns X", NamespaceLocks("ns2", Exclusive)}
	otherNsT := req{"other ns table X", TableLocks("ns2", "t", Exclusive)}
	sX := req{"server X", ServerLocks("rs1", Exclusive)}
	sS := req{"server S", ServerLocks("rs1", Shared)}
	s2X := req{"other server X", ServerLocks("rs2", Exclusive)}
	pX := req{"peer X", PeerLocks("p", Exclusive)}
	pS := req{"peer S", PeerLocks("p", Shared)}

	tests := []struct {
		first, second req
		compatible    bool
	}{
		{nsX, nsX, false}, {nsX, nsS, false}, {nsS, nsX, false}, {nsS, nsS, true},
		{nsX, tX, false}, {nsX, tS, false}, {nsX, r1, false},
		{nsS, tX, true}, {nsS, r1, true},
		{tX, nsX, false}, {tS, nsX, false}, {r1, nsX, false},
		{tX, tX, false}, {tX, tS, false}, {tS, tX, false}, {tS, tS, true},
		{tX, t2X, true}, {tX, o1, true},
		{tX, r1, false}, {tS, r1, true}, {r1, tX, false}, {r1, tS, true},
		{r1, r1, false}, {r1, r2, true}, {r12, r2, false}, {r2, r12, false},
		{otherNsX, tX, true}, {nsX, otherNsT, true},
		{sX, sX, false}, {sX, sS, false}, {sS, sX, false}, {sS, sS, true}, {sX, s2X, true},
		{sX, tX, true}, {pX, pX, false}, {pS, pS, true}, {pX, pS, false}, {pX, sX, true},
	}
	for _, tc := range tests {
		t.Run(tc.first.name+" then "+tc.second.name, func(t *testing.T) {
			var woken []uint64
			s := New(Config{Wake: func(id uint64) { woken = append(woken, id) }})
			if !s.Acquire(1, tbl("t"), nil, tc.first.locks) {
				t.Fatal("first request refused on an empty table")
			}
			got := s.Acquire(2, tbl("t"), nil, tc.second.locks)
			if got != tc.compatible {
				t.Fatalf("second request granted=%v, want %v; locks %v", got, tc.compatible, s.Locks())
			}
			checkLockInvariants(t, s)
			if !got {
				// 2 took nothing and waits; releasing 1 wakes it and then
				// it gets everything.
				if h := s.Held(2); len(h) != 0 {
					t.Fatalf("refused request holds %v", h)
				}
				if wi := s.Why(2); wi.Lock == nil {
					t.Fatalf("refused request not parked: %+v", wi)
				}
				s.Release(1)
				if !slices.Equal(woken, []uint64{2}) {
					t.Fatalf("woken %v, want [2]", woken)
				}
				if !s.Acquire(2, tbl("t"), nil, tc.second.locks) {
					t.Fatal("retry after release refused")
				}
			}
			s.Release(1)
			s.Release(2)
			checkLockInvariants(t, s)
			if l := s.Locks(); len(l) != 0 {
				t.Fatalf("locks left: %v", l)
			}
		})
	}
}

func TestAllOrNothing(t *testing.T) {
	s := New(Config{})
	if !s.Acquire(1, tbl("t"), nil, RegionLocks("ns", "t", "r3")) {
		t.Fatal("r3 refused")
	}
	if s.Acquire(2, tbl("t"), nil, RegionLocks("ns", "t", "r1", "r2", "r3", "r4")) {
		t.Fatal("overlapping request granted")
	}
	if h := s.Held(2); len(h) != 0 {
		t.Fatalf("refused request took %v", h)
	}
	// r1, r2, r4 are still free for someone else.
	if !s.Acquire(3, tbl("t"), nil, RegionLocks("ns", "t", "r1", "r2", "r4")) {
		t.Fatal("free regions refused")
	}
	wi := s.Why(2)
	if wi.Lock == nil || *wi.Lock != (Lock{LockRegion, "r3", Exclusive}) || !slices.Equal(wi.Holders, []uint64{1}) {
		t.Fatalf("Why(2) = %+v", wi)
	}
	checkLockInvariants(t, s)
}

func TestIdempotentAndUpgrade(t *testing.T) {
	s := New(Config{})
	l := TableLocks("ns", "t", Shared)
	if !s.Acquire(1, tbl("t"), nil, l) || !s.Acquire(1, tbl("t"), nil, l) {
		t.Fatal("re-acquire refused")
	}
	// Same lock asked twice in one request, once exclusive: exclusive.
	req := append(TableLocks("ns", "t", Shared), Lock{LockTable, "ns:t", Exclusive})
	if !s.Acquire(1, tbl("t"), nil, req) {
		t.Fatal("upgrade refused with no other holder")
	}
	want := []Lock{{LockNamespace, "ns", Shared}, {LockTable, "ns:t", Exclusive}}
	if h := s.Held(1); !slices.Equal(h, want) {
		t.Fatalf("held %v want %v", h, want)
	}
	if s.Acquire(2, tbl("t"), nil, TableLocks("ns", "t", Shared)) {
		t.Fatal("shared granted beside exclusive")
	}
	// Upgrade blocked by another shared holder.
	s2 := New(Config{})
	s2.Acquire(1, tbl("t"), nil, ServerLocks("a", Shared))
	s2.Acquire(2, tbl("t"), nil, ServerLocks("a", Shared))
	if s2.Acquire(1, tbl("t"), nil, ServerLocks("a", Exclusive)) {
		t.Fatal("upgrade granted with another shared holder")
	}
	checkLockInvariants(t, s)
	checkLockInvariants(t, s2)
}

func TestInheritance(t *testing.T) {
	s := New(Config{})
	// 1 (root) holds table X; 2 is its child, 3 its grandchild.
	if !s.Acquire(1, tbl("t"), nil, TableLocks("ns", "t", Exclusive)) {
		t.Fatal("root refused")
	}
	if !s.Acquire(2, tbl("t"), []uint64{1}, TableLocks("ns", "t", Exclusive)) {
		t.Fatal("child refused its parent's lock")
	}
	if h := s.Held(2); len(h) != 0 {
		t.Fatalf("inherited locks recorded as holds: %v", h)
	}
	if !s.Acquire(3, tbl("t"), []uint64{2, 1}, RegionLocks("ns", "t", "r1")) {
		t.Fatal("grandchild refused region under grandparent's table lock")
	}
	// Grandchild holds r1 itself (nobody up the line held it).
	if h := s.Held(3); !slices.Equal(h, []Lock{{LockRegion, "r1", Exclusive}}) {
		t.Fatalf("grandchild holds %v", h)
	}
	// An unrelated procedure is kept out, and so is the child for r1 held
	// by its own child (locks flow down, not up).
	if s.Acquire(9, tbl("t"), nil, RegionLocks("ns", "t", "r2")) {
		t.Fatal("stranger granted region under exclusive table")
	}
	if s.Acquire(2, tbl("t"), []uint64{1}, RegionLocks("ns", "t", "r1")) {
		t.Fatal("parent granted its child's region")
	}
	s.CancelLockWait(2)
	// Child's release leaves the root's locks alone.
	s.Release(2)
	s.Release(3)
	want := []Lock{{LockNamespace, "ns", Shared}, {LockTable, "ns:t", Exclusive}}
	if h := s.Held(1); !slices.Equal(h, want) {
		t.Fatalf("root holds %v after children released, want %v", h, want)
	}
	if s.Acquire(10, tbl("t"), nil, TableLocks("ns", "t", Shared)) {
		t.Fatal("stranger got the table after the children released")
	}
	checkLockInvariants(t, s)
}

func TestInheritSharedAndFIFO(t *testing.T) {
	s := New(Config{})
	// 1 holds the table shared, 2 waits for it exclusively.
	s.Acquire(1, tbl("t"), nil, TableLocks("ns", "t", Shared))
	if s.Acquire(2, tbl("t"), nil, TableLocks("ns", "t", Exclusive)) {
		t.Fatal("exclusive granted beside shared")
	}
	// A stranger asking shared queues behind the exclusive waiter.
	if s.Acquire(3, tbl("t"), nil, TableLocks("ns", "t", Shared)) {
		t.Fatal("shared request overtook an exclusive waiter")
	}
	// 1's child inherits the shared lock despite the queue.
	if !s.Acquire(4, tbl("t"), []uint64{1}, RegionLocks("ns", "t", "r1")) {
		t.Fatal("child of a shared holder refused")
	}
	// The child may even take exclusively what its parent holds shared
	// when nobody else holds it.
	s5 := New(Config{})
	s5.Acquire(1, tbl("t"), nil, ServerLocks("a", Shared))
	if !s5.Acquire(2, tbl("t"), []uint64{1}, ServerLocks("a", Exclusive)) {
		t.Fatal("child refused exclusive over its parent's shared lock")
	}
	if s5.Acquire(3, tbl("t"), nil, ServerLocks("a", Shared)) {
		t.Fatal("stranger shared beside child's exclusive")
	}
	checkLockInvariants(t, s)
	checkLockInvariants(t, s5)
}

func TestWakeOrderFIFO(t *testing.T) {
	var woken []uint64
	s := New(Config{Wake: func(id uint64) { woken = append(woken, id) }})
	s.Acquire(1, tbl("t"), nil, TableLocks("ns", "t", Exclusive))
	// Waiters park on different locks of 1's request, interleaved.
	s.Acquire(5, tbl("t"), nil, TableLocks("ns", "t", Shared))    // table
	s.Acquire(3, tbl("t"), nil, RegionLocks("ns", "t", "r"))      // table
	s.Acquire(2, tbl("t"), nil, NamespaceLocks("ns", Exclusive))  // namespace
	s.Acquire(4, tbl("t"), nil, TableLocks("ns", "t", Exclusive)) // table
	s.Release(1)
	if want := []uint64{5, 3, 2, 4}; !slices.Equal(woken, want) {
		t.Fatalf("woken %v, want arrival order %v", woken, want)
	}
	if l := s.Locks(); len(l) != 0 {
		t.Fatalf("locks after everyone woken: %v", l)
	}
}

func TestWakeWithoutCallbackAddsFront(t *testing.T) {
	s := New(Config{})
	s.AddBack(100, tbl("other"))
	s.AddBack(101, tbl("a"))
	s.Acquire(1, tbl("a"), nil, ServerLocks("x", Exclusive))
	s.Acquire(2, tbl("b"), nil, ServerLocks("x", Exclusive))
	s.Acquire(3, tbl("a"), nil, ServerLocks("x", Exclusive))
	s.Acquire(4, srv("x"), nil, ServerLocks("x", Exclusive))
	s.Release(1)
	// 4 is a server procedure: its kind goes first. Then the earliest
	// waiter, 2, and 3, ahead of what was queued before; then the rotation
	// goes on from table a's successor, "other".
	if got, want := drain(t, s), []uint64{4, 2, 3, 100, 101}; !slices.Equal(got, want) {
		t.Fatalf("poll order %v, want %v", got, want)
	}
}

func TestWakeCallbackOutsideMutex(t *testing.T) {
	var s *Scheduler
	var order []uint64
	s = New(Config{Wake: func(id uint64) {
		order = append(order, id)
		// Calling back in must not deadlock: retry the lock and queue.
		if s.Acquire(id, tbl("t"), nil, TableLocks("ns", "t", Shared)) {
			s.AddBack(id, tbl("t"))
		}
		_ = s.Why(id)
		_ = s.Locks()
	}})
	s.Acquire(1, tbl("t"), nil, TableLocks("ns", "t", Exclusive))
	for id := uint64(2); id <= 4; id++ {
		if s.Acquire(id, tbl("t"), nil, TableLocks("ns", "t", Shared)) {
			t.Fatalf("%d granted", id)
		}
	}
	done := make(chan struct{})
	go func() { s.Release(1); close(done) }()
	<-done
	if !slices.Equal(order, []uint64{2, 3, 4}) {
		t.Fatalf("wake order %v", order)
	}
	if got := drain(t, s); !slices.Equal(got, []uint64{2, 3, 4}) {
		t.Fatalf("queued %v", got)
	}
	for id := uint64(2); id <= 4; id++ {
		if len(s.Held(id)) != 2 {
			t.Fatalf("%d holds %v", id, s.Held(id))
		}
	}
}

func TestReleaseCancelsOwnWait(t *testing.T) {
	var woken []uint64
	s := New(Config{Wake: func(id uint64) { woken = append(woken, id) }})
	s.Acquire(1, tbl("t"), nil, ServerLocks("a", Exclusive))
	s.Acquire(2, tbl("t"), nil, ServerLocks("a", Exclusive))
	s.Release(2) // aborted while parked
	s.Release(1)
	if len(woken) != 0 {
		t.Fatalf("cancelled waiter woken: %v", woken)
	}
	// Acquire while parked re-parks instead of queueing twice.
	s.Acquire(1, tbl("t"), nil, ServerLocks("a", Exclusive))
	s.Acquire(2, tbl("t"), nil, ServerLocks("a", Exclusive))
	s.Acquire(2, tbl("t"), nil, ServerLocks("a", Exclusive))
	if l := s.Locks(); len(l) != 1 || !slices.Equal(l[0].Waiters, []uint64{2}) {
		t.Fatalf("locks %+v", l)
	}
	checkLockInvariants(t, s)
}

func TestLocksListing(t *testing.T) {
	s := New(Config{})
	s.Acquire(1, tbl("t"), nil, RegionLocks("ns", "t", "r1"))
	s.Acquire(2, tbl("t"), nil, RegionLocks("ns", "t", "r2"))
	s.Acquire(3, tbl("t"), nil, TableLocks("ns", "t", Exclusive))
	got := s.Locks()
	want := []LockInfo{
		{Type: LockNamespace, Name: "ns", Shared: []uint64{1, 2}}, // 3 took nothing
		{Type: LockTable, Name: "ns:t", Shared: []uint64{1, 2}, Waiters: []uint64{3}, Modes: []Mode{Exclusive}},
		{Type: LockRegion, Name: "r1", Exclusive: true, Holder: 1},
		{Type: LockRegion, Name: "r2", Exclusive: true, Holder: 2},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Locks()\n got %+v\nwant %+v", got, want)
	}
}

// TestLockStress has goroutines take and drop random overlapping requests,
// and checks with a model of its own that no two conflicting holders ever
// coexist, and that everyone eventually gets through.
func TestLockStress(t *testing.T) {
	const (
		workers = 16
		rounds  = 3000
	)
	var (
		mu      sync.Mutex
		excl    = map[lockKey]uint64{}
		shared  = map[lockKey]int{}
		wakeChs [workers + 1]chan struct{}
	)
	for i := range wakeChs {
		wakeChs[i] = make(chan struct{}, 1)
	}
	s := New(Config{Wake: func(id uint64) {
		select {
		case wakeChs[id] <- struct{}{}:
		default:
		}
	}})
	namespaces := []string{"a", "b"}
	tables := []string{"t1", "t2", "t3"}
	regions := []string{"r1", "r2", "r3", "r4"}
	random := func(rng uint64) []Lock {
		ns := namespaces[rng%2]
		tb := tables[(rng>>2)%3]
		m := Mode((rng >> 4) % 2)
		switch (rng >> 6) % 5 {
		case 0:
			return NamespaceLocks(ns, m)
		case 1:
			return TableLocks(ns, tb, m)
		case 2:
			return ServerLocks(tb, m)
		default:
			var rs []string
			for i, r := range regions {
				if rng>>(8+i)&1 == 1 {
					rs = append(rs, ns+tb+r)
				}
			}
			return RegionLocks(ns, tb, rs...)
		}
	}
	enter := func(id uint64, req []Lock) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range normalize(req) {
			k := lockKey{l.Type, l.Name}
			if h, ok := excl[k]; ok {
				t.Errorf("%d got %v while %d holds it exclusively", id, l, h)
			}
			if l.Mode == Exclusive {
				if shared[k] > 0 {
					t.Errorf("%d got %v while %d hold it shared", id, l, shared[k])
				}
				excl[k] = id
			} else {
				shared[k]++
			}
		}
	}
	leave := func(req []Lock) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range normalize(req) {
			k := lockKey{l.Type, l.Name}
			if l.Mode == Exclusive {
				delete(excl, k)
			} else {
				shared[k]--
			}
		}
	}
	var wg sync.WaitGroup
	for w := 1; w <= workers; w++ {
		wg.Add(1)
		go func(id uint64) {
			defer wg.Done()
			rng := newXorshift(id)
			for r := 0; r < rounds; r++ {
				req := random(rng.next())
				for !s.Acquire(id, tbl("t"), nil, req) {
					<-wakeChs[id]
				}
				enter(id, req)
				runtime.Gosched()
				if r%50 == 0 {
					checkLockInvariants(t, s)
				}
				leave(req)
				s.Release(id)
			}
		}(uint64(w))
	}
	wg.Wait()
	if l := s.Locks(); len(l) != 0 {
		t.Fatalf("locks left: %v", l)
	}
}

// TryAcquire takes what Acquire would grant, and where Acquire would park
// it takes nothing and parks nothing: the request leaves no trace, and a
// later Release does not wake it.
func TestTryAcquireNeverParks(t *testing.T) {
	var woken []uint64
	s := New(Config{Wake: func(id uint64) { woken = append(woken, id) }})
	key := QueueKey{Kind: KindTable, Name: "ns:t"}
	r1 := RegionLocks("ns", "t", "r1")
	r2 := RegionLocks("ns", "t", "r2")
	if !s.Acquire(1, key, nil, r1) {
		t.Fatal("1 could not take r1")
	}
	// r1 is 1's: 2's request for r1 (and r2 with it) takes nothing.
	if s.TryAcquire(2, nil, append(slices.Clone(r1), r2...)) {
		t.Fatal("2 took r1 while 1 held it")
	}
	if held := s.Held(2); len(held) != 0 {
		t.Fatalf("2 holds %v after a refused TryAcquire, want nothing", held)
	}
	if _, parked := s.lockWait[2]; parked {
		t.Fatal("a refused TryAcquire parked 2")
	}
	// A child of 1 inherits r1, and takes r2 beside it.
	if !s.TryAcquire(3, []uint64{1}, append(slices.Clone(r1), r2...)) {
		t.Fatal("1's child could not take what 1 holds and a free region")
	}
	// Queued waiters count, as for Acquire: a shared request does not
	// overtake an exclusive one parked on the table.
	if s.Acquire(4, key, nil, TableLocks("ns", "t", Exclusive)) {
		t.Fatal("4 took table t exclusively while regions of it are held")
	}
	if s.TryAcquire(5, nil, RegionLocks("ns", "t", "r3")) {
		t.Fatal("5 overtook the exclusive request queued on table t")
	}
	checkLockInvariants(t, s)
	s.Release(3)
	s.Release(1)
	if slices.Contains(woken, 2) || slices.Contains(woken, 5) {
		t.Fatalf("woken %v: a refused TryAcquire was parked after all", woken)
	}
	if !slices.Contains(woken, 4) {
		t.Fatalf("woken %v, want 4, the parked exclusive request", woken)
	}
	checkLockInvariants(t, s)
}

// TestSizesEmptyAfterRelease: what a holder, a waiter and a queued id put
// in the tables is gone once they are released and polled.
func TestSizesEmptyAfterRelease(t *testing.T) {
	s := New(Config{Wake: func(uint64) {}})
	key := QueueKey{Kind: KindTable, Name: "ns:t"}
	if !s.Acquire(1, key, nil, TableLocks("ns", "t", Exclusive)) {
		t.Fatal("first acquire refused")
	}
	if s.Acquire(2, key, nil, TableLocks("ns", "t", Shared)) {
		t.Fatal("conflicting acquire granted")
	}
	s.AddBack(3, key)
	if z := s.Sizes(); z != (Sizes{Queued: 1, Queues: 1, Levels: 1, Locks: 2, Holders: 1, LockWaiters: 1}) {
		t.Fatalf("sizes %+v", z)
	}
	s.Release(1)
	s.Release(2)
	if id, ok := s.Poll(0); !ok || id != 3 {
		t.Fatalf("poll %d %v", id, ok)
	}
	if z := s.Sizes(); z != (Sizes{}) {
		t.Fatalf("sizes after release and poll %+v, want empty", z)
	}
}
