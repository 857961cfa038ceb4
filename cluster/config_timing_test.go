package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The Raft timings of a Config are what raft runs with, and raft accepts
// them; a lease over the heartbeat timeout is refused by Validate before
// raft would refuse it.
func TestRaftConfigCarriesTimings(t *testing.T) {
	c := DefaultConfig()
	c.ID = "m1"
	c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 700*time.Millisecond, 900*time.Millisecond, 650*time.Millisecond
	rc := c.withDefaults().raftConfig(make(chan bool, 1))
	if rc.HeartbeatTimeout != 700*time.Millisecond || rc.ElectionTimeout != 900*time.Millisecond || rc.LeaderLeaseTimeout != 650*time.Millisecond {
		t.Fatalf("raft config heartbeat %v election %v lease %v", rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout)
	}
	if rc.PreVoteDisabled {
		t.Fatal("pre-vote is off: a follower that lost touch alone would depose a healthy leader")
	}
	if err := raft.ValidateConfig(rc); err != nil {
		t.Fatal(err)
	}

	c.LeaderLeaseTimeout = time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "LeaderLeaseTimeout 1s exceeds HeartbeatTimeout 700ms") {
		t.Fatalf("Validate: %v, want the lease over the heartbeat timeout named", err)
	}
}
