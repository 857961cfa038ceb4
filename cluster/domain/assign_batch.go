package domain

import (
	"fmt"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/scheduler"
)

// TypeAssignBatch names AssignBatch in the procedure registry. No admin
// call builds one: a ServerCrash spawns them, from cluster format 2.
const TypeAssignBatch = "AssignBatch"

func init() {
	registerType(TypeAssignBatch, func() procedure.Procedure { return &AssignBatch{} })
}

// States of AssignBatch. (1 is unused: the batch is always prepared by
// its parent.)
const (
	batchOpen int32 = 2
	batchRest int32 = 3
)

// BatchRegion is a region of an AssignBatch and its table's full name.
type BatchRegion struct {
	Name  string `json:"name"`
	Table string `json:"table"`
}

// AssignBatch reopens on one server (Target) up to Config.CrashBatch
// regions of a crashed incarnation (From): what a TransitRegionState per
// region does on its happy path, for a thousand regions at once. A
// procedure per region was two thirds of what a crash recovery cost the
// cluster (docs/performance.md, "What would reach goal 3"): its record,
// its step, its wake-up and its OPEN write, each once per region.
//
//	OPEN ──(every region answered opened)─────────────────────▶ done
//	  │ ▲                                                        ▲
//	  │ └─ Target live, some unanswered: the answered settled,   │
//	  │    the rest waited for (never sent twice in a term)      │
//	  └─ refused, or Target fenced or gone: a TransitRegionState ─▶ REST
//	     each, prepared at OPEN_DISPATCH on Target
//
// Its parent adds it only when its locks are free, and prepares it in
// the spawn's write (ServerCrash.spawnBatches): each region still on From
// recorded OPENING on Target with ProcID the batch's id. When a lock is
// taken the parent withdraws it and spawns a TransitRegionState per
// region instead, so one held region holds up no other.
//
// OPEN sends every region's open to Target in one go (the dispatcher
// batches them per call) and suspends until all are answered or
// Config.DispatchTimeout passed. It then records OPEN on Target, in one
// write, every region Target confirmed opened while still the live
// incarnation. A region Target refused, or every unsettled one once
// Target is fenced or gone, is handed to a child TransitRegionState
// prepared at OPEN_DISPATCH on Target, whose region record now names it:
// it sends the open again (a region server treats a repeat idempotently)
// and deals with whatever follows as any assignment does (fencing waits,
// another server, backoff). A region still unanswered by a live Target
// stays in the batch and is waited for again, as a TransitRegionState
// waits for its open: the dispatcher answers every op exactly once. The
// refused wait with it, and are handed on once the last answer is in: a
// batch with children waits for them, and must not wait for them with
// answers outstanding.
//
// A failover or restart resumes it at OPEN: the new leader sends every
// region still OPENING on Target for the batch again. It holds every
// region's lock exclusively (and their tables' and namespaces' shared)
// for its life, its children inherit them; it retries until done and is
// never rolled back.
type AssignBatch struct {
	procedure.StateMachine
	From    ServerRef `json:"from"`
	Target  ServerRef `json:"target"`
	Address string    `json:"address,omitempty"`
	// Regions are those still to settle: recorded OPENING on Target for
	// the batch.
	Regions []BatchRegion `json:"regions"`
	// Opened and HandedOn count the regions OPEN recorded and those
	// handed to children, for the result.
	Opened   int `json:"opened,omitempty"`
	HandedOn int `json:"handed_on,omitempty"`
}

// Locks implements procedure.Locker: every region exclusively, with its
// table and namespace shared.
func (p *AssignBatch) Locks() []scheduler.Lock {
	byTable := map[string][]string{}
	var order []string
	for _, r := range p.Regions {
		if _, ok := byTable[r.Table]; !ok {
			order = append(order, r.Table)
		}
		byTable[r.Table] = append(byTable[r.Table], r.Name)
	}
	var ls []scheduler.Lock
	for _, full := range order {
		ns, t := SplitTableName(full)
		ls = append(ls, scheduler.RegionLocks(ns, t, byTable[full]...)...)
	}
	return ls
}

// HoldLock implements procedure.Locker: its children inherit the locks.
func (p *AssignBatch) HoldLock() bool { return true }

// QueueKey implements procedure.Queued: the crashed server's queue, as
// its ServerCrash's and a crashed region's TransitRegionState's.
func (p *AssignBatch) QueueKey() scheduler.QueueKey {
	return scheduler.QueueKey{Kind: scheduler.KindServer, Name: p.From.ID}
}

// InitialState implements procedure.StateSteps.
func (p *AssignBatch) InitialState() int32 { return batchOpen }

// IsRollbackSupported implements procedure.RollbackSupport: recovery is
// never aborted.
func (p *AssignBatch) IsRollbackSupported(int32) bool { return false }

// RetryUntilDone implements procedure.RetriesUntilDone.
func (p *AssignBatch) RetryUntilDone() bool { return true }

// RollbackState implements procedure.StateSteps: never rolled back.
func (p *AssignBatch) RollbackState(*procedure.Context, int32) error { return nil }

// ForgetChildrenOnSuccess implements procedure.ForgetsChildren, as
// ServerCrash does: a finished assignment's region record says where it
// went.
func (p *AssignBatch) ForgetChildrenOnSuccess() bool { return true }

// Progress implements procedure.Progressor: the regions settled (opened,
// or handed to an assignment of their own) of all it was given.
func (p *AssignBatch) Progress() procedure.Progress {
	settled := int64(p.Opened + p.HandedOn)
	return procedure.Progress{Done: settled, Total: settled + int64(len(p.Regions)), Unit: "regions settled"}
}

// ExecuteState implements procedure.StateSteps.
func (p *AssignBatch) ExecuteState(ctx *procedure.Context, state int32) (procedure.Flow, error) {
	d, svc, flow, err := servicesOf(ctx)
	if svc == nil {
		return flow, err
	}
	r := ctxReader{ctx}
	switch state {
	case batchOpen:
		return p.open(ctx, d, svc, r)
	case batchRest:
		ctx.SetResult([]byte(fmt.Sprintf("%s opened on %s, %s handed on", countOf(p.Opened, "region"), p.Target, countOf(p.HandedOn, "region"))))
		return procedure.NoMoreState, nil
	}
	return procedure.NoMoreState, fmt.Errorf("assign batch: unknown state %d", state)
}

// mine says rg is recorded OPENING on Target for the batch.
func (p *AssignBatch) mine(ctx *procedure.Context, rg Region) bool {
	return rg.State == RegionOpening && rg.Server == p.Target.ID && rg.StartCode == p.Target.StartCode && rg.ProcID == ctx.ID()
}

// open sends the regions' opens once per term, waits for their answers
// (suspended), and settles them.
func (p *AssignBatch) open(ctx *procedure.Context, d *Domain, svc *services, r reader) (procedure.Flow, error) {
	if err := failPoint(d, "region.open"); err != nil {
		return procedure.NoMoreState, err
	}
	b := svc.batchOf(ctx.ID())
	if b == nil {
		if ev := svc.dispatchPaused(); ev != nil {
			// Maintenance mode: nothing is sent. The step runs again
			// once it ends.
			ctx.Suspend(procedure.OnEvent(ev), procedure.Timeout(maintenanceRecheck), procedure.SkipPersistence(),
				procedure.Because(catalog.MaintenanceNote))
			return procedure.HasMoreState, nil
		}
		srv, pres, _, err := svc.presenceOf(r, p.Target)
		if err != nil {
			return procedure.NoMoreState, err
		}
		if pres != present {
			// Fenced or gone before anything was sent: each region's own
			// assignment waits for it to stop serving, or goes elsewhere.
			return p.settle(ctx, r, nil, pres)
		}
		b = svc.newSuspendedBatch(ctx.ID(), rspb.OpKind_OP_KIND_OPEN)
		for _, br := range p.Regions {
			rg, ok, err := getRegion(r, br.Name)
			if err != nil {
				b.forget()
				return procedure.NoMoreState, err
			}
			if ok && p.mine(ctx, rg) {
				b.send(ctx, p.Target, srv.Address, br.Name, br.Table)
			}
		}
		b.seal()
		ctx.Suspend(procedure.OnEvent(b.ev), procedure.Timeout(d.cfg.DispatchTimeout), procedure.SkipPersistence())
		return procedure.HasMoreState, nil
	}
	if !b.complete() {
		if left := b.waitLeft(d.cfg.DispatchTimeout); left > 0 {
			ctx.Suspend(procedure.OnEvent(b.ev), procedure.Timeout(left), procedure.SkipPersistence())
			return procedure.HasMoreState, nil
		}
	}
	_, pres, _, err := svc.presenceOf(r, p.Target)
	if err != nil {
		return procedure.NoMoreState, err
	}
	return p.settle(ctx, r, b, pres)
}

// settle records OPEN on Target every region the batch b's answers say
// opened (pres: Target's presence now; only a live one's answers count),
// keeps waiting for those a live Target has not answered yet, and hands
// every other region still the batch's to a child TransitRegionState
// prepared at OPEN_DISPATCH on Target. b is nil when nothing was sent.
func (p *AssignBatch) settle(ctx *procedure.Context, r reader, b *opBatch, pres presence) (procedure.Flow, error) {
	var rest, waiting []BatchRegion
	opened, failed := 0, 0
	for _, br := range p.Regions {
		rg, ok, err := getRegion(r, br.Name)
		if err != nil {
			return procedure.NoMoreState, err
		}
		if !ok || !p.mine(ctx, rg) {
			continue // not the batch's (a repair moved it under its locks)
		}
		if b != nil && pres == present {
			switch res := b.result(br.Name); classify(res) {
			case outDone:
				if err := putRegion(ctx, br.Name, Region{Table: br.Table, State: RegionOpen, Server: p.Target.ID, StartCode: p.Target.StartCode}); err != nil {
					return procedure.NoMoreState, err
				}
				opened++
				continue
			case outNone:
				waiting = append(waiting, br)
				continue
			case outFailed:
				failed++
				if failed == 1 {
					ctx.Logger.Warn("region failed to open in a batch; handed to its own assignment", "region", br.Name, "server", p.Target.String(), "error", res.Err)
				}
			}
		}
		rest = append(rest, br)
	}
	if len(waiting) > 0 {
		// Answers are still to come from the live target: the refused
		// stay in the batch until they are in (their answers are kept).
		// Handed on now, their children would hold the batch's next
		// step, and the answers it waits for, until they all end: one
		// region opened nowhere would keep the rest OPENING for good.
		waiting = append(waiting, rest...)
		rest = nil
	}
	for _, br := range rest {
		ns, table := SplitTableName(br.Table)
		child := &TransitRegionState{Region: br.Name, Namespace: ns, Table: table, Kind: KindAssign, From: p.From,
			Server: p.Target, Address: p.Address, Prepared: true, UndoState: RegionClosed, Source: p.From.ID}
		id, locked, err := ctx.AddLockedChild(child)
		if err != nil {
			return procedure.NoMoreState, err
		}
		if !locked {
			// The batch holds the region for its life, and a child
			// inherits what its parent holds: this cannot be.
			return procedure.NoMoreState, fmt.Errorf("assign batch: region %s's assignment could not take the lock the batch holds", br.Name)
		}
		if err := putRegion(ctx, br.Name, Region{Table: br.Table, State: RegionOpening, Server: p.Target.ID, StartCode: p.Target.StartCode, ProcID: id}); err != nil {
			return procedure.NoMoreState, err
		}
	}
	p.Regions = waiting
	p.Opened += opened
	p.HandedOn += len(rest)
	if len(rest) > 0 || len(waiting) > 0 {
		ctx.Logger.Info("batch of crashed regions settled in part",
			"server", p.Target.String(), "opened", opened, "handed_on", len(rest), "failed", failed, "waiting", len(waiting))
	}
	if len(waiting) > 0 {
		// This state again: the answers still to come, for another
		// DispatchTimeout.
		b.extend()
		return procedure.HasMoreState, nil
	}
	if b != nil {
		b.forget()
	}
	if len(rest) > 0 {
		p.SetNextState(batchRest)
		return procedure.HasMoreState, nil
	}
	ctx.SetResult([]byte(fmt.Sprintf("%s opened on %s", countOf(p.Opened, "region"), p.Target)))
	return procedure.NoMoreState, nil
}
