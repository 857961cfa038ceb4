package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/scheduler"
)

// Lock kinds and states, as the admin API spells them.
const (
	LockKindNamespace = "namespace"
	LockKindTable     = "table"
	LockKindRegion    = "region"

	LockWaiting  = "WAITING"
	LockAcquired = "ACQUIRED"
	LockReleased = "RELEASED"
	LockExpired  = "EXPIRED"
)

// TypeLock names LockProcedure in the procedure registry.
const TypeLock = "Lock"

// An external lock is not built by Build: AcquireLock submits it, with a
// lease, and its heartbeats and release act on the running procedure.
func init() {
	registerType(TypeLock, func() procedure.Procedure { return &LockProcedure{} })
}

// States of LockProcedure.
const (
	lockAcquired int32 = 1
	lockHeld     int32 = 2
)

// LockProcedure is an external lock (HBase's LockProcedure): it takes the
// asked namespace, table or region locks through the scheduler like any
// procedure, holds them (HoldLock) while suspended, and lets go once its
// holder releases it or stops renewing its lease ("lock/<id>", a hard limit
// of the length the lock asked for, by default Config.LockLease, renewed
// by LockHeartbeat). While it waits for its
// locks it is WAITING; once its first step ran it is ACQUIRED, recorded at
// lock/<id>; it finishes with the result RELEASED or EXPIRED.
//
// Lease times are not replicated, their lengths are: a new leader grants
// every unfinished lock procedure a fresh lease of its persisted length
// (LeaseMs), so a holder has a full lease period to reach it. A holder
// restating its length is told the new one only once LeaseMs holds it.
type LockProcedure struct {
	procedure.StateMachine
	Kind        string   `json:"kind"`
	Names       []string `json:"names"`
	Exclusive   bool     `json:"exclusive"`
	Holder      string   `json:"holder"`
	Description string   `json:"description,omitempty"`
	// Namespace and Table of region locks (their regions' table).
	Namespace string `json:"namespace,omitempty"`
	Table     string `json:"table,omitempty"`
	Outcome   string `json:"outcome,omitempty"`
	// LeaseMs is the length of the holder's lease (0 in locks taken before
	// locks had their own: the cluster's default).
	LeaseMs int64 `json:"lease_ms,omitempty"`
}

// lockLeaseOf is the lease length lock id asked for, read from its
// persisted procedure (a new leader knows it from nowhere else), or the
// default if that cannot be read.
func (d *Domain) lockLeaseOf(id uint64) time.Duration {
	n := d.nodeOrNil()
	if n == nil {
		return d.cfg.LockLease
	}
	raw, ok := n.FSM().Proc(id)
	if !ok {
		return d.cfg.LockLease
	}
	info, err := procedure.DecodeInfo(raw)
	if err != nil {
		return d.cfg.LockLease
	}
	var p LockProcedure
	if err := json.Unmarshal(info.Data, &p); err != nil {
		return d.cfg.LockLease
	}
	return p.leaseLength(d.cfg.LockLease)
}

// leaseLength is the length of p's lease.
func (p *LockProcedure) leaseLength(def time.Duration) time.Duration {
	if p.LeaseMs > 0 {
		return time.Duration(p.LeaseMs) * time.Millisecond
	}
	return def
}

// NewLockProcedure validates a lock request. Region locks need the
// regions' table (all regions of one table), read from r.
func newLockProcedure(r reader, kind string, names []string, exclusive bool, holder, desc string) (*LockProcedure, error) {
	p := &LockProcedure{Kind: kind, Names: names, Exclusive: exclusive, Holder: holder, Description: desc}
	if len(names) == 0 {
		return nil, procedure.Errorf(errInvalid, "a lock names at least one namespace, table or region")
	}
	switch kind {
	case LockKindNamespace:
		if len(names) != 1 {
			return nil, procedure.Errorf(errInvalid, "a namespace lock names one namespace")
		}
		if err := validName("namespace", names[0]); err != nil {
			return nil, err
		}
	case LockKindTable:
		if len(names) != 1 {
			return nil, procedure.Errorf(errInvalid, "a table lock names one table")
		}
		ns, t := SplitTableName(names[0])
		if err := validName("namespace", ns); err != nil {
			return nil, err
		}
		if err := validName("table", t); err != nil {
			return nil, err
		}
		p.Names = []string{FullTableName(ns, t)}
	case LockKindRegion:
		for _, n := range names {
			rg, err := knownRegion(r, n)
			if err != nil {
				return nil, err
			}
			if p.Table == "" {
				p.Namespace, p.Table = SplitTableName(rg.Table)
			} else if FullTableName(p.Namespace, p.Table) != rg.Table {
				return nil, procedure.Errorf(errInvalid, "a region lock names regions of one table, not of %s and %s", FullTableName(p.Namespace, p.Table), rg.Table)
			}
		}
	default:
		return nil, procedure.Errorf(errInvalid, "lock kind %q: want namespace, table or region", kind)
	}
	return p, nil
}

func (p *LockProcedure) mode() scheduler.Mode {
	if p.Exclusive {
		return scheduler.Exclusive
	}
	return scheduler.Shared
}

// Locks implements procedure.Locker.
func (p *LockProcedure) Locks() []scheduler.Lock {
	switch p.Kind {
	case LockKindNamespace:
		return scheduler.NamespaceLocks(p.Names[0], p.mode())
	case LockKindTable:
		ns, t := SplitTableName(p.Names[0])
		return scheduler.TableLocks(ns, t, p.mode())
	case LockKindRegion:
		if p.Exclusive {
			return scheduler.RegionLocks(p.Namespace, p.Table, p.Names...)
		}
		out := []scheduler.Lock{
			{Type: scheduler.LockNamespace, Name: p.Namespace, Mode: scheduler.Shared},
			{Type: scheduler.LockTable, Name: FullTableName(p.Namespace, p.Table), Mode: scheduler.Shared},
		}
		for _, n := range p.Names {
			out = append(out, scheduler.Lock{Type: scheduler.LockRegion, Name: n, Mode: scheduler.Shared})
		}
		return out
	}
	return nil
}

// HoldLock implements procedure.Locker: held until released.
func (p *LockProcedure) HoldLock() bool { return true }

// InitialState implements procedure.StateSteps.
func (p *LockProcedure) InitialState() int32 { return lockAcquired }

// ExecuteState implements procedure.StateSteps.
func (p *LockProcedure) ExecuteState(ctx *procedure.Context, state int32) (procedure.Flow, error) {
	d, svc, flow, err := servicesOf(ctx)
	if svc == nil {
		return flow, err
	}
	released, expired, ev := svc.lockFlags(ctx.ID())
	if released || expired {
		p.Outcome = LockReleased
		if expired && !released {
			p.Outcome = LockExpired
		}
		svc.dropLock(ctx.ID())
		ctx.SetResult([]byte(p.Outcome))
		ctx.Logger.Info("external lock let go", "outcome", p.Outcome, "holder", p.Holder)
		if _, ok, err := ctx.Get(LockKey(ctx.ID())); err != nil || ok {
			return procedure.NoMoreState, ctx.Delete(LockKey(ctx.ID()))
		}
		return procedure.NoMoreState, nil
	}
	// A lease is granted by AcquireLock and by a new leader's reconcile;
	// one that raced ahead of both gets it here.
	if _, ok := svc.lockLeases.Length(lockHolder(ctx.ID())); !ok {
		if err := svc.lockLeases.Grant(lockHolder(ctx.ID()), p.leaseLength(d.cfg.LockLease)); err != nil {
			return procedure.NoMoreState, err
		}
	}
	// A length the holder restated is persisted by this step before any
	// heartbeat tells it (see LockHeartbeat); the lease itself moves to
	// it at the heartbeat that sees it committed.
	restated := svc.takeRestated(ctx.ID())
	if restated > 0 && restated.Milliseconds() != p.LeaseMs {
		p.LeaseMs = restated.Milliseconds()
	} else {
		restated = 0
	}
	switch state {
	case lockAcquired:
		rec := Lock{Kind: p.Kind, Names: p.Names, Exclusive: p.Exclusive, Holder: p.Holder, Description: p.Description}
		if err := ctx.Put(LockKey(ctx.ID()), mustJSON(rec)); err != nil {
			return procedure.NoMoreState, err
		}
		ctx.Logger.Info("external lock acquired", "kind", p.Kind, "names", p.Names, "exclusive", p.Exclusive, "holder", p.Holder)
		p.SetNextState(lockHeld)
		ctx.Suspend(procedure.OnEvent(ev)) // persisted: ACQUIRED commits here
		return procedure.HasMoreState, nil
	case lockHeld:
		if restated > 0 {
			ctx.Suspend(procedure.OnEvent(ev)) // persisted: the restated length commits here
			return procedure.HasMoreState, nil
		}
		ctx.Suspend(procedure.OnEvent(ev), procedure.SkipPersistence())
		return procedure.HasMoreState, nil
	}
	return procedure.NoMoreState, fmt.Errorf("lock: unknown state %d", state)
}

// RollbackState implements procedure.StateSteps: forget the record.
func (p *LockProcedure) RollbackState(ctx *procedure.Context, state int32) error {
	if state != lockAcquired {
		return nil
	}
	if _, ok, err := ctx.Get(LockKey(ctx.ID())); err != nil || !ok {
		return err
	}
	return ctx.Delete(LockKey(ctx.ID()))
}

// LockHolderOf names the holder of external lock info (a Lock procedure
// as read from the store, Data included): false for any other procedure.
// The admin API's lock listing uses it to say who holds a lock from
// outside.
func (d *Domain) LockHolderOf(info procedure.Info) (catalog.LockHolder, bool) {
	if info.Type != TypeLock || len(info.Data) == 0 {
		return catalog.LockHolder{}, false
	}
	var p LockProcedure
	if err := json.Unmarshal(info.Data, &p); err != nil {
		return catalog.LockHolder{}, false
	}
	return catalog.LockHolder{Holder: p.Holder, Description: p.Description}, true
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
