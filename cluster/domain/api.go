package domain

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/rspb"
)

// CreateNamespaceProcedure builds the procedure creating namespace name.
// The builders validate their input: errors wrap procedure.ErrInvalid.
func (d *Domain) CreateNamespaceProcedure(name string) (procedure.Procedure, error) {
	return NewCreateNamespace(name)
}

// DeleteNamespaceProcedure builds the procedure deleting namespace name.
func (d *Domain) DeleteNamespaceProcedure(name string) (procedure.Procedure, error) {
	return NewDeleteNamespace(name)
}

// CreateTableProcedure builds the procedure creating table ns:name, split
// into regions regions.
func (d *Domain) CreateTableProcedure(ns, name string, regions int) (procedure.Procedure, error) {
	return NewCreateTable(ns, name, regions)
}

// DeleteTableProcedure builds the procedure deleting table ns:name.
func (d *Domain) DeleteTableProcedure(ns, name string) (procedure.Procedure, error) {
	return NewDeleteTable(ns, name)
}

// EnableTableProcedure builds the procedure enabling table ns:name.
func (d *Domain) EnableTableProcedure(ns, name string) (procedure.Procedure, error) {
	return NewEnableTable(ns, name)
}

// DisableTableProcedure builds the procedure disabling table ns:name.
func (d *Domain) DisableTableProcedure(ns, name string) (procedure.Procedure, error) {
	return NewDisableTable(ns, name)
}

// MoveRegionProcedure builds a MOVE TransitRegionState of region to
// toServer ("" for the least loaded other live server).
func (d *Domain) MoveRegionProcedure(region, toServer string) (procedure.Procedure, error) {
	r, err := d.fsmReader()
	if err != nil {
		return nil, err
	}
	rg, ok, err := getRegion(r, region)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, procedure.Errorf(ErrNotFound, "region %q does not exist", region)
	}
	if toServer != "" {
		if _, ok, err := getServer(r, toServer); err != nil || !ok {
			if err == nil {
				err = procedure.Errorf(ErrNotFound, "region server %q is not known to the cluster", toServer)
			}
			return nil, err
		}
	}
	ns, table := SplitTableName(rg.Table)
	return &TransitRegionState{Region: region, Namespace: ns, Table: table, Kind: KindMove, Target: toServer}, nil
}

// BalanceProcedure builds a balancing round.
func (d *Domain) BalanceProcedure() (procedure.Procedure, error) { return &Balance{}, nil }

// ListNamespaces lists the namespaces in the local replicated state.
func (d *Domain) ListNamespaces() ([]string, error) {
	r, err := d.fsmReader()
	if err != nil {
		return nil, err
	}
	return scanNamespaces(r)
}

func regionInfo(name string, rg Region) catalog.Region {
	return catalog.Region{Name: name, Table: rg.Table, State: rg.State, Server: rg.Server, ProcID: rg.ProcID}
}

// ServerRegions is a page of what the region server says it hosts, and
// of what the replicated state assigns to its live incarnation: the names
// of both after q.After, at most q.PageSize of each, in
// maxServerRegionsPageBytes.
func (d *Domain) ServerRegions(ctx context.Context, q catalog.ServerRegionsQuery) (catalog.ServerRegions, error) {
	r, err := d.fsmReader()
	if err != nil {
		return catalog.ServerRegions{}, err
	}
	srv, ok, err := getServer(r, q.Server)
	if err != nil {
		return catalog.ServerRegions{}, err
	}
	if !ok {
		return catalog.ServerRegions{}, procedure.Errorf(ErrNotFound, "region server %q is not known to the cluster", q.Server)
	}
	var assigned []string
	ref := ServerRef{q.Server, srv.StartCode}
	if err := scanRegions(r, func(name string, rg Region) bool {
		if name > q.After && rg.onServer(ref) {
			assigned = append(assigned, name)
		}
		return true
	}); err != nil {
		return catalog.ServerRegions{}, err
	}
	hosted, hostedMore, err := d.hostedPage(ctx, q, srv.Address)
	if err != nil {
		return catalog.ServerRegions{}, err
	}
	sort.Strings(assigned)
	a, h, next := serverRegionsPage(assigned, hosted, hostedMore, q.PageSize)
	return catalog.ServerRegions{Server: q.Server, Assigned: a, Hosted: h, Next: next}, nil
}

// hostedPage asks the region server for the regions it hosts after
// q.After, at most q.PageSize, sorted; more says it has more.
func (d *Domain) hostedPage(ctx context.Context, q catalog.ServerRegionsQuery, addr string) (hosted []string, more bool, err error) {
	c, err := d.rsClient(q.Server, addr)
	if err != nil {
		return nil, false, err
	}
	req := &rspb.ListRegionsRequest{PageSize: int32(q.PageSize)}
	if q.After != "" {
		req.PageToken = rspb.EncodeRegionsToken(q.After)
	}
	// A deadline the gRPC call carries on the wire: real time, whatever
	// the domain's clock.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.ListRegions(cctx, req)
	if err != nil {
		// Not UNAVAILABLE: that would send the client to another master,
		// which cannot reach the region server any better.
		return nil, false, status.Errorf(codes.FailedPrecondition, "region server %s at %s does not answer: %s", q.Server, addr, status.Convert(err).Message())
	}
	// A region server older than paging answers every region, whatever
	// the token: those up to q.After were on earlier pages.
	for _, h := range resp.GetRegions() {
		if h.GetRegion() > q.After {
			hosted = append(hosted, h.GetRegion())
		}
	}
	sort.Strings(hosted)
	return hosted, resp.GetNextPageToken() != "", nil
}

// maxServerRegionsPageBytes ends a ServerRegions page before the names of
// both lists add up to more, far below gRPC's 4 MiB message limit.
const maxServerRegionsPageBytes = 1 << 20

// serverRegionsPage cuts the sorted lists at the same name, so that a
// page compares like with like: the last name both are complete up to,
// within size names of each and maxServerRegionsPageBytes in all. next
// is that name when either list has more.
func serverRegionsPage(assigned, hosted []string, hostedMore bool, size int) (a, h []string, next string) {
	bound, cut := "", false
	lower := func(list []string, more bool) {
		if len(list) == 0 || (!more && len(list) <= size) {
			return
		}
		if last := list[min(size, len(list))-1]; !cut || last < bound {
			bound, cut = last, true
		}
	}
	lower(hosted, hostedMore)
	lower(assigned, false)
	i, j, bytes, prev := 0, 0, 0, ""
	for i < len(assigned) || j < len(hosted) {
		name := firstOf(assigned, hosted, i, j)
		if cut && name > bound {
			break
		}
		inA, inH := i < len(assigned) && assigned[i] == name, j < len(hosted) && hosted[j] == name
		n := (len(name) + 4) * (boolInt(inA) + boolInt(inH)) // with each field's tag and length
		if prev != "" && bytes+n > maxServerRegionsPageBytes {
			return assigned[:i], hosted[:j], prev
		}
		i, j, bytes, prev = i+boolInt(inA), j+boolInt(inH), bytes+n, name
	}
	if !cut {
		return assigned, hosted, ""
	}
	return assigned[:i], hosted[:j], bound
}

// firstOf is the lesser of a[i] and b[j], of those there are.
func firstOf(a, b []string, i, j int) string {
	switch {
	case i >= len(a):
		return b[j]
	case j >= len(b):
		return a[i]
	}
	return min(a[i], b[j])
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lockState says where external lock id stands.
func (d *Domain) lockState(x catalog.Executor, id uint64) (string, error) {
	info, err := x.Get(id)
	if err != nil {
		return "", err
	}
	if info.Type != TypeLock {
		return "", procedure.Errorf(ErrNotFound, "lock %d does not exist (procedure %d is a %s)", id, id, info.Type)
	}
	if info.State.Terminal() {
		switch s := string(info.Result); s {
		case LockReleased, LockExpired:
			return s, nil
		}
		return LockReleased, nil // rolled back: nothing is held
	}
	r, err := d.fsmReader()
	if err != nil {
		return "", err
	}
	if _, held, _ := r.get(LockKey(id)); held {
		return LockAcquired, nil
	}
	return LockWaiting, nil
}

func (d *Domain) lockInfo(x catalog.Executor, id uint64) (catalog.Lock, error) {
	st, err := d.lockState(x, id)
	if err != nil {
		return catalog.Lock{}, err
	}
	length := d.cfg.LockLease
	if svc := d.services(); svc != nil {
		if l, ok := svc.lockLeases.Length(lockHolder(id)); ok {
			length = l
		}
	}
	return catalog.Lock{ID: id, State: st, LeaseTimeoutMs: length.Milliseconds()}, nil
}

// lockOwner owns the lock procedures (part of their nonce key).
const lockOwner = "admin/lock"

// acquireGrace is how long AcquireLock gives an uncontended lock to be
// taken, so the common answer is ACQUIRED rather than a WAITING the holder
// must poll past.
const acquireGrace = time.Second

// AcquireLock submits a LockProcedure (the nonce makes a retry return the
// same lock) and grants it a lease. The answer is ACQUIRED, or WAITING
// while a conflicting lock is held. It runs on the leader, with its
// executor x.
func (d *Domain) AcquireLock(x catalog.Executor, req catalog.LockRequest) (catalog.Lock, error) {
	svc := d.services()
	if svc == nil {
		return catalog.Lock{}, ErrNoServices
	}
	// A new lock is a new procedure: refused in maintenance mode (its
	// heartbeats and its release are not; nor is a retry of an acquire
	// that got through).
	if err := d.CheckSubmissions(x, lockOwner, req.Nonce); err != nil {
		return catalog.Lock{}, err
	}
	r, err := d.fsmReader()
	if err != nil {
		return catalog.Lock{}, err
	}
	length, err := lockLeaseLength(req.Lease, d.cfg.LockLease)
	if err != nil {
		return catalog.Lock{}, err
	}
	p, err := newLockProcedure(r, req.Kind, req.Names, req.Exclusive, req.Holder, req.Description)
	if err != nil {
		return catalog.Lock{}, err
	}
	p.LeaseMs = length.Milliseconds()
	id, err := x.Submit(p, procedure.SubmitOptions{Nonce: req.Nonce, Owner: lockOwner, Submitter: req.Submitter})
	if err != nil {
		return catalog.Lock{}, err
	}
	if _, ok := svc.lockLeases.Length(lockHolder(id)); !ok {
		// A retry (same nonce) keeps the lease the first request got, and
		// one of a lock that has ended since gets none.
		if st, err := d.lockState(x, id); err != nil || !lockLive(st) || lockEnded(svc, id) {
			return d.lockInfo(x, id)
		}
		if err := svc.lockLeases.Grant(lockHolder(id), length); err != nil {
			return catalog.Lock{}, err
		}
	}
	expired, stop := d.after(acquireGrace)
	defer stop()
	for {
		// Watched before the state is read, so a transition in between
		// is not missed.
		changed, unwatch := svc.watchProc(id)
		lk, err := d.lockInfo(x, id)
		if err != nil || lk.State != LockWaiting {
			unwatch()
			return lk, err
		}
		// Parked behind a conflicting lock: nothing will change before
		// that one is let go.
		if w, err := x.Why(id); err == nil && w.Reason == "waiting for lock" {
			unwatch()
			return lk, nil
		}
		// Taking the lock is a persisted transition and being parked
		// behind a conflicting one a lock wait: either closes changed.
		select {
		case <-changed:
		case <-expired:
			unwatch()
			return lk, nil
		case <-svc.stopCh:
			unwatch()
			return lk, nil
		}
		unwatch()
	}
}

// LockHeartbeat renews the lock's lease. A finished lock is not revived.
// A lease of 0 keeps the lock's length; another restates it. The length
// told to the holder is always one the replicated log holds: a new leader
// grants every lock the length it reads there, so a length known only to
// this leader's memory would let a new leader expire a lock whose holder
// was promised longer, and hand it to another. A restated length is
// therefore persisted by the lock's procedure before it is told (an
// ACQUIRED lock), or, for a WAITING lock, a longer one is persisted with
// the acquisition and the holder told the length it has until then
// (expiring a wait early loses a place in a queue, never a lock); a
// shorter one waits until the lock is held.
func (d *Domain) LockHeartbeat(ctx context.Context, x catalog.Executor, id uint64, asked time.Duration) (catalog.Lock, error) {
	svc := d.services()
	if svc == nil {
		return catalog.Lock{}, ErrNoServices
	}
	wanted, err := lockLeaseLength(asked, d.cfg.LockLease)
	if err != nil {
		return catalog.Lock{}, err
	}
	lk, err := d.lockInfo(x, id)
	if err != nil || !lockLive(lk.State) {
		return lk, err
	}
	length := d.lockLeaseOf(id)
	// Renewed first, at the length it has: a heartbeat that came in time
	// keeps the lock while a restated length commits.
	if ended, err := d.renewLockLease(x, svc, id, length); err != nil || ended {
		return d.endedLock(x, svc, id, lk), err
	}
	if asked != 0 && wanted != length {
		switch {
		case lk.State == LockAcquired:
			svc.restateLock(id, wanted)
			length = d.awaitLockLease(ctx, svc, id, wanted)
		case wanted > length:
			// Persisted with the acquisition. A shorter one waits for a
			// heartbeat once the lock is held: a holder told the longer
			// length would otherwise find a new leader granting less.
			svc.restateLock(id, wanted)
		}
		// What may have happened meanwhile: the lock let go, or its
		// length committed.
		if lk, err = d.lockInfo(x, id); err != nil || !lockLive(lk.State) {
			return lk, err
		}
		if ended, err := d.renewLockLease(x, svc, id, length); err != nil || ended {
			return d.endedLock(x, svc, id, lk), err
		}
	}
	lk.LeaseTimeoutMs = length.Milliseconds()
	return lk, nil
}

// renewLockLease renews lock id's lease at length (granting it one of that
// length if this leader has none yet, or one of another length), unless
// the lock has been let go: then ended is true and nothing is granted.
func (d *Domain) renewLockLease(x catalog.Executor, svc *services, id uint64, length time.Duration) (ended bool, err error) {
	holder := lockHolder(id)
	if err := svc.lockLeases.Renew(holder); err != nil {
		if !errors.Is(err, lease.ErrUnknownHolder) {
			return false, err
		}
		// Expired, or let go since the state was read: no lease again.
		if _, expired, ended := svc.lockRecord(id); expired || ended {
			return true, nil
		}
		if st, err := d.lockState(x, id); err != nil || !lockLive(st) {
			return true, err
		}
		// A new leader that has not granted it yet: the heartbeat is a
		// sign of life as good as a grant.
		return false, svc.lockLeases.Grant(holder, length)
	}
	if cur, _ := svc.lockLeases.Length(holder); cur != length {
		return false, svc.lockLeases.Grant(holder, length)
	}
	return false, nil
}

// endedLock is the answer to a heartbeat of lock id, found let go after
// lk was read: its end as the executor shows it, or RELEASED/EXPIRED as
// this leader's record says while that end is being written.
func (d *Domain) endedLock(x catalog.Executor, svc *services, id uint64, lk catalog.Lock) catalog.Lock {
	if now, err := d.lockInfo(x, id); err == nil && !lockLive(now.State) {
		return now
	}
	lk.State = LockExpired // the monitor lets it go shortly
	if released, _, _ := svc.lockRecord(id); released {
		lk.State = LockReleased
	}
	return lk
}

// lockLive reports whether a lock in state st is still held or waited
// for: a heartbeat renews it, a release lets it go.
func lockLive(st string) bool { return st == LockAcquired || st == LockWaiting }

// lockEnded reports whether lock id's procedure let it go in this term.
func lockEnded(svc *services, id uint64) bool {
	_, _, ended := svc.lockRecord(id)
	return ended
}

// restateTimeout bounds how long a heartbeat waits for a restated lease
// length to commit before it answers with the length that has.
const restateTimeout = 5 * time.Second

// awaitLockLease waits until lock id's persisted lease length is wanted
// (its procedure writes it once woken by restateLock), for at most
// restateTimeout, and returns the persisted length then: the only length
// the holder may be told.
func (d *Domain) awaitLockLease(ctx context.Context, svc *services, id uint64, wanted time.Duration) time.Duration {
	ctx, cancel := d.withTimeout(ctx, restateTimeout)
	defer cancel()
	for {
		// Watched before the record is read, so a commit in between is
		// not missed.
		changed, unwatch := svc.watchProc(id)
		length := d.lockLeaseOf(id)
		if length == wanted {
			unwatch()
			return length
		}
		select {
		case <-changed:
			unwatch()
		case <-ctx.Done():
			unwatch()
			d.log.Warn("external lock: restated lease not persisted in time; the holder is told the persisted one", "lock_id", id, "wanted", wanted, "persisted", length)
			return d.lockLeaseOf(id)
		case <-svc.stopCh:
			unwatch()
			return d.lockLeaseOf(id)
		}
	}
}

// releaseTimeout bounds how long ReleaseLock waits for the lock procedure
// to let go.
const releaseTimeout = 10 * time.Second

// ReleaseLock wakes the lock procedure to let go, and waits until it has.
func (d *Domain) ReleaseLock(ctx context.Context, x catalog.Executor, id uint64) (catalog.Lock, error) {
	svc := d.services()
	if svc == nil {
		return catalog.Lock{}, ErrNoServices
	}
	lk, err := d.lockInfo(x, id)
	if err != nil || !lockLive(lk.State) {
		return lk, err
	}
	svc.setLock(id, true, false)
	if lk.State == LockWaiting {
		// Nothing is held yet: the request is withdrawn from the lock's
		// wait queue (an aborted waiter leaves it at once), rather than
		// left to take the lock and let it go, which would hold up
		// whoever queued behind it. One that took the lock in between
		// lets it go as released.
		if err := x.Abort(id); err != nil && !errors.Is(err, procedure.ErrNotAllowed) && !errors.Is(err, procedure.ErrNotFound) {
			return catalog.Lock{}, fmt.Errorf("withdraw waiting lock %d: %w", id, err)
		}
	}
	ctx, cancel := d.withTimeout(ctx, releaseTimeout)
	defer cancel()
	if _, err := x.Wait(ctx, id); err != nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return catalog.Lock{}, fmt.Errorf("release lock %d: %w", id, err)
	}
	return d.lockInfo(x, id)
}

// NamespaceExists reports whether namespace name exists in the local replicated state.
func (d *Domain) NamespaceExists(name string) (bool, error) {
	r, err := d.fsmReader()
	if err != nil {
		return false, err
	}
	return namespaceExists(r, name)
}
