package admin

import (
	"maps"
	"net"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// The trail's quotas: each record counts against its holder (its
// principal; an anonymous caller's, its address), and a refusal against
// its source address too. A holder past its quota loses its own oldest
// record, never another's; a space past its ceiling loses the oldest
// record of the holder that has the most. So a caller flooding the trail,
// refused or served, only ever pushes out its own records, or those of a
// holder with at least as many.

// Group name prefixes of an auditIndex.
const (
	holderGroup = "p:"
	addrGroup   = "a:"
)

// auditIndex is the leader's view of one space's records, by group,
// oldest first: built by a scan when unknown, then kept up to date by the
// writes the leader makes.
type auditIndex struct {
	groupsOf map[string][]string // live key -> its groups
	groups   map[string]*auditGroup
	// dirty are the groups that may be past their quota.
	dirty map[string]bool
}

// auditGroup is a group's keys in order, with the dead ones (pruned)
// dropped lazily from the front.
type auditGroup struct {
	keys []string
	live int
}

func newAuditIndex() *auditIndex {
	return &auditIndex{groupsOf: map[string][]string{}, groups: map[string]*auditGroup{}, dirty: map[string]bool{}}
}

// auditHolder is whose quota rec counts against: its principal, or for
// an anonymous caller (no access control, no credentials) its address.
func auditHolder(rec *adminpb.AuditRecord) string {
	p := rec.GetPrincipal()
	if p == "" || p == kindAnonymous {
		return kindAnonymous + "@" + auditHost(rec.GetPeer())
	}
	return p
}

// auditHost is the host of a record's source address (which may lack a
// port, or be empty).
func auditHost(peer string) string {
	if h, _, err := net.SplitHostPort(peer); err == nil {
		return h
	}
	return peer
}

// groupsFor are the groups rec counts in within sp.
func (sp *auditSpace) groupsFor(rec *adminpb.AuditRecord) []string {
	g := []string{holderGroup + auditHolder(rec)}
	if sp.perAddr > 0 {
		if h := auditHost(rec.GetPeer()); h != "" {
			g = append(g, addrGroup+h)
		}
	}
	return g
}

// quota is the most records group g may keep in sp.
func (sp *auditSpace) quota(g string) int {
	if strings.HasPrefix(g, addrGroup) {
		return min(sp.perAddr, sp.max)
	}
	return min(sp.perHolder, sp.max)
}

func (x *auditIndex) add(key string, groups []string) {
	if _, ok := x.groupsOf[key]; ok {
		return
	}
	x.groupsOf[key] = groups
	for _, g := range groups {
		gr := x.groups[g]
		if gr == nil {
			gr = &auditGroup{}
			x.groups[g] = gr
		}
		gr.keys = append(gr.keys, key)
		gr.live++
		x.dirty[g] = true
	}
}

func (x *auditIndex) remove(key string) {
	groups, ok := x.groupsOf[key]
	if !ok {
		return
	}
	delete(x.groupsOf, key)
	for _, g := range groups {
		if gr := x.groups[g]; gr != nil {
			if gr.live--; gr.live <= 0 {
				delete(x.groups, g)
				delete(x.dirty, g)
			} else if len(gr.keys) > 2*gr.live+16 {
				// Dead keys behind a live one are dropped in one pass,
				// not walked over by every later look.
				gr.keys = slices.DeleteFunc(gr.keys, func(k string) bool { _, live := x.groupsOf[k]; return !live })
			}
		}
	}
}

// oldest is group g's oldest live key that skip lets go.
func (x *auditIndex) oldest(g string, skip func(string) bool) (string, bool) {
	gr := x.groups[g]
	if gr == nil {
		return "", false
	}
	for len(gr.keys) > 0 {
		if _, live := x.groupsOf[gr.keys[0]]; live {
			break
		}
		gr.keys = gr.keys[1:]
	}
	for _, k := range gr.keys {
		if _, live := x.groupsOf[k]; live && !skip(k) {
			return k, true
		}
	}
	return "", false
}

// biggestAt is the holder group with the most records among those of
// address group g.
func (x *auditIndex) biggestAt(g string) string {
	n := map[string]int{}
	best := ""
	for _, k := range x.groups[g].keys {
		if groups, live := x.groupsOf[k]; live {
			h := groups[0]
			n[h]++
			if best == "" || n[h] > n[best] || (n[h] == n[best] && h < best) {
				best = h
			}
		}
	}
	return best
}

// biggestHolders are the holder groups, the one with the most records
// first.
func (x *auditIndex) biggestHolders() []string {
	var out []string
	for g := range x.groups {
		if strings.HasPrefix(g, holderGroup) {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		if d := x.groups[b].live - x.groups[a].live; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return out
}

// indexLocked is sp's index, built by a scan if unknown. l.mu is held.
func (l *auditLog) indexLocked(sp *auditSpace, sc domainScanner) *auditIndex {
	if sp.idx != nil {
		return sp.idx
	}
	x := newAuditIndex()
	sc.DomainScan(sp.prefix, func(k string, v []byte) bool {
		if l.pruning[k] {
			return true
		}
		var r adminpb.AuditRecord
		if proto.Unmarshal(v, &r) != nil {
			// Unreadable: it counts against no one, and is pruned by age
			// or never; it holds no one's place either.
			return true
		}
		x.add(k, sp.groupsFor(&r))
		return true
	})
	sp.idx = x
	return x
}

// quotaPrunes are the deletions due in sp by its quotas and ceiling, at
// most limit, noted in its index. l.mu is held.
func (l *auditLog) quotaPrunes(sp *auditSpace, x *auditIndex, limit int) []raftfsm.Mutation {
	var out []raftfsm.Mutation
	skip := func(k string) bool { return l.pruning[k] || l.started[k] }
	del := func(k string) {
		out = append(out, raftfsm.Del(k))
		x.remove(k)
		l.pruning[k] = true
	}
	for _, g := range slices.Sorted(maps.Keys(x.dirty)) {
		for x.groups[g] != nil && x.groups[g].live > sp.quota(g) && len(out) < limit {
			var k string
			var ok bool
			if strings.HasPrefix(g, addrGroup) {
				// Callers share addresses (a NAT, a proxy, one host's
				// users): the one of them holding the most there pays.
				victim := x.biggestAt(g)
				k, ok = x.oldest(g, func(k string) bool { return skip(k) || x.groupsOf[k][0] != victim })
			} else {
				k, ok = x.oldest(g, skip)
			}
			if !ok {
				break
			}
			del(k)
		}
		if gr := x.groups[g]; gr == nil || gr.live <= sp.quota(g) {
			delete(x.dirty, g)
		}
	}
	for len(x.groupsOf) > sp.max && len(out) < limit {
		deleted := false
		for _, g := range x.biggestHolders() {
			if k, ok := x.oldest(g, skip); ok {
				del(k)
				deleted = true
				break
			}
		}
		if !deleted {
			break
		}
	}
	return out
}
