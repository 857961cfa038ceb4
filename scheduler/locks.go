package scheduler

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/baton-dev/baton/internal/enumname"
)

// Mode of a lock.
type Mode uint8

const (
	Shared    Mode = iota // compatible with other shared holders
	Exclusive             // compatible with no other holder outside the family
)

// String returns "shared" or "exclusive".
func (m Mode) String() string { return enumname.Format(m, modeNames, "mode(%d)") }

var modeNames = []string{Shared: "shared", Exclusive: "exclusive"}

// LockType is the kind of entity a lock protects. Locks of one request are
// taken in LockType order, then by name, which is what makes all-or-nothing
// acquisition of many regions deadlock-free.
type LockType uint8

// The kinds of entity, in acquisition order: a namespace's lock before its
// tables', a table's before its regions'; servers and peers (cluster
// members) apart.
const (
	LockNamespace LockType = iota
	LockTable
	LockRegion
	LockServer
	LockPeer
)

// String returns "namespace", "table", "region", "server" or "peer".
func (t LockType) String() string { return enumname.Format(t, lockTypeNames, "locktype(%d)") }

var lockTypeNames = []string{LockNamespace: "namespace", LockTable: "table", LockRegion: "region", LockServer: "server", LockPeer: "peer"}

// Lock is one lock a procedure asks for.
type Lock struct {
	Type LockType
	Name string
	Mode Mode
}

// String renders the lock as e.g. "table ns:t (exclusive)".
func (l Lock) String() string {
	return fmt.Sprintf("%s %s (%s)", l.Type, l.Name, l.Mode)
}

// TableName is the lock and queue name of table in namespace ns: "ns:table".
func TableName(ns, table string) string { return ns + ":" + table }

// NamespaceLocks is the request for namespace ns in mode m.
func NamespaceLocks(ns string, m Mode) []Lock {
	return []Lock{{LockNamespace, ns, m}}
}

// TableLocks is the request for a table: its namespace shared and the table
// "ns:table" in mode m.
func TableLocks(ns, table string, m Mode) []Lock {
	return []Lock{
		{LockNamespace, ns, Shared},
		{LockTable, TableName(ns, table), m},
	}
}

// RegionLocks is the request for regions of one table: the namespace
// shared, the table shared and every region exclusive, regions sorted and
// deduplicated. Region names are used as given; they must be unique across
// tables (HBase's encoded region names are).
func RegionLocks(ns, table string, regions ...string) []Lock {
	rs := slices.Clone(regions)
	slices.Sort(rs)
	rs = slices.Compact(rs)
	out := make([]Lock, 0, 2+len(rs))
	out = append(out,
		Lock{LockNamespace, ns, Shared},
		Lock{LockTable, TableName(ns, table), Shared})
	for _, r := range rs {
		out = append(out, Lock{LockRegion, r, Exclusive})
	}
	return out
}

// ServerLocks is the request for server in mode m.
func ServerLocks(server string, m Mode) []Lock {
	return []Lock{{LockServer, server, m}}
}

// PeerLocks is the request for replication peer in mode m.
func PeerLocks(peer string, m Mode) []Lock {
	return []Lock{{LockPeer, peer, m}}
}

type lockKey struct {
	typ  LockType
	name string
}

func compareLocks(a, b Lock) int {
	if c := cmp.Compare(a.Type, b.Type); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// lockEntry is one lock in the table. It exists while anyone holds it or
// waits for it, and is deleted as soon as neither is true.
type lockEntry struct {
	key     lockKey
	excl    uint64 // exclusive holder, if hasExcl
	hasExcl bool
	shared  map[uint64]struct{} // shared holders
	waiters []waiter            // parked procedures, arrival order
}

func (e *lockEntry) idle() bool {
	return !e.hasExcl && len(e.shared) == 0 && len(e.waiters) == 0
}

// normalize sorts a request by (Type, Name) and merges duplicates, keeping
// the stronger mode.
func normalize(locks []Lock) []Lock {
	req := slices.Clone(locks)
	slices.SortFunc(req, func(a, b Lock) int {
		if c := compareLocks(a, b); c != 0 {
			return c
		}
		return cmp.Compare(b.Mode, a.Mode) // exclusive first
	})
	return slices.CompactFunc(req, func(a, b Lock) bool { return compareLocks(a, b) == 0 })
}

// family reports whether holder is id or one of its ancestors.
func family(holder, id uint64, ancestors []uint64) bool {
	return holder == id || slices.Contains(ancestors, holder)
}

// covered reports whether id already has lock e in a mode at least m,
// itself or through an ancestor.
func (e *lockEntry) covered(id uint64, ancestors []uint64, m Mode) bool {
	if e.hasExcl && family(e.excl, id, ancestors) {
		return true
	}
	if m == Exclusive {
		return false
	}
	if _, ok := e.shared[id]; ok {
		return true
	}
	for _, a := range ancestors {
		if _, ok := e.shared[a]; ok {
			return true
		}
	}
	return false
}

// blocks reports whether e keeps id from taking it in mode m.
func (e *lockEntry) blocks(id uint64, ancestors []uint64, m Mode) bool {
	if e == nil || e.covered(id, ancestors, m) {
		return false
	}
	if e.hasExcl {
		return true // held exclusively outside id's family
	}
	if m == Shared {
		// FIFO: a shared request does not overtake queued waiters, or a
		// stream of readers would starve a writer.
		return len(e.waiters) > 0
	}
	// Exclusive: every shared holder must be id's family (a child may
	// take exclusively what its ancestor holds shared).
	for h := range e.shared {
		if !family(h, id, ancestors) {
			return true
		}
	}
	return len(e.shared) == 0 && len(e.waiters) > 0
}

// Acquire takes every lock in locks for id, all or nothing. ancestors are
// the ids of id's parent, grandparent, ... : a lock held by an ancestor is
// inherited. When not granted, id is parked in the wait queue of the first
// conflicting lock, remembered with key, and later handed to Config.Wake.
//
// In detail: the request is sorted by (Type, Name) and duplicates merged
// (exclusive wins). A lock is compatible with the request when
//   - id holds it already in a mode at least as strong (idempotent), or an
//     ancestor does (inherited: not recorded as a hold of id, so releasing
//     id leaves the ancestor's lock alone);
//   - an exclusive request: every holder is id or an ancestor;
//   - a shared request: no one outside id's family holds it exclusively and
//     nobody is queued waiting for it.
//
// Asking exclusively for a lock id holds shared upgrades it. Calling
// Acquire while parked on a lock first takes id out of that wait queue.
func (s *Scheduler) Acquire(id uint64, key QueueKey, ancestors []uint64, locks []Lock) bool {
	if s.wake == nil {
		checkKind(key.Kind) // key is used to re-queue id when woken
	}
	req := normalize(locks)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancelLockWaitLocked(id)
	var buf [8]*lockEntry
	es := buf[:0]
	for _, r := range req {
		e := s.locks[lockKey{r.Type, r.Name}]
		if e.blocks(id, ancestors, r.Mode) {
			s.seq++
			e.waiters = append(e.waiters, waiter{id: id, key: key, mode: r.Mode, seq: s.seq})
			s.lockWait[id] = e
			return false
		}
		es = append(es, e)
	}
	s.grantLocked(id, ancestors, req, es)
	return true
}

// TryAcquire is Acquire without the wait: it takes every lock in locks for
// id if all are free to it now (by Acquire's rules, queued waiters
// included), and otherwise takes none and parks nothing. It leaves a lock
// wait id is parked in alone. A procedure about to be spawned uses it to
// hold its locks before it exists (procedure.Context.AddLockedChild).
func (s *Scheduler) TryAcquire(id uint64, ancestors []uint64, locks []Lock) bool {
	req := normalize(locks)
	s.mu.Lock()
	defer s.mu.Unlock()
	var buf [8]*lockEntry
	es := buf[:0]
	for _, r := range req {
		e := s.locks[lockKey{r.Type, r.Name}]
		if e.blocks(id, ancestors, r.Mode) {
			return false
		}
		es = append(es, e)
	}
	s.grantLocked(id, ancestors, req, es)
	return true
}

// grantLocked takes the normalized request req for id, none of whose locks
// blocks it; es[i] is req[i]'s entry in the table, nil if it has none.
// Each lock is looked up once per request: at a million regions the
// table's lookups by name are a measurable share of a region's step.
func (s *Scheduler) grantLocked(id uint64, ancestors []uint64, req []Lock, es []*lockEntry) {
	hs := s.holds[id]
	if hs == nil {
		hs = make([]hold, 0, len(req))
	}
	for i, r := range req {
		e := es[i]
		if e == nil {
			k := lockKey{r.Type, r.Name}
			e = &lockEntry{key: k}
			s.locks[k] = e
		}
		if e.covered(id, ancestors, r.Mode) {
			continue
		}
		if r.Mode == Exclusive {
			delete(e.shared, id)
			e.excl, e.hasExcl = id, true
		} else {
			if e.shared == nil {
				e.shared = make(map[uint64]struct{})
			}
			e.shared[id] = struct{}{}
		}
		hs = recordHold(hs, r, e)
	}
	if len(hs) > 0 {
		s.holds[id] = hs
	}
}

// hold is a lock an id holds itself, and its entry in the table: the
// entry stays there while it is held (it is not idle), so Release finds it
// without a lookup by name.
type hold struct {
	Lock
	e *lockEntry
}

// recordHold adds l, whose entry is e, to hs, or raises the mode of hs's
// hold of it.
func recordHold(hs []hold, l Lock, e *lockEntry) []hold {
	for i := range hs {
		if hs[i].e == e {
			hs[i].Mode = l.Mode
			return hs
		}
	}
	return append(hs, hold{l, e})
}

// cancelLockWaitLocked takes id out of the wait queue it is parked in.
func (s *Scheduler) cancelLockWaitLocked(id uint64) bool {
	e, ok := s.lockWait[id]
	if !ok {
		return false
	}
	delete(s.lockWait, id)
	e.waiters = slices.DeleteFunc(e.waiters, func(w waiter) bool { return w.id == id })
	if e.idle() {
		delete(s.locks, e.key)
	}
	return true
}

// CancelLockWait takes id out of the lock wait queue it is parked in, if
// any, without waking it; reports whether it was parked.
func (s *Scheduler) CancelLockWait(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancelLockWaitLocked(id)
}

// Release drops every lock id holds and wakes waiters.
//
// Every waiter of every lock id held is woken (they call Acquire again and
// either get their locks or park anew), in arrival order across all those
// locks. Inherited locks are not id's to drop. If id was itself parked on a
// lock it leaves that wait queue too, without being woken.
func (s *Scheduler) Release(id uint64) {
	s.mu.Lock()
	s.cancelLockWaitLocked(id)
	hs := s.holds[id]
	if len(hs) == 0 {
		s.mu.Unlock()
		return
	}
	delete(s.holds, id)
	var woken []waiter
	for _, h := range hs {
		e := h.e
		if e.hasExcl && e.excl == id {
			e.excl, e.hasExcl = 0, false
		}
		delete(e.shared, id)
		for _, w := range e.waiters {
			delete(s.lockWait, w.id)
		}
		woken = append(woken, e.waiters...)
		e.waiters = nil
		if e.idle() {
			delete(s.locks, e.key)
		}
	}
	slices.SortFunc(woken, func(a, b waiter) int { return cmp.Compare(a.seq, b.seq) })
	s.unlockAndWake(woken)
}

// Held returns the locks id holds itself (not those it inherits), sorted.
func (s *Scheduler) Held(id uint64) []Lock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldLocked(id)
}

func (s *Scheduler) heldLocked(id uint64) []Lock {
	hs := s.holds[id]
	if hs == nil {
		return nil
	}
	out := make([]Lock, len(hs))
	for i, h := range hs {
		out[i] = h.Lock
	}
	slices.SortFunc(out, compareLocks)
	return out
}

// LockInfo describes one lock that is held or waited for.
type LockInfo struct {
	Type LockType
	Name string
	// Exclusive reports whether Holder holds the lock exclusively.
	Exclusive bool
	Holder    uint64
	// Shared holders, ascending.
	Shared []uint64
	// Waiters are the parked ids in arrival order; Modes[i] is the mode
	// Waiters[i] asked for.
	Waiters []uint64
	Modes   []Mode
}

// Locks lists every lock that is held or waited for, sorted by type and
// name. It is a snapshot for operators; it allocates.
func (s *Scheduler) Locks() []LockInfo {
	s.mu.Lock()
	out := make([]LockInfo, 0, len(s.locks))
	for _, e := range s.locks {
		li := LockInfo{Type: e.key.typ, Name: e.key.name, Exclusive: e.hasExcl, Holder: e.excl}
		li.Shared = sortedIDs(e.shared)
		for _, w := range e.waiters {
			li.Waiters = append(li.Waiters, w.id)
			li.Modes = append(li.Modes, w.mode)
		}
		out = append(out, li)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b LockInfo) int {
		return compareLocks(Lock{Type: a.Type, Name: a.Name}, Lock{Type: b.Type, Name: b.Name})
	})
	return out
}

func sortedIDs(m map[uint64]struct{}) []uint64 {
	if len(m) == 0 {
		return nil
	}
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
