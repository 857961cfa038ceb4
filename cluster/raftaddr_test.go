package cluster

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
)

// TestRaftBindAdvertisesName runs a TCP cluster whose members listen on
// an IP address (RaftBind) and advertise a name (RaftAddr), as pods of a
// StatefulSet do: the cluster elects a leader, and the name, never the
// address it resolves to, is what each member and the leader's address
// say.
func TestRaftBindAdvertisesName(t *testing.T) {
	c := newTestCluster(t, clusterOpts{tcp: true, tweak: func(i int, cfg *Config) {
		_, port, err := net.SplitHostPort(cfg.RaftAddr)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RaftBind = cfg.RaftAddr
		cfg.RaftAddr = net.JoinHostPort("localhost", port)
		// Peers is one slice shared by every node's configuration.
		cfg.Peers[i].Address = cfg.RaftAddr
	}})
	li, _ := c.leader()
	for i, n := range c.nodes {
		if got, want := n.Addr(), c.cfgs[i].RaftAddr; got != want {
			t.Errorf("node %d advertises %q, want %q", i, got, want)
		}
	}
	testwait.For(t, 10*time.Second, "every member to know the leader by its name", func() bool {
		for _, n := range c.nodes {
			if _, addr := n.Leader(); addr != c.cfgs[li].RaftAddr {
				return false
			}
		}
		return true
	})
}

func TestRaftBindValidate(t *testing.T) {
	c := Config{ID: "a", DataDir: "/tmp/x", RaftAddr: "a.example:7000", RaftBind: "nope", Registry: nil}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "RaftBind") {
		t.Fatalf("Validate() = %v, want a RaftBind problem", err)
	}
}
