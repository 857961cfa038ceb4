package domain

import (
	"errors"
	"fmt"

	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/scheduler"
)

// MaxRegions bounds the regions of one table (a create is one procedure
// per region, spawned Config.RegionWave at a time; its layout, a record
// per region, is one write of a few MB at this bound). Keep it equal to
// client.MaxRegions.
const MaxRegions = 100000

// nextWave is the range [from, to) of the next wave (Config.RegionWave)
// of n regions, of which done were spawned already, and whether it is the
// last one.
func nextWave(d *Domain, done, n int) (from, to int, last bool) {
	to = min(done+d.cfg.RegionWave, n)
	return done, to, to >= n
}

// tableProc is what the table procedures share: the table's exclusive lock
// (its namespace shared), held for life, and the table's queue.
type tableProc struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Locks implements procedure.Locker.
func (t *tableProc) Locks() []scheduler.Lock {
	return scheduler.TableLocks(t.Namespace, t.Name, scheduler.Exclusive)
}

// HoldLock implements procedure.Locker.
func (t *tableProc) HoldLock() bool { return true }

// QueueKey implements procedure.Queued.
func (t *tableProc) QueueKey() scheduler.QueueKey {
	return scheduler.QueueKey{Kind: scheduler.KindTable, Name: t.full()}
}

func (t *tableProc) full() string { return FullTableName(t.Namespace, t.Name) }

func newTableProc(ns, name string) (tableProc, error) {
	if ns == "" {
		ns = DefaultNamespace
	}
	if err := validName("namespace", ns); err != nil {
		return tableProc{}, err
	}
	if err := validName("table", name); err != nil {
		return tableProc{}, err
	}
	return tableProc{Namespace: ns, Name: name}, nil
}

// setTableState records the table's new state, keeping its layout.
func setTableState(ctx *procedure.Context, full string, t Table, state string) error {
	t.State = state
	return ctx.Put(TableKey(full), mustJSON(t))
}

// markTable moves the table from one of the states from to state to. A
// table already in state to passes: the step may be running again after a
// crash.
func markTable(ctx *procedure.Context, full, to string, from ...string) error {
	t, err := requireTable(ctxReader{ctx}, full, append(from, to)...)
	if err != nil {
		return err
	}
	return setTableState(ctx, full, t, to)
}

// requireTable reads the table and checks its state is one of want.
func requireTable(r reader, full string, want ...string) (Table, error) {
	t, ok, err := getTable(r, full)
	if err != nil {
		return Table{}, err
	}
	if !ok {
		return Table{}, refused(procedure.ErrNotFound, "table %s does not exist", full)
	}
	for _, w := range want {
		if t.State == w {
			return t, nil
		}
	}
	return Table{}, refused(procedure.ErrFailedPrecondition, "table %s is %s (want %v)", full, t.State, want)
}

// refusal is a failed precondition: its message as written, classified by
// kind (procedure.ErrAlreadyExists, ErrNotFound, ErrFailedPrecondition) so
// that the API answers with its code (procedure.ErrorCode).
type refusal struct {
	msg  string
	kind error
}

func (e *refusal) Error() string { return e.msg }
func (e *refusal) Unwrap() error { return e.kind }

func refused(kind error, format string, args ...any) error {
	return &refusal{msg: fmt.Sprintf(format, args...), kind: kind}
}

func failPoint(d *Domain, name string) error {
	if d.cfg.FailPoint != nil {
		if err := d.cfg.FailPoint(name); err != nil {
			return fmt.Errorf("fail point %s: %w", name, err)
		}
	}
	return nil
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
//	ASSIGN_REGIONS  one bounded TransitRegionState child per region
//	MARK_ENABLED    table ENABLED
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
	// one wave (Config.RegionWave) at a time.
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
		p.SetNextState(ctWriteLayout)
		return procedure.HasMoreState, nil
	case ctWriteLayout:
		if err := failPoint(d, "create.layout"); err != nil {
			return procedure.NoMoreState, err
		}
		t := Table{State: TableCreating, RegionCount: p.Regions, ProcID: ctx.ID()}
		for _, rn := range t.regionNames(full) {
			if err := putRegion(ctx, rn, Region{Table: full, State: RegionOffline}); err != nil {
				return procedure.NoMoreState, err
			}
		}
		if err := ctx.Put(TableKey(full), mustJSON(t)); err != nil {
			return procedure.NoMoreState, err
		}
		p.SetNextState(ctAssignRegions)
		return procedure.HasMoreState, nil
	case ctAssignRegions:
		from, to, last := nextWave(d, p.Spawned, p.Regions)
		for i := from; i < to; i++ {
			rn := RegionName(full, i, ctx.ID())
			ctx.AddChild(&TransitRegionState{Region: rn, Namespace: p.Namespace, Table: p.Name, Kind: KindAssign, Bounded: true, UndoState: RegionOffline})
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

// RollbackState implements procedure.StateSteps. The children, whose
// steps are newer, have been rolled back before WRITE_LAYOUT is: every
// region is closed and OFFLINE by then; the layout is deleted if it is
// this procedure's own.
func (p *CreateTable) RollbackState(ctx *procedure.Context, state int32) error {
	if state != ctWriteLayout {
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
	for _, rn := range t.regionNames(full) {
		rg, ok, err := getRegion(r, rn)
		if err != nil {
			return err
		}
		if ok && regionBusy(rg) {
			// A region no child undid (cannot happen while the tree's
			// table lock holds, but never leave one open behind).
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
				return fmt.Errorf("rollback of create %s: region %s: its fenced server %s may serve it for %v more", full, rn, ref, left)
			}
			if pres == present {
				if err := svc.closeSync(ctx, ctx.ID(), ref, srv.Address, rn, full); err != nil {
					return fmt.Errorf("rollback of create %s: closing %s: %w", full, rn, err)
				}
			}
		}
		if err := ctx.Delete(RegionKey(rn)); err != nil {
			return err
		}
	}
	return ctx.Delete(TableKey(full))
}

// States of DeleteTable, EnableTable and DisableTable: one machine,
// told apart by a tableTransition.
const (
	ttPreOperation int32 = 1 // the table is in the transition's from state
	ttMark         int32 = 2 // mark it with the transient state
	ttRegions      int32 = 3 // one child per region to move
	ttFinish       int32 = 4 // mark it final, or delete its layout
)

// tableTransition is what DeleteTable, EnableTable and DisableTable share:
// a table in state from is marked transient, children open or close its
// regions, then it is marked final (or, for a delete, its layout goes).
// Until its regions move, rolling back restores from.
type tableTransition struct {
	verb      string // "delete", "enable" or "disable", for messages
	from      string
	transient string
	final     string // "" deletes the table's layout instead
	// failPoint, if set, is checked before the last state (tests inject a
	// failure after the regions moved).
	failPoint string
	// child returns the procedure that moves region rn, or nil if the
	// region needs none.
	child func(r reader, tp tableProc, rn string) (procedure.Procedure, error)
}

var (
	deleting = &tableTransition{verb: "delete", from: TableDisabled, transient: TableDeleting,
		child: func(r reader, tp tableProc, rn string) (procedure.Procedure, error) {
			// A disabled table should have no region open; close any that is.
			rg, ok, err := getRegion(r, rn)
			if err != nil || !ok || !regionBusy(rg) {
				return nil, err
			}
			return &TransitRegionState{Region: rn, Namespace: tp.Namespace, Table: tp.Name, Kind: KindUnassign}, nil
		}}
	enabling = &tableTransition{verb: "enable", from: TableDisabled, transient: TableEnabling, final: TableEnabled,
		failPoint: "enable.enable",
		child: func(_ reader, tp tableProc, rn string) (procedure.Procedure, error) {
			return &TransitRegionState{Region: rn, Namespace: tp.Namespace, Table: tp.Name, Kind: KindAssign, Bounded: true, UndoState: RegionClosed}, nil
		}}
	disabling = &tableTransition{verb: "disable", from: TableEnabled, transient: TableDisabling, final: TableDisabled,
		child: func(_ reader, tp tableProc, rn string) (procedure.Procedure, error) {
			return &TransitRegionState{Region: rn, Namespace: tp.Namespace, Table: tp.Name, Kind: KindUnassign}, nil
		}}
)

// execute runs state of the machine m of the table tp; spawned counts the
// regions whose children were spawned (one wave at a time).
func (tt *tableTransition) execute(ctx *procedure.Context, m *procedure.StateMachine, tp tableProc, spawned *int, state int32) (procedure.Flow, error) {
	d, err := envOf(ctx)
	if err != nil {
		return procedure.NoMoreState, err
	}
	r := ctxReader{ctx}
	full := tp.full()
	switch state {
	case ttPreOperation:
		if _, err := requireTable(r, full, tt.from); err != nil {
			var r *refusal
			if errors.As(err, &r) {
				return procedure.NoMoreState, err // it names the table and what stands in the way
			}
			return procedure.NoMoreState, fmt.Errorf("%s table %s: %w", tt.verb, full, err)
		}
		m.SetNextState(ttMark)
		return procedure.HasMoreState, nil
	case ttMark:
		if err := markTable(ctx, full, tt.transient, tt.from); err != nil {
			return procedure.NoMoreState, err
		}
		m.SetNextState(ttRegions)
		return procedure.HasMoreState, nil
	case ttRegions:
		t, err := requireTable(r, full, tt.transient)
		if err != nil {
			return procedure.NoMoreState, err
		}
		// A wave whose regions need no child (a delete's, all closed)
		// is passed over in the same step.
		names := t.regionNames(full)
		for added := 0; ; {
			from, to, last := nextWave(d, *spawned, len(names))
			for _, rn := range names[from:to] {
				child, err := tt.child(r, tp, rn)
				if err != nil {
					return procedure.NoMoreState, err
				}
				if child != nil {
					ctx.AddChild(child)
					added++
				}
			}
			*spawned = to
			if last {
				m.SetNextState(ttFinish)
				return procedure.HasMoreState, nil
			}
			if added > 0 {
				return procedure.HasMoreState, nil
			}
		}
	case ttFinish:
		if tt.failPoint != "" {
			if err := failPoint(d, tt.failPoint); err != nil {
				return procedure.NoMoreState, err
			}
		}
		if err := tt.finish(ctx, r, full); err != nil {
			return procedure.NoMoreState, err
		}
		ctx.SetResult([]byte(fmt.Sprintf("table %s %sd", full, tt.verb)))
		return procedure.NoMoreState, nil
	}
	return procedure.NoMoreState, fmt.Errorf("%s table: unknown state %d", tt.verb, state)
}

func (tt *tableTransition) finish(ctx *procedure.Context, r reader, full string) error {
	if tt.final != "" {
		return markTable(ctx, full, tt.final, tt.transient)
	}
	t, ok, err := getTable(r, full)
	if err != nil || !ok {
		return err
	}
	for _, rn := range t.regionNames(full) {
		if err := ctx.Delete(RegionKey(rn)); err != nil {
			return err
		}
	}
	return ctx.Delete(TableKey(full))
}

// rollback undoes the mark: the only state with something to undo (the
// children undo their own regions).
func (tt *tableTransition) rollback(ctx *procedure.Context, tp tableProc, state int32) error {
	if state != ttMark {
		return nil
	}
	full := tp.full()
	t, ok, err := getTable(ctxReader{ctx}, full)
	if err != nil || !ok || t.State != tt.transient {
		return err
	}
	return setTableState(ctx, full, t, tt.from)
}

// DeleteTable deletes a DISABLED table: PRE_OPERATION (it is disabled) →
// MARK_DELETING → UNASSIGN (closes any region still open, which a disabled
// table should not have) → DELETE_LAYOUT (region and table records). It
// can be aborted only before MARK_DELETING's effect is built upon.
type DeleteTable struct {
	procedure.StateMachine
	tableProc
	// Spawned counts the regions whose children were spawned.
	Spawned int `json:"spawned,omitempty"`
}

// NewDeleteTable validates the arguments and returns the procedure.
func NewDeleteTable(ns, name string) (*DeleteTable, error) {
	tp, err := newTableProc(ns, name)
	if err != nil {
		return nil, err
	}
	return &DeleteTable{tableProc: tp}, nil
}

// InitialState implements procedure.StateSteps.
func (p *DeleteTable) InitialState() int32 { return ttPreOperation }

// IsRollbackSupported implements procedure.RollbackSupport.
func (p *DeleteTable) IsRollbackSupported(s int32) bool { return s <= ttMark }

// ExecuteState implements procedure.StateSteps.
func (p *DeleteTable) ExecuteState(ctx *procedure.Context, state int32) (procedure.Flow, error) {
	return deleting.execute(ctx, &p.StateMachine, p.tableProc, &p.Spawned, state)
}

// RollbackState implements procedure.StateSteps: back to DISABLED.
func (p *DeleteTable) RollbackState(ctx *procedure.Context, state int32) error {
	return deleting.rollback(ctx, p.tableProc, state)
}

// EnableTable opens every region of a DISABLED table: PRE_OPERATION →
// MARK_ENABLING → ASSIGN_REGIONS (bounded children) → MARK_ENABLED. A
// failure rolls back to DISABLED with every region closed again.
type EnableTable struct {
	procedure.StateMachine
	tableProc
	// Spawned counts the regions whose children were spawned.
	Spawned int `json:"spawned,omitempty"`
}

// NewEnableTable validates the arguments and returns the procedure.
func NewEnableTable(ns, name string) (*EnableTable, error) {
	tp, err := newTableProc(ns, name)
	if err != nil {
		return nil, err
	}
	return &EnableTable{tableProc: tp}, nil
}

// InitialState implements procedure.StateSteps.
func (p *EnableTable) InitialState() int32 { return ttPreOperation }

// ExecuteState implements procedure.StateSteps.
func (p *EnableTable) ExecuteState(ctx *procedure.Context, state int32) (procedure.Flow, error) {
	return enabling.execute(ctx, &p.StateMachine, p.tableProc, &p.Spawned, state)
}

// RollbackState implements procedure.StateSteps: back to DISABLED (the
// children closed their regions already).
func (p *EnableTable) RollbackState(ctx *procedure.Context, state int32) error {
	return enabling.rollback(ctx, p.tableProc, state)
}

// DisableTable closes every region of an ENABLED table: PRE_OPERATION →
// MARK_DISABLING → UNASSIGN_REGIONS (children that never give up) →
// MARK_DISABLED. Abortable only until MARK_DISABLING is undone-able (as
// HBase: once regions close, the disable finishes).
type DisableTable struct {
	procedure.StateMachine
	tableProc
	// Spawned counts the regions whose children were spawned.
	Spawned int `json:"spawned,omitempty"`
}

// NewDisableTable validates the arguments and returns the procedure.
func NewDisableTable(ns, name string) (*DisableTable, error) {
	tp, err := newTableProc(ns, name)
	if err != nil {
		return nil, err
	}
	return &DisableTable{tableProc: tp}, nil
}

// InitialState implements procedure.StateSteps.
func (p *DisableTable) InitialState() int32 { return ttPreOperation }

// IsRollbackSupported implements procedure.RollbackSupport.
func (p *DisableTable) IsRollbackSupported(s int32) bool { return s <= ttMark }

// ExecuteState implements procedure.StateSteps.
func (p *DisableTable) ExecuteState(ctx *procedure.Context, state int32) (procedure.Flow, error) {
	return disabling.execute(ctx, &p.StateMachine, p.tableProc, &p.Spawned, state)
}

// RollbackState implements procedure.StateSteps: back to ENABLED, if
// nothing was closed yet.
func (p *DisableTable) RollbackState(ctx *procedure.Context, state int32) error {
	return disabling.rollback(ctx, p.tableProc, state)
}

// Progress implements procedure.Progressor: its region assignments (one
// child each) ended, of Regions.
func (p *CreateTable) Progress() procedure.Progress {
	return procedure.Progress{Total: int64(p.Regions), Unit: "regions open", FromChildren: true}
}

// Progress implements procedure.Progressor: regions opened so far (the
// table's count is not part of its state).
func (p *EnableTable) Progress() procedure.Progress {
	return procedure.Progress{Unit: "regions opened", FromChildren: true}
}

// Progress implements procedure.Progressor: regions closed so far.
func (p *DisableTable) Progress() procedure.Progress {
	return procedure.Progress{Unit: "regions closed", FromChildren: true}
}

// Progress implements procedure.Progressor: regions closed so far.
func (p *DeleteTable) Progress() procedure.Progress {
	return procedure.Progress{Unit: "regions closed", FromChildren: true}
}
