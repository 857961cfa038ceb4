package main

import (
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/baton-dev/baton/cluster/client"
)

// transferJSON is `cluster transfer-leadership --json`.
type transferJSON struct {
	From        string `json:"from"`
	To          string `json:"to"`
	Transferred bool   `json:"transferred"`
	LeaderAfter string `json:"leader_after"`
	Message     string `json:"message"`
}

// clusterTransferLeadership hands leadership over: by an operator before
// maintenance of the leader's machine, or by a master's preStop hook for
// itself (--from its own id, with its own certificate) so that a pod
// stopped while it leads is replaced without an election timeout.
// Exit 0 also when --from does not lead: there is nothing to do.
func (c *cli) clusterTransferLeadership(args []string) int {
	const cmd = "cluster transfer-leadership"
	e := c.command(cmd, "[--from ID] [--to ID]", map[codes.Code]string{
		codes.NotFound:         "--from or --to names no member: the members are the IDs 'baton cluster status' lists",
		codes.PermissionDenied: "a master's certificate may ask only for itself (--from its own id); an admin may ask for any member",
		codes.Aborted:          "no voter took over; the leader still leads",
	})
	fs, cf := e.fs, e.cf
	// The default from BATON_ID (the agent's --id variable) is for a
	// Kubernetes preStop hook: an exec'd command's arguments are not
	// expanded, its environment is, so the hook names its own member
	// without a shell (the image has none).
	from := fs.String("from", c.getenv("BATON_ID"), "hand over only if this member leads (default: $BATON_ID, the agent's own id where one runs; else whoever leads); a master's own certificate must give its own id")
	to := fs.String("to", "", "the voter to hand leadership to (default: raft's choice, the most caught-up voter)")
	pos, err := parse(fs, args)
	if err != nil {
		return parseFailed(err)
	}
	switch {
	case len(pos) != 0:
		return e.fail(usagef("takes no arguments, got %q (give members with --from and --to)", pos))
	case *from != "" && *from == *to:
		return e.fail(usagef("--from and --to are both %q", *from))
	}
	return e.withClient(func(cl *client.Client) int {
		r, err := cl.TransferLeadership(c.ctx, *from, *to)
		if err != nil {
			return e.fail(err)
		}
		if cf.json {
			c.printJSON(transferJSON{From: r.GetFrom(), To: r.GetTo(), Transferred: r.GetTransferred(), LeaderAfter: r.GetLeaderId(), Message: r.GetMessage()})
		} else {
			fmt.Fprintln(c.stdout, r.GetMessage())
		}
		return exitOK
	})
}
