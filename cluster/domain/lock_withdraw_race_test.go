package domain_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
)

// withdrawing a WAITING lock as it is granted leaves
// nothing held: the next lock is acquired.
func TestWithdrawRacingGrant(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 1})
	cl := h.c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := []string{"default"}
	for i := 0; i < 30; i++ {
		a, _ := cl.AcquireLockWith(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: ns, Exclusive: true, LeaseMs: 3600_000, Nonce: fmt.Sprint("a", i)})
		b, _ := cl.AcquireLockWith(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: ns, Exclusive: true, LeaseMs: 3600_000, Nonce: fmt.Sprint("b", i)})
		if b.GetState() != domain.LockWaiting {
			t.Fatalf("b %s", b.GetState())
		}
		errc := make(chan error, 1)
		go func() { _, err := cl.ReleaseLock(ctx, a.GetLockId()); errc <- err }()
		rb, err := cl.ReleaseLock(ctx, b.GetLockId())
		if err != nil || rb.GetState() != domain.LockReleased {
			t.Fatalf("round %d: withdraw b: %v %v", i, rb, err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		c, _ := cl.AcquireLockWith(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: ns, Exclusive: true, LeaseMs: 3600_000, Nonce: fmt.Sprint("c", i)})
		testwait.For(t, 10*time.Second, "c acquired", func() bool {
			r, err := cl.LockHeartbeat(ctx, c.GetLockId())
			return err == nil && r.GetState() == domain.LockAcquired
		})
		if _, err := cl.ReleaseLock(ctx, c.GetLockId()); err != nil {
			t.Fatal(err)
		}
	}
}
