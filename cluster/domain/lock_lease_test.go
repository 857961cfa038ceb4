package domain_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
)

// A heartbeat may restate a lock's lease (LockRef.lease_ms); a later
// heartbeat with 0 keeps it. A WAITING lock whose holder restated a longer
// lease must keep it once it is acquired: the procedure's first step must
// not cut it back to the length of the original request.
func TestLockRestatedLeaseSurvivesAcquisition(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 1})
	lm, _ := h.leader()
	c := lm.client
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := []string{"default"}
	a, err := c.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: ns, Exclusive: true, LeaseMs: 3600_000})
	if err != nil || a.GetState() != domain.LockAcquired {
		t.Fatalf("acquire a: %v, %v", a, err)
	}
	b, err := c.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: ns, Exclusive: true, LeaseMs: 1000})
	if err != nil || b.GetState() != domain.LockWaiting {
		t.Fatalf("acquire b: %v, %v", b, err)
	}
	hb, err := c.LockHeartbeat(ctx, &adminpb.LockRef{LockId: b.GetLockId(), LeaseMs: 3600_000})
	if err != nil || hb.GetLeaseTimeoutMs() != 3600_000 {
		t.Fatalf("restating 1h: %v, %v", hb, err)
	}
	if _, err := c.ReleaseLock(ctx, &adminpb.LockRef{LockId: a.GetLockId()}); err != nil {
		t.Fatal(err)
	}
	var got *adminpb.LockResponse
	testwait.For(t, 20*time.Second, "b acquired", func() bool {
		got, err = c.LockHeartbeat(ctx, &adminpb.LockRef{LockId: b.GetLockId()})
		return err == nil && got.GetState() != domain.LockWaiting
	})
	if got.GetState() != domain.LockAcquired || got.GetLeaseTimeoutMs() != 3600_000 {
		t.Fatalf("b once acquired: %s with a lease of %d ms; its holder was told 3600000 ms", got.GetState(), got.GetLeaseTimeoutMs())
	}
}

// A WAITING lock on a new leader keeps its own lease, as an ACQUIRED one
// does: its holder (say 'baton lock acquire --lease 10m', renewed by hand
// with 'baton lock heartbeat', which restates nothing) was told its length.
func TestWaitingLockOwnLeaseAfterFailover(t *testing.T) {
	h := newHarness(t, harnessOpts{servers: 1, domain: func(c *domain.Config) { c.LockLease = 2 * time.Second }})
	li := h.leaderIndex()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := h.masters[li].client
	ns := []string{"default"}
	a, err := c.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: ns, Exclusive: true, LeaseMs: 3600_000})
	if err != nil || a.GetState() != domain.LockAcquired {
		t.Fatalf("acquire a: %v, %v", a, err)
	}
	b, err := c.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: ns, Exclusive: true, LeaseMs: 3600_000})
	if err != nil || b.GetState() != domain.LockWaiting || b.GetLeaseTimeoutMs() != 3600_000 {
		t.Fatalf("acquire b: %v, %v", b, err)
	}
	h.killMaster(li)
	h.leader()
	other := h.masters[(li+1)%len(h.masters)].client
	var ha, hb *adminpb.LockResponse
	testwait.For(t, 20*time.Second, "heartbeats at the new leader", func() bool {
		ha, err = other.LockHeartbeat(ctx, &adminpb.LockRef{LockId: a.GetLockId()})
		if err != nil {
			return false
		}
		hb, err = other.LockHeartbeat(ctx, &adminpb.LockRef{LockId: b.GetLockId()})
		return err == nil
	})
	if ha.GetLeaseTimeoutMs() != 3600_000 {
		t.Errorf("acquired a on the new leader: lease %d ms, want 3600000", ha.GetLeaseTimeoutMs())
	}
	if hb.GetState() != domain.LockWaiting || hb.GetLeaseTimeoutMs() != 3600_000 {
		t.Errorf("waiting b on the new leader: %s, lease %d ms, want WAITING with 3600000 (it expires after the cluster's 2 s)", hb.GetState(), hb.GetLeaseTimeoutMs())
	}
}
