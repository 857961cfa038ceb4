package scheduler

import (
	"slices"
	"sync/atomic"
)

// Event: suspended procedures wait on it until woken.
//
// An Event starts not ready. Its waiters are guarded by the mutex of the
// Scheduler they were parked through; an Event must only be used with one
// Scheduler. Ready may be called from anywhere.
type Event struct {
	description string
	ready       atomic.Bool
	waiters     []waiter // guarded by the Scheduler's mutex
}

// NewEvent returns a not-ready event; description names it in Why and
// String (e.g. "open region 1588230740 on rs1").
func NewEvent(description string) *Event {
	return &Event{description: description}
}

// Ready reports whether the event has been woken and not suspended since.
func (ev *Event) Ready() bool { return ev.ready.Load() }

// Description returns the description given to NewEvent.
func (ev *Event) Description() string { return ev.description }

// String returns the description and the state, e.g. "open region r1 (not ready)".
func (ev *Event) String() string {
	if ev.Ready() {
		return ev.description + " (ready)"
	}
	return ev.description + " (not ready)"
}

// WaitEvent parks id on ev unless ev is ready; returns true if parked.
//
// Parking an id already parked on ev is a no-op that returns true; an id
// parked on another event is moved to ev (a procedure waits for one event
// at a time).
func (s *Scheduler) WaitEvent(ev *Event, id uint64, key QueueKey) bool {
	if s.wake == nil {
		checkKind(key.Kind) // key is used to re-queue id when woken
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.ready.Load() {
		return false
	}
	if old, ok := s.eventWait[id]; ok {
		if old == ev {
			return true
		}
		s.removeEventWaiterLocked(old, id)
	}
	ev.waiters = append(ev.waiters, waiter{id: id, key: key})
	s.eventWait[id] = ev
	return true
}

// WakeEvent marks ev ready and hands every waiter to Config.Wake in order.
// Without a Wake callback the waiters go to the front of their queues, the
// earliest foremost. Waking a ready event is a no-op.
func (s *Scheduler) WakeEvent(ev *Event) {
	s.mu.Lock()
	ev.ready.Store(true)
	woken := ev.waiters
	ev.waiters = nil
	for _, w := range woken {
		delete(s.eventWait, w.id)
	}
	s.unlockAndWake(woken)
}

// SuspendEvent marks ev not ready again, so later WaitEvent calls park.
func (s *Scheduler) SuspendEvent(ev *Event) {
	s.mu.Lock()
	ev.ready.Store(false)
	s.mu.Unlock()
}

// RemoveWaiter takes id off ev's waiters; reports whether it was there.
func (s *Scheduler) RemoveWaiter(ev *Event, id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.eventWait[id] != ev {
		return false
	}
	s.removeEventWaiterLocked(ev, id)
	return true
}

func (s *Scheduler) removeEventWaiterLocked(ev *Event, id uint64) {
	delete(s.eventWait, id)
	ev.waiters = slices.DeleteFunc(ev.waiters, func(w waiter) bool { return w.id == id })
}
