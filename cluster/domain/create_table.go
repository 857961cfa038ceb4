package domain

import (
	"encoding/json"
	"fmt"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TypeCreateTable names CreateTable in the procedure registry.
const TypeCreateTable = "CreateTable"

func init() {
	// Version 2 may have written its layout in PRE_OPERATION (see
	// CreateTable): 0.1.0 must not load it. The state's shape is version
	// 1's.
	registerTypeWith(TypeCreateTable, procedure.TypeOptions{Version: 2, Since: map[int]version.Format{2: version.Format2}},
		func() procedure.Procedure { return &CreateTable{} })
	// The admin call builds it from its request on any master.
	registerBuilder(adminpb.Admin_CreateTable_FullMethodName, func(_ *Domain, req *adminpb.CreateTableRequest) (procedure.Procedure, error) {
		return NewCreateTable(req.GetNamespace(), req.GetName(), int(req.GetRegions()))
	})
}

// States of CreateTable (HBase's CreateTableState).
const (
	ctPreOperation  int32 = 1
	ctWriteLayout   int32 = 2
	ctAssignRegions int32 = 3
	ctMarkEnabled   int32 = 4
)

// CreateTable creates a table of Regions regions and opens them:
//
//	PRE_OPERATION   the namespace exists, the table does not
//	WRITE_LAYOUT    table CREATING with its region names, regions OFFLINE
//	ASSIGN_REGIONS  one bounded TransitRegionState child per region, a
//	                wave at a time as the region budget lets it
//	MARK_ENABLED    table ENABLED
//
// At state version 2 (written from cluster version 2 on), PRE_OPERATION
// writes the layout in the step that checks for it, and WRITE_LAYOUT is
// not run: a step, a procedure record and a commit fewer per table, which
// is what many small tables pay for. Its rollback then deletes the layout
// as WRITE_LAYOUT's does. 0.1.0 undoes nothing for PRE_OPERATION, and its
// children forgotten, a rollback there would leave the table CREATING and
// its opened regions open: a 0.1.0 master refuses to load version 2 (it
// holds the tree until a newer master leads), and 0.1.0 ignores the
// cluster version, so the version of the record is what keeps it off.
//
// A failure anywhere (a region that no server will open, an abort, a
// fail point) rolls the whole tree back: the children close what they
// opened and record their regions OFFLINE, then the layout is deleted. A
// failed create never leaves "table exists" behind.
type CreateTable struct {
	procedure.StateMachine
	tableProc
	Regions int `json:"regions"`
	// Spawned counts the regions whose procedures ASSIGN_REGIONS spawned,
	// one wave (at most Config.RegionWave, as the region budget grants)
	// at a time.
	Spawned int `json:"spawned,omitempty"`
	// Region names are not kept here (records of an older version carry
	// them as region_names, ignored): they are RegionName(table, i, id),
	// and a list of them would make every write of this procedure's state
	// as long as the table.
}

// NewCreateTable validates the arguments and returns the procedure.
func NewCreateTable(ns, name string, regions int) (*CreateTable, error) {
	tp, err := newTableProc(ns, name)
	if err != nil {
		return nil, err
	}
	if regions == 0 {
		regions = 1
	}
	if regions < 1 || regions > MaxRegions {
		return nil, procedure.Errorf(errInvalid, "%d regions (want 1..%d)", regions, MaxRegions)
	}
	return &CreateTable{tableProc: tp, Regions: regions}, nil
}

// InitialState implements procedure.StateSteps.
func (p *CreateTable) InitialState() int32 { return ctPreOperation }

// ExecuteState implements procedure.StateSteps.
func (p *CreateTable) ExecuteState(ctx *procedure.Context, state int32) (procedure.Flow, error) {
	d, err := envOf(ctx)
	if err != nil {
		return procedure.NoMoreState, err
	}
	r := ctxReader{ctx}
	full := p.full()
	switch state {
	case ctPreOperation:
		ok, err := namespaceExists(r, p.Namespace)
		if err != nil {
			return procedure.NoMoreState, err
		}
		if !ok {
			return procedure.NoMoreState, refused(procedure.ErrNotFound, "namespace %s does not exist (creating table %s)", p.Namespace, full)
		}
		if _, exists, err := getTable(r, full); err != nil || exists {
			if err == nil {
				err = refused(procedure.ErrAlreadyExists, "table %s exists", full)
			}
			return procedure.NoMoreState, err
		}
		if !layoutWithChecks(ctx) {
			p.SetNextState(ctWriteLayout)
			return procedure.HasMoreState, nil
		}
		if err := p.writeLayout(ctx, d, full); err != nil {
			return procedure.NoMoreState, err
		}
		p.SetNextState(ctAssignRegions)
		return procedure.HasMoreState, nil
	case ctWriteLayout:
		if err := p.writeLayout(ctx, d, full); err != nil {
			return procedure.NoMoreState, err
		}
		p.SetNextState(ctAssignRegions)
		return procedure.HasMoreState, nil
	case ctAssignRegions:
		if p.Spawned >= p.Regions {
			p.SetNextState(ctMarkEnabled)
			return procedure.HasMoreState, nil
		}
		grant, svc, ok, flow, err := takeWave(ctx, min(d.cfg.RegionWave, p.Regions-p.Spawned))
		if !ok {
			return flow, err
		}
		from, to, last := nextWave(p.Spawned, grant, p.Regions)
		spawn := newAssignSpawner(ctx, svc)
		for i := from; i < to; i++ {
			rn := RegionName(full, i, ctx.ID())
			spawn.add(&TransitRegionState{Region: rn, Namespace: p.Namespace, Table: p.Name, Kind: KindAssign, Bounded: true, UndoState: RegionOffline})
		}
		if err := spawn.Err(); err != nil {
			return procedure.NoMoreState, err
		}
		p.Spawned = to
		if last {
			p.SetNextState(ctMarkEnabled)
		}
		return procedure.HasMoreState, nil
	case ctMarkEnabled:
		if err := failPoint(d, "create.enable"); err != nil {
			return procedure.NoMoreState, err
		}
		if err := markTable(ctx, full, TableEnabled, TableCreating); err != nil {
			return procedure.NoMoreState, err
		}
		ctx.SetResult([]byte(fmt.Sprintf("table %s created with %s", full, countOf(p.Regions, "region"))))
		return procedure.NoMoreState, nil
	}
	return procedure.NoMoreState, fmt.Errorf("create table: unknown state %d", state)
}

// writeLayout records the table CREATING with its regions OFFLINE, in
// this step's write.
func (p *CreateTable) writeLayout(ctx *procedure.Context, d *Domain, full string) error {
	if err := failPoint(d, "create.layout"); err != nil {
		return err
	}
	t := Table{State: TableCreating, RegionCount: p.Regions, ProcID: ctx.ID()}
	for _, rn := range t.regionNames(full) {
		if err := putRegion(ctx, rn, Region{Table: full, State: RegionOffline}); err != nil {
			return err
		}
	}
	return ctx.Put(TableKey(full), mustJSON(t))
}

// layoutWithChecks says PRE_OPERATION writes the layout itself: the
// procedure's record is written at state version 2, which no master that
// would undo nothing for it (0.1.0) loads. Once a step is told 2, every
// later write of the procedure is at 2.
func layoutWithChecks(ctx *procedure.Context) bool { return ctx.StateVersion() >= 2 }

// DowngradeState implements procedure.StateDowngrader: version 1's state
// has the same shape; what differs is what PRE_OPERATION did, which a step
// told version 1 does not do.
func (p *CreateTable) DowngradeState(to int) ([]byte, error) {
	if to != 1 {
		return nil, fmt.Errorf("create table: no state version %d", to)
	}
	return json.Marshal(p)
}

// RollbackState implements procedure.StateSteps. The children, whose
// steps are newer, have been rolled back before the state that wrote the
// layout is (WRITE_LAYOUT, or PRE_OPERATION from cluster version 2): every
// region a child ran for is closed and OFFLINE by then, the regions of
// children prepared in the spawn that never ran are closed here
// (rollbackCloses); the layout is deleted if it is this procedure's own,
// so a PRE_OPERATION that only checked, or was refused, deletes nothing.
func (p *CreateTable) RollbackState(ctx *procedure.Context, state int32) error {
	if state != ctWriteLayout && state != ctPreOperation {
		return nil
	}
	d, err := envOf(ctx)
	if err != nil {
		return err
	}
	r := ctxReader{ctx}
	full := p.full()
	t, ok, err := getTable(r, full)
	if err != nil || !ok || t.ProcID != ctx.ID() {
		return err
	}
	names := t.regionNames(full)
	var recorded []recordedRegion
	for _, rn := range names {
		rg, ok, err := getRegion(r, rn)
		if err != nil {
			return err
		}
		if ok {
			recorded = append(recorded, recordedRegion{rn, rg})
		}
	}
	// A region no child undid is still recorded open (or opening): a
	// child prepared in the spawn that never ran has no step to undo, and
	// may have sent its open on a previous leader. Closed together: one
	// at a time, each close waits out the dispatcher's batching delay.
	if err := d.rollbackCloses(ctx, r, recorded, full, "rollback of create "+full); err != nil {
		return err
	}
	for _, rn := range names {
		if err := ctx.Delete(RegionKey(rn)); err != nil {
			return err
		}
	}
	return ctx.Delete(TableKey(full))
}

// Progress implements procedure.Progressor: its region assignments (one
// child each) ended, of Regions.
func (p *CreateTable) Progress() procedure.Progress {
	return procedure.Progress{Total: int64(p.Regions), Unit: "regions open", FromChildren: true, Spawned: int64(p.Spawned)}
}

// ForgetChildrenOnSuccess implements procedure.ForgetsChildren: a region
// whose assignment succeeded needs nothing more of its child, whose
// record would otherwise be kept (in the replicated state, every master's
// executor and every snapshot) until the create ends, then deleted in one
// write as long as the table. With RollbackCoversChildren, each child's
// last write deletes its record instead.
func (p *CreateTable) ForgetChildrenOnSuccess() bool { return true }

// RollbackCoversChildren implements procedure.RollbackCoversChildren:
// the rollback of the state that wrote the layout (WRITE_LAYOUT, or
// PRE_OPERATION at state version 2) reads every region of the table from
// the domain, closes each one still open (or opening, or closing) on a
// live server, whichever child opened it, and deletes every region's
// record and the table's: what a forgotten child did is undone there,
// also after a failover, when nothing is known of the child. A 0.1.0
// master that takes over a version 1 tree loads the parent with the
// children still stored (ASSIGN_REGIONS counts its waves in Spawned,
// MARK_ENABLED reads no child) and its rollback of WRITE_LAYOUT closes
// and deletes the same way, so no cluster version gates forgetting
// (internal/compat/release_tests.sh); a version 2 tree it does not load.
func (p *CreateTable) RollbackCoversChildren() bool { return true }
