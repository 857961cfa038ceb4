package domain

import (
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TypeEnableTable names EnableTable in the procedure registry.
const TypeEnableTable = "EnableTable"

func init() {
	registerType(TypeEnableTable, func() procedure.Procedure { return &EnableTable{} })
	// The admin call builds it from its request on any master.
	registerBuilder(adminpb.Admin_EnableTable_FullMethodName, func(_ *Domain, req *adminpb.TableRequest) (procedure.Procedure, error) {
		return NewEnableTable(req.GetNamespace(), req.GetName())
	})
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

// enabling is EnableTable's transition: DISABLED → ENABLING → ENABLED.
var enabling = &tableTransition{verb: "enable", from: TableDisabled, transient: TableEnabling, final: TableEnabled,
	failPoint: "enable.enable",
	child: func(_ reader, tp tableProc, rn string) (procedure.Procedure, error) {
		return &TransitRegionState{Region: rn, Namespace: tp.Namespace, Table: tp.Name, Kind: KindAssign, Bounded: true, UndoState: RegionClosed}, nil
	}}

// Progress implements procedure.Progressor: regions opened so far (the
// table's count is not part of its state).
func (p *EnableTable) Progress() procedure.Progress {
	return procedure.Progress{Unit: "regions opened", FromChildren: true}
}
