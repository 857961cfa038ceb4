package admin

import (
	"testing"
	"time"
)

// The raise loop does not probe every member each tick for good while one
// stays old: its wait doubles up to raiseHeldMax while a member holds the
// raise back, and falls back to the base once nothing does.
func TestRaiseLoopBacksOffWhileHeld(t *testing.T) {
	base := 250 * time.Millisecond
	wait := base
	var waits []time.Duration
	for range 10 {
		wait = nextRaiseWait(wait, base, true)
		waits = append(waits, wait)
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, raiseHeldMax, raiseHeldMax, raiseHeldMax, raiseHeldMax}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits while held: %v, want %v", waits, want)
		}
	}
	if got := nextRaiseWait(wait, base, false); got != base {
		t.Fatalf("wait once not held: %v, want %v", got, base)
	}
	// A base above the bound is kept.
	if got := nextRaiseWait(time.Minute, time.Minute, true); got != time.Minute {
		t.Fatalf("held with a base of a minute: %v", got)
	}
}
