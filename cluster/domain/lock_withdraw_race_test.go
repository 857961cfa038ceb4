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

// Withdrawing a WAITING lock as it is granted leaves
// nothing held: the next lock is acquired.
func TestWithdrawRacingGrant(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 1})
	cl := h.c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := []string{"default"}
	for i := 0; i < 30; i++ {
		a := lockNamespace(t, ctx, cl, fmt.Sprint("a", i), 3600_000, domain.LockAcquired)
		b := lockNamespace(t, ctx, cl, fmt.Sprint("b", i), 3600_000, domain.LockWaiting)
		errc := make(chan error, 1)
		go func() { _, err := cl.ReleaseLock(ctx, a.GetLockId()); errc <- err }()
		rb, err := cl.ReleaseLock(ctx, b.GetLockId())
		if err != nil || rb.GetState() != domain.LockReleased {
			t.Fatalf("round %d: withdraw b: %v %v", i, rb, err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		c, err := cl.AcquireLockWith(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: ns, Exclusive: true, LeaseMs: 3600_000, Nonce: fmt.Sprint("c", i)})
		if err != nil {
			t.Fatalf("acquire c: %v", err)
		}
		testwait.For(t, 10*time.Second, "c acquired", func() bool {
			r, err := cl.LockHeartbeat(ctx, c.GetLockId())
			return err == nil && r.GetState() == domain.LockAcquired
		})
		if _, err := cl.ReleaseLock(ctx, c.GetLockId()); err != nil {
			t.Fatal(err)
		}
	}
}
