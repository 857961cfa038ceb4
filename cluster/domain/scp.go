package domain

import (
	"fmt"
	"time"

	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/scheduler"
)

// States of ServerCrash.
const (
	scpFence  int32 = 1
	scpAssign int32 = 2
)

// ServerCrash recovers the regions of a dead region server incarnation
// (HBase's ServerCrashProcedure):
//
//	FENCE:  record the incarnation expired (if it is still the live one);
//	ASSIGN: wait until the incarnation has certainly stopped serving
//	        (services.presenceOf: it registered again, or its self-fence
//	        deadline passed); drop the dispatcher's ops for the server;
//	        reassign every region whose record places it on the
//	        incarnation (OPEN, OPENING or CLOSING there), one
//	        TransitRegionState child each (From = the incarnation); run
//	        again until none is left.
//
// It is idempotent and holds nothing but the server's lock, so a new
// leader simply resumes it; its children re-check each region under the
// region's lock, so a region another procedure already moved is left
// alone. Regions of disabled tables are recorded CLOSED, not reopened. See
// the package doc for why reassigning is safe (no double assignment).
type ServerCrash struct {
	procedure.StateMachine
	Server ServerRef `json:"server"`
	// Reassigned counts the children spawned, for the result.
	Reassigned int `json:"reassigned"`
	// removedIn is the term whose dispatcher dropped the server's ops
	// (once per term: a later incarnation's ops must not be dropped over
	// and over).
	removedIn uint64
	// waitingIn is the term that logged waiting for the incarnation to
	// stop serving (once per term).
	waitingIn uint64
}

// Locks implements procedure.Locker.
func (p *ServerCrash) Locks() []scheduler.Lock {
	return scheduler.ServerLocks(p.Server.ID, scheduler.Exclusive)
}

// HoldLock implements procedure.Locker.
func (p *ServerCrash) HoldLock() bool { return true }

// QueueKey implements procedure.Queued: the server queue, served before
// any table's (a crash is handled before table operations that wait on
// its regions).
func (p *ServerCrash) QueueKey() scheduler.QueueKey {
	return scheduler.QueueKey{Kind: scheduler.KindServer, Name: p.Server.ID}
}

// InitialState implements procedure.StateSteps.
func (p *ServerCrash) InitialState() int32 { return scpFence }

// IsRollbackSupported implements procedure.RollbackSupport: recovery is
// never aborted.
func (p *ServerCrash) IsRollbackSupported(int32) bool { return false }

// RetryUntilDone implements procedure.RetriesUntilDone: recovery has no
// meaningful rollback, so a failing step is retried, and a failing child
// is rolled back alone before ASSIGN runs again.
func (p *ServerCrash) RetryUntilDone() bool { return true }

// ExecuteState implements procedure.StateSteps.
func (p *ServerCrash) ExecuteState(ctx *procedure.Context, state int32) (procedure.Flow, error) {
	d, err := envOf(ctx)
	if err != nil {
		return procedure.NoMoreState, err
	}
	r := ctxReader{ctx}
	switch state {
	case scpFence:
		srv, ok, err := getServer(r, p.Server.ID)
		if err != nil {
			return procedure.NoMoreState, err
		}
		if ok && srv.StartCode == p.Server.StartCode && srv.State == ServerLive {
			srv.State = ServerExpired
			if err := ctx.Put(ServerKey(p.Server.ID), mustJSON(srv)); err != nil {
				return procedure.NoMoreState, err
			}
		}
		p.SetNextState(scpAssign)
		return procedure.HasMoreState, nil
	case scpAssign:
		svc := d.servicesFor(ctx)
		if svc == nil {
			return awaitServices(ctx)
		}
		// The regions move only once the incarnation has certainly
		// stopped serving them: the expiry committed above may not have
		// reached it.
		if _, pres, left, err := svc.presenceOf(r, p.Server); err != nil {
			return procedure.NoMoreState, err
		} else if pres != gone {
			if p.waitingIn != svc.term {
				p.waitingIn = svc.term
				ctx.Logger.Info("waiting for the crashed server to stop serving before reassigning its regions",
					"server", p.Server.String(), "left", left)
			}
			ctx.Suspend(procedure.Timeout(max(left, time.Millisecond)), procedure.SkipPersistence())
			return procedure.HasMoreState, nil
		}
		// The expiry is committed: the incarnation is fenced. Its held
		// and buffered ops can now fail (ErrServerRemoved) and their
		// procedures go elsewhere.
		if p.removedIn != svc.term {
			svc.disp.RemoveServer(p.Server.ID)
			p.removedIn = svc.term
		}
		var names []string
		var tables []string
		if err := scanRegions(r, func(name string, rg Region) bool {
			if rg.onServer(p.Server) {
				names = append(names, name)
				tables = append(tables, rg.Table)
			}
			return true
		}); err != nil {
			return procedure.NoMoreState, err
		}
		if err := failPoint(d, "crash.assign"); err != nil {
			return procedure.NoMoreState, err
		}
		if len(names) == 0 {
			ctx.SetResult([]byte(fmt.Sprintf("server %s: %s reassigned", p.Server, countOf(p.Reassigned, "region"))))
			ctx.Logger.Info("server crash handled", "server", p.Server.String(), "reassigned", p.Reassigned)
			return procedure.NoMoreState, nil
		}
		for i, name := range names {
			ns, table := SplitTableName(tables[i])
			ctx.AddChild(&TransitRegionState{Region: name, Namespace: ns, Table: table, Kind: KindAssign, From: p.Server})
		}
		p.Reassigned += len(names)
		ctx.Logger.Info("reassigning the regions of a crashed server", "server", p.Server.String(), "regions", len(names))
		return procedure.HasMoreState, nil // this state again, once the children are done
	}
	return procedure.NoMoreState, fmt.Errorf("master: server crash: unknown state %d", state)
}

// RollbackState implements procedure.StateSteps: nothing to undo (an
// expiry stands; the children leave every region consistent).
func (p *ServerCrash) RollbackState(*procedure.Context, int32) error { return nil }
