package lease

import (
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/clock"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// testConfig is the default config on a Manual clock, recording expiries.
func testConfig(c clock.Clock, rec *recorder) Config {
	cfg := DefaultConfig()
	cfg.Clock = c
	if rec != nil {
		cfg.OnExpire = rec.add
	}
	return cfg
}

func newManual(t *testing.T, mutate func(*Config)) (*Manager, *clock.Manual, *recorder) {
	t.Helper()
	c := clock.NewManual(t0)
	rec := &recorder{}
	cfg := testConfig(c, rec)
	if mutate != nil {
		mutate(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m, c, rec
}

// recorder collects OnExpire calls.
type recorder struct {
	mu  sync.Mutex
	got []Info
}

func (r *recorder) add(in Info) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, in)
}

func (r *recorder) holders() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return holders(r.got)
}

func holders(ins []Info) []string {
	out := make([]string, 0, len(ins))
	for _, in := range ins {
		out = append(out, in.Holder)
	}
	return out
}

// setClock is a clock a test can set to any time, backwards included, and
// that can move forward by step on every Now (to make a monitor pass "take
// time" deterministically). It does not schedule: only CheckNow is used
// with it.
type setClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *setClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.now
	c.now = c.now.Add(c.step)
	return n
}

func (c *setClock) set(t time.Time, step time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now, c.step = t, step
}

func (c *setClock) AfterFunc(time.Duration, func()) clock.Timer {
	panic("setClock does not schedule")
}

// checkInvariants verifies the three structures agree.
func checkInvariants(t *testing.T, m *Manager) {
	t.Helper()
	m.mu.RLock()
	defer m.mu.RUnlock()
	inList := make(map[*lease]bool)
	var prev *lease
	for l := m.root.next; l != &m.root; l = l.next {
		if l.next.prev != l || l.prev.next != l {
			t.Fatalf("list links broken at %q", l.holder)
		}
		if prev != nil && prev.last.After(l.last) {
			t.Fatalf("list not sorted: %q (%v) before %q (%v)", prev.holder, prev.last, l.holder, l.last)
		}
		if inList[l] {
			t.Fatalf("%q twice in list", l.holder)
		}
		inList[l] = true
		if !l.detached && m.byHolder[l.holder] != l {
			t.Fatalf("%q in list but not found by holder", l.holder)
		}
		prev = l
	}
	for h, l := range m.byHolder {
		if !inList[l] || l.holder != h || l.detached {
			t.Fatalf("byHolder[%q] is not a listed, attached lease for it", h)
		}
	}
	for e, l := range m.byEntity {
		if !inList[l] {
			t.Fatalf("entity %q points to a lease not in the list", e)
		}
		if _, ok := l.entities[e]; !ok {
			t.Fatalf("entity %q points to %q, which does not own it", e, l.holder)
		}
	}
	for l := range inList {
		for e := range l.entities {
			if m.byEntity[e] != l {
				t.Fatalf("%q owns %q but the index disagrees", l.holder, e)
			}
		}
	}
}
