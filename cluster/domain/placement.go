package domain

import (
	"time"

	"github.com/baton-dev/baton/cluster/lease"
)

// liveTargets lists the servers new regions may go to: live in the
// replicated state and live (not suspect, not revoked) by their lease.
func (s *services) liveTargets(r reader) (map[string]Server, error) {
	servers, err := scanServers(r)
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
// one create spread evenly without a full scan each.
const loadCacheTTL = 250 * time.Millisecond

// pick chooses the live server with the fewest regions among candidates
// (ties by id), preferring want if it is a candidate, and counts the pick.
func (s *services) pick(r reader, candidates map[string]Server, want string) (string, error) {
	if len(candidates) == 0 {
		return "", nil
	}
	// Picks are serialized, so concurrent assignments (a create's
	// children run side by side) each see the others' picks.
	s.pickMu.Lock()
	defer s.pickMu.Unlock()
	s.mu.Lock()
	stale := s.load == nil || s.d.cfg.Clock.Now().Sub(s.loadAt) > loadCacheTTL
	s.mu.Unlock()
	if stale {
		load := map[string]int{}
		err := scanRegions(r, func(_ string, rg Region) bool {
			if rg.Server != "" && (rg.State == RegionOpen || rg.State == RegionOpening) {
				load[rg.Server]++
			}
			return true
		})
		if err != nil {
			return "", err
		}
		s.mu.Lock()
		s.load, s.loadAt = load, s.d.cfg.Clock.Now()
		s.mu.Unlock()
	}
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
	return best, nil
}
