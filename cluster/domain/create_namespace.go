package domain

import (
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TypeCreateNamespace names CreateNamespace in the procedure registry.
const TypeCreateNamespace = "CreateNamespace"

func init() {
	registerType(TypeCreateNamespace, func() procedure.Procedure { return &CreateNamespace{} })
	// The admin call builds it from its request on any master.
	registerBuilder(adminpb.Admin_CreateNamespace_FullMethodName, func(_ *Domain, req *adminpb.NamespaceRequest) (procedure.Procedure, error) {
		return NewCreateNamespace(req.GetName())
	})
}

// CreateNamespace creates a namespace: PRE_OPERATION (absent) → WRITE.
type CreateNamespace struct {
	procedure.StateMachine
	nsProc
}

// NewCreateNamespace validates the name and returns the procedure.
func NewCreateNamespace(name string) (*CreateNamespace, error) {
	np, err := newNSProc(name)
	if err != nil {
		return nil, err
	}
	return &CreateNamespace{nsProc: np}, nil
}

// InitialState implements procedure.StateSteps.
func (p *CreateNamespace) InitialState() int32 { return nsPreOperation }

// ExecuteState implements procedure.StateSteps.
func (p *CreateNamespace) ExecuteState(ctx *procedure.Context, state int32) (procedure.Flow, error) {
	return nsCreate.execute(ctx, &p.StateMachine, p.Namespace, state)
}

// nsCreate is CreateNamespace's check and write.
var nsCreate = &nsChange{verb: "create",
	check: func(r reader, ns string) error {
		ok, err := namespaceExists(r, ns)
		if err != nil {
			return err
		}
		if ok {
			return refused(procedure.ErrAlreadyExists, "namespace %s exists", ns)
		}
		return nil
	},
	write: func(ctx *procedure.Context, ns string) error {
		return ctx.Put(NamespaceKey(ns), mustJSON(Namespace{Name: ns}))
	}}
