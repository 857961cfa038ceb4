package admin_test

import (
	"fmt"
	"testing"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/internal/version"
)

// The leader writes a cluster id once the cluster version is 2, not
// before; every member's status shows it, and a new leader keeps it.
func TestClusterIDWrittenAtFormat2(t *testing.T) {
	c := versionCluster(t, 2)
	waitReports(t, c, map[string]version.Format{"m1": version.MaxFormat, "m2": version.MaxFormat, "m3": version.Format1})
	// Every member has reported, and the raise loop has had its ticks:
	// at cluster version 1 it writes no id.
	if id := statusOf(t, c.Leader()).GetClusterId(); id != "" {
		t.Fatalf("cluster id %q written at cluster version 1", id)
	}
	c.RestartAs(2, version.Build{})
	waitClusterFormat(t, c, version.MaxFormat)
	var id string
	c.WaitForNil("a cluster id on every member", func() error {
		for _, m := range c.Masters() {
			got := statusOf(t, m).GetClusterId()
			if got == "" || (id != "" && got != id) {
				return fmt.Errorf("%s shows %q (others %q)", m.ID, got, id)
			}
			id = got
		}
		return nil
	})
	li, _ := c.WaitLeader()
	c.Kill(li)
	nl, _ := c.WaitLeader(li)
	c.Restart(li)
	c.WaitForNil("the id kept after a failover", func() error {
		for _, m := range c.Masters() {
			if v, _ := m.Node().FSM().Get(cluster.ClusterIDKey); string(v) != id {
				return fmt.Errorf("%s holds %q, want %q (leader now %d)", m.ID, v, id, nl)
			}
		}
		return nil
	})
	if len(id) != 32 {
		t.Fatalf("cluster id %q: want 32 hex digits", id)
	}
}
