package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/client/clienttest"
	"github.com/baton-dev/baton/internal/clock"
)

func TestLocks(t *testing.T) {
	for _, tc := range []struct {
		name          string
		first, second []string // kind, then names
		firstEx       bool
		secondEx      bool
		want          string // the second's state while the first is held
	}{
		{"shared and shared", []string{"table", "default:t"}, []string{"table", "default:t"}, false, false, client.LockAcquired},
		{"exclusive then shared", []string{"table", "default:t"}, []string{"table", "default:t"}, true, false, client.LockWaiting},
		{"shared then exclusive", []string{"namespace", "ns"}, []string{"namespace", "ns"}, false, true, client.LockWaiting},
		{"other table", []string{"table", "default:t"}, []string{"table", "default:u"}, true, true, client.LockAcquired},
		{"overlapping regions", []string{"region", "a", "b"}, []string{"region", "b", "c"}, true, false, client.LockWaiting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := clienttest.Start(t, 1)
			c := newClient(t, fc.Addrs())
			a, err := c.AcquireLock(ctx(t), tc.first[0], tc.first[1:], tc.firstEx, "a", "", "")
			if err != nil || a.State != client.LockAcquired || a.LeaseTimeoutMs <= 0 {
				t.Fatalf("first: %v %v", a, err)
			}
			b, err := c.AcquireLock(ctx(t), tc.second[0], tc.second[1:], tc.secondEx, "b", "", "")
			if err != nil || b.State != tc.want {
				t.Fatalf("second: %v %v, want %s", b, err, tc.want)
			}
			// Releasing the first grants the second.
			if r, err := c.ReleaseLock(ctx(t), a.LockId); err != nil || r.State != client.LockReleased {
				t.Fatalf("release: %v %v", r, err)
			}
			if r, err := c.LockHeartbeat(ctx(t), b.LockId); err != nil || r.State != client.LockAcquired {
				t.Fatalf("second after release: %v %v", r, err)
			}
		})
	}
}

// TestLockExpiresWithoutHeartbeats: a lock renewed within its lease is
// kept, one left alone expires. The lease runs on a Manual clock, moved
// by the test between heartbeats, so no stall can expire the kept one.
func TestLockExpiresWithoutHeartbeats(t *testing.T) {
	fc := clienttest.Start(t, 1)
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	fc.SetLockClock(clk)
	fc.SetLockTimeout(100 * time.Millisecond)
	c := newClient(t, fc.Addrs())
	kept, err := c.AcquireLock(ctx(t), client.LockRegion, []string{"r1"}, true, "kept", "", "n-kept")
	if err != nil {
		t.Fatal(err)
	}
	lapsed, err := c.AcquireLock(ctx(t), client.LockRegion, []string{"r2"}, true, "lapsed", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		clk.Advance(40 * time.Millisecond)
		if r, err := c.LockHeartbeat(ctx(t), kept.LockId); err != nil || r.State != client.LockAcquired {
			t.Fatalf("heartbeat: %v %v", r, err)
		}
	}
	r, err := c.LockHeartbeat(ctx(t), lapsed.LockId)
	if err != nil || r.State != client.LockExpired || client.LockHeld(r.State) {
		t.Fatalf("lapsed lock: %v %v", r, err)
	}
	// An acquisition retried with its nonce gets the same lock.
	again, err := c.AcquireLock(context.Background(), client.LockRegion, []string{"r1"}, true, "kept", "", "n-kept")
	if err != nil || again.LockId != kept.LockId || again.State != client.LockAcquired {
		t.Fatalf("again: %v %v", again, err)
	}
}
