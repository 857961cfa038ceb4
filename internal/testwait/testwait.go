// Package testwait is how Baton's tests wait: for a condition they then
// assert, with a deadline, never for a moment in time. A test that sleeps
// "to let things settle" passes on an idle laptop and fails on a loaded
// 2-core CI machine; a test that waits for what it asserts only gets
// slower there.
//
// The deadline is a bound on a failure, not a claim about speed: pick it
// generously (seconds), since a passing run returns as soon as the
// condition holds. Conditions are polled, starting at 1 ms and backing off
// to 25 ms, so a condition that holds at once costs nothing and one that
// takes seconds costs few calls.
package testwait

import (
	"fmt"
	"testing"
	"time"
)

const (
	firstPoll = time.Millisecond
	maxPoll   = 25 * time.Millisecond
)

// Until polls cond until it holds or d has passed, and reports whether it
// held. For callers that fail in their own words, or that must not fail
// (a cleanup, a goroutine other than the test's).
func Until(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	poll := firstPoll
	for {
		if cond() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		timer := time.NewTimer(min(poll, left))
		<-timer.C
		poll = min(2*poll, maxPoll)
	}
}

// For fails the test (t.Fatalf) unless cond holds within d; what names the
// condition in the failure ("leader elected", "region r1 open on rs2").
// Call it from the test's goroutine only, as with t.Fatal.
func For(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// ForNil fails the test unless check returns nil within d. Each non-nil
// answer says why the condition does not hold yet; the last one is in the
// failure, which tells far more than "timed out".
func ForNil(t testing.TB, d time.Duration, what string, check func() error) {
	t.Helper()
	var last error
	if !Until(d, func() bool { last = check(); return last == nil }) {
		t.Fatalf("timed out after %v waiting for %s: %v", d, what, last)
	}
}

// Err is ForNil for callers that are not on the test's goroutine or that
// add context of their own: nil if check returned nil within d, else an
// error naming what and check's last answer.
func Err(d time.Duration, what string, check func() error) error {
	var last error
	if Until(d, func() bool { last = check(); return last == nil }) {
		return nil
	}
	return fmt.Errorf("timed out after %v waiting for %s: %w", d, what, last)
}
