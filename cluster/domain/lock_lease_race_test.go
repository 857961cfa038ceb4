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

// Found by review; before the fix, a WAITING lock whose holder restates a SHORTER lease is told its
// persisted (longer) length until the acquisition persists the shorter one.
// A leader that dies after the acquisition but before the holder's next
// heartbeat leaves a successor that grants the shorter length: the holder,
// told 1 h and heartbeating at that pace, loses the lock to a waiter.
// The successor's grant must be at least what the holder was last told.
func TestShortenedWaitingLeaseThenFailover(t *testing.T) {
	h := newHarness(t, harnessOpts{servers: 1})
	cl := h.c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a := lockNamespace(t, ctx, cl, "a", 3600_000, domain.LockAcquired)
	b := lockNamespace(t, ctx, cl, "b", 3600_000, domain.LockWaiting)
	hb, err := cl.LockHeartbeatWith(ctx, &adminpb.LockRef{LockId: b.GetLockId(), LeaseMs: 1000})
	if err != nil || hb.GetState() != domain.LockWaiting || hb.GetLeaseTimeoutMs() != 3600_000 {
		t.Fatalf("b restating 1 s while waiting: %v, %v; want WAITING told 3600000", hb, err)
	}
	told := hb.GetLeaseTimeoutMs()
	if _, err := cl.ReleaseLock(ctx, a.GetLockId()); err != nil {
		t.Fatal(err)
	}
	// b is acquired (its shorter length persisted with it) without a
	// heartbeat of b's holder: observed through the leader's FSM.
	testwait.For(t, 20*time.Second, "b acquired", func() bool {
		_, ok, _ := domain.ReaderGet(h.reader(), domain.LockKey(b.GetLockId()))
		return ok
	})
	c := lockNamespace(t, ctx, cl, "c", 3600_000, domain.LockWaiting)
	h.c.Restart(h.leaderIndex())
	h.leaderIndex()
	// b's holder, told 1 h, is silent; c polls for well over 1 s.
	for quiet := time.Now().Add(4 * time.Second); time.Now().Before(quiet); {
		r, err := cl.LockHeartbeat(ctx, c.GetLockId())
		if err != nil {
			t.Fatalf("c's heartbeat: %v", err)
		}
		if r.GetState() != domain.LockWaiting {
			t.Fatalf("c is %s: b expired at the new leader although its holder was last told %d ms", r.GetState(), told)
		}
	}
}

// Found by review; before the fix, a heartbeat restating an ACQUIRED lock's length waits (up to 5 s)
// for the procedure to persist it, and only then renews the lease. A release
// (or an expiry) that the procedure sees before the restatement finishes the
// lock without persisting it: the heartbeat then waits out its 5 s, finds no
// lease (the lock's wait state dropped with it), grants a fresh lease to the
// finished lock and answers with the ACQUIRED read before the wait. The
// holder is told it holds a lock that is gone (an expired one may already
// be another's).
func TestRestateRacingRelease(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 1})
	cl := h.c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := 0; i < 20; i++ {
		a := lockNamespace(t, ctx, cl, fmt.Sprint("a", i), 3600_000, domain.LockAcquired)
		hbc := make(chan *adminpb.LockResponse, 1)
		go func() {
			hb, err := cl.LockHeartbeatWith(ctx, &adminpb.LockRef{LockId: a.GetLockId(), LeaseMs: 30_000})
			if err != nil {
				t.Error(err)
			}
			hbc <- hb
		}()
		r, err := cl.ReleaseLock(ctx, a.GetLockId())
		if err != nil || r.GetState() != domain.LockReleased {
			t.Fatalf("release: %v, %v", r, err)
		}
		if hb := <-hbc; hb.GetState() == domain.LockAcquired {
			// Told ACQUIRED after (or while) the lock was released: fine
			// only if the heartbeat was served before the release.
			now, err := cl.LockHeartbeat(ctx, a.GetLockId())
			if err != nil {
				t.Fatal(err)
			}
			if lw := h.masters[0].dom.Services().LockLeaseLength(a.GetLockId()); lw > 0 {
				t.Fatalf("round %d: released lock %d (now %s) still has a lease of %v, granted by a heartbeat that answered ACQUIRED", i, a.GetLockId(), now.GetState(), lw)
			}
		}
	}
}

// Found by review; before the fix, ReleaseLock of a WAITING lock aborts its procedure, which rolls
// back without running a step: nothing calls dropLock, so the lock's lease
// (and its wait state) outlive it. The lease runs on, and when it runs out
// the monitor warns "external lock expired: its holder stopped
// heartbeating" about a lock withdrawn long before, and re-creates its wait
// state, which nothing removes.
func TestWithdrawnWaitingLockLeavesNoLease(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 1})
	cl := h.c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lockNamespace(t, ctx, cl, "a", 3600_000, domain.LockAcquired)
	b := lockNamespace(t, ctx, cl, "b", 3600_000, domain.LockWaiting)
	r, err := cl.ReleaseLock(ctx, b.GetLockId())
	if err != nil || r.GetState() != domain.LockReleased {
		t.Fatalf("withdraw b: %v, %v", r, err)
	}
	svc := h.masters[0].dom.Services()
	testwait.For(t, 10*time.Second, "withdrawn b's lease dropped", func() bool {
		return svc.LockLeaseLength(b.GetLockId()) == 0
	})
}
