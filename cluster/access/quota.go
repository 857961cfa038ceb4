package access

import (
	"maps"
	"net"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
)

// The trail's quotas: each record counts against its holder (its
// principal; an anonymous caller's, its address), and a refusal against
// its source address too. A holder past its quota loses its own oldest
// record, never another's; a space past its ceiling loses the oldest
// record of the holder that has the most. So a caller flooding the trail,
// refused or served, only ever pushes out its own records, or those of a
// holder with at least as many. A key that holds a group of records
// (AuditRecordGroup, one holder's) goes whole: its holder may keep up to
// a group's records fewer than its quota, never another's fewer.

// Group name prefixes of an Index.
const (
	holderGroup = "p:"
	addrGroup   = "a:"
)

// Index is the leader's view of one space's records, by group,
// oldest first: built by a scan when unknown, then kept up to date by the
// writes the leader makes. It counts records, not keys: a key may hold a
// group of records (AuditRecordGroup), all of one holder, which a quota
// takes out whole.
type Index struct {
	groupsOf map[string]indexed // live key -> its groups
	groups   map[string]*group
	// dirty are the groups that may be past their quota.
	dirty map[string]bool
	// records is how many records the live keys hold.
	records int
}

// indexed is what the index knows of a live key: the groups it counts
// in, and how many records it holds.
type indexed struct {
	groups  []string
	records int
}

// group is a group's keys in order, with the dead ones (pruned)
// dropped lazily from the front; live counts its records, liveKeys its
// keys.
type group struct {
	keys           []string
	live, liveKeys int
}

func NewIndex() *Index {
	return &Index{groupsOf: map[string]indexed{}, groups: map[string]*group{}, dirty: map[string]bool{}}
}

// Holder is whose quota rec counts against: its principal, or for
// an anonymous caller (no access control, no credentials) its address.
func Holder(rec *adminpb.AuditRecord) string {
	p := rec.GetPrincipal()
	if p == "" || p == KindAnonymous {
		return KindAnonymous + "@" + Host(rec.GetPeer())
	}
	return p
}

// Host is the host of a record's source address (which may lack a
// port, or be empty).
func Host(peer string) string {
	if h, _, err := net.SplitHostPort(peer); err == nil {
		return h
	}
	return peer
}

// groupsFor are the groups rec counts in within sp.
func (sp *Space) GroupsFor(rec *adminpb.AuditRecord) []string {
	g := []string{holderGroup + Holder(rec)}
	if sp.PerAddr > 0 {
		if h := Host(rec.GetPeer()); h != "" {
			g = append(g, addrGroup+h)
		}
	}
	return g
}

// quota is the most records group g may keep in sp.
func (sp *Space) quota(g string) int {
	if strings.HasPrefix(g, addrGroup) {
		return min(sp.PerAddr, sp.Max)
	}
	return min(sp.PerHolder, sp.Max)
}

// Add counts key, holding records records (at least one), in groups.
func (x *Index) Add(key string, groups []string, records int) {
	if _, ok := x.groupsOf[key]; ok {
		return
	}
	records = max(records, 1)
	x.groupsOf[key] = indexed{groups, records}
	x.records += records
	for _, g := range groups {
		gr := x.groups[g]
		if gr == nil {
			gr = &group{}
			x.groups[g] = gr
		}
		gr.keys = append(gr.keys, key)
		gr.live += records
		gr.liveKeys++
		x.dirty[g] = true
	}
}

func (x *Index) Remove(key string) {
	k, ok := x.groupsOf[key]
	if !ok {
		return
	}
	delete(x.groupsOf, key)
	x.records -= k.records
	for _, g := range k.groups {
		if gr := x.groups[g]; gr != nil {
			gr.live -= k.records
			if gr.liveKeys--; gr.liveKeys <= 0 {
				delete(x.groups, g)
				delete(x.dirty, g)
			} else if len(gr.keys) > 2*gr.liveKeys+16 {
				// Dead keys behind a live one are dropped in one pass,
				// not walked over by every later look.
				gr.keys = slices.DeleteFunc(gr.keys, func(k string) bool { _, live := x.groupsOf[k]; return !live })
			}
		}
	}
}

// oldest is group g's oldest live key that skip lets go.
func (x *Index) oldest(g string, skip func(string) bool) (string, bool) {
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
func (x *Index) biggestAt(g string) string {
	n := map[string]int{}
	best := ""
	for _, k := range x.groups[g].keys {
		if ik, live := x.groupsOf[k]; live {
			h := ik.groups[0]
			n[h] += ik.records
			if best == "" || n[h] > n[best] || (n[h] == n[best] && h < best) {
				best = h
			}
		}
	}
	return best
}

// biggestHolders are the holder groups, the one with the most records
// first.
func (x *Index) biggestHolders() []string {
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

// Space is one key space of the trail, within its own bounds.
type Space struct {
	Prefix    string
	Max       int // the ceiling
	PerHolder int // each principal's quota
	PerAddr   int // each source address's quota; 0: none
}

// BuildIndex is sp's index as scan finds it, leaving out the keys skip
// names (deletions in flight).
func (sp *Space) BuildIndex(scan func(prefix string, fn func(string, []byte) bool), skip func(string) bool) *Index {
	x := NewIndex()
	scan(sp.Prefix, func(k string, v []byte) bool {
		if skip(k) {
			return true
		}
		// A group's records are all one holder's: its first says whose.
		recs := StoredRecords(strings.TrimPrefix(k, sp.Prefix), v)
		var r adminpb.AuditRecord
		if len(recs) == 0 || proto.Unmarshal(recs[0].Value, &r) != nil {
			// Unreadable: it counts against no one, and is pruned by age
			// or never; it holds no one's place either.
			return true
		}
		x.Add(k, sp.GroupsFor(&r), len(recs))
		return true
	})
	return x
}

// QuotaPrunes are the deletions due in sp by its quotas and ceiling, at
// most limit, taken out of x; skip names the keys that may not go (a
// deletion in flight, a record whose outcome is yet to be written).
func (x *Index) QuotaPrunes(sp *Space, limit int, skip func(string) bool) []string {
	var out []string
	del := func(k string) {
		out = append(out, k)
		x.Remove(k)
	}
	for _, g := range slices.Sorted(maps.Keys(x.dirty)) {
		for x.groups[g] != nil && x.groups[g].live > sp.quota(g) && len(out) < limit {
			var k string
			var ok bool
			if strings.HasPrefix(g, addrGroup) {
				// Callers share addresses (a NAT, a proxy, one host's
				// users): the one of them holding the most there pays.
				victim := x.biggestAt(g)
				k, ok = x.oldest(g, func(k string) bool { return skip(k) || x.groupsOf[k].groups[0] != victim })
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
	for x.records > sp.Max && len(out) < limit {
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
