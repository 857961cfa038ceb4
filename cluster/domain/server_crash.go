package domain

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/scheduler"
)

// TypeServerCrash names ServerCrash in the procedure registry. No admin
// call builds one: the domain submits it when a server's lease expires,
// and the repair kit's RecoverServer when asked.
const TypeServerCrash = "ServerCrash"

func init() {
	// Version 2 spawns AssignBatch children, which 0.1.0 does not know:
	// written only from format 2, which every member reads. The state's
	// shape is version 1's.
	registerTypeWith(TypeServerCrash, procedure.TypeOptions{Version: 2, Since: map[int]version.Format{2: version.Format2}},
		func() procedure.Procedure { return &ServerCrash{} })
}

// DowngradeState implements procedure.StateDowngrader: version 1's state
// has the same shape; what differs is the children a step told version 1
// spawns (a TransitRegionState per region).
func (p *ServerCrash) DowngradeState(to int) ([]byte, error) {
	if to != 1 {
		return nil, fmt.Errorf("server crash: no state version %d", to)
	}
	return json.Marshal(p)
}

// batchesOf says ctx's step reassigns in batches (AssignBatch): the
// procedure's record is written at state version 2.
func batchesOf(ctx *procedure.Context) bool { return ctx.StateVersion() >= 2 }

// States of ServerCrash.
const (
	crashFence  int32 = 1
	crashAssign int32 = 2
)

// ServerCrash recovers the regions of a dead region server incarnation
// (HBase's ServerCrashProcedure):
//
//	FENCE:  record the incarnation expired (if it is still the live one);
//	ASSIGN: wait until the incarnation has certainly stopped serving
//	        (services.presenceOf: it registered again, or its self-fence
//	        deadline passed); drop the dispatcher's ops for the server;
//	        reassign the regions whose record places them on the
//	        incarnation (OPEN, OPENING or CLOSING there), one
//	        TransitRegionState child each (From = the incarnation) or,
//	        from state version 2, an AssignBatch child per server picked
//	        and Config.CrashBatch regions (spawnBatches), in
//	        waves of at most Config.CrashWave, up to
//	        Config.CrashInFlight in flight; run again until none is
//	        left.
//
// The waves keep every write bounded: a server of a third of a million
// regions would otherwise spawn them all in one Raft entry. The first
// waves sweep the tables in key order, table by table (a table's region
// names start with its name), after Cursor, the last region of the
// previous wave, so each wave reads only its own stretch of the region
// records; the cursor is saved with the wave's children, so a new leader
// resumes after the last wave written, neither repeating nor skipping
// one. The sweep's waves overlap: the next is spawned once the unfinished
// children of those before are down to CrashInFlight − CrashWave, so one
// slow region holds up no wave behind it. Children finishing out of order
// change nothing of this: the cursor says what was spawned, not what
// finished, and a new leader resumes every child spawned, waiting for all
// of them (the watermark is not persisted) before its first wave. Once
// the sweep has passed the last table and every wave has finished, each
// wave scans every region record, until a scan finds none left on the
// incarnation: that
// catches what the sweep cannot see, a region recorded on the incarnation
// behind the cursor (an open that picked it just before the fence
// committed) or one whose table record is gone.
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
	// Cursor is the last region of the sweep's latest wave ("" before the
	// first), and Swept says the sweep has passed the last table.
	Cursor string `json:"cursor,omitempty"`
	Swept  bool   `json:"swept,omitempty"`
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
func (p *ServerCrash) InitialState() int32 { return crashFence }

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
	case crashFence:
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
		p.SetNextState(crashAssign)
		return procedure.HasMoreState, nil
	case crashAssign:
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
		// Woken before the earlier waves finished (WakeAtChildren), the
		// sweep runs on; a scan of every region waits for them.
		left := ctx.ChildrenLeft()
		wave, cursor, swept, err := p.nextWave(r, d.cfg.CrashWave, left == 0)
		if err != nil {
			return procedure.NoMoreState, err
		}
		if err := failPoint(d, "crash.assign"); err != nil {
			return procedure.NoMoreState, err
		}
		if len(wave) == 0 && left > 0 {
			// The sweep is over and the earlier waves are not.
			p.Cursor, p.Swept = cursor, swept
			ctx.Suspend(procedure.OnChildren())
			return procedure.HasMoreState, nil
		}
		if len(wave) == 0 {
			p.Cursor, p.Swept = cursor, swept
			ctx.SetResult([]byte(fmt.Sprintf("server %s: %s reassigned", p.Server, countOf(p.Reassigned, "region"))))
			ctx.Logger.Info("server crash handled", "server", p.Server.String(), "reassigned", p.Reassigned)
			return procedure.NoMoreState, nil
		}
		batches := batchesOf(ctx)
		spawn := p.spawnWave
		if batches {
			spawn = p.spawnBatches
		}
		prepared, err := spawn(ctx, svc, r, wave)
		if err != nil {
			return procedure.NoMoreState, err
		}
		// Only once nothing can fail: a failed step runs again with the
		// fields it left.
		p.Cursor, p.Swept = cursor, swept
		p.Reassigned += len(wave)
		if !swept {
			// The next wave of the sweep goes out once this one and
			// those before it are down to CrashInFlight − CrashWave
			// regions: as many children, or batches of CrashBatch.
			inFlight := d.cfg.CrashInFlight - d.cfg.CrashWave
			if batches {
				inFlight /= max(d.cfg.CrashBatch, 1)
			}
			ctx.WakeAtChildren(inFlight)
		}
		ctx.Logger.Info("reassigning the regions of a crashed server", "server", p.Server.String(), "regions", len(wave),
			"prepared", prepared, "reassigned", p.Reassigned, "swept", p.Swept)
		return procedure.HasMoreState, nil // this state again, once the children are done
	}
	return procedure.NoMoreState, fmt.Errorf("server crash: unknown state %d", state)
}

// spawnWave adds a TransitRegionState child per region of the wave. Each
// child whose region's locks are free is prepared here, in its name
// (TransitRegionState.prepareCrashed): its target picked and its region
// recorded OPENING there in this step's write, the one that persists the
// child; it starts by sending the open. The others (a region another
// procedure holds, a table not enabled, no live server) run their own
// PREPARE. It returns how many were prepared.
func (p *ServerCrash) spawnWave(ctx *procedure.Context, svc *services, r reader, wave []crashedRegion) (int, error) {
	cands, err := svc.liveTargets(r)
	if err != nil {
		return 0, err
	}
	return p.spawnEach(ctx, svc, r, wave, cands, map[string]Table{})
}

// spawnEach is spawnWave with the live servers read (cands) and a cache
// of table records.
func (p *ServerCrash) spawnEach(ctx *procedure.Context, svc *services, r reader, wave []crashedRegion, cands map[string]Server, tables map[string]Table) (int, error) {
	prepared := 0
	opens := newFirstOpens(ctx, svc.d, svc)
	for _, w := range wave {
		ns, table := SplitTableName(w.table)
		child := &TransitRegionState{Region: w.name, Namespace: ns, Table: table, Kind: KindAssign, From: p.Server}
		id, locked, err := ctx.AddLockedChild(child)
		if err != nil {
			return 0, err
		}
		if !locked {
			continue
		}
		ok, err := child.prepareCrashed(ctx, svc, r, id, cands, tables)
		if err != nil {
			return 0, err
		}
		if ok {
			prepared++
			if err := opens.add(id, child); err != nil {
				return 0, err
			}
		}
	}
	return prepared, nil
}

// crashedRegion is a region to reassign and its table.
type crashedRegion struct{ name, table string }

// nextWave returns the next at most n regions recorded on the incarnation,
// and the cursor and sweep state once they are spawned: from the sweep
// while it lasts, then, if scan says every earlier wave is finished, from
// a scan of every region record (before that, the scan would find the
// regions of children that have not run yet still on the incarnation, and
// reassign them twice). It leaves p alone, so a step that fails after it
// repeats the same wave.
func (p *ServerCrash) nextWave(r reader, n int, scan bool) (wave []crashedRegion, cursor string, swept bool, err error) {
	cursor, swept = p.Cursor, p.Swept
	if !swept {
		if wave, cursor, swept, err = p.sweep(r, n); err != nil || len(wave) > 0 {
			return wave, cursor, swept, err
		}
	}
	if !scan {
		return nil, cursor, swept, nil
	}
	err = scanRegions(r, func(name string, rg Region) bool {
		if rg.onServer(p.Server) {
			wave = append(wave, crashedRegion{name, rg.Table})
		}
		return len(wave) < n
	})
	return wave, cursor, swept, err
}

// sweep collects up to n regions recorded on the incarnation from the
// tables after the cursor, in key order; cursor is the last one, and
// swept says the sweep reached the end of the last table.
func (p *ServerCrash) sweep(r reader, n int) (wave []crashedRegion, cursor string, swept bool, err error) {
	var tables []string
	if err := r.scan(tablePrefix, func(k string, _ []byte) bool {
		tables = append(tables, strings.TrimPrefix(k, tablePrefix))
		return true
	}); err != nil {
		return nil, "", false, err
	}
	cursor = p.Cursor
	var derr error
	for _, full := range tables {
		// Region names are "<table>,…", and ',' sorts before every
		// character a name may hold, so the tables' regions follow each
		// other in the tables' order.
		first := full + ","
		if p.Cursor != "" && first < p.Cursor && !strings.HasPrefix(p.Cursor, first) {
			continue // swept already
		}
		err := r.scan(regionPrefix+first, func(k string, v []byte) bool {
			name := strings.TrimPrefix(k, regionPrefix)
			if name <= p.Cursor {
				return true
			}
			// The scanned value, not a Get of it: the step has written
			// nothing yet, so the two read the same record (and each
			// child reads its region again once it holds its lock:
			// prepareCrashed).
			rg, err := decodeRegion(name, v)
			if err != nil {
				derr = err
				return false
			}
			if rg.onServer(p.Server) {
				wave = append(wave, crashedRegion{name, rg.Table})
				cursor = name
			}
			return len(wave) < n
		})
		if err == nil {
			err = derr
		}
		if err != nil {
			return nil, "", false, err
		}
		if len(wave) == n {
			return wave, cursor, false, nil
		}
	}
	return wave, cursor, true, nil
}

// ForgetChildrenOnSuccess implements procedure.ForgetsChildren: a
// reassignment that succeeded is never rolled back (this procedure retries
// until done), and its region's record says where it went, so its
// TransitRegionState record goes with its last write. A crash of a server
// holding a third of a million regions would otherwise keep as many
// finished children stored, and in every snapshot, until the last one is
// done.
func (p *ServerCrash) ForgetChildrenOnSuccess() bool { return true }

// RollbackState implements procedure.StateSteps: nothing to undo (an
// expiry stands; the children leave every region consistent).
func (p *ServerCrash) RollbackState(*procedure.Context, int32) error { return nil }

// What a crash's reassignment does with a region it read.
const (
	regionMovedOn    = iota // no longer on the incarnation: not the batch's
	regionAssignable        // on it, its table enabled
	regionOwnAssign         // on it, but its table is not enabled: its own assignment's PREPARE deals with it
)

// crashedRegionAssignable reads br's region and table (through tables,
// the step's cache: see tableOf) and says what the reassignment of the
// crashed incarnation from's regions does with it.
func crashedRegionAssignable(r reader, br BatchRegion, from ServerRef, tables map[string]Table) (int, error) {
	rg, ok, err := getRegion(r, br.Name)
	if err != nil {
		return 0, err
	}
	if !ok || !rg.onServer(from) || rg.Table != br.Table {
		return regionMovedOn, nil
	}
	enabled, err := tableEnabled(r, br.Table, tables)
	if err != nil || !enabled {
		return regionOwnAssign, err
	}
	return regionAssignable, nil
}

// tableEnabled says table full's record is ENABLED, read through tables,
// a step's cache of the records it read: one read per table, trusted only
// while a lock the step holds (or reserved) on the table keeps it as read.
func tableEnabled(r reader, full string, tables map[string]Table) (bool, error) {
	t, ok := tables[full]
	if !ok {
		var err error
		if t, ok, err = getTable(r, full); err != nil || !ok {
			return false, err
		}
		tables[full] = t
	}
	return t.State == TableEnabled, nil
}

// spawnBatches is spawnWave from state version 2: the wave's regions
// grouped by the server picked for each, an AssignBatch child per server
// and Config.CrashBatch regions. A batch whose locks are free is prepared
// here, in its name: each region read again under them and, if still on
// the incarnation with its table enabled, recorded OPENING on the
// batch's server in the spawn's write; the batch starts by sending the
// opens. One whose locks are taken is withdrawn, and its regions get a
// TransitRegionState each, so that the region held elsewhere holds up
// no other.
// The regions a batch cannot take (no live server, a table not enabled)
// get a TransitRegionState each, as spawnWave gives them. It returns how
// many regions were prepared.
func (p *ServerCrash) spawnBatches(ctx *procedure.Context, svc *services, r reader, wave []crashedRegion) (int, error) {
	cands, err := svc.liveTargets(r)
	if err != nil {
		return 0, err
	}
	size := max(svc.d.cfg.CrashBatch, 1)
	tables := map[string]Table{}
	groups := map[string]*AssignBatch{}
	var order []string // the servers, in the order each was first picked
	var each []crashedRegion
	prepared := 0
	flush := func(b *AssignBatch) error {
		// Between the wave's reads and the batch's locks: what a test
		// changes here, the batch must read again under them.
		if err := failPoint(svc.d, "crash.batch"); err != nil {
			return err
		}
		n, locked, err := p.prepareBatch(ctx, r, b)
		if err != nil {
			return err
		}
		if !locked {
			// A region of it is held elsewhere: its regions go as a
			// child each, as version 1 sends them, so that the held one
			// holds up no other.
			for _, br := range b.Regions {
				each = append(each, crashedRegion{br.Name, br.Table})
			}
		}
		prepared += n
		return nil
	}
	for _, w := range wave {
		br := BatchRegion{Name: w.name, Table: w.table}
		// The sweep read the region on the incarnation; the batch reads
		// it again under its locks (prepareBatch). Only its table decides
		// here whether it goes in a batch.
		enabled, err := tableEnabled(r, w.table, tables)
		if err != nil {
			return 0, err
		}
		target := ""
		if enabled {
			if target, err = svc.pick(r, cands, ""); err != nil {
				return 0, err
			}
		}
		if target == "" {
			each = append(each, w)
			continue
		}
		b, seen := groups[target]
		if b == nil {
			srv := cands[target]
			b = &AssignBatch{From: p.Server, Target: ServerRef{target, srv.StartCode}, Address: srv.Address}
			groups[target] = b
			if !seen {
				order = append(order, target)
			}
		}
		b.Regions = append(b.Regions, br)
		if len(b.Regions) >= size {
			if err := flush(b); err != nil {
				return 0, err
			}
			groups[target] = nil // flushed: the next region for it starts another
		}
	}
	for _, target := range order {
		if b := groups[target]; b != nil {
			if err := flush(b); err != nil {
				return 0, err
			}
		}
	}
	// A table cache of its own: tables holds what was read before any
	// lock was taken, and a child's prepare trusts its cache only for
	// what the child's table lock keeps as read (a disable that ended in
	// between would have its region reopened).
	n, err := p.spawnEach(ctx, svc, r, each, cands, map[string]Table{})
	return prepared + n, err
}

// prepareBatch adds batch b as a child if its locks are free, and
// prepares it (see spawnBatches): it returns how many regions it recorded
// OPENING for it. Not locked, b is not added; left with no region to
// open once re-read, it is withdrawn.
func (p *ServerCrash) prepareBatch(ctx *procedure.Context, r reader, b *AssignBatch) (n int, locked bool, err error) {
	id, locked, err := ctx.AddLockedChild(b)
	if err != nil {
		return 0, false, err
	}
	if !locked {
		return 0, false, ctx.WithdrawChild(id)
	}
	// Read again under the locks: what the wave read may have changed
	// before they were taken (a move that ended in between).
	keep := make([]BatchRegion, 0, len(b.Regions))
	var own []BatchRegion
	tables := map[string]Table{}
	for _, br := range b.Regions {
		state, err := crashedRegionAssignable(r, br, p.Server, tables)
		if err != nil {
			return 0, true, err
		}
		switch state {
		case regionAssignable:
			if err := putRegion(ctx, br.Name, Region{Table: br.Table, State: RegionOpening, Server: b.Target.ID, StartCode: b.Target.StartCode, ProcID: id}); err != nil {
				return 0, true, err
			}
			keep = append(keep, br)
		case regionOwnAssign:
			own = append(own, br)
		}
	}
	if len(keep) == 0 {
		// Nothing of it is left to open (a disable or a move ended
		// before its locks were taken): no batch.
		if err := ctx.WithdrawChild(id); err != nil {
			return 0, true, err
		}
	}
	// The batch is written as it is now, when the step returns.
	b.Regions = keep
	for _, br := range own {
		// It takes the region's lock once the batch, which holds it
		// (its record no longer lists the region), is done, or at once
		// if the batch was withdrawn.
		ns, table := SplitTableName(br.Table)
		ctx.AddChild(&TransitRegionState{Region: br.Name, Namespace: ns, Table: table, Kind: KindAssign, From: p.Server})
	}
	return len(keep), true, nil
}
