package raftfsm

import (
	"context"
	"sync"
)

// appliedSignal wakes the goroutines waiting for the applied index to move
// (WaitApplied): publish closes the current channel and installs a new one,
// so a waiter that read the channel before checking the index can never
// miss the version that satisfies it.
type appliedSignal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (s *appliedSignal) current() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *appliedSignal) broadcast() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// publish makes st the state readers see and wakes WaitApplied callers.
func (f *FSM) publish(st *state) {
	f.st.Store(st)
	f.applied.broadcast()
}

// WaitApplied blocks until the FSM has applied the entry at index (or a
// snapshot at or past it), or ctx ends. A linearizable read waits here for
// its read index.
//
// Raft hands the FSM only command and configuration entries: an index
// that only a no-op or barrier entry holds is reached when the next command
// after it is applied. The cluster layer makes sure one follows (it commits
// a NOOP command when it becomes leader).
func (f *FSM) WaitApplied(ctx context.Context, index uint64) error {
	for {
		ch := f.applied.current()
		if f.AppliedIndex() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
