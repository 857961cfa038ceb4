package main

import (
	"flag"
	"fmt"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
)

// readFlags are the flags of a command that reads the cluster's state, and
// what the answer said about how it was served.
type readFlags struct {
	stale  bool
	served *adminpb.ReadInfo
}

// addReadFlags adds --stale to a read command.
func addReadFlags(fs *flag.FlagSet) *readFlags {
	rf := &readFlags{}
	fs.BoolVar(&rf.stale, "stale", false, "let the first node reached answer from its own state without asking the leader: works without a quorum, but may miss recent writes (the answer says how stale)")
	return rf
}

// opts returns the client's read options; the answer's ReadInfo lands in
// rf.served.
func (rf *readFlags) opts() []client.ReadOption {
	opts := []client.ReadOption{client.Served(&rf.served)}
	if rf.stale {
		opts = append(opts, client.Stale())
	}
	return opts
}

// readJSON is the "read" member of a read command's --json document: which
// node served the answer, at which applied index and consistency.
type readJSON struct {
	ServedBy           string `json:"served_by"`
	AppliedIndex       uint64 `json:"applied_index"`
	Consistency        string `json:"consistency"`
	RaftState          string `json:"raft_state,omitempty"`
	Term               uint64 `json:"term,omitempty"`
	LeaderContactAgeMs int64  `json:"leader_contact_age_ms"`
}

func toReadJSON(ri *adminpb.ReadInfo) *readJSON {
	if ri == nil {
		return nil
	}
	return &readJSON{
		ServedBy: ri.GetServedBy(), AppliedIndex: ri.GetAppliedIndex(), Consistency: consistencyName(ri.GetConsistency()),
		RaftState: ri.GetRaftState(), Term: ri.GetTerm(), LeaderContactAgeMs: ri.GetLeaderContactAgeMs(),
	}
}

func consistencyName(c adminpb.Consistency) string {
	switch c {
	case adminpb.Consistency_LINEARIZABLE:
		return "linearizable"
	case adminpb.Consistency_STALE:
		return "stale"
	}
	return c.String()
}

// printServed tells, on stderr (stdout stays the answer alone), how a read
// was served.
func (c *cli) printServed(ri *adminpb.ReadInfo) {
	if ri == nil {
		return
	}
	msg := fmt.Sprintf("(served by %s, %s in term %d, at applied index %d, %s",
		ri.GetServedBy(), ri.GetRaftState(), ri.GetTerm(), ri.GetAppliedIndex(), consistencyName(ri.GetConsistency()))
	if ri.GetConsistency() == adminpb.Consistency_STALE {
		switch age := ri.GetLeaderContactAgeMs(); {
		case age < 0:
			msg += "; it has never heard from a leader"
		case ri.GetRaftState() != "Leader":
			msg += fmt.Sprintf("; last heard from the leader %d ms before", age)
		}
	}
	fmt.Fprintln(c.stderr, msg+")")
}

// optsQuiet is opts for a second read of the same command, whose serving
// is not reported.
func (rf *readFlags) optsQuiet() []client.ReadOption {
	if rf.stale {
		return []client.ReadOption{client.Stale()}
	}
	return nil
}
