package domain_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
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
	// A waiting lock's restatement is persisted with its acquisition:
	// until then it is told the length it has.
	hb, err := c.LockHeartbeat(ctx, &adminpb.LockRef{LockId: b.GetLockId(), LeaseMs: 3600_000})
	if err != nil || hb.GetState() != domain.LockWaiting || hb.GetLeaseTimeoutMs() != 1000 {
		t.Fatalf("restating 1h while waiting: %v, %v; want WAITING told its persisted 1000 ms", hb, err)
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

// A holder restating its lease is told the new length only once the
// replicated log holds it: a leader killed right after any restatement
// leaves a successor that grants the lock the length its holder was told,
// so no one else gets an exclusive lock its holder believes it still has.
// (With the length kept in the leader's memory only, the successor
// expired a 1 s lock restated to 1 h about a second after the failover
// and gave it to the waiter.)
func TestRestatedLockLeaseSurvivesTheLeadersDeath(t *testing.T) {
	h, cl, ctx := lockHarness(t, harnessOpts{servers: 1}, 3*time.Minute)
	a := lockNamespace(t, ctx, cl, "a", 1000, domain.LockAcquired)
	b := lockNamespace(t, ctx, cl, "b", 3600_000, domain.LockWaiting)
	for round, restated := range []int64{3600_000, 1800_000, 3600_000} {
		// The holder restates until told the new length: a leadership
		// lost while it commits (a loaded machine's elections) answers
		// the length the log holds, which the next heartbeat restates.
		testwait.ForNil(t, 30*time.Second, fmt.Sprintf("round %d: the holder told %d ms", round, restated), func() error {
			hb, err := cl.LockHeartbeatWith(ctx, &adminpb.LockRef{LockId: a.GetLockId(), LeaseMs: restated})
			switch {
			case err != nil:
				return err
			case hb.GetState() != domain.LockAcquired:
				t.Fatalf("round %d: restating %d ms: a is %s", round, restated, hb.GetState())
			case hb.GetLeaseTimeoutMs() != restated:
				return fmt.Errorf("told %d ms", hb.GetLeaseTimeoutMs())
			}
			return nil
		})
		h.c.Restart(h.leaderIndex()) // killed the moment the holder was told
		h.leaderIndex()
		// The waiter polls; a is silent for well over its first length
		// (1 s) and a lease monitor's round, as a holder told an hour
		// would be.
		for quiet := time.Now().Add(3 * time.Second); time.Now().Before(quiet); {
			r, err := cl.LockHeartbeat(ctx, b.GetLockId())
			if err != nil {
				t.Fatalf("round %d: b's heartbeat: %v", round, err)
			}
			if r.GetState() != domain.LockWaiting {
				t.Fatalf("round %d: b is %s while a's holder was told its lock lasts %d ms", round, r.GetState(), restated)
			}
		}
		ha, err := cl.LockHeartbeat(ctx, a.GetLockId())
		if err != nil || ha.GetState() != domain.LockAcquired || ha.GetLeaseTimeoutMs() != restated {
			t.Fatalf("round %d: a at the new leader: %v, %v; want ACQUIRED with the %d ms its holder was told", round, ha, err, restated)
		}
	}
	if _, err := cl.ReleaseLock(ctx, a.GetLockId()); err != nil {
		t.Fatal(err)
	}
	testwait.ForNil(t, 30*time.Second, "b acquired once a let go", func() error {
		r, err := cl.LockHeartbeat(ctx, b.GetLockId())
		if err == nil && r.GetState() != domain.LockAcquired {
			err = fmt.Errorf("b is %s", r.GetState())
		}
		return err
	})
}

// lockNamespace takes an exclusive lock on namespace "default" with a
// lease of leaseMs under nonce, and fails the test unless it is answered
// want (ACQUIRED or WAITING).
// lockHarness is a cluster of o for a lock test, with its client (which
// follows the leader) and a context of d for the test's calls.
func lockHarness(t *testing.T, o harnessOpts, d time.Duration) (*harness, *client.Client, context.Context) {
	t.Helper()
	h := newHarness(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return h, h.c.Client(), ctx
}

func lockNamespace(t *testing.T, ctx context.Context, cl *client.Client, nonce string, leaseMs int64, want string) *adminpb.LockResponse {
	t.Helper()
	r, err := cl.AcquireLockWith(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: []string{"default"}, Exclusive: true, LeaseMs: leaseMs, Nonce: nonce})
	if err != nil || r.GetState() != want {
		t.Fatalf("acquire %s: %v, %v; want %s", nonce, r, err, want)
	}
	return r
}

// Found by review; before the fix, a WAITING lock whose holder restates a SHORTER lease is told its
// persisted (longer) length until the acquisition persists the shorter one.
// A leader that dies after the acquisition but before the holder's next
// heartbeat leaves a successor that grants the shorter length: the holder,
// told 1 h and heartbeating at that pace, loses the lock to a waiter.
// The successor's grant must be at least what the holder was last told.
func TestShortenedWaitingLeaseThenFailover(t *testing.T) {
	h, cl, ctx := lockHarness(t, harnessOpts{servers: 1}, 3*time.Minute)
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
	h, cl, ctx := lockHarness(t, harnessOpts{masters: 1, servers: 1}, 3*time.Minute)
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
	h, cl, ctx := lockHarness(t, harnessOpts{masters: 1, servers: 1}, time.Minute)
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

// Withdrawing a WAITING lock as it is granted leaves
// nothing held: the next lock is acquired.
func TestWithdrawRacingGrant(t *testing.T) {
	_, cl, ctx := lockHarness(t, harnessOpts{masters: 1, servers: 1}, 3*time.Minute)
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
