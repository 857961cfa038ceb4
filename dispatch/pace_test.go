package dispatch

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/clock"
)

func paced(pace time.Duration) func(*Config) {
	return func(c *Config) { c.Pace, c.MaxBatch, c.RetryBase = pace, 100, 10*time.Millisecond }
}

// A due retry is not paced, even when it comes sooner than Pace after the
// failed call started.
func TestPaceNeverDelaysARetry(t *testing.T) {
	h := newHarness(t, paced(50*time.Millisecond))
	a := target("a", 1)
	ops := h.dispatch(a, 33)
	c1 := h.nextCallOf("first", ops)
	h.answer(c1, status.Error(codes.Unavailable, "down"))
	h.clk.Advance(10 * time.Millisecond) // the retry is due; 10 ms < Pace
	c2 := h.nextCallOf("retry", ops)
	h.answer(c2, nil)
	h.collect(33)
}

// Pause across a pace timer: the timer fires while paused, Resume sends.
func TestPaceAcrossPauseAndResume(t *testing.T) {
	h := newHarness(t, paced(20*time.Millisecond))
	a := target("a", 1)
	first := h.dispatch(a, 33)
	h.answer(h.nextCallOf("first", first), nil)
	h.clk.Advance(5 * time.Millisecond)
	second := h.dispatch(a, 33) // paced
	h.d.Pause("op")
	h.clk.Advance(30 * time.Millisecond)
	h.wantBatches(1)
	h.d.Resume("op")
	h.wantBatches(2)
	h.answer(h.nextCallOf("second", second), nil)
	// A lone op afterwards waits its Delay.
	h.clk.Advance(time.Second)
	lone := h.dispatch(a, 1)
	h.wantBatches(2)
	h.clk.Advance(DefaultDelay - time.Millisecond)
	h.wantBatches(2)
	h.clk.Advance(time.Millisecond)
	h.wantBatches(3)
	h.answer(h.nextCallOf("lone", lone), nil)
	h.collect(67)
}

// MaxBatch exactly is sent at once; one fewer is paced.
func TestPaceSendsAFullBatchAtOnce(t *testing.T) {
	h := newHarness(t, paced(20*time.Millisecond))
	a := target("a", 1)
	h.answer(h.nextCallOf("first", h.dispatch(a, 33)), nil)
	full := h.dispatch(a, 100)
	h.wantBatches(2)
	h.answer(h.nextCallOf("full", full), nil)
	almost := h.dispatch(a, 99)
	h.wantBatches(2)
	h.clk.Advance(20 * time.Millisecond)
	h.wantBatches(3)
	h.answer(h.nextCallOf("almost", almost), nil)
	h.collect(232)
}

// A paced buffer whose server is removed leaves no state that makes a
// later lone op skip its Delay.
func TestPaceLeavesNothingAfterRemoval(t *testing.T) {
	h := newHarness(t, paced(20*time.Millisecond))
	a := target("a", 1)
	h.answer(h.nextCallOf("first", h.dispatch(a, 33)), nil)
	h.dispatch(a, 33) // paced
	h.d.RemoveServer("a")
	for _, r := range h.collect(33 + 33)[33:] {
		if !errors.Is(r.Err, ErrServerRemoved) {
			t.Fatalf("%+v", r)
		}
	}
	lone := h.dispatch(a, 1)
	h.wantBatches(1)
	h.clk.Advance(DefaultDelay)
	h.wantBatches(2)
	h.answer(h.nextCallOf("lone", lone), nil)
	h.collect(1)
}

// countingClock is a Manual clock whose Now moves 1 ns at each reading, as
// a real clock's does between two readings, and that counts the timers
// armed.
type countingClock struct {
	*clock.Manual
	ns, armed atomic.Int64
}

func (c *countingClock) Now() time.Time { return c.Manual.Now().Add(time.Duration(c.ns.Add(1))) }
func (c *countingClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.armed.Add(1)
	return c.Manual.AfterFunc(d, f)
}

// With a clock that moves between two readings (the real one), ops into
// a buffer waiting on a timer do not re-arm it when its deadline stays the
// same: kick compares deadlines taken from one reading of the clock.
func TestPaceArmsOneTimerPerDeadline(t *testing.T) {
	clk := &countingClock{Manual: clock.NewManual(t0)}
	h := newHarness(t, func(c *Config) { c.Pace = 20 * time.Millisecond; c.Clock = clk })
	a := target("a", 1)
	h.dispatch(a, 20) // a trickle under MinBatch: one delay timer
	if n := clk.armed.Load(); n != 1 {
		t.Errorf("%d timers armed for 20 ops waiting on one delay, want 1", n)
	}
}
