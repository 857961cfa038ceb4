package console

import (
	"context"
	"fmt"
	"net/http"
	"sort"

	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

type overviewPage struct {
	base
	Alerts []alert
	// Members is this node's view, each member's own status beside it.
	Members      []*adminpb.Peer
	MembersError string
	Quorum       bool
	Voters       uint32
	Reachable    uint32
	Self         *adminpb.ClusterStatusResponse
	// Servers and ServerStates: region servers by lease state.
	Servers      []*adminpb.Server
	ServerStates []count
	ServersError string
	// Procedures by state (and type), and the stuck ones.
	Stats      *adminpb.ProcedureStatsResponse
	ByState    []count
	StatsError string
	StuckAfter string
	// MaintenanceOn: the overview offers to turn it off, else on.
	MaintenanceOn bool
	// LastSnapshot is the newest good scheduled snapshot any master that
	// answered reports (each writes its own while it leads), and By that
	// master; nil if none.
	LastSnapshot   *adminpb.LastSnapshot
	LastSnapshotBy string
}

type alert struct {
	Level string // bad, warn
	Text  string
	Link  string
}

type count struct {
	Name string
	N    int64
}

// sortedCounts turns a map of counts into a list by name.
func sortedCounts(m map[string]int64) []count {
	out := make([]count, 0, len(m))
	for k, v := range m {
		out = append(out, count{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	rd := c.pageReads(w, r, "Overview")
	if rd == nil {
		return
	}
	p := overviewPage{Self: rd.node, StuckAfter: fmtDur(c.cfg.StuckAfter), MaintenanceOn: rd.node.GetMaintenance().GetOn()}

	// The members as this node sees them: its own view, never forwarded.
	ctx, cancel := context.WithTimeout(r.Context(), c.cfg.ReadTimeout)
	ms, err := c.self.ClusterStatus(ctx, &adminpb.ClusterStatusRequest{Members: true})
	cancel()
	if err != nil {
		p.MembersError = status.Convert(err).Message()
	} else {
		p.Members, p.Quorum, p.Voters, p.Reachable = ms.GetPeers(), ms.GetQuorum(), ms.GetVoters(), ms.GetVotersReachable()
		if !ms.GetQuorum() {
			p.Alerts = append(p.Alerts, alert{"bad", fmt.Sprintf("No quorum: %d of %d voters reachable from %s", ms.GetVotersReachable(), ms.GetVoters(), ms.GetNodeId()), ""})
		}
		for _, m := range ms.GetPeers() {
			switch {
			case !m.GetReachable():
				p.Alerts = append(p.Alerts, alert{"warn", fmt.Sprintf("Member %s does not answer: %s", m.GetId(), m.GetError()), ""})
			case m.GetStatus().GetStorageError() != "":
				p.Alerts = append(p.Alerts, alert{"bad", fmt.Sprintf("Member %s storage failed: %s", m.GetId(), m.GetStatus().GetStorageError()), ""})
			}
		}
	}
	p.LastSnapshot, p.LastSnapshotBy = newestSnapshot(rd.node, p.Members)
	if rd.node.GetLeaderId() == "" {
		p.Alerts = append(p.Alerts, alert{"bad", "No leader is known to " + rd.node.GetNodeId() + " (an election, or this node is cut off)", ""})
	}

	stats, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ProcedureStatsResponse, error) {
		return c.self.ProcedureStats(ctx, &adminpb.ProcedureStatsRequest{StuckAfterMs: c.cfg.StuckAfter.Milliseconds(), MaxStuck: 10, Consistency: cons})
	}, readOf)
	if err != nil {
		p.StatsError = status.Convert(err).Message()
	} else {
		p.Stats = stats
		byState := map[string]int64{}
		for _, n := range stats.GetCounts() {
			byState[n.GetState()] += n.GetCount()
		}
		p.ByState = sortedCounts(byState)
		if n := stats.GetStuckCount(); n > 0 {
			p.Alerts = append(p.Alerts, alert{"warn", fmt.Sprintf("%d procedures stuck: unfinished and not written for %s", n, p.StuckAfter), "#stuck"})
		}
		if n := byState["FAILED"]; n > 0 {
			p.Alerts = append(p.Alerts, alert{"warn", fmt.Sprintf("%d procedures failed and rolling back", n), "/ui/procedures?state=FAILED"})
		}
	}

	servers, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListServersResponse, error) {
		return c.self.ListServers(ctx, &adminpb.ListServersRequest{Consistency: cons})
	}, readOf)
	if err != nil {
		p.ServersError = leaderOnly(rd, err)
	} else {
		p.Servers = servers.GetServers()
		byLease := map[string]int64{}
		for _, s := range p.Servers {
			byLease[s.GetLeaseState()]++
			// "unknown": a standby that no leader answers shows the
			// servers it recorded, whose leases only a leader knows; the
			// stale banner says so, an alert per server would not help.
			if st := s.GetLeaseState(); st != "live" && st != "unknown" {
				p.Alerts = append(p.Alerts, alert{"warn", fmt.Sprintf("Region server %s is %s (last renewal %s)", s.GetId(), s.GetLeaseState(), ageOfUnixMs(s.GetLastRenewalUnixMs())), serverURL(s.GetId())})
			}
		}
		p.ServerStates = sortedCounts(byLease)
	}
	p.base = c.base(rd, "Overview", "overview", true)
	c.render(w, http.StatusOK, "overview", p)
}

// leaderOnly explains a failed read of what only the leader holds.
func leaderOnly(rd *reads, err error) string {
	msg := status.Convert(err).Message()
	if rd.stale {
		return "only the leader holds this, and no leader answered (" + msg + ")"
	}
	return msg
}

// newestSnapshot is the newest scheduled snapshot self or a member that
// answered reports, and who reports it.
func newestSnapshot(self *adminpb.ClusterStatusResponse, members []*adminpb.Peer) (*adminpb.LastSnapshot, string) {
	best, by := self.GetLastSnapshot(), self.GetNodeId()
	for _, m := range members {
		if l := m.GetStatus().GetLastSnapshot(); l != nil && l.GetUnixMs() > best.GetUnixMs() {
			best, by = l, m.GetId()
		}
	}
	if best == nil {
		return nil, ""
	}
	return best, by
}
