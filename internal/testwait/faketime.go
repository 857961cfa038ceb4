package testwait

import (
	"testing/synctest"
	"time"
)

// FakeTimeTo, inside a testing/synctest bubble, moves the bubble's fake
// clock to start+d and returns once every goroutine in the bubble is
// durably blocked again: every timer due by then has fired and its work
// is done. The sleep is the fake clock's advance, the behaviour a timing
// test asserts on, not a wait for things to settle: time moves only when
// all of the bubble waits, so the moment is exact whatever the machine's
// load. Outside a bubble it panics (synctest.Wait), so it can never turn
// into a real sleep racing the code under test.
func FakeTimeTo(start time.Time, d time.Duration) {
	time.Sleep(time.Until(start.Add(d)))
	synctest.Wait()
}
