package domain

import (
	"maps"
	"time"

	"github.com/baton-dev/baton/cluster/lease"
)

// liveTargets lists the servers new regions may go to: live in the
// replicated state and live (not suspect, not revoked) by their lease.
func (s *services) liveTargets(r reader) (map[string]Server, error) {
	servers, err := s.servers.scan(r)
	if err != nil {
		return nil, err
	}
	for id, srv := range servers {
		ref := ServerRef{id, srv.StartCode}
		if srv.State != ServerLive || s.leases.State(holderOf(ref)) != lease.Live || s.revoked(ref) {
			delete(servers, id)
		}
	}
	return servers, nil
}

// loadCacheTTL bounds how stale the region counts used to pick targets
// may be; picks made meanwhile are counted in, so the many assignments of
// one create spread evenly without a full scan each. A scan that takes
// long (a million regions) is repeated less often: at most every
// loadScanShare × its duration, so scans take at most 1/loadScanShare of
// one core (at 1/10, 7% of a 1 M-region leader's CPU during a bulk open
// went to them). What the counts miss meanwhile (regions closed, moved or
// gone with a crashed server) only skews the balance a little until the
// next scan: correctness never depends on them.
const (
	loadCacheTTL    = 250 * time.Millisecond
	loadScanShare   = 40
	maxLoadCacheTTL = 30 * time.Second
)

// pick chooses the live server with the fewest regions among candidates
// (ties by id), preferring want if it is a candidate, and counts the pick.
func (s *services) pick(r reader, candidates map[string]Server, want string) (string, error) {
	if len(candidates) == 0 {
		return "", nil
	}
	if err := s.refreshLoad(r); err != nil {
		return "", err
	}
	// Picks are serialized, so concurrent assignments (a create's
	// children run side by side) each see the others' picks.
	s.mu.Lock()
	defer s.mu.Unlock()
	best := ""
	if _, ok := candidates[want]; ok && want != "" {
		best = want
	} else {
		for id := range candidates {
			if best == "" || s.load[id] < s.load[best] || s.load[id] == s.load[best] && id < best {
				best = id
			}
		}
	}
	s.load[best]++
	if s.picked == nil {
		s.picked = map[string]int{}
	}
	s.picked[best]++
	return best, nil
}

// refreshLoad counts the regions per server again if the counts are
// stale. One caller scans, outside any lock; the others pick meanwhile
// from the counts they have (a scan of every region record holds no pick
// up).
func (s *services) refreshLoad(r reader) error {
	clk := s.d.cfg.Clock
	s.mu.Lock()
	ttl := min(max(loadCacheTTL, loadScanShare*s.loadScan), maxLoadCacheTTL)
	if s.load != nil && (s.loadScanning || clk.Now().Sub(s.loadAt) <= ttl) {
		s.mu.Unlock()
		return nil
	}
	s.loadScanning = true
	// The picks made from here on may be missing from the records the
	// scan reads: they are added to its counts. Several callers scan at
	// once while there are no counts yet, each then installing its own.
	pickedBefore := maps.Clone(s.picked)
	s.mu.Unlock()
	began := clk.Now()
	load := map[string]int{}
	err := scanRegions(r, func(_ string, rg Region) bool {
		if rg.Server != "" && (rg.State == RegionOpen || rg.State == RegionOpening) {
			load[rg.Server]++
		}
		return true
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loadScanning = false
	if err != nil {
		return err
	}
	for id, n := range s.picked {
		load[id] += n - pickedBefore[id]
	}
	now := clk.Now()
	s.load, s.loadAt, s.loadScan = load, now, now.Sub(began)
	return nil
}
