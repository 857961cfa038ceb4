package domain

import (
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TypeDeleteNamespace names DeleteNamespace in the procedure registry.
const TypeDeleteNamespace = "DeleteNamespace"

func init() {
	registerType(TypeDeleteNamespace, func() procedure.Procedure { return &DeleteNamespace{} })
	// The admin call builds it from its request on any master.
	registerBuilder(adminpb.Admin_DeleteNamespace_FullMethodName, func(_ *Domain, req *adminpb.NamespaceRequest) (procedure.Procedure, error) {
		return NewDeleteNamespace(req.GetName())
	})
}

// DeleteNamespace deletes an empty namespace: PRE_OPERATION (exists, holds
// no table) → WRITE (delete). Its exclusive lock keeps any create table in
// it out meanwhile.
type DeleteNamespace struct {
	procedure.StateMachine
	nsProc
}

// NewDeleteNamespace validates the name and returns the procedure.
func NewDeleteNamespace(name string) (*DeleteNamespace, error) {
	np, err := newNSProc(name)
	if err != nil {
		return nil, err
	}
	return &DeleteNamespace{nsProc: np}, nil
}

// InitialState implements procedure.StateSteps.
func (p *DeleteNamespace) InitialState() int32 { return nsPreOperation }

// ExecuteState implements procedure.StateSteps.
func (p *DeleteNamespace) ExecuteState(ctx *procedure.Context, state int32) (procedure.Flow, error) {
	return nsDelete.execute(ctx, &p.StateMachine, p.Namespace, state)
}

// nsDelete is DeleteNamespace's check and write.
var nsDelete = &nsChange{verb: "delete",
	check: func(r reader, ns string) error {
		ok, err := namespaceExists(r, ns)
		if err != nil {
			return err
		}
		if !ok {
			return refused(procedure.ErrNotFound, "namespace %s does not exist", ns)
		}
		tables, err := scanTables(r, ns)
		if err != nil {
			return err
		}
		if len(tables) > 0 {
			return refused(procedure.ErrFailedPrecondition, "namespace %s is not empty (%d tables, e.g. %s)",
				ns, len(tables), sortedKeys(tables)[0])
		}
		return nil
	},
	write: func(ctx *procedure.Context, ns string) error {
		return ctx.Delete(NamespaceKey(ns))
	}}
