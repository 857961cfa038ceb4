package scheduler

import "testing"

// checkHoldEntries: every hold's entry is the one the table files under
// its lock, and lists the holder in the hold's mode (a stale pointer, to
// an entry deleted or replaced, fails here before it can mislead a
// Release).
func checkHoldEntries(t testing.TB, s *Scheduler) {
	t.Helper()
	checkLockInvariants(t, s)
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, hs := range s.holds {
		if len(hs) == 0 {
			t.Fatalf("%d: empty holds kept", id)
		}
		for _, h := range hs {
			k := lockKey{h.Type, h.Name}
			if h.e == nil || h.e.key != k || s.locks[k] != h.e {
				t.Fatalf("%d holds %v through an entry the table does not hold (stale)", id, h.Lock)
			}
		}
	}
}
