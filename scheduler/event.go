package scheduler

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Event: suspended procedures wait on it until woken.
//
// An Event starts not ready. It may outlive the Scheduler it was used with
// and be used with the next one (a master that regains leadership builds a
// new executor in the same process): each Scheduler wakes and removes only
// the waiters it parked itself, and Close takes them all off. Ready may be
// called from anywhere.
type Event struct {
	description string
	ready       atomic.Bool
	// mu guards waiters. It is taken inside a Scheduler's mutex, never
	// the other way round: waiters of two Schedulers share the slice.
	mu      sync.Mutex
	waiters []eventWaiter
}

// eventWaiter is a procedure parked on an Event through Scheduler s: ids
// are s's, and mean another procedure, or nothing, in another Scheduler.
type eventWaiter struct {
	s *Scheduler
	waiter
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
// at a time). A closed Scheduler parks nothing (it runs nothing either),
// so that it leaves no waiter behind on an Event that outlives it.
func (s *Scheduler) WaitEvent(ev *Event, id uint64, key QueueKey) bool {
	if s.wake == nil {
		checkKind(key.Kind) // key is used to re-queue id when woken
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.ready.Load() {
		return false
	}
	if s.closed {
		return true
	}
	if old, ok := s.eventWait[id]; ok {
		if old == ev {
			return true
		}
		s.removeEventWaiterLocked(old, id)
	}
	ev.mu.Lock()
	ev.waiters = append(ev.waiters, eventWaiter{s: s, waiter: waiter{id: id, key: key}})
	ev.mu.Unlock()
	s.eventWait[id] = ev
	return true
}

// WakeEvent marks ev ready and hands every waiter s parked on it to
// Config.Wake in order. Without a Wake callback the waiters go to the
// front of their queues, the earliest foremost. Waking a ready event is a
// no-op. Waiters another Scheduler parked on ev are left alone: their ids
// are not s's.
func (s *Scheduler) WakeEvent(ev *Event) {
	s.mu.Lock()
	ev.ready.Store(true)
	var woken []waiter
	ev.mu.Lock()
	ev.waiters = slices.DeleteFunc(ev.waiters, func(w eventWaiter) bool {
		if w.s != s {
			return false
		}
		woken = append(woken, w.waiter)
		return true
	})
	if len(ev.waiters) == 0 {
		ev.waiters = nil // let go of the backing array, as before
	}
	ev.mu.Unlock()
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
	ev.mu.Lock()
	ev.waiters = slices.DeleteFunc(ev.waiters, func(w eventWaiter) bool { return w.s == s && w.id == id })
	ev.mu.Unlock()
}

// dropEventWaitersLocked takes every waiter s parked off its event, for
// Close: an Event can outlive s, and its waiters must not outlive s.
func (s *Scheduler) dropEventWaitersLocked() {
	for id, ev := range s.eventWait {
		s.removeEventWaiterLocked(ev, id)
	}
}
