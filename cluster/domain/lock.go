package domain

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/baton-dev/baton/cluster/catalog"
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
			rg, ok, err := getRegion(r, n)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, procedure.Errorf(ErrNotFound, "region %q does not exist", n)
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
	d, err := envOf(ctx)
	if err != nil {
		return procedure.NoMoreState, err
	}
	svc := d.servicesFor(ctx)
	if svc == nil {
		return awaitServices(ctx)
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

// Procedure type names, as registered by Register.
const (
	TypeTransitRegionState = "TransitRegionState"
	TypeCreateTable        = "CreateTable"
	TypeDeleteTable        = "DeleteTable"
	TypeEnableTable        = "EnableTable"
	TypeDisableTable       = "DisableTable"
	TypeCreateNamespace    = "CreateNamespace"
	TypeDeleteNamespace    = "DeleteNamespace"
	TypeServerCrash        = "ServerCrash"
	TypeBalance            = "Balance"
	TypeLock               = "Lock"
)

// Register adds the domain's procedure types to reg (version 1 each).
func Register(reg *procedure.Registry) error {
	for _, t := range []struct {
		name string
		f    func() procedure.Procedure
	}{
		{TypeTransitRegionState, func() procedure.Procedure { return &TransitRegionState{} }},
		{TypeCreateTable, func() procedure.Procedure { return &CreateTable{} }},
		{TypeDeleteTable, func() procedure.Procedure { return &DeleteTable{} }},
		{TypeEnableTable, func() procedure.Procedure { return &EnableTable{} }},
		{TypeDisableTable, func() procedure.Procedure { return &DisableTable{} }},
		{TypeCreateNamespace, func() procedure.Procedure { return &CreateNamespace{} }},
		{TypeDeleteNamespace, func() procedure.Procedure { return &DeleteNamespace{} }},
		{TypeServerCrash, func() procedure.Procedure { return &ServerCrash{} }},
		{TypeBalance, func() procedure.Procedure { return &Balance{} }},
		{TypeLock, func() procedure.Procedure { return &LockProcedure{} }},
	} {
		if err := reg.Register(t.name, 1, t.f); err != nil {
			return err
		}
	}
	return nil
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
