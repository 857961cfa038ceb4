package compat_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
)

// TestGoldenUpgradeFinishesInFlight starts a current master on a copy of
// the data directory a release's master left with work in flight, with
// region servers of the current code under the ids the release knew, and
// shows every procedure the release left in flight finish: the table
// create whose opens never came back, the held lock (released by its
// holder) and its waiter, the sleep mid-way. Nothing the release had
// finished changes.
func TestGoldenUpgradeFinishesInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	eachRelease(t, func(t *testing.T, g *golden) {
		dataDir := copyDir(t, g.path("datadir"))
		c := clustertest.New(t, clustertest.Config{
			Masters:       1,
			TCP:           true,
			RegionServers: 2,
			Node: func(_ int, n *cluster.Config) {
				n.DataDir = dataDir
			},
		})
		cl := c.Client()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()

		// Every procedure the release listed is there, as it listed it,
		// before anything more happens to the in-flight ones than a step.
		for _, lp := range g.procs {
			p, err := cl.Get(ctx, lp.ID)
			if err != nil {
				t.Fatalf("%s: procedure %d (%s) after the upgrade: %v", g.version, lp.ID, lp.Type, err)
			}
			if p.Type != lp.Type || p.ParentId != lp.ParentID || p.RootId != lp.RootID {
				t.Errorf("%s: procedure %d read as %s parent %d root %d, listed %+v", g.version, lp.ID, p.Type, p.ParentId, p.RootId, lp)
			}
			if lp.State == "SUCCESS" || lp.State == "ROLLEDBACK" {
				if p.State != lp.State || string(p.Result) != deref(lp.Result) || p.Error != deref(lp.Error) {
					t.Errorf("%s: finished procedure %d read as %v %q %q, listed %+v", g.version, lp.ID, p.State, p.Result, p.Error, lp)
				}
			}
		}

		r := g.roles
		// The holder lets its lock go, as 'baton lock release' does; the
		// waiter then holds it, and lets go too.
		if _, err := cl.ReleaseLock(ctx, r.HeldLock); err != nil {
			t.Fatalf("%s: release the held lock %d: %v", g.version, r.HeldLock, err)
		}
		c.WaitForNil("the waiting lock to be acquired", func() error {
			resp, err := cl.LockHeartbeat(ctx, r.WaitingLock)
			if err != nil {
				return err
			}
			if resp.State != "ACQUIRED" {
				return errState("lock " + resp.State)
			}
			return nil
		})
		if _, err := cl.ReleaseLock(ctx, r.WaitingLock); err != nil {
			t.Fatalf("%s: release the lock %d: %v", g.version, r.WaitingLock, err)
		}

		for id, result := range map[uint64]string{
			r.PendingTableCreate: "table ns1:pending created with 4 regions",
			r.SleepMidway:        "slept 2 steps",
			r.HeldLock:           "",
			r.WaitingLock:        "",
		} {
			p, err := cl.Wait(ctx, id)
			if err != nil {
				t.Fatalf("%s: wait for procedure %d: %v", g.version, id, err)
			}
			if p.State != "SUCCESS" || result != "" && string(p.Result) != result {
				t.Errorf("%s: procedure %d (%s) ended %v %q (error %q)", g.version, id, p.Type, p.State, p.Result, p.Error)
			}
		}

		all, err := cl.ListAll(ctx, client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range all {
			if p.State != "SUCCESS" && p.State != "ROLLEDBACK" {
				t.Errorf("%s: procedure %d (%s) still %v after the in-flight ones finished", g.version, p.Id, p.Type, p.State)
			}
		}
		c.WaitForNil("every region of both tables open", func() error {
			for table, n := range map[string]int{"ns1:done": 3, "ns1:pending": 4} {
				regions, err := cl.ListRegions(ctx, table)
				if err != nil {
					return err
				}
				open := 0
				for _, rg := range regions {
					if rg.State == "OPEN" {
						open++
					}
				}
				if open != n || len(regions) != n {
					return errState(table + ": not every region open")
				}
			}
			return nil
		})
	})
}

type errState string

func (e errState) Error() string { return string(e) }
