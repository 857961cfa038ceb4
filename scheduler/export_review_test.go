package scheduler

import "testing"

// CheckHoldEntries exports checkHoldEntries to the external review tests.
func CheckHoldEntries(t testing.TB, s *Scheduler) { checkHoldEntries(t, s) }
