package domain

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/scheduler"
)

// lockWait is an external lock procedure's wake-up: released by its
// holder, or its lease expired.
type lockWait struct {
	ev       *scheduler.Event
	released bool
	expired  bool
	// restated is a lease length the holder asked for that the procedure
	// has yet to persist (0: none).
	restated time.Duration
	// ended: the procedure let the lock go (its lease is gone); kept
	// until its end is visible, so that a heartbeat racing the end does
	// not grant the finished lock a lease again (see lockRecord).
	ended bool
}

func (s *services) lockWaitOf(id uint64) *lockWait {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lockWaitLocked(id)
}

// lockWaitLocked is lockWaitOf for a caller that holds s.mu.
func (s *services) lockWaitLocked(id uint64) *lockWait {
	w := s.locks[id]
	if w == nil {
		w = &lockWait{ev: lockEvent(id)}
		s.locks[id] = w
	}
	return w
}

// lockEvent is the event a wait for lock id's release parks on.
func lockEvent(id uint64) *scheduler.Event {
	return scheduler.NewEvent(fmt.Sprintf("release of lock %d", id))
}

// lockFlags reports what happened to lock id, and re-arms its event for
// the next wait.
func (s *services) lockFlags(id uint64) (released, expired bool, ev *scheduler.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.lockWaitLocked(id)
	if !w.released && !w.expired && w.ev.Ready() {
		w.ev = lockEvent(id)
	}
	return w.released, w.expired, w.ev
}

// lockRecord reports what this leader's record says of lock id: released
// by its holder, expired, and let go by its procedure (ended) in this term.
func (s *services) lockRecord(id uint64) (released, expired, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.locks[id]; w != nil {
		return w.released, w.expired, w.ended
	}
	return false, false, false
}

func (s *services) setLock(id uint64, released, expired bool) {
	w := s.lockWaitOf(id)
	s.mu.Lock()
	w.released = w.released || released
	w.expired = w.expired || expired
	ev := w.ev
	s.mu.Unlock()
	s.x.Wake(ev)
}

// restateLock asks lock id's procedure to persist lease length d (a
// holder's restatement), waking it if it holds its locks.
func (s *services) restateLock(id uint64, d time.Duration) {
	w := s.lockWaitOf(id)
	s.mu.Lock()
	w.restated = d
	ev := w.ev
	s.mu.Unlock()
	s.x.Wake(ev)
}

// takeRestated returns the lease length lock id's holder restated since
// the last call, or 0.
func (s *services) takeRestated(id uint64) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.locks[id]
	if w == nil {
		return 0
	}
	d := w.restated
	w.restated = 0
	return d
}

// dropLock lets go of lock id's lease as its procedure ends. Its record
// stays, marked ended, until the end is visible (forgetLock).
func (s *services) dropLock(id uint64) {
	s.mu.Lock()
	if w := s.locks[id]; w != nil {
		w.ended = true
	}
	s.mu.Unlock()
	s.lockLeases.Release(lockHolder(id))
}

// forgetLock drops what the leader keeps of lock id once its procedure's
// end is visible (a release, an expiry, a withdrawal's rollback alike):
// its lease and its record.
func (s *services) forgetLock(id uint64) {
	s.mu.Lock()
	delete(s.locks, id)
	s.mu.Unlock()
	s.lockLeases.Release(lockHolder(id))
}

// onLockLeaseExpired is the lock lease monitor's OnExpire.
func (s *services) onLockLeaseExpired(info lease.Info) {
	idStr, ok := strings.CutPrefix(info.Holder, "lock/")
	if !ok {
		return
	}
	id, err := strconv.ParseUint(idStr, 10, 64)
	if err != nil {
		return
	}
	s.log.Warn("external lock expired: its holder stopped heartbeating", "lock_id", id)
	s.setLock(id, false, true)
}

// logLeaseErr logs a failure to grant lock id its lease (a lease manager
// that could not be made): the lock then lives until it is released.
func (s *services) logLeaseErr(id uint64, err error) {
	if err != nil {
		s.log.Error("external lock: no lease granted", "lock_id", id, "error", err)
	}
}
