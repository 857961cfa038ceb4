package domain

import (
	"context"
	"time"

	"github.com/baton-dev/baton/procedure"
)

// after returns a channel closed once dur has passed on the domain's
// clock, and a stop that releases its timer.
func (d *Domain) after(dur time.Duration) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	t := d.cfg.Clock.AfterFunc(dur, func() { close(ch) })
	return ch, func() { t.Stop() }
}

// withTimeout is context.WithTimeout on the domain's clock, so tests on a
// manual clock decide when it runs out. Its cause is
// context.DeadlineExceeded.
func (d *Domain) withTimeout(ctx context.Context, dur time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	t := d.cfg.Clock.AfterFunc(dur, func() { cancel(context.DeadlineExceeded) })
	return ctx, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

// watchProc returns a channel closed at procedure id's next persisted
// transition or parking behind a lock, and an unwatch to call once the caller stops waiting.
func (s *services) watchProc(id uint64) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	s.watchMu.Lock()
	if s.watchers == nil {
		s.watchers = map[uint64]map[chan struct{}]struct{}{}
	}
	if s.watchers[id] == nil {
		s.watchers[id] = map[chan struct{}]struct{}{}
	}
	s.watchers[id][ch] = struct{}{}
	s.watchMu.Unlock()
	return ch, func() {
		s.watchMu.Lock()
		defer s.watchMu.Unlock()
		if ws := s.watchers[id]; ws != nil {
			delete(ws, ch)
			if len(ws) == 0 {
				delete(s.watchers, id)
			}
		}
	}
}

// onTransition is the executor's change listener: it wakes the watchers of the
// procedure that moved. It runs on a worker, and inside Submit, whose
// callers may hold s.mu: it takes only watchMu and only closes channels.
func (s *services) onTransition(info procedure.Change) {
	s.wakeWatchers(info.ID)
	if info.State.Terminal() {
		s.wakeAll(s.budget.onEnded(info.ID, info.ParentID))
	}
	if info.Type == TypeLock && info.State.Terminal() {
		// s.mu may be held by this call's caller: forgotten apart.
		go s.forgetLock(info.ID)
	}
	if info.Type == TypeCreateTable && info.State.Terminal() {
		// A create that ends without its rollback step succeeding (a
		// bypass, an abort of the rollback) would leave, for the rest of
		// the term, the regions its failed attempts saw closed (noteClosed).
		// s.mu may be held by this call's caller: forgotten apart.
		go s.forgetClosed(info.ID)
		go s.forgetFirstOpens(info.ID)
	}
}

// onLockWait is the executor's lock-wait listener: a procedure parked
// behind a conflicting lock has not moved, but AcquireLock's caller is
// owed a WAITING now rather than at the end of its grace.
func (s *services) onLockWait(id uint64) { s.wakeWatchers(id) }

func (s *services) wakeWatchers(id uint64) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	for ch := range s.watchers[id] {
		close(ch)
	}
	delete(s.watchers, id)
}
