package domain

import (
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TypeDeleteTable names DeleteTable in the procedure registry.
const TypeDeleteTable = "DeleteTable"

func init() {
	registerType(TypeDeleteTable, func() procedure.Procedure { return &DeleteTable{} })
	// The admin call builds it from its request on any master.
	registerBuilder(adminpb.Admin_DeleteTable_FullMethodName, func(_ *Domain, req *adminpb.TableRequest) (procedure.Procedure, error) {
		return NewDeleteTable(req.GetNamespace(), req.GetName())
	})
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

// deleting is DeleteTable's transition: DISABLED → DELETING → gone.
var deleting = &tableTransition{verb: "delete", from: TableDisabled, transient: TableDeleting,
	child: func(r reader, tp tableProc, rn string) (procedure.Procedure, error) {
		// A disabled table should have no region open; close any that is.
		rg, ok, err := getRegion(r, rn)
		if err != nil || !ok || !regionBusy(rg) {
			return nil, err
		}
		return &TransitRegionState{Region: rn, Namespace: tp.Namespace, Table: tp.Name, Kind: KindUnassign}, nil
	}}

// Progress implements procedure.Progressor: regions closed so far.
func (p *DeleteTable) Progress() procedure.Progress {
	return procedure.Progress{Unit: "regions closed", FromChildren: true}
}
