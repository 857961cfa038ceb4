package raftfsm

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"
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

// AwaitFuture waits for f's answer, asking giveUp every interval whether
// to stop waiting: raft may never answer (an Apply still in its batch
// queue at shutdown; a shutdown behind a disk write that never returns),
// and offers no notification of either, so the wait polls on wall-clock
// time, which only bounds how late it notices. The first non-nil error
// giveUp returns ends the wait with it, unless f answered meanwhile; stop
// closed (nil: never) ends it with raft.ErrRaftShutdown.
func AwaitFuture(f raft.Future, stop <-chan struct{}, interval time.Duration, giveUp func() error) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-stop:
			return raft.ErrRaftShutdown
		case <-tick.C:
			if err := giveUp(); err != nil {
				select {
				case answer := <-done:
					return answer
				default:
					return err
				}
			}
		}
	}
}

// IfShutDown is a giveUp for AwaitFuture: raft.ErrRaftShutdown once r has
// shut down.
func IfShutDown(r *raft.Raft) func() error {
	return func() error {
		if r.State() == raft.Shutdown {
			return raft.ErrRaftShutdown
		}
		return nil
	}
}
