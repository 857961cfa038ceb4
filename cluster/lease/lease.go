package lease

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/enumname"
)

// State is where a holder's lease stands at a given moment. The zero value
// is Unknown, so a State nobody set is never mistaken for Live.
type State int

const (
	// Unknown: the manager holds no lease for the holder.
	Unknown State = iota
	// Live: renewed within the soft limit.
	Live
	// Suspect: the soft limit has passed but not the hard limit. Nothing new
	// should be assigned to the holder.
	Suspect
	// Expired: the hard limit has passed. The lease can no longer be renewed;
	// the monitor removes it and reports it.
	Expired
)

// String returns "live", "suspect", "expired" or "unknown".
func (s State) String() string {
	if name, ok := enumname.Lookup(s, stateNames); ok {
		return name
	}
	return "unknown"
}

var stateNames = []string{Live: "live", Suspect: "suspect", Expired: "expired"}

var (
	// ErrUnknownHolder is returned for a holder the manager has no lease for
	// (never granted, released, or expired and already reported).
	ErrUnknownHolder = errors.New("lease: unknown holder")
	// ErrExpired is returned for a lease past its hard limit: it cannot be
	// renewed or extended; the holder must be granted a new lease.
	ErrExpired = errors.New("lease: expired")
)

// Info is a snapshot of one lease.
type Info struct {
	Holder      string
	LastRenewal time.Time
	// State is computed when the snapshot is taken.
	State State
	// Entities are the entities the lease owns, sorted.
	Entities []string
	// Granted is when the lease was first granted; renewals and re-grants of
	// a lease that has not expired keep it.
	Granted time.Time
}

// lease is one holder's lease. It is a node of the manager's list ordered by
// last renewal (intrusive, so renewing allocates nothing).
type lease struct {
	holder   string
	granted  time.Time
	last     time.Time
	entities map[string]struct{}

	prev, next *lease

	// detached: the lease expired before the monitor reached it and its
	// holder was then re-granted or released. It is no longer found by
	// holder, but it stays in the list, in its place, so the monitor still
	// reports its expiry in order: an expiry is never silently dropped.
	detached bool
}

// Manager holds leases by holder, by last renewal and by entity. All its
// methods are safe for concurrent use.
type Manager struct {
	soft, hard, maxPass time.Duration
	interval            time.Duration
	cfg                 Config

	mu       sync.RWMutex
	byHolder map[string]*lease
	byEntity map[string]*lease
	// root is the sentinel of a circular list ordered by last renewal:
	// root.next is the oldest lease, root.prev the newest.
	root lease

	// passMu serializes monitor passes, so OnExpire calls never overlap and
	// reports from successive passes stay oldest first.
	passMu sync.Mutex

	mon monitor
}

// New returns a Manager for cfg. The monitor is not running until Start.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Manager{
		soft:     cfg.SoftLimit,
		hard:     cfg.HardLimit,
		maxPass:  cfg.MaxPassTime,
		interval: cfg.MonitorInterval,
		cfg:      cfg,
		byHolder: make(map[string]*lease),
		byEntity: make(map[string]*lease),
	}
	m.root.next, m.root.prev = &m.root, &m.root
	return m, nil
}

// Grant gives holder a lease owning exactly entities, and returns it.
//
// If holder already has a lease within its hard limit, that lease is renewed
// and its entities are replaced by entities (Granted is kept), so applying
// the same replicated grant twice is harmless. If the existing lease is past
// its hard limit, it is not revived: it stays expired and the monitor still
// reports it, and holder gets a new lease.
//
// An entity owned by another lease moves to this one: the last claim wins.
// Deciding whether a claim is allowed (locks, assignment) is the caller's job.
func (m *Manager) Grant(holder string, entities ...string) Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Clock.Now()
	l := m.byHolder[holder]
	if l != nil && m.stateAt(l, now) == Expired {
		m.detachLocked(l)
		l = nil
	}
	if l == nil {
		l = &lease{holder: holder, granted: now, last: now, entities: make(map[string]struct{}, len(entities))}
		m.byHolder[holder] = l
		m.insertLocked(l)
	} else {
		m.touchLocked(l, now)
		keep := make(map[string]struct{}, len(entities))
		for _, e := range entities {
			keep[e] = struct{}{}
		}
		for e := range l.entities {
			if _, ok := keep[e]; !ok {
				m.dropEntityLocked(l, e)
			}
		}
	}
	for _, e := range entities {
		m.claimLocked(l, e)
	}
	return m.infoLocked(l, now)
}

// Renew records a sign of life from holder. It fails with ErrUnknownHolder
// if holder has no lease and with ErrExpired if the lease is past its hard
// limit, even if the monitor has not removed it yet.
func (m *Manager) Renew(holder string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Clock.Now()
	l, err := m.usableLocked(holder, now)
	if err != nil {
		return err
	}
	m.touchLocked(l, now)
	return nil
}

// Release ends holder's lease and frees its entities, without reporting an
// expiry. It returns false if holder has no lease, or if the lease is already
// past its hard limit: then it is not released but stays expired, and the
// monitor reports it as for any other expiry (recovery is owed once the hard
// limit has passed, whatever arrives afterwards).
func (m *Manager) Release(holder string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.byHolder[holder]
	if l == nil {
		return false
	}
	if m.stateAt(l, m.cfg.Clock.Now()) == Expired {
		m.detachLocked(l)
		return false
	}
	m.removeLocked(l)
	return true
}

// AddEntity makes holder's lease own entity (taking it from any other lease).
// It does not renew the lease: only the holder's own Grant and Renew are signs
// of life. It fails with ErrUnknownHolder or ErrExpired as Renew does.
// Refusing to assign to a suspect holder is the caller's policy (see State).
func (m *Manager) AddEntity(holder, entity string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.usableLocked(holder, m.cfg.Clock.Now())
	if err != nil {
		return err
	}
	m.claimLocked(l, entity)
	return nil
}

// RemoveEntity removes entity from holder's lease, if that lease owns it.
// It works in any state: the caller has dealt with the entity, so an expiry
// report must not claim it any more.
func (m *Manager) RemoveEntity(holder, entity string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.byHolder[holder]; l != nil && m.byEntity[entity] == l {
		m.dropEntityLocked(l, entity)
	}
}

// HolderOf returns the holder whose lease owns entity. The lease may be
// suspect or expired (until its expiry is reported); ask State for that.
func (m *Manager) HolderOf(entity string) (string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	l := m.byEntity[entity]
	if l == nil {
		return "", false
	}
	return l.holder, true
}

// Get returns a snapshot of holder's lease.
func (m *Manager) Get(holder string) (Info, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	l := m.byHolder[holder]
	if l == nil {
		return Info{}, false
	}
	return m.infoLocked(l, m.cfg.Clock.Now()), true
}

// State returns holder's state now: Unknown if it has no lease.
func (m *Manager) State(holder string) State {
	m.mu.RLock()
	defer m.mu.RUnlock()
	l := m.byHolder[holder]
	if l == nil {
		return Unknown
	}
	return m.stateAt(l, m.cfg.Clock.Now())
}

// List returns every lease found by holder, oldest renewal first (ties in the
// order they were renewed). Leases detached by a re-grant or a late release
// are not listed; they are only reported by the monitor.
func (m *Manager) List() []Info {
	m.mu.RLock()
	defer m.mu.RUnlock()
	now := m.cfg.Clock.Now()
	out := make([]Info, 0, len(m.byHolder))
	for l := m.root.next; l != &m.root; l = l.next {
		if !l.detached {
			out = append(out, m.infoLocked(l, now))
		}
	}
	return out
}

// Counts returns how many leases found by holder are in each state now
// (as List would say, without building it: for metrics). Leases are kept
// sorted by renewal, so the count stops walking at the first live one.
func (m *Manager) Counts() map[State]int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	now := m.cfg.Clock.Now()
	out := map[State]int{Live: 0, Suspect: 0, Expired: 0}
	n := 0
	for l := m.root.next; l != &m.root; l = l.next {
		if l.detached {
			continue
		}
		st := m.stateAt(l, now)
		if st == Live {
			break
		}
		out[st]++
		n++
	}
	out[Live] = len(m.byHolder) - n
	return out
}

// GraceAll gives every lease found by holder a renewal time of now, expired
// ones included. A new leader calls it after loading the replicated grants:
// renewals are not replicated, so the old times say nothing about the
// holders, and each must get a full hard limit to reach the new leader.
// Detached leases stay expired: their expiry was already decided here.
func (m *Manager) GraceAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Clock.Now()
	var live []*lease
	for l := m.root.next; l != &m.root; l = l.next {
		if !l.detached {
			live = append(live, l)
		}
	}
	// Re-append in the current order, so ties keep it.
	for _, l := range live {
		m.unlinkLocked(l)
		l.last = now
		m.insertLocked(l)
	}
}

// CheckNow runs one monitor pass: it removes leases past their hard limit,
// oldest first, until it meets one that is not or MaxPassTime (by the Clock)
// has gone by, whichever comes first, but always removes at least one if any
// is due. It then calls OnExpire for each, outside the lock, and returns them.
func (m *Manager) CheckNow() []Info {
	m.passMu.Lock()
	defer m.passMu.Unlock()
	expired := m.sweep()
	if m.cfg.OnExpire != nil {
		for _, in := range expired {
			m.cfg.OnExpire(in)
		}
	}
	return expired
}

func (m *Manager) sweep() []Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	start := m.cfg.Clock.Now()
	var out []Info
	// The list is sorted by renewal, so the first lease within the hard limit
	// ends the pass: every later one is newer.
	for l := m.root.next; l != &m.root && start.Sub(l.last) > m.hard; l = m.root.next {
		in := m.infoLocked(l, start)
		m.removeLocked(l)
		out = append(out, in)
		if m.cfg.Clock.Now().Sub(start) >= m.maxPass {
			break
		}
	}
	return out
}

func (m *Manager) stateAt(l *lease, now time.Time) State {
	switch age := now.Sub(l.last); {
	case age > m.hard:
		return Expired
	case age > m.soft:
		return Suspect
	default:
		return Live
	}
}

// usableLocked returns holder's lease if it may be renewed or extended.
func (m *Manager) usableLocked(holder string, now time.Time) (*lease, error) {
	l := m.byHolder[holder]
	if l == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownHolder, holder)
	}
	if m.stateAt(l, now) == Expired {
		return nil, fmt.Errorf("%w: %q last renewed %v ago (hard limit %v)", ErrExpired, holder, now.Sub(l.last), m.hard)
	}
	return l, nil
}

func (m *Manager) infoLocked(l *lease, now time.Time) Info {
	in := Info{Holder: l.holder, LastRenewal: l.last, State: m.stateAt(l, now), Granted: l.granted}
	if len(l.entities) > 0 {
		in.Entities = make([]string, 0, len(l.entities))
		for e := range l.entities {
			in.Entities = append(in.Entities, e)
		}
		slices.Sort(in.Entities)
	}
	return in
}

func (m *Manager) claimLocked(l *lease, entity string) {
	if o := m.byEntity[entity]; o != nil && o != l {
		delete(o.entities, entity)
	}
	m.byEntity[entity] = l
	l.entities[entity] = struct{}{}
}

func (m *Manager) dropEntityLocked(l *lease, entity string) {
	delete(l.entities, entity)
	if m.byEntity[entity] == l {
		delete(m.byEntity, entity)
	}
}

// detachLocked hides an expired lease from lookups by holder while it waits,
// still in the list and still owning its entities, for the monitor.
func (m *Manager) detachLocked(l *lease) {
	if m.byHolder[l.holder] == l {
		delete(m.byHolder, l.holder)
	}
	l.detached = true
}

// removeLocked forgets l. It relies on two invariants (checked by the
// tests) to delete without looking first, which halves the map work of a
// big expiry wave: an attached lease is the one found by its holder, and
// every entity a lease owns is indexed to it.
func (m *Manager) removeLocked(l *lease) {
	m.unlinkLocked(l)
	if !l.detached {
		delete(m.byHolder, l.holder)
	}
	for e := range l.entities {
		delete(m.byEntity, e)
	}
}

func (m *Manager) touchLocked(l *lease, now time.Time) {
	m.unlinkLocked(l)
	l.last = now
	m.insertLocked(l)
}

// insertLocked links l after the newest lease not renewed later than l.
// The clock is read under the lock, so that is the newest lease and this is
// O(1); the walk back only matters for a clock that steps backwards.
func (m *Manager) insertLocked(l *lease) {
	p := m.root.prev
	for p != &m.root && p.last.After(l.last) {
		p = p.prev
	}
	l.prev, l.next = p, p.next
	p.next.prev = l
	p.next = l
}

func (m *Manager) unlinkLocked(l *lease) {
	l.prev.next = l.next
	l.next.prev = l.prev
	l.prev, l.next = nil, nil
}
