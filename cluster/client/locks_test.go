package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
)

func TestLocks(t *testing.T) {
	// One cluster for every case, each on names of its own. Region locks
	// name regions of an existing table, so it has a region server.
	fc := clustertest.New(t, clustertest.Config{Masters: 1, RegionServers: 1})
	c := newClient(t, fc.AdminAddrs())
	id, err := c.CreateTable(ctx(t), "", "regions", 3, "")
	mustSucceed(t, c, id, err)
	tb, err := c.DescribeTable(ctx(t), "", "regions")
	if err != nil {
		t.Fatal(err)
	}
	r := func(i int) string { return tb.Regions[i].Name }
	for i, tc := range []struct {
		name          string
		first, second []string // kind, then names
		firstEx       bool
		secondEx      bool
		want          string // the second's state while the first is held
	}{
		{"shared and shared", []string{"table", "default:t%d"}, []string{"table", "default:t%d"}, false, false, client.LockAcquired},
		{"exclusive then shared", []string{"table", "default:t%d"}, []string{"table", "default:t%d"}, true, false, client.LockWaiting},
		{"shared then exclusive", []string{"namespace", "ns%d"}, []string{"namespace", "ns%d"}, false, true, client.LockWaiting},
		{"other table", []string{"table", "default:t%d"}, []string{"table", "default:u%d"}, true, true, client.LockAcquired},
		{"overlapping regions", []string{"region", r(0), r(1)}, []string{"region", r(1), r(2)}, true, false, client.LockWaiting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names := func(l []string) []string {
				var out []string
				for _, n := range l[1:] {
					if l[0] != "region" {
						n = fmt.Sprintf(n, i)
					}
					out = append(out, n)
				}
				return out
			}
			a, err := c.AcquireLock(ctx(t), tc.first[0], names(tc.first), tc.firstEx, "a", "", "")
			if err != nil || a.State != client.LockAcquired || a.LeaseTimeoutMs <= 0 {
				t.Fatalf("first: %v %v", a, err)
			}
			b, err := c.AcquireLock(ctx(t), tc.second[0], names(tc.second), tc.secondEx, "b", "", "")
			if err != nil || b.State != tc.want {
				t.Fatalf("second: %v %v, want %s", b, err, tc.want)
			}
			// Releasing the first grants the second.
			if r, err := c.ReleaseLock(ctx(t), a.LockId); err != nil || r.State != client.LockReleased {
				t.Fatalf("release: %v %v", r, err)
			}
			testwait.ForNil(t, 30*time.Second, "the second lock granted", func() error {
				if r, err := c.LockHeartbeat(ctx(t), b.LockId); err != nil || r.State != client.LockAcquired {
					return fmt.Errorf("second after release: %v %v", r, err)
				}
				return nil
			})
			if _, err := c.ReleaseLock(ctx(t), b.LockId); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLockExpiresWithoutHeartbeats: a lock renewed within its lease is
// kept, one left alone expires. The master's domain runs on a Manual
// clock, moved by the test between heartbeats, so no stall can expire the
// kept one. Table locks: region locks need regions, whose servers' leases
// would run on that clock too.
func TestLockExpiresWithoutHeartbeats(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	fc := clustertest.New(t, clustertest.Config{Masters: 1, Domain: func(_ int, d *domain.Config) {
		d.Clock = clk
		d.LockLease = 100 * time.Millisecond
	}})
	c := newClient(t, fc.AdminAddrs())
	kept, err := c.AcquireLock(ctx(t), client.LockTable, []string{"default:r1"}, true, "kept", "", "n-kept")
	if err != nil {
		t.Fatal(err)
	}
	lapsed, err := c.AcquireLock(ctx(t), client.LockTable, []string{"default:r2"}, true, "lapsed", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		clk.Advance(40 * time.Millisecond)
		if r, err := c.LockHeartbeat(ctx(t), kept.LockId); err != nil || r.State != client.LockAcquired {
			t.Fatalf("heartbeat: %v %v", r, err)
		}
	}
	// The master ends an expired lock's procedure asynchronously.
	testwait.ForNil(t, 30*time.Second, "the lapsed lock expired", func() error {
		r, err := c.LockHeartbeat(ctx(t), lapsed.LockId)
		if err != nil || r.State != client.LockExpired || client.LockHeld(r.State) {
			return fmt.Errorf("lapsed lock: %v %v", r, err)
		}
		return nil
	})
	// An acquisition retried with its nonce gets the same lock.
	again, err := c.AcquireLock(context.Background(), client.LockTable, []string{"default:r1"}, true, "kept", "", "n-kept")
	if err != nil || again.LockId != kept.LockId || again.State != client.LockAcquired {
		t.Fatalf("again: %v %v", again, err)
	}
}
