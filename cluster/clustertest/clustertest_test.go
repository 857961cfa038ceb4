package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/cluster/regionserver"
	"github.com/baton-dev/baton/procedure"
)

// openRegions counts, by the region servers' own answers, the regions of
// table they host.
func openRegions(c *clustertest.Cluster, table string) (int, error) {
	n := 0
	for id, s := range c.RegionServers() {
		resp, err := s.ListRegions(context.Background(), nil)
		if err != nil {
			return 0, fmt.Errorf("ListRegions %s: %w", id, err)
		}
		for _, r := range resp.GetRegions() {
			if len(r.GetRegion()) > len(table) && r.GetRegion()[:len(table)+1] == table+"," {
				n++
			}
		}
	}
	return n, nil
}

// A table created through the client opens its regions on the region
// servers; with the leader killed mid-create, the next leader finishes it
// and the client follows.
func TestCreateTableThroughLeaderFailover(t *testing.T) {
	c := clustertest.New(t, clustertest.Config{RegionServers: 2, RegionServer: func(rc *regionserver.Config) {
		rc.OpLatency = 50 * time.Millisecond // long enough for the kill to land mid-create
	}})
	cl := c.Client(clientTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	id, err := cl.CreateTable(ctx, "", "t1", 6, "")
	if err != nil {
		t.Fatal(err)
	}
	li, _ := c.WaitLeader()
	c.Kill(li)
	nl, _ := c.WaitLeader(li)
	if nl == li {
		t.Fatalf("leader %d killed, yet it leads", li)
	}
	p, err := cl.Wait(ctx, id)
	if err != nil || p.GetState() != "SUCCESS" {
		t.Fatalf("create after failover: %v, %v", p, err)
	}
	c.WaitForNil("6 regions of default:t1 open", func() error {
		n, err := openRegions(c, "default:t1")
		if err == nil && n != 6 {
			err = fmt.Errorf("%d open", n)
		}
		return err
	})

	// The killed master comes back on its storage and follows.
	m := c.Restart(li)
	c.WaitFor(m.ID+" following the leader", func() bool {
		n := m.Node()
		id, _ := n.Leader()
		return id == c.Master(nl).ID && n.FSM().AppliedIndex() >= c.Master(nl).Node().FSM().AppliedIndex()
	})
}

// A partitioned leader steps down, the majority elects another, and after
// healing the old leader follows it; a paused one does the same on its
// own.
func TestPartitionHealAndPause(t *testing.T) {
	c := clustertest.New(t, clustertest.Config{NoDomain: true})
	li, x := c.WaitLeader()
	c.Partition(li)
	old := c.Master(li)
	c.WaitFor("the cut-off leader to step down", func() bool {
		_, err := old.Executor()
		return errors.Is(err, cluster.ErrNotLeader)
	})
	if _, err := x.Submit(&diag.Sleep{Steps: 1}, procedure.SubmitOptions{}); err == nil {
		t.Error("the deposed leader's executor accepted a submission")
	}
	nl, _ := c.WaitLeader(li)
	c.Heal()
	c.WaitFor("the old leader to follow", func() bool {
		id, _ := old.Node().Leader()
		return id == c.Master(nl).ID
	})

	c.Pause(nl, 2*time.Second)
	c.WaitLeader(nl)
	c.WaitFor("the paused master back and following", func() bool {
		id, _ := c.Master(nl).Node().Leader()
		return c.Connected(nl, li) && id != "" && id != c.Master(nl).ID
	})
}

var clientTimeout = client.WithCallTimeout(30 * time.Second)
