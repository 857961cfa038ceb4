package domain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/internal/tracectx"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/scheduler"
)

// TypeTransitRegionState names TransitRegionState in the procedure
// registry. The procedures of tables, server crashes and balancing spawn
// it; MoveRegion (move_region.go) and the repair kit (repair_region.go)
// submit it.
const TypeTransitRegionState = "TransitRegionState"

func init() {
	registerType(TypeTransitRegionState, func() procedure.Procedure { return &TransitRegionState{} })
}

// Kinds of TransitRegionState.
const (
	// KindAssign opens a closed region (or, with From, one whose server
	// crashed).
	KindAssign = "assign"
	// KindUnassign closes a region.
	KindUnassign = "unassign"
	// KindMove closes a region and opens it on another server (Target, or
	// the least loaded other one).
	KindMove = "move"
	// KindReopen closes a region and opens it again, anywhere.
	KindReopen = "reopen"
)

// States of TransitRegionState.
const (
	transitPrepare       int32 = 1
	transitCloseDispatch int32 = 3
	transitOpenPrepare   int32 = 4
	transitOpenDispatch  int32 = 5
)

// TransitRegionState moves one region through its states (HBase's
// TransitRegionStateProcedure): assign, unassign, move or reopen.
//
//	PREPARE ──(open somewhere live)──────────────────────────────▶ done
//	   │  └─ nothing to close: pick S', record OPENING@S' ──┐        ▲
//	   │ close first: record CLOSING@S                      │        │ OPEN@S' confirmed
//	   ▼                                                    ▼        │
//	CLOSE_DISPATCH ── close confirmed ──▶ OPEN_PREPARE ──▶ OPEN_DISPATCH
//	   (re-sent while S lives)  or S fenced:  pick S', record    (retry: back to
//	                            record CLOSED OPENING@S'          OPEN_PREPARE)
//
// An assignment with nothing to close (a create's, an enable's, a crashed
// server's regions) does OPEN_PREPARE's work in PREPARE's write, and the
// final OPEN is recorded in the write that ends the procedure: two commits
// per region, the child's insert riding in its parent's spawn write. A
// create's and a crash's parent do PREPARE's work itself, in the spawn's
// write (prepareIdle, prepareCrashed): one commit per region after it.
//
// Every remote operation is sent only after the step that records its
// target (CLOSING@S, OPENING@S') committed, and from a step that a failover
// re-runs: the new leader sends it again, and the region server treats the
// repeat idempotently. OPEN is recorded only once the server confirmed the
// open (and is still the live incarnation); a server that refused an open
// is excluded and another tried. A server that is no longer the live
// incarnation in the replicated state is fenced (see the package doc), so
// a region recorded on it counts as closed.
//
// The region's locks (namespace and table shared, region exclusive) are
// held for the procedure's life.
type TransitRegionState struct {
	procedure.StateMachine
	Region    string `json:"region"`
	Namespace string `json:"namespace"`
	Table     string `json:"table"`
	Kind      string `json:"kind"`
	// Target is the server a move (or assign) prefers; "" for any.
	Target string `json:"target,omitempty"`
	// From, if set, is an incarnation known to have lost the region (it
	// crashed): the procedure acts only while the record still places the
	// region there.
	From ServerRef `json:"from"`
	// Bounded procedures (a create's or an enable's) fail after
	// MaxOpenAttempts refused opens, and may be aborted; the others retry
	// for ever.
	Bounded bool `json:"bounded,omitempty"`
	// UndoState is what a rollback leaves the region in: OFFLINE for a
	// create's regions, CLOSED otherwise.
	UndoState string `json:"undo_state,omitempty"`

	// Server is the incarnation the current close or open goes to.
	Server  ServerRef `json:"server"`
	Address string    `json:"address,omitempty"`
	// Source is the server a move or reopen closed the region on.
	Source   string   `json:"source,omitempty"`
	Excluded []string `json:"excluded,omitempty"`
	Attempts int      `json:"attempts,omitempty"`
	Rounds   int      `json:"rounds,omitempty"`
	// Opened is where this procedure opened the region, so a rollback of
	// the enclosing create can close it again.
	Opened ServerRef `json:"opened"`
	Undone bool      `json:"undone,omitempty"`
	// Prepared: the parent that spawned it did PREPARE's work in its name,
	// in the spawn's write (prepareCrashed), so it starts at OPEN_DISPATCH.
	Prepared bool `json:"prepared,omitempty"`
}

// Locks implements procedure.Locker.
func (p *TransitRegionState) Locks() []scheduler.Lock {
	return scheduler.RegionLocks(p.Namespace, p.Table, p.Region)
}

// HoldLock implements procedure.Locker: nobody else touches the region
// until this procedure is done.
func (p *TransitRegionState) HoldLock() bool { return true }

// QueueKey implements procedure.Queued: the table's queue, but a crashed
// server's region (From set) waits in that server's queue, beside its
// ServerCrash, which the scheduler serves before every table's: regions
// that are down come back before table work (a big create's assignments)
// runs, as HBase gives crash recovery meta-like priority.
func (p *TransitRegionState) QueueKey() scheduler.QueueKey {
	if !p.From.IsZero() {
		return scheduler.QueueKey{Kind: scheduler.KindServer, Name: p.From.ID}
	}
	return scheduler.QueueKey{Kind: scheduler.KindTable, Name: FullTableName(p.Namespace, p.Table)}
}

// InitialState implements procedure.StateSteps.
func (p *TransitRegionState) InitialState() int32 {
	if p.Prepared {
		return transitOpenDispatch
	}
	return transitPrepare
}

// IsRollbackSupported implements procedure.RollbackSupport: only a
// bounded assignment (part of a create or an enable) may be aborted; crash
// recovery, moves, unassigns must finish.
func (p *TransitRegionState) IsRollbackSupported(int32) bool { return p.Bounded }

// RetryUntilDone implements procedure.RetriesUntilDone: a procedure that
// may not be aborted (crash recovery, moves, unassigns, reopens) retries a
// failing step rather than rolling back, which would leave its region
// closed with nobody to reopen it.
func (p *TransitRegionState) RetryUntilDone() bool { return !p.Bounded }

func (p *TransitRegionState) fullTable() string { return FullTableName(p.Namespace, p.Table) }

// ctxReader reads the domain state as a step sees it.
type ctxReader struct{ c *procedure.Context }

func (r ctxReader) get(k string) ([]byte, bool, error) { return r.c.Get(k) }
func (r ctxReader) scan(prefix string, fn func(string, []byte) bool) error {
	return r.c.Scan(prefix, fn)
}

func envOf(ctx *procedure.Context) (*Domain, error) {
	d, ok := ctx.Env.(*Domain)
	if !ok || d == nil {
		return nil, fmt.Errorf("procedure Env is %T, want *domain.Domain", ctx.Env)
	}
	return d, nil
}

// servicesOf is the domain of ctx's procedure and the leader's services
// its step uses. Without services yet (nil) the step returns flow and
// err: a suspension until they are up, or the error of a procedure run
// without a Domain.
func servicesOf(ctx *procedure.Context) (*Domain, *services, procedure.Flow, error) {
	d, err := envOf(ctx)
	if err != nil {
		return nil, nil, procedure.NoMoreState, err
	}
	svc := d.servicesFor(ctx)
	if svc == nil {
		flow, err := awaitServices(ctx)
		return d, nil, flow, err
	}
	return d, svc, procedure.NoMoreState, nil
}

// putRegion records the region's state.
func putRegion(ctx *procedure.Context, name string, rg Region) error {
	return ctx.Put(RegionKey(name), encodeRegion(name, rg))
}

// ExecuteState implements procedure.StateSteps.
func (p *TransitRegionState) ExecuteState(ctx *procedure.Context, state int32) (procedure.Flow, error) {
	d, svc, flow, err := servicesOf(ctx)
	if svc == nil {
		return flow, err
	}
	r := ctxReader{ctx}
	switch state {
	case transitPrepare:
		return p.prepare(ctx, d, svc, r)
	case transitCloseDispatch:
		return p.closeDispatch(ctx, d, svc, r)
	case transitOpenPrepare:
		return p.openPrepare(ctx, d, svc, r)
	case transitOpenDispatch:
		return p.openDispatch(ctx, d, svc, r)
	}
	return procedure.NoMoreState, fmt.Errorf("region %s: unknown state %d", p.Region, state)
}

func regionBusy(rg Region) bool {
	return rg.Server != "" && (rg.State == RegionOpen || rg.State == RegionOpening || rg.State == RegionClosing)
}

func (p *TransitRegionState) prepare(ctx *procedure.Context, d *Domain, svc *services, r reader) (procedure.Flow, error) {
	rg, ok, err := getRegion(r, p.Region)
	if err != nil {
		return procedure.NoMoreState, err
	}
	if !ok {
		ctx.Logger.Info("region gone; nothing to do", "region", p.Region)
		return procedure.NoMoreState, nil
	}
	if p.UndoState == "" {
		p.UndoState = RegionClosed
	}
	cur := ServerRef{rg.Server, rg.StartCode}
	curAlive := false
	var curSrv Server
	if regionBusy(rg) {
		var pres presence
		var left time.Duration
		if curSrv, pres, left, err = svc.presenceOf(r, cur); err != nil {
			return procedure.NoMoreState, err
		}
		if pres == fencing {
			return p.awaitGone(ctx, cur, left)
		}
		curAlive = pres == present
	}
	closeFirst := func() (procedure.Flow, error) {
		p.Server, p.Address, p.Source = cur, curSrv.Address, cur.ID
		rg.State, rg.ProcID = RegionClosing, ctx.ID()
		if err := putRegion(ctx, p.Region, rg); err != nil {
			return procedure.NoMoreState, err
		}
		p.SetNextState(transitCloseDispatch)
		return procedure.HasMoreState, nil
	}
	openNext := func() (procedure.Flow, error) {
		if !curAlive && regionBusy(rg) {
			p.Source = rg.Server
		}
		// Nothing to close: pick the target and record OPENING@S' in this
		// step's own write, one commit fewer per region than running
		// OPEN_PREPARE as a step of its own (a create's regions all come
		// this way). If no server can take it, this step runs again, and
		// reads the region again.
		return p.openPrepare(ctx, d, svc, r)
	}
	done := func(state string) (procedure.Flow, error) {
		if rg.State != state || rg.ProcID != 0 || (state != RegionOpen && rg.Server != "") {
			nrg := Region{Table: rg.Table, State: state}
			if state == RegionOpen {
				nrg.Server, nrg.StartCode = rg.Server, rg.StartCode
			}
			if err := putRegion(ctx, p.Region, nrg); err != nil {
				return procedure.NoMoreState, err
			}
		}
		return procedure.NoMoreState, nil
	}

	switch p.Kind {
	case KindAssign:
		if !p.From.IsZero() {
			if !rg.onServer(p.From) {
				return procedure.NoMoreState, nil // dealt with already
			}
			if curAlive {
				return closeFirst() // not actually dead: close it properly
			}
			t, tok, err := getTable(r, rg.Table)
			if err != nil {
				return procedure.NoMoreState, err
			}
			if !tok || t.State == TableDisabled || t.State == TableDisabling || t.State == TableDeleting {
				return done(RegionClosed)
			}
			p.Source = p.From.ID
			return openNext()
		}
		if curAlive {
			if rg.State == RegionOpen && (rg.ProcID == 0 || rg.ProcID == ctx.ID()) {
				return done(RegionOpen) // already open: idempotent
			}
			// Left in transition on a live server by a procedure that is
			// gone: close it there first, so it cannot end up open twice.
			return closeFirst()
		}
		return openNext()
	case KindUnassign:
		if !regionBusy(rg) {
			if rg.State == RegionOffline {
				return done(RegionOffline)
			}
			return done(RegionClosed)
		}
		if !curAlive {
			return done(RegionClosed) // its server is fenced
		}
		return closeFirst()
	case KindMove, KindReopen:
		if curAlive {
			if p.Kind == KindMove && p.Target == cur.ID && rg.State == RegionOpen {
				return done(RegionOpen) // already there
			}
			return closeFirst()
		}
		if regionBusy(rg) {
			return openNext() // its server is fenced: just open it
		}
		if p.Kind == KindReopen {
			t, tok, err := getTable(r, rg.Table)
			if err != nil {
				return procedure.NoMoreState, err
			}
			if tok && t.State == TableEnabled {
				return openNext()
			}
		}
		return procedure.NoMoreState, nil // closed: a move does not open it
	}
	return procedure.NoMoreState, procedure.Errorf(errInvalid, "region %s: unknown kind %q", p.Region, p.Kind)
}

// prepareCrashed does, in the name of child id, what PREPARE does for a
// crashed server's region (Kind assign, From set) in the common case: the
// region is still recorded on From, which has certainly stopped serving,
// and its table is enabled, so the region opens on a server picked now,
// recorded OPENING there by ctx's step (the spawning parent's) with id as
// its procedure. The parent holds the child's locks for it
// (procedure.Context.AddLockedChild), and the record commits in the write
// that persists the child, which starts at OPEN_DISPATCH (Prepared). One
// write per region fewer than the child's own PREPARE. It reports false,
// having changed nothing, for anything else (the region moved on, the
// table is not enabled, no live server): the child's PREPARE then deals
// with it as usual. tables caches the table records the step read (their
// shared locks, held for the children, keep them as read).
func (p *TransitRegionState) prepareCrashed(ctx *procedure.Context, svc *services, r reader, id uint64,
	cands map[string]Server, tables map[string]Table) (bool, error) {
	if p.Kind != KindAssign || p.From.IsZero() || len(cands) == 0 {
		return false, nil
	}
	state, err := crashedRegionAssignable(r, BatchRegion{Name: p.Region, Table: p.fullTable()}, p.From, tables)
	if err != nil || state != regionAssignable {
		return false, err
	}
	ok, err := p.prepareOn(ctx, svc, r, id, cands)
	if ok {
		p.UndoState, p.Source = RegionClosed, p.From.ID
	}
	return ok, err
}

// prepareIdle does, in the name of child id, what PREPARE does for an
// assignment whose region has nothing to close (Kind assign, no From: a
// create's or an enable's region, OFFLINE or CLOSED): its target picked
// now and recorded OPENING there by ctx's step (the spawning parent's),
// in the write that persists the child, which starts at OPEN_DISPATCH
// (Prepared), as prepareCrashed does for a crashed server's region. One
// write per region fewer than the child's own PREPARE: the write of
// PREPARE, the only state of the assignment with no durable boundary of
// its own to keep (HBase's TRSP folds it the same way). A 0.1.0 master
// resumes such a child (it reads Prepared, and a crash's children are
// written so). It reports false, having changed nothing, for anything
// else: the child's PREPARE then deals with it.
func (p *TransitRegionState) prepareIdle(ctx *procedure.Context, svc *services, r reader, id uint64, cands map[string]Server) (bool, error) {
	if p.Kind != KindAssign || !p.From.IsZero() || len(cands) == 0 {
		return false, nil
	}
	rg, ok, err := getRegion(r, p.Region)
	if err != nil || !ok || regionBusy(rg) {
		return false, err
	}
	ok, err = p.prepareOn(ctx, svc, r, id, cands)
	if ok && p.UndoState == "" {
		p.UndoState = RegionClosed
	}
	return ok, err
}

// prepareOn picks the target of child id among cands and records the
// region OPENING there in ctx's write, the child to start at
// OPEN_DISPATCH; false, having changed nothing, if no server fits.
func (p *TransitRegionState) prepareOn(ctx *procedure.Context, svc *services, r reader, id uint64, cands map[string]Server) (bool, error) {
	target, err := svc.pick(r, cands, p.Target)
	if err != nil || target == "" {
		return false, err
	}
	srv := cands[target]
	if err := putRegion(ctx, p.Region, Region{Table: p.fullTable(), State: RegionOpening, Server: target, StartCode: srv.StartCode, ProcID: id}); err != nil {
		return false, err
	}
	p.Server, p.Address = ServerRef{target, srv.StartCode}, srv.Address
	p.Prepared = true
	return true, nil
}

// assignSpawner spawns a parent step's assignments (AddAssign), each
// prepared in the step's own write where its region's locks are free
// (prepareIdle), the others left to their own PREPARE.
type assignSpawner struct {
	ctx   *procedure.Context
	svc   *services
	r     reader
	cands map[string]Server
	opens *firstOpens
	err   error
}

// newAssignSpawner reads the live servers once for the step's
// assignments, through svc, the step's services (servicesOf).
func newAssignSpawner(ctx *procedure.Context, svc *services) *assignSpawner {
	a := &assignSpawner{ctx: ctx, svc: svc, r: ctxReader{ctx}, opens: newFirstOpens(ctx, svc.d, svc)}
	a.opens.track = true // a create's: it may roll back with them suspended
	a.cands, a.err = svc.liveTargets(a.r)
	return a
}

// add spawns child, prepared if it is an assignment prepareIdle can
// prepare; after the first error it does nothing more (Err).
func (a *assignSpawner) add(p procedure.Procedure) {
	if a.err != nil {
		return
	}
	child, ok := p.(*TransitRegionState)
	if !ok || len(a.cands) == 0 || child.Kind != KindAssign || !child.From.IsZero() {
		a.ctx.AddChild(p)
		return
	}
	id, locked, err := a.ctx.AddLockedChild(child)
	if err != nil || !locked {
		a.err = err
		return
	}
	prepared, err := child.prepareIdle(a.ctx, a.svc, a.r, id, a.cands)
	if err == nil && prepared {
		err = a.opens.add(id, child)
	}
	a.err = err
}

// Err is the first error of add: the step fails with it.
func (a *assignSpawner) Err() error { return a.err }

// outcome sorts a dispatch result.
type outcome int

const (
	outNone    outcome = iota // no result yet
	outDone                   // the server did it
	outRemoved                // the incarnation was removed or restarted
	outDeposed                // this master is deposed or stopping
	outFailed                 // the server refused or failed it
)

func classify(res *dispatch.Result) outcome {
	switch {
	case res == nil:
		return outNone
	case res.OK:
		return outDone
	case errors.Is(res.Err, dispatch.ErrServerRemoved):
		return outRemoved
	case errors.Is(res.Err, dispatch.ErrStaleTerm), errors.Is(res.Err, dispatch.ErrStopped):
		return outDeposed
	}
	return outFailed
}

// await sends op to p.Server unless a send of it is already outstanding in
// this term, and suspends until its result (or DispatchTimeout, after
// which the server's liveness is checked again).
func (p *TransitRegionState) await(ctx *procedure.Context, d *Domain, svc *services, kind rspb.OpKind) (procedure.Flow, error) {
	if ev := svc.dispatchPaused(); ev != nil {
		// Maintenance mode: nothing is sent, and whatever was sent before
		// is held by the paused dispatcher. The step runs again once it
		// ends, and reads the answer if one came meanwhile.
		ctx.Suspend(procedure.OnEvent(ev), procedure.Timeout(maintenanceRecheck), procedure.SkipPersistence(),
			procedure.Because(catalog.MaintenanceNote))
		return procedure.HasMoreState, nil
	}
	w := svc.outstanding(ctx.ID(), p.Server, p.Region, kind)
	if w == nil {
		w = svc.dispatch(ctx, ctx.ID(), p.Server, p.Address, p.Region, p.fullTable(), kind)
	}
	ctx.Suspend(procedure.OnEvent(w.ev), procedure.Timeout(d.cfg.DispatchTimeout), procedure.SkipPersistence())
	return procedure.HasMoreState, nil
}

// awaitGone waits for incarnation ref, fenced but possibly still serving,
// to have certainly stopped serving (services.presenceOf): until then the
// region may be open there and must not be counted closed.
func (p *TransitRegionState) awaitGone(ctx *procedure.Context, ref ServerRef, left time.Duration) (procedure.Flow, error) {
	ctx.Logger.Debug("region's server is fenced but may still serve it; waiting", "region", p.Region, "server", ref.String(), "left", left)
	ctx.Suspend(procedure.Timeout(max(left, time.Millisecond)), procedure.SkipPersistence())
	return procedure.HasMoreState, nil
}

func (p *TransitRegionState) backoff(ctx *procedure.Context, d *Domain, attempt int, because ...string) (procedure.Flow, error) {
	opts := []procedure.SuspendOption{procedure.Timeout(d.cfg.RetryBackoff.Delay(attempt)), procedure.SkipPersistence()}
	if len(because) > 0 {
		opts = append(opts, procedure.Because(because[0]))
	}
	ctx.Suspend(opts...)
	return procedure.HasMoreState, nil
}

// dispatched takes the result (nil if none arrived) of p's operation of kind
// and looks at p.Server now (presenceOf), recording its address while it
// is present.
func (p *TransitRegionState) dispatched(ctx *procedure.Context, svc *services, r reader, kind rspb.OpKind) (*dispatch.Result, presence, time.Duration, error) {
	res := svc.take(ctx.ID(), p.Server, p.Region, kind)
	srv, pres, left, err := svc.presenceOf(r, p.Server)
	if err != nil {
		return res, pres, left, err
	}
	if pres == present {
		p.Address = srv.Address
	}
	return res, pres, left, nil
}

func (p *TransitRegionState) closeDispatch(ctx *procedure.Context, d *Domain, svc *services, r reader) (procedure.Flow, error) {
	res, pres, left, err := p.dispatched(ctx, svc, r, rspb.OpKind_OP_KIND_CLOSE)
	if err != nil {
		return procedure.NoMoreState, err
	}
	alive := pres == present
	closed := pres == gone
	switch classify(res) {
	case outDone:
		closed = true
	case outDeposed:
		return p.backoff(ctx, d, ctx.Attempt())
	case outFailed:
		if alive {
			ctx.Logger.Warn("close failed; retrying", "region", p.Region, "server", p.Server.String(), "error", res.Err)
			return p.backoff(ctx, d, ctx.Attempt())
		}
	}
	if !closed {
		if pres == fencing {
			return p.awaitGone(ctx, p.Server, left)
		}
		return p.await(ctx, d, svc, rspb.OpKind_OP_KIND_CLOSE)
	}
	svc.forget(ctx.ID())
	if p.Kind == KindUnassign {
		return procedure.NoMoreState, putRegion(ctx, p.Region, Region{Table: p.fullTable(), State: RegionClosed})
	}
	if err := putRegion(ctx, p.Region, Region{Table: p.fullTable(), State: RegionClosed, ProcID: ctx.ID()}); err != nil {
		return procedure.NoMoreState, err
	}
	p.SetNextState(transitOpenPrepare)
	return procedure.HasMoreState, nil
}

func (p *TransitRegionState) openPrepare(ctx *procedure.Context, d *Domain, svc *services, r reader) (procedure.Flow, error) {
	cands, err := svc.liveTargets(r)
	if err != nil {
		return procedure.NoMoreState, err
	}
	for _, ex := range p.Excluded {
		delete(cands, ex)
	}
	if len(cands) == 0 && len(p.Excluded) > 0 {
		// Every live server refused once: start another round, after a
		// pause that grows with the rounds.
		p.Excluded = nil
		p.Rounds++
		return p.backoff(ctx, d, p.Rounds)
	}
	if (p.Kind == KindMove || p.Kind == KindReopen) && p.Target == "" && len(cands) > 1 {
		delete(cands, p.Source) // a move goes elsewhere if it can
	}
	id, err := svc.pick(r, cands, p.Target)
	if err != nil {
		return procedure.NoMoreState, err
	}
	if id == "" {
		ctx.Logger.Debug("no live region server to open on; waiting", "region", p.Region)
		return p.backoff(ctx, d, ctx.Attempt(), "no live region server; waiting")
	}
	srv := cands[id]
	p.Server, p.Address = ServerRef{id, srv.StartCode}, srv.Address
	if err := putRegion(ctx, p.Region, Region{Table: p.fullTable(), State: RegionOpening, Server: id, StartCode: srv.StartCode, ProcID: ctx.ID()}); err != nil {
		return procedure.NoMoreState, err
	}
	p.SetNextState(transitOpenDispatch)
	return procedure.HasMoreState, nil
}

func (p *TransitRegionState) openDispatch(ctx *procedure.Context, d *Domain, svc *services, r reader) (procedure.Flow, error) {
	if err := failPoint(d, "region.open"); err != nil {
		return procedure.NoMoreState, err
	}
	res, pres, left, err := p.dispatched(ctx, svc, r, rspb.OpKind_OP_KIND_OPEN)
	if err != nil {
		return procedure.NoMoreState, err
	}
	alive := pres == present
	switch classify(res) {
	case outDone:
		if !alive {
			break // fenced: it drops the region; open it elsewhere once it has
		}
		svc.forget(ctx.ID())
		p.Opened = p.Server
		return procedure.NoMoreState, putRegion(ctx, p.Region, Region{Table: p.fullTable(), State: RegionOpen, Server: p.Server.ID, StartCode: p.Server.StartCode})
	case outDeposed:
		return p.backoff(ctx, d, ctx.Attempt())
	case outFailed:
		p.Attempts++
		p.Excluded = append(p.Excluded, p.Server.ID)
		ctx.Logger.Warn("region failed to open", "region", p.Region, "server", p.Server.String(), "attempt", p.Attempts, "error", res.Err)
		if p.Bounded && p.Attempts >= d.cfg.MaxOpenAttempts {
			return procedure.NoMoreState, fmt.Errorf("region %s failed to open %d times (last on %s): %w", p.Region, p.Attempts, p.Server, res.Err)
		}
		if err := putRegion(ctx, p.Region, Region{Table: p.fullTable(), State: RegionFailedOpen, Server: p.Server.ID, StartCode: p.Server.StartCode, ProcID: ctx.ID()}); err != nil {
			return procedure.NoMoreState, err
		}
		p.SetNextState(transitOpenPrepare)
		return procedure.HasMoreState, nil
	case outNone, outRemoved:
		if alive {
			return p.await(ctx, d, svc, rspb.OpKind_OP_KIND_OPEN)
		}
	}
	if pres == fencing {
		// Fenced, but the open may have reached it and it may serve the
		// region until its self-fence deadline.
		return p.awaitGone(ctx, p.Server, left)
	}
	// The target is gone (restarted, or past its self-fence deadline): it
	// cannot hold the region any more, so try elsewhere.
	svc.forget(ctx.ID())
	if !slices.Contains(p.Excluded, p.Server.ID) {
		p.Excluded = append(p.Excluded, p.Server.ID)
	}
	p.SetNextState(transitOpenPrepare)
	return procedure.HasMoreState, nil
}

// RollbackState implements procedure.StateSteps. Whatever the state, the
// undo is the same and done once: if the region is open (or opening, or
// closing) through this procedure on a live server, close it there and
// wait for the confirmation (a rollback cannot suspend; an error is
// retried with backoff by the executor), then record UndoState.
func (p *TransitRegionState) RollbackState(ctx *procedure.Context, _ int32) error {
	if p.Undone {
		return nil
	}
	d, err := envOf(ctx)
	if err != nil {
		return err
	}
	r := ctxReader{ctx}
	rg, ok, err := getRegion(r, p.Region)
	if err != nil {
		return err
	}
	mine := ok && (rg.ProcID == ctx.ID() ||
		!p.Opened.IsZero() && rg.State == RegionOpen && rg.Server == p.Opened.ID && rg.StartCode == p.Opened.StartCode)
	if !mine {
		p.Undone = true
		return nil
	}
	if err := d.rollbackClose(ctx, r, rg, p.Region, p.fullTable(), "rollback", p.Bounded); err != nil {
		return err
	}
	undo := p.UndoState
	if undo == "" {
		undo = RegionClosed
	}
	if err := putRegion(ctx, p.Region, Region{Table: rg.Table, State: undo}); err != nil {
		return err
	}
	p.Undone = true
	return nil
}

// closeTableOnce sends, once per rolled-back tree and term, a close for
// every region of table that is open (or opening, or closing) on a live
// server, without waiting. The rollback undoes one child at a time and
// each waits for its own close; sent together first, the closes run in
// parallel on the servers, and each child's own close then finds its
// region closed already. Only a create's or an enable's rollback does it:
// their table is CREATING or ENABLING and held exclusively by the tree, so
// every open region of it is the tree's own. The dispatcher keeps one call
// in flight per server, in order, so a close can never overtake an open
// sent before it.
func (s *services) closeTableOnce(ctx *procedure.Context, r reader, rootID uint64, table string) error {
	if s.dispatchPaused() != nil {
		return nil // maintenance mode: each child's own close, later, does it
	}
	s.mu.Lock()
	if s.closedTables == nil {
		s.closedTables = map[uint64]bool{}
	}
	done := s.closedTables[rootID]
	s.closedTables[rootID] = true
	s.mu.Unlock()
	if done {
		return nil
	}
	t, ok, err := getTable(r, table)
	if err != nil || !ok || (t.State != TableCreating && t.State != TableEnabling) {
		return err
	}
	for _, rn := range t.regionNames(table) {
		rg, ok, err := getRegion(r, rn)
		if err != nil {
			return err
		}
		if !ok || !regionBusy(rg) {
			continue
		}
		srv, alive, err := serverAlive(r, ServerRef{rg.Server, rg.StartCode})
		if err != nil {
			return err
		}
		if alive {
			// Proc id 0: nobody waits for these answers.
			s.disp.Dispatch(dispatch.Target{ServerID: rg.Server, Address: srv.Address, StartCode: rg.StartCode},
				dispatch.Op{Kind: rspb.OpKind_OP_KIND_CLOSE, Region: rn, Table: table, Span: tracectx.RefOf(ctx)})
		}
	}
	ctx.Logger.Info("rollback: closing the table's regions", "table", table, "regions", t.regionTotal())
	return nil
}

// rollbackClose closes region rn of table where rg records it open (or
// opening, or closing), for a rollback, and waits for the answer: a
// rollback cannot suspend, so an error is retried with backoff by the
// executor. A gone incarnation serves nothing; a fenced one may still
// serve it, so the rollback fails until it is gone. what begins the
// errors; closeTable first sends the closes of the whole table
// (closeTableOnce), for a create's or an enable's child.
func (d *Domain) rollbackClose(ctx *procedure.Context, r reader, rg Region, rn, table, what string, closeTable bool) error {
	if !regionBusy(rg) {
		return nil
	}
	ref := ServerRef{rg.Server, rg.StartCode}
	svc := d.servicesFor(ctx)
	if svc == nil {
		return ErrNoServices
	}
	srv, pres, left, err := svc.presenceOf(r, ref)
	if err != nil {
		return err
	}
	if pres == fencing {
		return fmt.Errorf("%s: region %s: its fenced server %s may serve it for %v more", what, rn, ref, left)
	}
	if pres != present {
		return nil
	}
	if closeTable {
		if err := svc.closeTableOnce(ctx, r, ctx.RootID(), rg.Table); err != nil {
			return err
		}
	}
	if err := svc.closeSync(ctx, ctx.ID(), ref, srv.Address, rn, table); err != nil {
		return fmt.Errorf("%s: closing region %s on %s: %w", what, rn, ref, err)
	}
	return nil
}

// recordedRegion is a region's name with its record.
type recordedRegion struct {
	name string
	rg   Region
}

// rollbackCloses is rollbackClose for many regions of table at once (a
// create's regions that no child undid). Each region is checked as
// rollbackClose checks it (a fenced incarnation fails the step, a gone
// one needs no close); the closes needed are all sent first, so the
// dispatcher batches them per server, then waited for with one deadline,
// DispatchTimeout. A close that fails or gets no answer fails the step
// once the others were waited for; the retry does not close again the
// regions this term saw closed (noteClosed).
func (d *Domain) rollbackCloses(ctx *procedure.Context, r reader, regions []recordedRegion, table, what string) error {
	busy := make([]recordedRegion, 0, len(regions))
	for _, x := range regions {
		if regionBusy(x.rg) {
			busy = append(busy, x)
		}
	}
	if len(busy) == 0 {
		return nil
	}
	svc := d.servicesFor(ctx)
	if svc == nil {
		return ErrNoServices
	}
	var errs []error
	fail := func(err error) { errs = append(errs, err) }
	type toClose struct {
		name string
		ref  ServerRef
		addr string
	}
	var send []toClose
	for _, x := range busy {
		ref := ServerRef{x.rg.Server, x.rg.StartCode}
		srv, pres, left, err := svc.presenceOf(r, ref)
		if err != nil {
			return err
		}
		if pres == fencing {
			fail(fmt.Errorf("%s: region %s: its fenced server %s may serve it for %v more", what, x.name, ref, left))
			continue
		}
		if pres != present || svc.closedBefore(ctx.ID(), x.name, ref) {
			continue
		}
		send = append(send, toClose{x.name, ref, srv.Address})
	}
	if len(send) > 0 {
		if svc.dispatchPaused() != nil {
			// A rollback cannot suspend: it fails, and is retried with
			// backoff until maintenance mode ends.
			return errors.New(catalog.MaintenanceNote)
		}
		b := svc.newBatch(ctx.ID(), rspb.OpKind_OP_KIND_CLOSE)
		defer b.forget()
		for _, c := range send {
			b.send(ctx, c.ref, c.addr, c.name, table)
		}
		if len(send) > 1 {
			ctx.Logger.Info("rollback: closing regions together", "table", table, "regions", len(send))
		}
		waitErr := b.wait(ctx, d.cfg.DispatchTimeout)
		if waitErr != nil && (errors.Is(waitErr, ErrNoServices) || ctx.Err() != nil) {
			return waitErr // deposed or stopping: the next leader closes them
		}
		for _, c := range send {
			res := b.result(c.name)
			switch classify(res) {
			case outDone:
				svc.noteClosed(ctx.ID(), c.name, c.ref)
				continue
			case outRemoved:
				if _, pres, _, err := svc.presenceOf(svc.reader(), c.ref); err == nil && pres == gone {
					continue
				}
			}
			err := waitErr
			switch {
			case res != nil:
				err = res.Err
			case err == nil:
				err = errors.New("result lost")
			}
			fail(fmt.Errorf("%s: closing region %s on %s: %w", what, c.name, c.ref, err))
		}
	}
	switch len(errs) {
	case 0:
		svc.forgetClosed(ctx.ID())
		return nil
	case 1:
		return errs[0]
	}
	return fmt.Errorf("%d of %d regions not closed (%d sent a close); first: %w", len(errs), len(busy), len(send), errs[0])
}

// closeSync closes region on ref and waits for the answer (rollbacks).
func (s *services) closeSync(ctx context.Context, procID uint64, ref ServerRef, addr, region, table string) error {
	if s.dispatchPaused() != nil {
		// A rollback cannot suspend: it fails, and is retried with backoff
		// until maintenance mode ends.
		return errors.New(catalog.MaintenanceNote)
	}
	w := s.dispatch(ctx, procID, ref, addr, region, table, rspb.OpKind_OP_KIND_CLOSE)
	timeout, stopTimer := s.d.after(s.d.cfg.DispatchTimeout)
	defer stopTimer()
	select {
	case <-w.done:
	case <-timeout:
		return fmt.Errorf("no answer within %v", s.d.cfg.DispatchTimeout)
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopCh:
		return ErrNoServices
	}
	res := s.take(procID, ref, region, rspb.OpKind_OP_KIND_CLOSE)
	switch classify(res) {
	case outDone:
		return nil
	case outRemoved:
		if _, pres, _, err := s.presenceOf(s.reader(), ref); err == nil && pres == gone {
			return nil
		}
	}
	if res == nil {
		return errors.New("result lost")
	}
	return res.Err
}
