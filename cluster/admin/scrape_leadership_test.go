package admin_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/baton-dev/baton/cluster/clustertest"
)

// Scrapes of every master while leadership moves and procedures run: no
// race, no panic, no gather error; and once leadership settles, the
// leader-only families (procedures, regions, leases, dispatch queue) come
// from the leader alone.
func TestScrapeDuringLeadershipChanges(t *testing.T) {
	c := clustertest.New(t, clustertest.Config{Masters: 3, RegionServers: 1})
	c.WaitLeader()
	cl := c.Client()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var scrapes atomic.Int64
	for _, m := range c.Masters() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := m.Metrics().Gather(); err != nil {
					t.Errorf("gather on %s: %v", m.ID, err)
					return
				}
				scrapes.Add(1)
			}
		}()
	}
	ctx := context.Background()
	for round := range 3 {
		if _, err := cl.Submit(ctx, "sleep", map[string]string{"steps": "2"}, "", "review", 0); err != nil {
			t.Fatal(err)
		}
		li, _ := c.WaitLeader()
		c.TransferLeadership((li + 1 + round) % 3)
	}
	close(stop)
	wg.Wait()
	if scrapes.Load() == 0 {
		t.Fatal("no scrape ran")
	}
	leader := c.Leader()
	c.WaitForNil("the leader-only families on the leader alone", func() error {
		for _, m := range c.Masters() {
			have := families(t, m.Metrics())
			for _, name := range []string{"baton_procedures", "baton_regions", "baton_leases", "baton_dispatch_queued_operations"} {
				if have[name] != (m == leader) {
					return fmt.Errorf("%s on %s: %v (leader %s)", name, m.ID, have[name], leader.ID)
				}
			}
		}
		return nil
	})
}
