package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	semver "github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
)

// `baton cluster upgrade-check` says whether restarting a member on
// another binary is safe now (docs/upgrades.md): the operator runs it
// before each step of a rolling upgrade or downgrade, with the binary of
// the release being moved to.

// caughtUpBound is how far a member's applied index may trail the
// leader's commit index and still count as caught up. The members are
// asked one by one within a second, so a busy cluster's indexes move
// between their answers: no bound at all would refuse every check under
// load, while a member that is really behind (restarting, replaying a
// snapshot) trails by far more.
const caughtUpBound = 100

// The checks, in the order they are printed.
const (
	checkCaughtUp = "caught_up"
	checkQuorum   = "quorum_kept"
	checkVersions = "no_member_too_old"
	checkLeader   = "leader"
)

type upgradeCheckJSON struct {
	// Safe: with --id, restarting that member now is safe; without, every
	// member's is.
	Safe bool `json:"safe"`
	// Member is --id's; without it, Checks are those every member shares.
	Member string            `json:"member,omitempty"`
	Checks []checkResultJSON `json:"checks"`
	// AnsweredBy is the master whose view this is.
	AnsweredBy        string `json:"answered_by"`
	ReleaseLine       string `json:"release_line"`
	OldestLine        string `json:"oldest_line"`
	CaughtUpBound     uint64 `json:"caught_up_bound"`
	LeaderID          string `json:"leader_id"`
	LeaderCommitIndex uint64 `json:"leader_commit_index"`
	// ClusterFormat is the committed cluster version (0 from a 0.1.0
	// master, which has none).
	ClusterFormat uint32              `json:"cluster_format"`
	Members       []upgradeMemberJSON `json:"members"`
	// RegionServers are the region servers no_member_too_old counts (each
	// recorded one but the expired); RegionServersError says why they are
	// missing, if the masters could not list them (the check then fails).
	RegionServers      []upgradeServerJSON `json:"region_servers"`
	RegionServersError string              `json:"region_servers_error,omitempty"`
}

// upgradeServerJSON is a region server as upgrade-check counts it: the
// binary its live incarnation registered with (VersionSource "report"),
// else 0.1.0, which says none ("none").
type upgradeServerJSON struct {
	ID            string `json:"id"`
	LeaseState    string `json:"lease_state"`
	Version       string `json:"version"`
	VersionSource string `json:"version_source"`
	MaxFormat     uint32 `json:"max_format"`
}

// regionServerList is what the masters answered to ListServers for
// upgrade-check: the servers, or why not.
type regionServerList struct {
	servers []*adminpb.Server
	err     error
}

type checkResultJSON struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

type upgradeMemberJSON struct {
	ID        string `json:"id"`
	Suffrage  string `json:"suffrage"`
	Leader    bool   `json:"leader"`
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// Version is what the member runs: its own answer, else (not
	// answering) its last committed report, else 0.1.0, which reports
	// none; VersionSource says which ("answer", "report", "none").
	Version       string            `json:"version"`
	VersionSource string            `json:"version_source"`
	MaxFormat     uint32            `json:"max_format"`
	AppliedIndex  uint64            `json:"applied_index"`
	Healthy       bool              `json:"healthy"`
	Safe          bool              `json:"safe"`
	Checks        []checkResultJSON `json:"checks"`
}

// upgradeMember is what the checks know of a member.
type upgradeMember struct {
	peer   *adminpb.Peer
	st     *adminpb.ClusterStatusResponse // its own answer; nil if none
	ver    string
	source string
	line   semver.Line
	lineOK bool
}

// healthy: it answered, is ready and its storage works: a voter that
// counts towards a quorum.
func (m *upgradeMember) healthy() bool {
	return m.st != nil && m.st.GetReady() && m.st.GetStorageError() == ""
}

// ill says why it is not healthy.
func (m *upgradeMember) ill() string {
	switch {
	case m.st == nil && m.peer.GetError() != "":
		return "not answering: " + m.peer.GetError()
	case m.st == nil:
		return "not answering"
	case m.st.GetStorageError() != "":
		return "storage failed: " + m.st.GetStorageError()
	}
	return "not ready: " + m.st.GetReadyReason()
}

func (m *upgradeMember) describeVersion() string {
	switch m.source {
	case "none":
		return m.ver + " (reports none)"
	case "report":
		return m.ver + " (last report; not answering)"
	}
	return m.ver
}

func newUpgradeMember(p *adminpb.Peer) *upgradeMember {
	m := &upgradeMember{peer: p}
	maxFormat := semver.Format(p.GetMaxFormat())
	if st := p.GetStatus(); p.GetReachable() && st != nil {
		m.st = st
		// Its answer, not its committed report: a report outlives the
		// binary that made it (a member put back on 0.1.0 never
		// reports again), and 0.1.0 answers without a version.
		m.ver, m.source, maxFormat = st.GetVersion(), "answer", semver.Format(st.GetMaxFormat())
	} else {
		m.ver, m.source = p.GetVersion(), "report"
	}
	if m.ver == "" {
		m.ver, m.source, maxFormat = semver.Unreported.Version, "none", semver.Unreported.MaxFormat
	}
	m.line, m.lineOK = placeLine(m.ver, maxFormat)
	return m
}

// placeLine is the release line of a binary of version v and level
// maxFormat; false if neither says.
func placeLine(v string, maxFormat semver.Format) (semver.Line, bool) {
	l, err := semver.ParseLine(v)
	if err != nil {
		// A version set at link time need not be semantic: the format
		// level says which release the binary is at least.
		if r, ok := semver.IntroducedIn(maxFormat); ok {
			l, err = semver.ParseLine(r)
		}
	}
	return l, err == nil
}

// upgradeServer is what no_member_too_old knows of a region server.
type upgradeServer struct {
	doc    upgradeServerJSON
	line   semver.Line
	lineOK bool
}

// upgradeServers are the region servers no_member_too_old counts. An
// expired incarnation is left out: it serves nothing, and the binary it
// comes back on registers anew (a dead server's record stays until then,
// and would hold every upgrade back).
func upgradeServers(rs regionServerList) []upgradeServer {
	var out []upgradeServer
	for _, s := range rs.servers {
		if s.GetLeaseState() == client.LeaseExpired {
			continue
		}
		d := upgradeServerJSON{ID: s.GetId(), LeaseState: s.GetLeaseState(), Version: s.GetVersion(), VersionSource: "report", MaxFormat: s.GetMaxFormat()}
		if d.MaxFormat == 0 {
			// 0.1.0 says nothing at registration (nor does a current
			// server to a 0.1.0 leader): counted as 0.1.0, as a master
			// without a report is.
			d.Version, d.VersionSource, d.MaxFormat = semver.Unreported.Version, "none", uint32(semver.Unreported.MaxFormat)
		}
		u := upgradeServer{doc: d}
		u.line, u.lineOK = placeLine(d.Version, semver.Format(d.MaxFormat))
		out = append(out, u)
	}
	return out
}

func (u upgradeServer) describe() string {
	v := "region server " + u.doc.ID + " " + u.doc.Version
	if u.doc.VersionSource == "none" {
		v += " (reports none)"
	}
	return v
}

// decideUpgrade is the verdict on s (a ClusterStatus with members asked)
// and rs (the region servers) for restarting member id next, or every
// member if id is "", for a binary of release line target. An id that is
// no member is a usage error.
func decideUpgrade(s *adminpb.ClusterStatusResponse, rs regionServerList, id string, target semver.Line) (upgradeCheckJSON, error) {
	doc := upgradeCheckJSON{Member: id, AnsweredBy: s.GetNodeId(), ReleaseLine: target.String(),
		OldestLine: target.Previous().String(), CaughtUpBound: caughtUpBound, ClusterFormat: s.GetClusterFormat(),
		Members: []upgradeMemberJSON{}, RegionServers: []upgradeServerJSON{}}
	servers := upgradeServers(rs)
	for _, u := range servers {
		doc.RegionServers = append(doc.RegionServers, u.doc)
	}
	if rs.err != nil {
		doc.RegionServersError = rs.err.Error()
	}
	var members []*upgradeMember
	var ids []string
	var leader *upgradeMember
	found := false
	for _, p := range s.GetPeers() {
		m := newUpgradeMember(p)
		members = append(members, m)
		ids = append(ids, p.GetId())
		found = found || p.GetId() == id
		if p.GetLeader() {
			leader = m
		}
	}
	if id != "" && !found {
		return doc, usagef("--id %q is not a member of the cluster (members, as %s sees them: %s)", id, s.GetNodeId(), strings.Join(ids, ", "))
	}
	if leader != nil {
		doc.LeaderID = leader.peer.GetId()
		if leader.st != nil {
			doc.LeaderCommitIndex = leader.st.GetCommitIndex()
		}
	}
	caughtUp := caughtUpCheck(members, leader)
	versions := versionsCheck(members, servers, rs.err, target)
	doc.Safe = len(members) > 0
	for _, m := range members {
		checks := []checkResultJSON{caughtUp, quorumCheck(members, m), versions, leaderCheck(members, m, target)}
		mj := upgradeMemberJSON{ID: m.peer.GetId(), Suffrage: m.peer.GetSuffrage(), Leader: m.peer.GetLeader(),
			Reachable: m.st != nil, Error: m.peer.GetError(), Version: m.ver, VersionSource: m.source,
			MaxFormat: m.peer.GetMaxFormat(), Healthy: m.healthy(), Safe: allOK(checks), Checks: checks}
		if m.st != nil {
			mj.AppliedIndex, mj.MaxFormat = m.st.GetAppliedIndex(), m.st.GetMaxFormat()
		}
		doc.Members = append(doc.Members, mj)
		if id == "" {
			doc.Safe = doc.Safe && mj.Safe
		} else if mj.ID == id {
			doc.Safe, doc.Checks = mj.Safe, checks
		}
	}
	if id == "" {
		doc.Checks = []checkResultJSON{caughtUp, versions}
	}
	return doc, nil
}

func allOK(checks []checkResultJSON) bool {
	for _, c := range checks {
		if !c.OK {
			return false
		}
	}
	return true
}

// caughtUpCheck: every member has applied what the leader committed, or
// nearly, so that none is left replaying the log (or a snapshot) when
// another goes down.
func caughtUpCheck(members []*upgradeMember, leader *upgradeMember) checkResultJSON {
	c := checkResultJSON{Name: checkCaughtUp}
	switch {
	case leader == nil:
		c.Detail = "no leader known to the answering master: nothing to compare the members' indexes with"
		return c
	case leader.st == nil:
		c.Detail = fmt.Sprintf("the leader %s is not answering (%s): nothing to compare the members' indexes with", leader.peer.GetId(), leader.ill())
		return c
	}
	commit := leader.st.GetCommitIndex()
	var behind []string
	for _, m := range members {
		switch {
		case m.st == nil:
			behind = append(behind, m.peer.GetId()+" "+m.ill())
		case m.st.GetAppliedIndex()+caughtUpBound < commit:
			behind = append(behind, fmt.Sprintf("%s applied %d, %d behind", m.peer.GetId(), m.st.GetAppliedIndex(), commit-m.st.GetAppliedIndex()))
		}
	}
	c.OK = len(behind) == 0
	c.Detail = fmt.Sprintf("every member's applied index is within %d entries of the leader's commit index %d", caughtUpBound, commit)
	if !c.OK {
		c.Detail = fmt.Sprintf("not every member's applied index is within %d entries of the leader's commit index %d: %s; wait and check again",
			caughtUpBound, commit, strings.Join(behind, "; "))
	}
	return c
}

// quorumCheck: with down stopped, enough healthy voters remain to make a
// quorum of the configuration.
func quorumCheck(members []*upgradeMember, down *upgradeMember) checkResultJSON {
	c := checkResultJSON{Name: checkQuorum}
	voters := 0
	var up, ill []string
	for _, m := range members {
		if m.peer.GetSuffrage() != "Voter" {
			continue
		}
		voters++
		switch {
		case m == down:
		case m.healthy():
			up = append(up, m.peer.GetId())
		default:
			ill = append(ill, m.peer.GetId()+" "+m.ill())
		}
	}
	quorum := voters/2 + 1
	c.OK = voters > 0 && len(up) >= quorum
	c.Detail = fmt.Sprintf("without %s, %d of the %d voters stay healthy (%s); a quorum is %d",
		down.peer.GetId(), len(up), voters, strings.Join(up, ", "), quorum)
	if len(ill) > 0 {
		c.Detail += "; " + strings.Join(ill, "; ")
	}
	return c
}

// versionsCheck: no member, master or region server, is older than N−1,
// the oldest release a rolling upgrade to target starts from: formats and
// calls are kept compatible one release back, not further, and a region
// server speaks the same protocol with the masters as they do with each
// other. Region servers the masters could not list (listErr) fail it: an
// old one could be among them.
func versionsCheck(members []*upgradeMember, servers []upgradeServer, listErr error, target semver.Line) checkResultJSON {
	c := checkResultJSON{Name: checkVersions}
	oldest := target.Previous()
	var all, old []string
	place := func(v string, line semver.Line, ok bool) {
		all = append(all, v)
		switch {
		case !ok:
			old = append(old, v+": not a version this binary can place")
		case line.Compare(oldest) < 0:
			old = append(old, v)
		}
	}
	for _, m := range members {
		place(m.peer.GetId()+" "+m.describeVersion(), m.line, m.lineOK)
	}
	for _, u := range servers {
		place(u.describe(), u.line, u.lineOK)
	}
	c.OK = len(old) == 0 && listErr == nil
	c.Detail = fmt.Sprintf("every member runs release line %v or later (this binary: %v): %s", oldest, target, strings.Join(all, ", "))
	if len(old) > 0 {
		c.Detail = fmt.Sprintf("older than release line %v, the oldest this binary (%v) upgrades from: %s; upgrade them one line at a time first",
			oldest, target, strings.Join(old, ", "))
	}
	if listErr != nil {
		c.Detail += fmt.Sprintf("; the region servers could not be listed, so none is known not to be older: %v", listErr)
	}
	return c
}

// leaderCheck: the leader goes last. Stopped with SIGTERM it hands
// leadership to another voter first (0.1.0 does too), so the only thing
// to get right is the order: once it is the last member not on target's
// line, its turn has come.
func leaderCheck(members []*upgradeMember, m *upgradeMember, target semver.Line) checkResultJSON {
	c := checkResultJSON{Name: checkLeader, OK: true}
	id := m.peer.GetId()
	if !m.peer.GetLeader() {
		c.Detail = id + " is not the leader"
		return c
	}
	var others []string
	for _, o := range members {
		if o != m && (!o.lineOK || o.line != target) {
			others = append(others, o.peer.GetId()+" "+o.describeVersion())
		}
	}
	if len(others) > 0 {
		c.OK = false
		c.Detail = fmt.Sprintf("%s leads while other members do not run this binary's release line %v (%s): restart them first and %s last",
			id, target, strings.Join(others, ", "), id)
		return c
	}
	c.Detail = fmt.Sprintf("%s leads and every other member runs release line %v: its turn is last, now; stop it with SIGTERM, which hands leadership to another voter first, and see the new leader in 'baton cluster status'", id, target)
	return c
}

func (c *cli) clusterUpgradeCheck(args []string) int {
	const cmd = "cluster upgrade-check"
	e := c.command(cmd, "[--id MEMBER]", map[codes.Code]string{
		codes.FailedPrecondition: "ask a member of the cluster with --addr",
	})
	id := e.fs.String("id", "", "the member about to be restarted on another binary (default: tell for every member)")
	if _, code, ok := e.parse(args, 0, ""); !ok {
		return code
	}
	return e.withClient(func(cl *client.Client) int {
		s, err := cl.MembersStatus(c.ctx)
		if err != nil {
			return e.fail(err)
		}
		if err := notMember(s); err != nil {
			return e.fail(status.Error(codes.FailedPrecondition, err.Error()))
		}
		// The region servers as the leader lists them, each with the binary
		// its live incarnation registered with.
		servers, err := cl.ListServers(c.ctx)
		if status.Code(err) == codes.Unimplemented {
			// Masters that serve no domain have no region servers.
			servers, err = nil, nil
		}
		doc, err := decideUpgrade(s, regionServerList{servers, err}, *id, semver.CurrentLine())
		if err != nil {
			return e.fail(err)
		}
		if e.cf.json {
			c.printJSON(doc)
		} else {
			c.printUpgradeCheck(doc)
		}
		if doc.Safe {
			return exitOK
		}
		var failed []string
		for _, ch := range doc.Checks {
			if !ch.OK {
				failed = append(failed, ch.Name)
			}
		}
		if *id == "" {
			for _, m := range doc.Members {
				if !m.Safe {
					failed = append(failed, m.ID)
				}
			}
			fmt.Fprintf(c.stderr, "baton %s: not safe to restart every member now: %s\n", cmd, strings.Join(failed, ", "))
		} else {
			fmt.Fprintf(c.stderr, "baton %s: not safe to restart %s now: %s\n", cmd, *id, strings.Join(failed, ", "))
		}
		return exitFailed
	})
}

func (c *cli) printUpgradeCheck(doc upgradeCheckJSON) {
	cluster := "none (a 0.1.0 master)"
	if doc.ClusterFormat != 0 {
		cluster = semver.Format(doc.ClusterFormat).String()
	}
	fmt.Fprintf(c.stdout, "answered by  %s; cluster version %s; this binary's release line %s (upgrades from %s)\n",
		doc.AnsweredBy, cluster, doc.ReleaseLine, doc.OldestLine)
	printChecks := func(checks []checkResultJSON) {
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		for _, ch := range checks {
			mark := "ok"
			if !ch.OK {
				mark = "FAIL"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", mark, ch.Name, ch.Detail)
		}
		tw.Flush()
	}
	if doc.Member != "" {
		fmt.Fprintf(c.stdout, "checks for restarting %s:\n", doc.Member)
		printChecks(doc.Checks)
		if doc.Safe {
			fmt.Fprintf(c.stdout, "safe: %s may be restarted now\n", doc.Member)
		} else {
			fmt.Fprintf(c.stdout, "NOT SAFE: do not restart %s yet\n", doc.Member)
		}
		return
	}
	fmt.Fprintln(c.stdout, "checks every member shares:")
	printChecks(doc.Checks)
	fmt.Fprintln(c.stdout)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSUFFRAGE\tROLE\tVERSION\tAPPLIED\tSAFE TO RESTART NOW")
	for _, m := range doc.Members {
		r := "standby"
		if m.Leader {
			r = "leader"
		}
		verdict := "yes"
		if !m.Safe {
			var why []string
			for _, ch := range m.Checks {
				if !ch.OK {
					why = append(why, ch.Name)
				}
			}
			verdict = "no: " + strings.Join(why, ", ")
		}
		applied := "-"
		if m.Reachable {
			applied = fmt.Sprint(m.AppliedIndex)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Suffrage, r, m.Version, applied, verdict)
	}
	tw.Flush()
	if len(doc.RegionServers) > 0 {
		var rs []string
		for _, s := range doc.RegionServers {
			rs = append(rs, upgradeServer{doc: s}.describe())
		}
		fmt.Fprintf(c.stdout, "\nregion servers (restart in any order, see docs/upgrades.md): %s\n", strings.Join(rs, ", "))
	}
	fmt.Fprintln(c.stdout, "\n'baton cluster upgrade-check --id ID' says why for one member.")
}
