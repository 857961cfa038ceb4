package domain

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/procedure"
)

// Bounds of an external lock's own lease (catalog.LockRequest.Lease).
const (
	// MinLockLease is the shortest lease a lock may ask for: a lease must
	// outlast a few heartbeats and a leader election, or a live holder
	// loses its lock to a hiccup.
	MinLockLease = time.Second
	// MaxLockLease is the longest: a holder that dies without releasing
	// blocks the locked work for this long.
	MaxLockLease = time.Hour
)

// lockLeaseSteps are the lease lengths a lock gets: an asked length is
// rounded up to the next step. A lease.Manager expires leases of one hard
// limit in renewal order, so each length has its own manager (and monitor);
// the steps keep their number small whatever lengths clients ask for.
// Rounding up is harmless: the holder is told the length it got, and
// renewing early is always allowed.
var lockLeaseSteps = []time.Duration{
	time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second, 10 * time.Second,
	15 * time.Second, 20 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute,
	5 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour,
}

// lockLeaseLength is the lease a lock asking for asked gets: def (the
// cluster's Config.LockLease) for 0, else asked rounded up to a step. A
// length outside [MinLockLease, MaxLockLease] is an error.
func lockLeaseLength(asked, def time.Duration) (time.Duration, error) {
	if asked == 0 {
		return def, nil
	}
	if asked < MinLockLease || asked > MaxLockLease {
		return 0, procedure.Errorf(errInvalid, "lock lease %v: want between %v and %v (or 0 for the cluster's default, %v)", asked, MinLockLease, MaxLockLease, def)
	}
	i, _ := slices.BinarySearch(lockLeaseSteps, asked)
	return lockLeaseSteps[i], nil
}

// lockLeases are the leases of external lock holders ("lock/<id>"), each
// under the length its lock asked for. Safe for concurrent use.
type lockLeases struct {
	base lease.Config // everything but the limits

	mu      sync.Mutex
	started bool
	stopped bool
	byLen   map[time.Duration]*lease.Manager
	lenOf   map[string]time.Duration // holder → the length of its lease
}

func newLockLeases(base lease.Config) *lockLeases {
	return &lockLeases{base: base, byLen: map[time.Duration]*lease.Manager{}, lenOf: map[string]time.Duration{}}
}

// managerLocked returns the manager of leases of length d, made (and
// started, if the set is) on first use.
func (s *lockLeases) managerLocked(d time.Duration) (*lease.Manager, error) {
	if m := s.byLen[d]; m != nil {
		return m, nil
	}
	c := s.base
	c.SoftLimit, c.HardLimit = d/2, d
	c.MonitorInterval = min(c.MonitorInterval, d/2)
	onExpire := c.OnExpire
	c.OnExpire = func(in lease.Info) {
		s.mu.Lock()
		if s.lenOf[in.Holder] == d {
			delete(s.lenOf, in.Holder)
		}
		s.mu.Unlock()
		if onExpire != nil {
			onExpire(in)
		}
	}
	m, err := lease.New(c)
	if err != nil {
		return nil, err
	}
	s.byLen[d] = m
	if s.started && !s.stopped {
		m.Start()
	}
	return m, nil
}

// Grant gives holder a lease of length d, moving it from a lease of another
// length if it had one (a holder may restate its length).
func (s *lockLeases) Grant(holder string, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.lenOf[holder]; ok && old != d {
		s.byLen[old].Release(holder)
	}
	m, err := s.managerLocked(d)
	if err != nil {
		return err
	}
	m.Grant(holder)
	s.lenOf[holder] = d
	return nil
}

// Length returns the length of holder's lease, if it has one.
func (s *lockLeases) Length(holder string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.lenOf[holder]
	return d, ok
}

// Renew renews holder's lease, failing as lease.Manager.Renew does.
//
// It renews under the set's lock, so that a concurrent Grant moving the
// lease to another length cannot make it fail as unknown (Grant takes the
// same locks in the same order; the monitors take the set's lock only
// after their sweep, outside their own).
func (s *lockLeases) Renew(holder string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.lenOf[holder]
	if !ok {
		return fmt.Errorf("%w: %q", lease.ErrUnknownHolder, holder)
	}
	return s.byLen[d].Renew(holder)
}

// Release ends holder's lease without reporting an expiry.
func (s *lockLeases) Release(holder string) {
	s.mu.Lock()
	d, ok := s.lenOf[holder]
	delete(s.lenOf, holder)
	m := s.byLen[d]
	s.mu.Unlock()
	if ok {
		m.Release(holder)
	}
}

// Counts sums the leases of every length by state.
func (s *lockLeases) Counts() map[lease.State]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[lease.State]int{lease.Live: 0, lease.Suspect: 0, lease.Expired: 0}
	for _, m := range s.byLen {
		for st, n := range m.Counts() {
			out[st] += n
		}
	}
	return out
}

// Start starts every manager's monitor, and those made later.
func (s *lockLeases) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = true
	for _, m := range s.byLen {
		m.Start()
	}
}

// Stop stops every monitor; it waits for passes under way, so it must not
// be called from OnExpire.
func (s *lockLeases) Stop() {
	s.mu.Lock()
	s.stopped = true
	ms := make([]*lease.Manager, 0, len(s.byLen))
	for _, m := range s.byLen {
		ms = append(ms, m)
	}
	s.mu.Unlock()
	for _, m := range ms {
		m.Stop()
	}
}
