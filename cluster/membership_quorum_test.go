package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"google.golang.org/grpc/codes"
)

// TestRemoveDeadMemberAllowed: the operator's way out of a
// three-member cluster with one member down is to remove that member; the
// quorum check must let it through (the two running members are all of
// the new configuration).
func TestRemoveDeadMemberAllowed(t *testing.T) {
	c := newMembershipCluster(t, 3)
	li := c.WaitLeaderKnown()
	f := followers(c, li)
	dead := c.Master(f[1]).ID
	c.Kill(f[1])
	if _, err := removePeer(c, dead); err != nil {
		t.Fatalf("removing the dead member %s: %v", dead, err)
	}
	requireLeader(t, c, "remove the dead member", []string{c.Master(li).ID, c.Master(f[0]).ID}, 10*time.Second)
}

// TestDeposedLeaderSaysNotLeader: a leader cut off from the others
// while it checks a membership change's quorum steps down within its
// lease, and a new leader is elected among the others. Its answer must
// send the caller there (NotLeader, UNAVAILABLE: the client retries on
// the leader), not ErrNoQuorum (FAILED_PRECONDITION: "nothing was
// changed, bring the members back"), which the client does not retry
// and which names members that are up. Before checkQuorum, raft's
// RemoveServer answered ErrLeadershipLost here.
func TestDeposedLeaderSaysNotLeader(t *testing.T) {
	c := newMembershipCluster(t, 3)
	li := c.WaitLeaderKnown()
	f := followers(c, li)
	n := c.Master(li).Node()
	c.Partition(li)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := n.RemovePeer(ctx, c.Master(f[0]).ID)
	if err == nil {
		t.Fatalf("a leader cut off from every member removed %s", c.Master(f[0]).ID)
	}
	if n.IsLeader() {
		t.Skipf("still leader when it answered (%v): the case did not arise", err)
	}
	if errors.Is(err, cluster.ErrNoQuorum) || cluster.Code(err) != codes.Unavailable {
		t.Fatalf("a deposed leader answered %v (%s); want a NotLeaderError (UNAVAILABLE), so that the caller retries on the new leader", err, cluster.Code(err))
	}
}
