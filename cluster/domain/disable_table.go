package domain

import (
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TypeDisableTable names DisableTable in the procedure registry.
const TypeDisableTable = "DisableTable"

func init() {
	registerType(TypeDisableTable, func() procedure.Procedure { return &DisableTable{} })
	// The admin call builds it from its request on any master.
	registerBuilder(adminpb.Admin_DisableTable_FullMethodName, func(_ *Domain, req *adminpb.TableRequest) (procedure.Procedure, error) {
		return NewDisableTable(req.GetNamespace(), req.GetName())
	})
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

// disabling is DisableTable's transition: ENABLED → DISABLING → DISABLED.
var disabling = &tableTransition{verb: "disable", from: TableEnabled, transient: TableDisabling, final: TableDisabled,
	child: func(_ reader, tp tableProc, rn string) (procedure.Procedure, error) {
		return &TransitRegionState{Region: rn, Namespace: tp.Namespace, Table: tp.Name, Kind: KindUnassign}, nil
	}}

// Progress implements procedure.Progressor: regions closed so far.
func (p *DisableTable) Progress() procedure.Progress {
	return procedure.Progress{Unit: "regions closed", FromChildren: true}
}
