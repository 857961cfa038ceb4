package scheduler

import (
	"fmt"
	"sync"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/defaults"
	"github.com/baton-dev/baton/internal/enumname"
)

// Kind selects a run queue. Queues are tried in this order: every runnable
// meta procedure before any server procedure, and so on.
type Kind uint8

// The run queues, in the order they are served: meta procedures (the
// catalog's) first, then server procedures (crash recovery), then peer
// (membership) ones, then table procedures, fair among tables.
const (
	KindMeta Kind = iota
	KindServer
	KindPeer
	KindTable

	numKinds = int(KindTable) + 1
)

// String returns "meta", "server", "peer" or "table".
func (k Kind) String() string { return enumname.Format(k, kindNames, "kind(%d)") }

var kindNames = []string{KindMeta: "meta", KindServer: "server", KindPeer: "peer", KindTable: "table"}

// Table priorities (HBase: meta 3, system 2, user 1). Higher runs first;
// queues of equal priority are served round-robin.
const (
	PriorityUser   = 1
	PrioritySystem = 2
	PriorityMeta   = 3
)

// QueueKey names the per-entity queue a procedure waits in.
type QueueKey struct {
	Kind     Kind
	Name     string // entity: table "ns:table", server name, peer id; "" allowed
	Priority int    // within Kind; 0 is treated as PriorityUser
}

// String renders the key as "kind/name@priority", e.g. "table/ns:t@1".
func (k QueueKey) String() string {
	return fmt.Sprintf("%s/%s@%d", k.Kind, k.Name, effectivePriority(k.Priority))
}

func effectivePriority(p int) int {
	if p == 0 {
		return PriorityUser
	}
	return p
}

// Config of a Scheduler.
type Config struct {
	// Wake is called, outside the scheduler's lock, for every procedure
	// released from a lock wait queue or an event, in arrival order. When nil
	// the scheduler adds the procedure to the front of its queue itself.
	Wake func(id uint64)
	// Clock times Poll's timeout; nil is the wall clock.
	Clock clock.Clock
}

// Scheduler holds the run queues, the lock table and the event waiters of
// one executor. All of its methods are safe for concurrent use; one mutex
// guards everything, so a Scheduler's state is always consistent as a whole
// (a procedure is never seen both granted and parked, for instance).
type Scheduler struct {
	wake  func(id uint64)
	clock clock.Clock

	mu     sync.Mutex
	closed bool

	// Run queues.
	kinds       [numKinds]kindQueue
	queued      map[uint64]*entityQueue // id -> the entity queue holding it
	idle        []*pollWaiter           // blocked Polls, most recent last
	freeWaiters []*pollWaiter
	freeQueues  []*entityQueue
	freeLevels  []*level

	// Locks.
	locks    map[lockKey]*lockEntry
	holds    map[uint64][]hold     // locks each id holds itself (not inherited)
	lockWait map[uint64]*lockEntry // id -> the lock it is parked on
	seq      uint64                // arrival counter for lock waiters

	// Events.
	eventWait map[uint64]*Event // id -> the event it is parked on
}

// New returns an empty, open Scheduler.
func New(cfg Config) *Scheduler {
	s := &Scheduler{
		wake:      cfg.Wake,
		clock:     cfg.Clock,
		queued:    make(map[uint64]*entityQueue),
		locks:     make(map[lockKey]*lockEntry),
		holds:     make(map[uint64][]hold),
		lockWait:  make(map[uint64]*lockEntry),
		eventWait: make(map[uint64]*Event),
	}
	defaults.Set[clock.Clock](&s.clock, clock.Real{})
	for i := range s.kinds {
		s.kinds[i].byName = make(map[string]*entityQueue)
	}
	return s
}

// waiter is a procedure parked on a lock or an event, with the queue it goes
// back to when woken and Config.Wake is nil.
type waiter struct {
	id   uint64
	key  QueueKey
	mode Mode   // lock waiters: the mode asked for
	seq  uint64 // lock waiters: arrival order across all locks
}

// unlockAndWake hands woken procedures on, in the order given, and unlocks
// s.mu. With a Wake callback the calls happen after the unlock, so the
// callback may call back into the scheduler. Without one, the procedures are
// put at the front of their queues, the earliest foremost.
func (s *Scheduler) unlockAndWake(woken []waiter) {
	if len(woken) == 0 {
		s.mu.Unlock()
		return
	}
	if s.wake == nil {
		for i := len(woken) - 1; i >= 0; i-- {
			s.addLocked(woken[i].id, woken[i].key, true)
		}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	for _, w := range woken {
		s.wake(w.id)
	}
}

// Sizes counts what a Scheduler's tables hold. Every count is zero once
// nothing is queued, holds a lock, waits for one or waits on an event:
// an entry outliving the procedure it was made for is a leak (HBASE-28876).
type Sizes struct {
	// Queued is the number of ids in the run queues; Queues the entity
	// queues holding them, across kinds; Levels the priority levels in
	// rotation.
	Queued, Queues, Levels int
	// Locks is the number of lock entries (held or waited for); Holders
	// the ids holding a lock themselves; LockWaiters the ids parked on a
	// lock.
	Locks, Holders, LockWaiters int
	// EventWaiters is the number of ids parked on an event.
	EventWaiters int
}

// Sizes reports how many entries the scheduler's tables hold. It only
// reads them.
func (s *Scheduler) Sizes() Sizes {
	s.mu.Lock()
	defer s.mu.Unlock()
	z := Sizes{Queued: len(s.queued), Locks: len(s.locks), Holders: len(s.holds),
		LockWaiters: len(s.lockWait), EventWaiters: len(s.eventWait)}
	for i := range s.kinds {
		z.Queues += len(s.kinds[i].byName)
		z.Levels += len(s.kinds[i].levels)
	}
	return z
}
