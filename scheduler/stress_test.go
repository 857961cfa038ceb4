package scheduler

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestLockStressFamily: roots take a table (shared or exclusive) and run two
// children concurrently that lock regions of that table, inheriting the
// table; other roots lock regions directly. A model checks that no two
// holders outside one family ever hold conflicting modes of one lock.
func TestLockStressFamily(t *testing.T) {
	const (
		roots    = 8
		duration = 1500 * time.Millisecond
	)
	type holder struct {
		id, root uint64
		mode     Mode
	}
	var (
		mu      sync.Mutex
		held    = map[lockKey][]holder{}
		wakeMu  sync.Mutex
		wakeChs = map[uint64]chan struct{}{}
	)
	ch := func(id uint64) chan struct{} {
		wakeMu.Lock()
		defer wakeMu.Unlock()
		c, ok := wakeChs[id]
		if !ok {
			c = make(chan struct{}, 1)
			wakeChs[id] = c
		}
		return c
	}
	s := New(Config{Wake: func(id uint64) {
		select {
		case ch(id) <- struct{}{}:
		default:
		}
	}})
	related := func(a, b holder) bool {
		return a.id == b.id || a.id == b.root || b.id == a.root
	}
	enter := func(h0 holder, req []Lock) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range normalize(req) {
			k := lockKey{l.Type, l.Name}
			h := h0
			h.mode = l.Mode
			for _, o := range held[k] {
				if !related(h, o) && (h.mode == Exclusive || o.mode == Exclusive) {
					t.Errorf("%d (root %d) got %v while %d (root %d) holds it %v", h.id, h.root, l, o.id, o.root, o.mode)
				}
			}
			held[k] = append(held[k], h)
		}
	}
	leave := func(id uint64, req []Lock) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range normalize(req) {
			k := lockKey{l.Type, l.Name}
			hs := held[k]
			for i, o := range hs {
				if o.id == id {
					held[k] = append(hs[:i:i], hs[i+1:]...)
					break
				}
			}
		}
	}
	acquire := func(id uint64, anc []uint64, req []Lock) {
		for !s.Acquire(id, tbl("t"), anc, req) {
			<-ch(id)
		}
	}
	tables := []string{"t1", "t2"}
	regions := []string{"r1", "r2", "r3"}
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	for r := 1; r <= roots; r++ {
		wg.Add(1)
		go func(root uint64) {
			defer wg.Done()
			rng := newXorshift(root)
			for n := 0; time.Now().Before(deadline); n++ {
				x := rng.next()
				tb := tables[x%2]
				if x>>1%3 == 0 {
					// A root locking regions directly, no children.
					req := RegionLocks("ns", tb, tb+regions[x>>3%3])
					acquire(root, nil, req)
					enter(holder{id: root, root: root}, req)
					leave(root, req)
					s.Release(root)
					continue
				}
				req := TableLocks("ns", tb, Mode(x>>5%2))
				acquire(root, nil, req)
				enter(holder{id: root, root: root}, req)
				var cw sync.WaitGroup
				for c := uint64(1); c <= 2; c++ {
					child := root*100 + c
					creq := RegionLocks("ns", tb, tb+regions[(x>>(6+2*c))%3])
					cw.Add(1)
					go func() {
						defer cw.Done()
						acquire(child, []uint64{root}, creq)
						enter(holder{id: child, root: root}, creq)
						// Hold the locks across a few yields so that
						// other families' acquires run and contend with them.
						for range x >> (12 + c) % 50 {
							runtime.Gosched()
						}
						leave(child, creq)
						s.Release(child)
					}()
				}
				cw.Wait()
				leave(root, req)
				s.Release(root)
			}
		}(uint64(r))
	}
	wg.Wait()
	checkLockInvariants(t, s)
	if l := s.Locks(); len(l) != 0 {
		t.Fatalf("locks left: %v", l)
	}
}

// xorshift is the lock stress tests' cheap random stream, one per
// goroutine: seeded from the goroutine's id, each draws its own sequence,
// the same every run.
type xorshift uint64

func newXorshift(id uint64) *xorshift {
	x := xorshift(id * 0x9E3779B97F4A7C15)
	return &x
}

func (x *xorshift) next() uint64 {
	*x ^= *x << 13
	*x ^= *x >> 7
	*x ^= *x << 17
	return uint64(*x)
}
