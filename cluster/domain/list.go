package domain

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
)

// The admin API's lists, paged (see catalog's list.go). Every page is read
// from one view of the FSM, so it is consistent within itself; between
// pages the walk resumes strictly after the key the previous page ended
// at. A table's regions are found by the prefix of their names
// ("<ns:name>,"), not through the table's record.

// regionStates and tableStates are the states a filter may name.
var (
	regionStates = []string{RegionOffline, RegionOpening, RegionOpen, RegionClosing, RegionClosed, RegionFailedOpen}
	tableStates  = []string{TableCreating, TableEnabled, TableDisabling, TableDisabled, TableEnabling, TableDeleting}
)

// stateFilter checks the states a query names against the known ones; a
// nil set keeps every state.
func stateFilter(what string, asked, known []string) (map[string]bool, error) {
	if len(asked) == 0 {
		return nil, nil
	}
	set := make(map[string]bool, len(asked))
	for _, s := range asked {
		if !slices.Contains(known, s) {
			return nil, procedure.Errorf(errInvalid, "unknown %s state %q (one of %s)", what, s, strings.Join(known, ", "))
		}
		set[s] = true
	}
	return set, nil
}

// pageSize applies a query's default and bound.
func pageSize(asked, def, most int) int {
	switch {
	case asked <= 0:
		return def
	case asked > most:
		return most
	}
	return asked
}

// resumeKey is the key a page starts strictly after: its token's record
// (key of it), or none for the first page (no token).
func resumeKey(token string, key func(string) string) string {
	if token == "" {
		return ""
	}
	return key(token)
}

// view is the local FSM's current state, which a whole page is read from.
func (d *Domain) view() (raftfsm.View, error) {
	n := d.nodeOrNil()
	if n == nil {
		return raftfsm.View{}, fmt.Errorf("node not attached yet: %w", cluster.ErrNotReady)
	}
	return n.FSM().View(), nil
}

// qualifyTable turns "name" into "default:name".
func qualifyTable(table string) string {
	if table != "" && !strings.Contains(table, ":") {
		return FullTableName(DefaultNamespace, table)
	}
	return table
}

// tableRegionPrefix is the key prefix of table full's regions.
func tableRegionPrefix(full string) string { return regionPrefix + full + "," }

// ListRegionsPage returns one page of regions (see catalog.RegionQuery).
// At most catalog.ScanBudget records are examined per call: a filter that
// rejects them all answers an empty page with a resume point.
func (d *Domain) ListRegionsPage(q catalog.RegionQuery) (catalog.RegionPage, error) {
	states, err := stateFilter("region", q.States, regionStates)
	if err != nil {
		return catalog.RegionPage{}, err
	}
	prefix := regionPrefix
	if table := qualifyTable(q.Table); table != "" {
		prefix = tableRegionPrefix(table)
		if q.After != "" && !strings.HasPrefix(RegionKey(q.After), prefix) {
			return catalog.RegionPage{}, procedure.Errorf(errInvalid, "page token is for region %q, not a region of table %s", q.After, table)
		}
	}
	v, err := d.view()
	if err != nil {
		return catalog.RegionPage{}, err
	}
	size := pageSize(q.PageSize, catalog.DefaultRegionPageSize, catalog.MaxRegionPageSize)
	after := resumeKey(q.After, RegionKey)
	out := catalog.RegionPage{Regions: []catalog.Region{}}
	examined := 0
	last := ""
	var derr error
	v.ScanFrom(prefix, after, func(k string, val []byte) bool {
		// One record past a full page (or an exhausted budget) tells
		// that there is more: only then is there a next page.
		if len(out.Regions) == size || examined == catalog.ScanBudget {
			out.Next = last
			return false
		}
		examined++
		last = strings.TrimPrefix(k, regionPrefix)
		if states != nil || q.Server != "" {
			// Most records fail a filter: peeked at, not decoded.
			p, err := peekRegion(val)
			if err != nil {
				derr = fmt.Errorf("decoding %s: %w", k, err)
				return false
			}
			if (states != nil && !states[p.State]) || (q.Server != "" && p.Server != q.Server) {
				return true
			}
		}
		rg, err := decodeRegion(last, val)
		if err != nil {
			derr = err
			return false
		}
		out.Regions = append(out.Regions, regionInfo(last, rg))
		return true
	})
	if derr != nil {
		return catalog.RegionPage{}, derr
	}
	return out, nil
}

// regionCounts counts and groups the regions of table full, and returns
// its first limit regions (none for limit 0) with whether there are more.
func regionCounts(v raftfsm.View, full string, limit int) (catalog.Table, error) {
	ns, name := SplitTableName(full)
	out := catalog.Table{Namespace: ns, Name: name, RegionsByState: map[string]int{}}
	groups := map[catalog.RegionGroup]int{}
	var derr error
	v.ScanFrom(tableRegionPrefix(full), "", func(k string, val []byte) bool {
		if len(out.Regions) < limit {
			name := strings.TrimPrefix(k, regionPrefix)
			rg, err := decodeRegion(name, val)
			if err != nil {
				derr = err
				return false
			}
			out.Regions = append(out.Regions, regionInfo(name, rg))
		} else if limit > 0 {
			out.RegionsTruncated = true
		}
		p, err := peekRegion(val)
		if err != nil {
			derr = fmt.Errorf("decoding %s: %w", k, err)
			return false
		}
		out.RegionCount++
		out.RegionsByState[p.State]++
		groups[catalog.RegionGroup{State: p.State, Server: p.Server}]++
		return true
	})
	if derr != nil {
		return catalog.Table{}, derr
	}
	if out.RegionsTruncated {
		out.NextRegion = out.Regions[len(out.Regions)-1].Name
	}
	for g, n := range groups {
		g.Count = n
		out.Groups = append(out.Groups, g)
	}
	sort.Slice(out.Groups, func(i, j int) bool {
		a, b := out.Groups[i], out.Groups[j]
		if a.State != b.State {
			return a.State < b.State
		}
		return a.Server < b.Server
	})
	return out, nil
}

// DescribeTable returns table ns:name with its counts and its first
// catalog.DescribeRegions regions. It fails with an error wrapping
// procedure.ErrNotFound for an unknown table.
func (d *Domain) DescribeTable(ns, name string) (catalog.Table, error) {
	v, err := d.view()
	if err != nil {
		return catalog.Table{}, err
	}
	full := FullTableName(ns, name)
	t, ok, err := getTable(viewReader(v), full)
	if err != nil {
		return catalog.Table{}, err
	}
	if !ok {
		return catalog.Table{}, procedure.Errorf(ErrNotFound, "table %s does not exist", full)
	}
	out, err := regionCounts(v, full, catalog.DescribeRegions)
	out.State = t.State
	return out, err
}

// ListTablesPage returns one page of tables with their region counts (see
// catalog.TableQuery). Counting reads each listed table's regions: a call
// ends its page once it has examined catalog.ScanBudget table records or
// counted catalog.CountBudget regions, always finishing the table it is
// counting (whose counts must be whole), so one call costs at most the
// budgets plus the largest table.
func (d *Domain) ListTablesPage(q catalog.TableQuery) (catalog.TablePage, error) {
	states, err := stateFilter("table", q.States, tableStates)
	if err != nil {
		return catalog.TablePage{}, err
	}
	v, err := d.view()
	if err != nil {
		return catalog.TablePage{}, err
	}
	// A namespace that does not exist has no tables: an empty list, as
	// before lists were paged.
	prefix := tablePrefix
	if q.Namespace != "" {
		prefix += q.Namespace + ":"
	}
	after := resumeKey(q.After, TableKey)
	// Resuming after a table of another namespace would start the list
	// over or skip all of it, without a word.
	if after != "" && !strings.HasPrefix(after, prefix) {
		return catalog.TablePage{}, procedure.Errorf(errInvalid, "page token is for table %q, not a table of namespace %s", q.After, q.Namespace)
	}
	size := pageSize(q.PageSize, catalog.DefaultTablePageSize, catalog.MaxTablePageSize)
	out := catalog.TablePage{Tables: []catalog.Table{}}
	examined, counted := 0, 0
	last := ""
	var derr error
	v.ScanFrom(prefix, after, func(k string, val []byte) bool {
		if len(out.Tables) == size || examined == catalog.ScanBudget || counted >= catalog.CountBudget {
			out.Next = last
			return false
		}
		examined++
		last = strings.TrimPrefix(k, tablePrefix)
		var t Table
		if err := json.Unmarshal(val, &t); err != nil {
			derr = fmt.Errorf("decoding %s: %w", k, err)
			return false
		}
		if states != nil && !states[t.State] {
			return true
		}
		info, err := regionCounts(v, last, 0)
		if err != nil {
			derr = err
			return false
		}
		info.State = t.State
		counted += info.RegionCount
		out.Tables = append(out.Tables, info)
		return true
	})
	if derr != nil {
		return catalog.TablePage{}, derr
	}
	return out, nil
}

// ListServersPage returns one page of region servers as the leader's
// leases see them. Only the leader knows the leases (renewals are not
// replicated); elsewhere it fails with a *cluster.NotLeaderError. The
// region counts take one pass over the regions per call, counting only
// for the page's servers: the servers are few, the regions many, and an
// index kept beside the records would be one more thing every region
// write must keep right.
func (d *Domain) ListServersPage(q catalog.ServerQuery) (catalog.ServerPage, error) {
	svc, err := d.leaderServices()
	if err != nil {
		return catalog.ServerPage{}, err
	}
	return d.listServersPage(q, svc)
}

// ListRecordedServersPage is ListServersPage from the replicated state
// alone, on any master: what a stale read answers when no leader can be
// asked. The leases are the leader's, so a server recorded live is shown
// with lease state ServerLeaseUnknown (one recorded expired is expired).
func (d *Domain) ListRecordedServersPage(q catalog.ServerQuery) (catalog.ServerPage, error) {
	return d.listServersPage(q, nil)
}

// listServersPage lists a page of servers with svc's lease view, or with
// none (nil: ListRecordedServersPage).
func (d *Domain) listServersPage(q catalog.ServerQuery, svc *services) (catalog.ServerPage, error) {
	v, err := d.view()
	if err != nil {
		return catalog.ServerPage{}, err
	}
	size := pageSize(q.PageSize, catalog.DefaultServerPageSize, catalog.MaxServerPageSize)
	after := resumeKey(q.After, ServerKey)
	type entry struct {
		id  string
		srv Server
	}
	var page []entry
	next := ""
	var derr error
	v.ScanFrom(serverPrefix, after, func(k string, val []byte) bool {
		id := strings.TrimPrefix(k, serverPrefix)
		if len(page) == size {
			next = page[len(page)-1].id
			return false
		}
		var s Server
		if err := json.Unmarshal(val, &s); err != nil {
			derr = fmt.Errorf("decoding %s: %w", k, err)
			return false
		}
		page = append(page, entry{id, s})
		return true
	})
	if derr != nil {
		return catalog.ServerPage{}, derr
	}
	counts := make(map[ServerRef]int, len(page))
	for _, e := range page {
		counts[ServerRef{e.id, e.srv.StartCode}] = 0
	}
	if len(page) > 0 {
		if err := countByServer(v, counts); err != nil {
			return catalog.ServerPage{}, err
		}
	}
	out := catalog.ServerPage{Servers: make([]catalog.Server, 0, len(page)), Next: next}
	now := d.cfg.Clock.Now()
	for _, e := range page {
		id, srv := e.id, e.srv
		ref := ServerRef{id, srv.StartCode}
		ps := catalog.Server{ID: id, Address: srv.Address, StartCode: srv.StartCode, RegionCount: counts[ref], LeaseState: ServerExpired,
			SoftLimitMs: d.cfg.ServerLease.SoftLimit.Milliseconds(), HardLimitMs: d.cfg.ServerLease.HardLimit.Milliseconds(),
			Version: srv.Version, MaxFormat: uint32(srv.MaxFormat)}
		if srv.State == ServerLive && svc == nil {
			ps.LeaseState = ServerLeaseUnknown
		} else if srv.State == ServerLive {
			if info, ok := svc.leases.Get(holderOf(ref)); ok {
				ps.LastRenewalUnixMs = info.LastRenewal.UnixMilli()
				if info.State == lease.Live || info.State == lease.Suspect {
					ps.LeaseState = info.State.String()
				}
			}
			if at, ok := svc.heartbeatAt(ref); ok {
				ps.HeartbeatSeen = true
				ps.LastHeartbeatAgeMs = max(now.Sub(at), 0).Milliseconds()
			} else if ps.LeaseState != ServerExpired {
				// Only what is shown changes: the lease (and the crash
				// procedure that its expiry starts) runs as before.
				ps.LeaseState = ServerUnconfirmed
			}
			if svc.revoked(ref) {
				ps.LeaseState = ServerExpired
			}
		}
		out.Servers = append(out.Servers, ps)
	}
	return out, nil
}

// countByServer counts, for each incarnation in counts, the regions open or
// opening on it, in one pass over the regions.
func countByServer(v raftfsm.View, counts map[ServerRef]int) error {
	var derr error
	v.Scan(regionPrefix, func(k string, val []byte) bool {
		rg, err := peekRegion(val)
		if err != nil {
			derr = fmt.Errorf("decoding %s: %w", k, err)
			return false
		}
		if rg.State != RegionOpen && rg.State != RegionOpening {
			return true
		}
		ref := ServerRef{rg.Server, rg.StartCode}
		if n, ok := counts[ref]; ok {
			counts[ref] = n + 1
		}
		return true
	})
	return derr
}

// viewReader reads one view through the domain's reader.
func viewReader(v raftfsm.View) reader { return kvReader{Get: v.Get, Scan: v.Scan} }

// regionPeek is what the filters and counts read of a region record.
type regionPeek struct {
	State     string
	Server    string
	StartCode uint64
}

// peekRegion reads a region record's state, server and start code, for
// the filters and counts: the binary form (region_codec.go) is cheap to
// decode whole, and a JSON record an older version wrote is decoded as
// getRegion would.
func peekRegion(val []byte) (regionPeek, error) {
	rg, err := decodeRegionValue("", val)
	if err != nil {
		return regionPeek{}, err
	}
	return regionPeek{State: rg.State, Server: rg.Server, StartCode: rg.StartCode}, nil
}

func regionInfo(name string, rg Region) catalog.Region {
	return catalog.Region{Name: name, Table: rg.Table, State: rg.State, Server: rg.Server, ProcID: rg.ProcID}
}
