package cluster

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// A follower's readiness: is this member caught up with the leader?
//
// raft does not say. A follower's commit index is min(the leader's, its
// own last entry), so one far behind still sees commit == last; and raft
// keeps the leader's commit index, which every AppendEntries carries, to
// itself. So the transport wrapper (contactTracker) reads it off the
// requests on their way in (Consumer), before raft handles them: the
// leader sends one to each follower at least every CommitTimeout even
// when nothing is written (replication.go: "to ensure followers quickly
// learn the leader's commit index"). Heartbeats carry none and are not
// needed: raft's own leader and last contact cover them.

// followState is what the newest replication requests from a leader said.
// Under contactTracker.mu.
type followState struct {
	// term, commit, at: the term and leader commit index of the newest
	// AppendEntries that carried one, and when it arrived.
	term   uint64
	leader string
	commit uint64
	at     time.Time
	// snapTerm, snapIndex, snapAt: the newest InstallSnapshot request
	// (zero if none): a snapshot arrived after the newest AppendEntries
	// is being installed (the leader sends no entries meanwhile).
	snapTerm  uint64
	snapIndex uint64
	snapAt    time.Time
}

// Consumer implements raft.Transport: the requests to this node, relayed
// to raft once noted (observe).
func (c *contactTracker) Consumer() <-chan raft.RPC {
	c.relayOnce.Do(func() { go c.relay(c.Transport.Consumer()) })
	return c.relayOut
}

func (c *contactTracker) relay(in <-chan raft.RPC) {
	for {
		select {
		case rpc := <-in:
			c.observe(rpc.Command, time.Now())
			select {
			case c.relayOut <- rpc:
			case <-c.relayStop:
				return
			}
		case <-c.relayStop:
			return
		}
	}
}

// observe notes what a request to this node says of the leader's log.
func (c *contactTracker) observe(cmd any, now time.Time) {
	switch req := cmd.(type) {
	case *raft.AppendEntriesRequest:
		if req.LeaderCommitIndex == 0 && len(req.Entries) == 0 && req.PrevLogEntry == 0 {
			return // a heartbeat: says nothing of the log
		}
		c.mu.Lock()
		if req.Term >= c.follow.term {
			c.follow.term, c.follow.leader, c.follow.commit, c.follow.at = req.Term, string(req.ID), req.LeaderCommitIndex, now
		}
		c.mu.Unlock()
	case *raft.InstallSnapshotRequest:
		c.mu.Lock()
		if req.Term >= c.follow.snapTerm {
			c.follow.snapTerm, c.follow.snapIndex, c.follow.snapAt = req.Term, req.LastLogIndex, now
		}
		c.mu.Unlock()
	}
}

// followed is the newest followState.
func (c *contactTracker) followed() followState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.follow
}

// CatchUp is a member's view of how far behind the leader it is
// (Node.CatchUp).
type CatchUp struct {
	// CaughtUp: the leader leads in this term, and this member applied the
	// log to within MaxLag entries of the leader's commit index, learned
	// from the leader within the last ReplicationWithin. The leader is
	// caught up by definition.
	CaughtUp bool
	// Reason says why not (empty when caught up).
	Reason string
	// LeaderCommit is the leader's commit index as last learned (0 if
	// none in this term), Applied this member's applied index, Lag the
	// difference (0 when not behind).
	LeaderCommit, Applied, Lag uint64
}

// readyReplicationWithin is how recent the leader's last replication
// request must be for its commit index to be believed: two heartbeat
// timeouts (the leader sends one every CommitTimeout), at least a second
// so that a loaded machine does not make a live follower flap.
func (n *Node) readyReplicationWithin() time.Duration {
	return max(2*n.cfg.HeartbeatTimeout, time.Second)
}

// CatchUp says whether this member is caught up with the leader, from the
// replication requests it received: what /readyz asks of a follower
// beyond knowing a leader. A member that knows no leader is not caught up.
func (n *Node) CatchUp() CatchUp {
	applied := n.raft.AppliedIndex()
	if n.raft.State() == raft.Leader {
		return CatchUp{CaughtUp: true, LeaderCommit: n.raft.CommitIndex(), Applied: applied}
	}
	out := n.catchUp(n.raft.CurrentTerm(), applied, n.contact.followed(), time.Now())
	if out.CaughtUp && n.isNonvoter() {
		// Ready counts a member toward a disruption budget, which is
		// there to keep a quorum of voters: a non-voter is not one yet.
		out.CaughtUp = false
		out.Reason = fmt.Sprintf("catching up: a non-voter until the leader promotes it (caught up: %d entries behind)", out.Lag)
	}
	return out
}

// isNonvoter says this node is a non-voter in the latest configuration.
func (n *Node) isNonvoter() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == raft.ServerID(n.cfg.ID) {
			return s.Suffrage == raft.Nonvoter
		}
	}
	return false
}

// catchUp judges f, the newest replication requests, for a member in term
// that applied the log up to applied.
func (n *Node) catchUp(term, applied uint64, f followState, now time.Time) CatchUp {
	out := CatchUp{Applied: applied}
	if f.snapTerm == term && !f.snapAt.IsZero() && !f.snapAt.Before(f.at) {
		out.Reason = fmt.Sprintf("catching up: installing a snapshot from the leader (up to index %d; applied %d)", f.snapIndex, applied)
		return out
	}
	if f.term != term || f.at.IsZero() {
		out.Reason = fmt.Sprintf("catching up: no log replicated from the leader in term %d yet", term)
		return out
	}
	out.LeaderCommit = f.commit
	if f.commit > applied {
		out.Lag = f.commit - applied
	}
	if age, within := now.Sub(f.at), n.readyReplicationWithin(); age > within {
		out.Reason = fmt.Sprintf("catching up: nothing replicated from leader %s for %v (more than %v; applied %d, its commit index %d then)",
			f.leader, age.Round(time.Millisecond), within, applied, f.commit)
		return out
	}
	if out.Lag > n.cfg.ReadyMaxLag {
		out.Reason = fmt.Sprintf("catching up: %d entries behind leader %s's commit index %d (applied %d; ready within %d, --ready-max-lag)",
			out.Lag, f.leader, f.commit, applied, n.cfg.ReadyMaxLag)
		return out
	}
	out.CaughtUp = true
	return out
}
