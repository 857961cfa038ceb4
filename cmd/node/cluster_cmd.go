package main

import (
	"fmt"
	"text/tabwriter"

	"google.golang.org/grpc/codes"

	"github.com/baton-dev/baton/proto/adminpb"
)

const clusterUsage = `usage: baton cluster <command> [flags]

commands:
  status                                          the cluster as the master that answers sees it
  join --id ID --raft-addr H:P [--admin-addr H:P]  add a node as a voter
  remove ID                                       remove a node

Every command takes --addr (env BATON_ADDR, default 127.0.0.1:7070), --json
and --timeout. Run 'baton cluster <command> -h' for its flags.
`

func (c *cli) cluster(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, clusterUsage)
		return exitUsage
	}
	switch args[0] {
	case "status":
		return c.clusterStatus(args[1:])
	case "join":
		return c.clusterJoin(args[1:])
	case "remove":
		return c.clusterRemove(args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, clusterUsage)
		return exitOK
	default:
		fmt.Fprintf(c.stderr, "baton cluster: unknown command %q\n\n%s", args[0], clusterUsage)
		return exitUsage
	}
}

// statusJSON is the --json document of every cluster command.
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
}

type peerJSON struct {
	ID           string `json:"id"`
	RaftAddress  string `json:"raft_address"`
	AdminAddress string `json:"admin_address"`
	Suffrage     string `json:"suffrage"`
	Leader       bool   `json:"leader"`
}

func toStatusJSON(s *adminpb.ClusterStatusResponse) statusJSON {
	j := statusJSON{
		NodeID: s.GetNodeId(), State: s.GetState(), LeaderID: s.GetLeaderId(), LeaderRaftAddress: s.GetLeaderRaftAddress(),
		LeaderAdminAddress: s.GetLeaderAdminAddress(), Term: s.GetTerm(), CommitIndex: s.GetCommitIndex(),
		AppliedIndex: s.GetAppliedIndex(), FSMIndex: s.GetFsmIndex(), Peers: []peerJSON{},
	}
	for _, p := range s.GetPeers() {
		j.Peers = append(j.Peers, peerJSON{ID: p.GetId(), RaftAddress: p.GetRaftAddress(), AdminAddress: p.GetAdminAddress(),
			Suffrage: p.GetSuffrage(), Leader: p.GetLeader()})
	}
	return j
}

func (c *cli) printStatus(cf *clientFlags, s *adminpb.ClusterStatusResponse) int {
	if cf.json {
		c.printJSON(toStatusJSON(s))
		return exitOK
	}
	leader := s.GetLeaderId()
	if leader == "" {
		leader = "(none known)"
	}
	fmt.Fprintf(c.stdout, "answered by  %s (%s)\n", s.GetNodeId(), s.GetState())
	fmt.Fprintf(c.stdout, "leader       %s\n", leader)
	fmt.Fprintf(c.stdout, "term         %d\n", s.GetTerm())
	fmt.Fprintf(c.stdout, "indexes      commit %d, applied %d, fsm %d\n\n", s.GetCommitIndex(), s.GetAppliedIndex(), s.GetFsmIndex())
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSUFFRAGE\tRAFT\tADMIN\tROLE")
	for _, p := range s.GetPeers() {
		role := "standby"
		if p.GetLeader() {
			role = "leader"
		}
		admin := p.GetAdminAddress()
		if admin == "" {
			admin = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.GetId(), p.GetSuffrage(), p.GetRaftAddress(), admin, role)
	}
	tw.Flush()
	return exitOK
}

func (c *cli) clusterStatus(args []string) int {
	const cmd = "cluster status"
	fs, cf := c.newFlagSet(cmd, "")
	pos, err := parse(fs, args)
	if err != nil {
		return parseFailed(err)
	}
	if len(pos) != 0 {
		return c.finish(cmd, fs, cf, usagef("takes no arguments, got %q", pos))
	}
	cl, err := cf.client()
	if err != nil {
		return c.finish(cmd, fs, cf, err)
	}
	defer cl.Close()
	s, err := cl.Status(c.ctx)
	if err != nil {
		return c.finish(cmd, fs, cf, err)
	}
	return c.printStatus(cf, s)
}

func (c *cli) clusterJoin(args []string) int {
	const cmd = "cluster join"
	fs, cf := c.newFlagSet(cmd, "--id ID --raft-addr HOST:PORT [--admin-addr HOST:PORT]")
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
		return c.finish(cmd, fs, cf, err)
	}
	cl, err := cf.client()
	if err != nil {
		return c.finish(cmd, fs, cf, err)
	}
	defer cl.Close()
	s, err := cl.AddPeer(c.ctx, *id, *raftAddr, *adminAddr)
	if err != nil {
		return c.finish(cmd, fs, cf, err)
	}
	if !cf.json {
		fmt.Fprintf(c.stdout, "%s joined the cluster\n\n", *id)
	}
	return c.printStatus(cf, s)
}

func (c *cli) clusterRemove(args []string) int {
	const cmd = "cluster remove"
	fs, cf := c.newFlagSet(cmd, "ID")
	pos, err := parse(fs, args)
	if err != nil {
		return parseFailed(err)
	}
	if len(pos) != 1 || pos[0] == "" {
		return c.finish(cmd, fs, cf, usagef("want exactly one node ID, got %q", pos))
	}
	cl, err := cf.client()
	if err != nil {
		return c.finish(cmd, fs, cf, err)
	}
	defer cl.Close()
	s, err := cl.RemovePeer(c.ctx, pos[0])
	if err != nil {
		return c.finishWith(cmd, fs, cf, err, map[codes.Code]string{
			codes.NotFound: "the members are the IDs 'baton cluster status' lists",
		})
	}
	if !cf.json {
		fmt.Fprintf(c.stdout, "%s removed from the cluster\n\n", pos[0])
	}
	return c.printStatus(cf, s)
}
