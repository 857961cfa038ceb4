package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/baton-dev/baton/cluster/client"
	semver "github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
)

const clusterUsage = `usage: baton cluster <command> [flags]

commands:
  status                                          every member's own state and health, as the master that answers reaches them (exit 3 without a quorum)
  join --id ID --raft-addr H:P [--admin-addr H:P]  add a node (a non-voter, promoted once caught up)
  remove ID --yes                                 remove a node (the leader too: it hands leadership over first)
  transfer-leadership [--from ID] [--to ID]       hand leadership from the leader (only if it is --from) to
                                                  another voter (--to, or raft's choice); exit 0 if --from does not lead
  maintenance on [--reason R] --yes | off | status
                                                  pause dispatch and refuse new procedures
                                                  while operators repair (repair kit)
  repairs [--after SEQ]                           the recorded repair commands: who, what, when, outcome
  upgrade-check [--id ID]                         whether restarting member ID (default: each) on another
                                                  binary is safe now: caught up, quorum kept, none older
                                                  than N-1, the leader last (exit 1 if not; docs/upgrades.md)

Every command takes --addr (env BATON_ADDR, default 127.0.0.1:7070), --json
and --timeout. Run 'baton cluster <command> -h' for its flags.
`

func init() {
	topLevel.add(topCommand{
		name: "cluster", rank: 40, run: (*cli).cluster,
		summary: `status, join --id ID --raft-addr H:P --admin-addr H:P, remove ID,
maintenance on|off|status, repairs, upgrade-check [--id ID]`,
	})
}

func (c *cli) cluster(args []string) int {
	return c.subcommands("cluster", clusterUsage, args, map[string]func([]string) int{
		"status":              c.clusterStatus,
		"join":                c.clusterJoin,
		"remove":              c.clusterRemove,
		"transfer-leadership": c.clusterTransferLeadership,
		"maintenance":         c.clusterMaintenance,
		"repairs":             c.clusterRepairs,
		"upgrade-check":       c.clusterUpgradeCheck,
	})
}

// statusJSON is the --json document of every cluster command. The keys
// after peers come with every answer; voters, voters_reachable and quorum
// with cluster status, which asks every member.
type statusJSON struct {
	NodeID             string     `json:"node_id"`
	State              string     `json:"state"`
	LeaderID           string     `json:"leader_id"`
	LeaderRaftAddress  string     `json:"leader_raft_address"`
	LeaderAdminAddress string     `json:"leader_admin_address"`
	Term               uint64     `json:"term"`
	CommitIndex        uint64     `json:"commit_index"`
	AppliedIndex       uint64     `json:"applied_index"`
	FSMIndex           uint64     `json:"fsm_index"`
	Peers              []peerJSON `json:"peers"`
	PID                int64      `json:"pid"`
	Ready              bool       `json:"ready"`
	ReadyReason        string     `json:"ready_reason"`
	StorageError       string     `json:"storage_error"`
	LastContactMs      int64      `json:"last_contact_ms"`
	Voters             *uint32    `json:"voters,omitempty"`
	VotersReachable    *uint32    `json:"voters_reachable,omitempty"`
	VotersUnknown      *uint32    `json:"voters_unknown,omitempty"`
	Quorum             *bool      `json:"quorum,omitempty"`
	// Maintenance is maintenance mode as the answering node's replicated
	// state holds it.
	Maintenance *maintenanceJSON `json:"maintenance,omitempty"`
	// Removed: the answering master is not a member of the cluster (it
	// was removed and has not re-joined); its view is not the cluster's.
	Removed bool `json:"removed"`
	// AlreadyRemoved (cluster remove): the node was not a member any
	// more, an earlier removal took it out; nothing was changed.
	AlreadyRemoved bool `json:"already_removed,omitempty"`
	// ClusterFormat is the cluster version the answering node's state
	// holds; Version and MaxFormat its binary (0 and "" from a 0.1.0
	// node).
	ClusterFormat uint32 `json:"cluster_format"`
	Version       string `json:"version"`
	MaxFormat     uint32 `json:"max_format"`
	// ClusterID is the cluster's id as the answering node's state holds
	// it: "" until the leader writes one (at cluster version 2), and from
	// a node older than that.
	ClusterID string `json:"cluster_id"`
	// LastSnapshot is the answering master's newest good scheduled
	// snapshot (docs/operations.md, "Scheduled snapshots"): absent when it
	// schedules none, has written none yet, or runs a binary without them.
	// The keys are /status's.
	LastSnapshot *lastSnapshotJSON `json:"last_snapshot,omitempty"`
	Error        *errorJSON        `json:"error,omitempty"`
}

// lastSnapshotJSON is a scheduled snapshot in statusJSON: time is when
// the leader read the state (RFC 3339, UTC), index the Raft index it
// reflects, duration_ms the read, write, fsync and read-back (0 for a file
// the master found on its disk at start).
type lastSnapshotJSON struct {
	File       string `json:"file"`
	Time       string `json:"time"`
	Index      uint64 `json:"index"`
	Bytes      int64  `json:"bytes"`
	DurationMs int64  `json:"duration_ms"`
}

func toLastSnapshotJSON(l *adminpb.LastSnapshot) *lastSnapshotJSON {
	if l == nil {
		return nil
	}
	return &lastSnapshotJSON{File: l.GetFile(), Time: msTime(l.GetUnixMs()), Index: l.GetIndex(), Bytes: l.GetBytes(), DurationMs: l.GetDurationMs()}
}

type peerJSON struct {
	ID           string `json:"id"`
	RaftAddress  string `json:"raft_address"`
	AdminAddress string `json:"admin_address"`
	Suffrage     string `json:"suffrage"`
	Leader       bool   `json:"leader"`
	// Version and MaxFormat are the member's committed report of its
	// binary; "" and 0 while it has made none (0.1.0: format 1).
	Version   string `json:"version"`
	MaxFormat uint32 `json:"max_format"`
	// Reachable and Error come when the members were asked; the member's
	// own answer (MemberJSON's keys) when it answered.
	Reachable *bool  `json:"reachable,omitempty"`
	Error     string `json:"error,omitempty"`
	// The leader's view of the member, when the answer carries it (the
	// leader answered, or was asked): entries behind the leader's last
	// index, healthy as the autopilot judges, ms since it last answered
	// the leader.
	LagEntries      *uint64 `json:"lag_entries,omitempty"`
	Healthy         *bool   `json:"healthy,omitempty"`
	LeaderContactMs *int64  `json:"leader_contact_ms,omitempty"`
	*MemberJSON
}

// MemberJSON is a member's own answer about itself.
type MemberJSON struct {
	State         string `json:"state"`
	Term          uint64 `json:"term"`
	CommitIndex   uint64 `json:"commit_index"`
	AppliedIndex  uint64 `json:"applied_index"`
	FSMIndex      uint64 `json:"fsm_index"`
	LastContactMs int64  `json:"last_contact_ms"`
	PID           int64  `json:"pid"`
	Ready         bool   `json:"ready"`
	ReadyReason   string `json:"ready_reason"`
	StorageError  string `json:"storage_error"`
	LeaderID      string `json:"leader_id"`
}

type errorJSON struct {
	Code     string `json:"code"`
	Message  string `json:"message"`
	ExitCode int    `json:"exit_code"`
}

func toStatusJSON(s *adminpb.ClusterStatusResponse) statusJSON {
	j := statusJSON{
		NodeID: s.GetNodeId(), State: s.GetState(), LeaderID: s.GetLeaderId(), LeaderRaftAddress: s.GetLeaderRaftAddress(),
		LeaderAdminAddress: s.GetLeaderAdminAddress(), Term: s.GetTerm(), CommitIndex: s.GetCommitIndex(),
		AppliedIndex: s.GetAppliedIndex(), FSMIndex: s.GetFsmIndex(), Peers: []peerJSON{},
		PID: s.GetPid(), Ready: s.GetReady(), ReadyReason: s.GetReadyReason(), StorageError: s.GetStorageError(),
		LastContactMs: s.GetLastContactMs(), Maintenance: toMaintenanceJSON(s.GetMaintenance()),
		Removed: s.GetRemoved(), AlreadyRemoved: s.GetAlreadyRemoved(),
		ClusterFormat: s.GetClusterFormat(), Version: s.GetVersion(), MaxFormat: s.GetMaxFormat(),
		ClusterID: s.GetClusterId(), LastSnapshot: toLastSnapshotJSON(s.GetLastSnapshot()),
	}
	if s.GetMembersProbed() {
		v, r, u, q := s.GetVoters(), s.GetVotersReachable(), s.GetVotersUnknown(), s.GetQuorum()
		j.Voters, j.VotersReachable, j.VotersUnknown, j.Quorum = &v, &r, &u, &q
	}
	for _, p := range s.GetPeers() {
		pj := peerJSON{ID: p.GetId(), RaftAddress: p.GetRaftAddress(), AdminAddress: p.GetAdminAddress(),
			Suffrage: p.GetSuffrage(), Leader: p.GetLeader(), Version: p.GetVersion(), MaxFormat: p.GetMaxFormat(),
			LagEntries: p.LagEntries, Healthy: p.Healthy, LeaderContactMs: p.LeaderContactMs}
		if s.GetMembersProbed() {
			r := p.GetReachable()
			pj.Reachable, pj.Error = &r, p.GetError()
		}
		if m := p.GetStatus(); m != nil {
			pj.MemberJSON = &MemberJSON{State: m.GetState(), Term: m.GetTerm(), CommitIndex: m.GetCommitIndex(),
				AppliedIndex: m.GetAppliedIndex(), FSMIndex: m.GetFsmIndex(), LastContactMs: m.GetLastContactMs(),
				PID: m.GetPid(), Ready: m.GetReady(), ReadyReason: m.GetReadyReason(), StorageError: m.GetStorageError(),
				LeaderID: m.GetLeaderId()}
		}
		j.Peers = append(j.Peers, pj)
	}
	return j
}

// noQuorum is the error of a cluster status whose members were asked and
// too few voters answered, nil otherwise.
func noQuorum(s *adminpb.ClusterStatusResponse) error {
	if !s.GetMembersProbed() || s.GetQuorum() {
		return nil
	}
	return fmt.Errorf("no quorum: %d of %d voters reachable", s.GetVotersReachable(), s.GetVoters())
}

// contactAge spells a last_contact_ms.
func contactAge(ms int64, state string) string {
	switch {
	case state == "Leader":
		return "-"
	case ms < 0:
		return "never"
	}
	return (time.Duration(ms) * time.Millisecond).String() + " ago"
}

// health spells a node's own health: ok, or what is wrong.
func health(s *adminpb.ClusterStatusResponse) string {
	switch {
	case s.GetStorageError() != "":
		return "storage failed: " + s.GetStorageError()
	case !s.GetReady():
		return "not ready: " + s.GetReadyReason()
	}
	return "ok"
}

// notMember is the error of an answer by a master that is not a member of
// the cluster (removed, not re-joined), nil otherwise: what it says of the
// cluster is only its own stale view.
func notMember(s *adminpb.ClusterStatusResponse) error {
	if !s.GetRemoved() {
		return nil
	}
	return fmt.Errorf("%s answered, but it is not a member of the cluster (removed): ask a member with --addr, or re-join it ('baton cluster join')", s.GetNodeId())
}

func (c *cli) printStatus(cf *clientFlags, s *adminpb.ClusterStatusResponse) int {
	qerr := noQuorum(s)
	merr := notMember(s)
	if cf.json {
		j := toStatusJSON(s)
		switch {
		case merr != nil:
			j.Error = &errorJSON{Code: adminpb.CodeName(codes.FailedPrecondition), Message: merr.Error(), ExitCode: exitFailed}
		case qerr != nil:
			j.Error = &errorJSON{Code: adminpb.CodeName(codes.Unavailable), Message: qerr.Error(), ExitCode: exitUnavailable}
		}
		c.printJSON(j)
	} else {
		c.printStatusHuman(s)
	}
	switch {
	case merr != nil:
		fmt.Fprintf(c.stderr, "baton cluster status: %v\n", merr)
		return exitFailed
	case qerr != nil:
		fmt.Fprintf(c.stderr, "baton cluster status: %v\n", qerr)
		return exitUnavailable
	}
	return exitOK
}

func (c *cli) printStatusHuman(s *adminpb.ClusterStatusResponse) {
	leader := s.GetLeaderId()
	if leader == "" {
		leader = "(none known)"
	}
	fmt.Fprintf(c.stdout, "answered by  %s (%s), pid %d, %s\n", s.GetNodeId(), s.GetState(), s.GetPid(), health(s))
	if s.GetRemoved() {
		fmt.Fprintf(c.stdout, "member       NO: %s was removed from the cluster; what follows is its own stale view\n", s.GetNodeId())
	}
	if s.GetState() == "Leader" {
		fmt.Fprintf(c.stdout, "leader       %s (this node)\n", leader)
	} else {
		fmt.Fprintf(c.stdout, "leader       %s (last contact %s)\n", leader, contactAge(s.GetLastContactMs(), s.GetState()))
	}
	fmt.Fprintf(c.stdout, "term         %d\n", s.GetTerm())
	fmt.Fprintf(c.stdout, "indexes      commit %d, applied %d, fsm %d\n", s.GetCommitIndex(), s.GetAppliedIndex(), s.GetFsmIndex())
	if m := s.GetMaintenance(); m != nil {
		fmt.Fprintf(c.stdout, "maintenance  %s\n", describeMaintenance(m))
	}
	if f := s.GetClusterFormat(); f != 0 {
		fmt.Fprintf(c.stdout, "version      cluster at %v; members: %s\n", semver.Format(f), describeBinaries(s))
	}
	if l := s.GetLastSnapshot(); l != nil {
		fmt.Fprintf(c.stdout, "snapshot     %s\n", describeLastSnapshot(l))
	}
	if s.GetMembersProbed() {
		q := "quorum"
		if !s.GetQuorum() {
			q = "NO QUORUM"
		}
		unknown := ""
		if n := s.GetVotersUnknown(); n > 0 {
			unknown = fmt.Sprintf(", %d not asked (no admin address registered yet)", n)
		}
		fmt.Fprintf(c.stdout, "voters       %d of %d reachable%s: %s\n", s.GetVotersReachable(), s.GetVoters(), unknown, q)
	}
	fmt.Fprintln(c.stdout)
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	if !s.GetMembersProbed() {
		fmt.Fprintln(tw, "ID\tSUFFRAGE\tRAFT\tADMIN\tROLE\tLAG\tLEADER SEES")
		for _, p := range s.GetPeers() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.GetId(), p.GetSuffrage(), p.GetRaftAddress(), orDash(p.GetAdminAddress()), role(p), lagOf(p), leaderSees(p))
		}
		tw.Flush()
		return
	}
	fmt.Fprintln(tw, "ID\tSUFFRAGE\tRAFT\tADMIN\tROLE\tSTATE\tTERM\tCOMMIT\tAPPLIED\tLAST CONTACT\tPID\tHEALTH\tLAG\tLEADER SEES")
	var unreachable []*adminpb.Peer
	for _, p := range s.GetPeers() {
		m := p.GetStatus()
		if !p.GetReachable() || m == nil {
			unreachable = append(unreachable, p)
			r, h := "unreachable", "unreachable"
			if p.GetAdminAddress() == "" {
				r, h = role(p), "not asked"
			} else if p.GetLeader() {
				r = "leader, unreachable"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t%s\t%s\t%s\n", p.GetId(), p.GetSuffrage(), p.GetRaftAddress(), orDash(p.GetAdminAddress()), r, h, lagOf(p), leaderSees(p))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%s\t%s\t%s\n", p.GetId(), p.GetSuffrage(), p.GetRaftAddress(), orDash(p.GetAdminAddress()), role(p),
			m.GetState(), m.GetTerm(), m.GetCommitIndex(), m.GetAppliedIndex(), contactAge(m.GetLastContactMs(), m.GetState()), m.GetPid(), health(m), lagOf(p), leaderSees(p))
	}
	tw.Flush()
	for _, p := range unreachable {
		fmt.Fprintf(c.stdout, "%s: %s\n", p.GetId(), p.GetError())
	}
}

// describeLastSnapshot spells the answering master's newest scheduled
// snapshot: "last scheduled one at index 48211, taken 2025-03-01T12:00:00.000Z, 1048576 bytes in
// 35ms: /var/lib/baton/snap/baton-....snap".
func describeLastSnapshot(l *adminpb.LastSnapshot) string {
	took := ""
	if d := l.GetDurationMs(); d > 0 {
		took = fmt.Sprintf(" in %v", time.Duration(d)*time.Millisecond)
	}
	return fmt.Sprintf("last scheduled one at index %d, taken %s, %d bytes%s: %s", l.GetIndex(), msTime(l.GetUnixMs()), l.GetBytes(), took, l.GetFile())
}

// describeBinaries spells each member's reported binary: "m1 0.2.0
// (format 2), m2 not reported (format 1)".
func describeBinaries(s *adminpb.ClusterStatusResponse) string {
	var parts []string
	for _, p := range s.GetPeers() {
		if p.GetMaxFormat() == 0 {
			parts = append(parts, p.GetId()+" not reported (format 1)")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s (format %d)", p.GetId(), p.GetVersion(), p.GetMaxFormat()))
	}
	return strings.Join(parts, ", ")
}

// joinedAs says, of a member that joined as a non-voter, that the leader
// promotes it later (docs/operations.md, "Members that manage
// themselves"); nothing of a voter.
func joinedAs(s *adminpb.ClusterStatusResponse, id string) string {
	for _, p := range s.GetPeers() {
		if p.GetId() == id && p.GetSuffrage() == "Nonvoter" {
			return " as a non-voter: the leader makes it a voter once it has caught up and stayed healthy for the stabilization time (agent --server-stabilization-time)"
		}
	}
	return ""
}

// lagOf spells a member's lag behind the leader's log, "-" when the
// answer does not carry it.
func lagOf(p *adminpb.Peer) string {
	if p.LagEntries == nil {
		return "-"
	}
	return fmt.Sprintf("%d", p.GetLagEntries())
}

// leaderSees spells the leader's judgement of a member: healthy, or not
// and how long since it answered; "-" when the answer does not carry it.
func leaderSees(p *adminpb.Peer) string {
	switch {
	case p.Healthy == nil:
		return "-"
	case p.GetHealthy():
		return "healthy"
	case p.LeaderContactMs == nil:
		return "unhealthy (never answered this leader)"
	}
	return fmt.Sprintf("unhealthy (answered %v ago)", time.Duration(p.GetLeaderContactMs())*time.Millisecond)
}

// role is a member's role in the answering node's view.
func role(p *adminpb.Peer) string {
	if p.GetLeader() {
		return "leader"
	}
	return "standby"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *cli) clusterStatus(args []string) int {
	const cmd = "cluster status"
	e := c.command(cmd, "", nil)
	fs, cf := e.fs, e.cf
	pos, err := parse(fs, args)
	if err != nil {
		return parseFailed(err)
	}
	if len(pos) != 0 {
		return e.fail(usagef("takes no arguments, got %q", pos))
	}
	return e.withClient(func(cl *client.Client) int {
		s, err := cl.MembersStatus(c.ctx)
		if err != nil {
			return e.fail(err)
		}
		return c.printStatus(cf, s)
	})
}

func (c *cli) clusterJoin(args []string) int {
	const cmd = "cluster join"
	e := c.command(cmd, "--id ID --raft-addr HOST:PORT [--admin-addr HOST:PORT]", nil)
	fs, cf := e.fs, e.cf
	id := fs.String("id", "", "the new node's id (its agent's --id)")
	raftAddr := fs.String("raft-addr", "", "the new node's Raft address (its agent's --raft-addr)")
	adminAddr := fs.String("admin-addr", "", "the new node's admin address (its agent's --grpc-addr)")
	pos, err := parse(fs, args)
	if err != nil {
		return parseFailed(err)
	}
	switch {
	case len(pos) != 0:
		err = usagef("takes no arguments, got %q (give the node with --id, --raft-addr, --admin-addr)", pos)
	case *id == "" || *raftAddr == "":
		err = usagef("--id and --raft-addr are required")
	default:
		if e := checkAddr("--raft-addr", *raftAddr, false); e != nil {
			err = e
		} else if *adminAddr != "" {
			err = checkAddr("--admin-addr", *adminAddr, false)
		}
	}
	if err != nil {
		return e.fail(err)
	}
	return e.withClient(func(cl *client.Client) int {
		s, err := cl.AddPeer(c.ctx, *id, *raftAddr, *adminAddr)
		if err != nil {
			return e.fail(err)
		}
		if !cf.json {
			fmt.Fprintf(c.stdout, "%s joined the cluster%s\n\n", *id, joinedAs(s, *id))
		}
		return c.printStatus(cf, s)
	})
}

// clusterRemove takes a member out of the cluster. Destructive, so it
// needs --yes: without it, it says what it would do and exits 2. A retry
// of a removal whose answer was lost succeeds (already_removed); an id
// that never was a member is NOT_FOUND.
func (c *cli) clusterRemove(args []string) int {
	const cmd = "cluster remove"
	e := c.command(cmd, "ID --yes", nil)
	fs, cf := e.fs, e.cf
	yes := fs.Bool("yes", false, "do it; without --yes the command says what it would do and exits 2 ("+confirmHint+")")
	pos, err := parse(fs, args)
	if err != nil {
		return parseFailed(err)
	}
	if len(pos) != 1 || pos[0] == "" {
		return e.fail(usagef("want exactly one node ID, got %q", pos))
	}
	id := pos[0]
	return e.withClient(func(cl *client.Client) int {
		if !*yes {
			s, err := cl.Status(c.ctx)
			if err != nil {
				return e.fail(err)
			}
			summary := removeDryRun(s, id)
			if cf.json {
				c.printJSON(removeDryRunJSON{DryRun: true, Summary: summary, Confirm: confirmHint, ExitCode: exitUsage})
			} else {
				fmt.Fprintf(c.stdout, "dry run: %s\n", summary)
			}
			fmt.Fprintf(c.stderr, "baton %s: nothing done: %s\n", cmd, confirmHint)
			return exitUsage
		}
		s, err := cl.RemovePeer(c.ctx, id)
		if err != nil {
			return c.finishWith(cmd, fs, cf, err, map[codes.Code]string{
				codes.NotFound:           "the members are the IDs 'baton cluster status' lists",
				codes.FailedPrecondition: "nothing was removed; the message says what stands in the way",
			})
		}
		if !cf.json {
			if s.GetAlreadyRemoved() {
				fmt.Fprintf(c.stdout, "%s is not a member of the cluster: an earlier removal took it out (nothing changed)\n\n", id)
			} else {
				fmt.Fprintf(c.stdout, "%s removed from the cluster\n\n", id)
			}
		}
		return c.printStatus(cf, s)
	})
}

// removeDryRunJSON is cluster remove's --json document without --yes.
type removeDryRunJSON struct {
	DryRun   bool   `json:"dry_run"`
	Summary  string `json:"summary"`
	Confirm  string `json:"confirm"`
	ExitCode int    `json:"exit_code"`
}

// removeDryRun says what removing id would do, as s (any master's view)
// sees the cluster.
func removeDryRun(s *adminpb.ClusterStatusResponse, id string) string {
	var ids []string
	member, leader := false, false
	for _, p := range s.GetPeers() {
		ids = append(ids, p.GetId())
		if p.GetId() == id {
			member, leader = true, p.GetLeader()
		}
	}
	members := strings.Join(ids, ", ")
	switch {
	case !member:
		return fmt.Sprintf("%s is not a member of the cluster (members: %s): nothing to remove", id, members)
	case leader:
		return fmt.Sprintf("would remove %s, the leader, from the cluster (members: %s): it hands leadership to another voter first; then %s serves nothing until it re-joins ('baton cluster join')", id, members, id)
	}
	return fmt.Sprintf("would remove %s from the cluster (members: %s): %s then serves nothing until it re-joins ('baton cluster join')", id, members, id)
}
