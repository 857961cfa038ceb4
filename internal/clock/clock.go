// Package clock abstracts time so that timeouts, backoff and leases can be
// tested without sleeping. Real is the wall clock; Manual only moves when a
// test advances it.
package clock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock tells the time and schedules callbacks.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a scheduled callback.
type Timer interface {
	// Stop cancels the callback; it reports whether it stopped it before it ran.
	Stop() bool
}

// Real is the system clock.
type Real struct{}

// Now implements Clock.
func (Real) Now() time.Time { return time.Now() }

// AfterFunc implements Clock.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Manual is a clock that moves only through Advance. The zero value is not
// usable; use NewManual.
type Manual struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers map[uint64]*manualTimer
}

type manualTimer struct {
	c   *Manual
	id  uint64
	at  time.Time
	f   func()
	seq uint64
}

// NewManual returns a Manual clock reading start.
func NewManual(start time.Time) *Manual {
	return &Manual{now: start, timers: make(map[uint64]*manualTimer)}
}

// Now implements Clock.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements Clock. A non-positive d fires on the next Advance.
func (c *Manual) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &manualTimer{c: c, id: c.seq, at: c.now.Add(d), f: f, seq: c.seq}
	c.timers[t.id] = t
	return t
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, ok := t.c.timers[t.id]
	delete(t.c.timers, t.id)
	return ok
}

// Advance moves the clock forward by d and runs, synchronously and in
// deadline order, every callback that became due.
func (c *Manual) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*manualTimer
	for id, t := range c.timers {
		if !t.at.After(c.now) {
			due = append(due, t)
			delete(c.timers, id)
		}
	}
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool {
		if due[i].at.Equal(due[j].at) {
			return due[i].seq < due[j].seq
		}
		return due[i].at.Before(due[j].at)
	})
	for _, t := range due {
		t.f()
	}
}

// Pending is the number of callbacks not yet run.
func (c *Manual) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Sleep waits d on clk, or until ctx ends (then it returns ctx.Err()). A
// wait that must stop when its caller gives up, on time a test can drive.
func Sleep(ctx context.Context, clk Clock, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	ch := make(chan struct{})
	t := clk.AfterFunc(d, func() { close(ch) })
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
