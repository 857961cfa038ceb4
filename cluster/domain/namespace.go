package domain

import (
	"fmt"

	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/scheduler"
)

// nsProc is what the namespace procedures share: the namespace's exclusive
// lock, which keeps out every table procedure in it (they hold it shared).
type nsProc struct {
	Namespace string `json:"namespace"`
}

// Locks implements procedure.Locker.
func (n *nsProc) Locks() []scheduler.Lock {
	return scheduler.NamespaceLocks(n.Namespace, scheduler.Exclusive)
}

// HoldLock implements procedure.Locker.
func (n *nsProc) HoldLock() bool { return true }

// QueueKey implements procedure.Queued.
func (n *nsProc) QueueKey() scheduler.QueueKey {
	return scheduler.QueueKey{Kind: scheduler.KindTable, Name: "ns/" + n.Namespace}
}

func newNSProc(name string) (nsProc, error) {
	if err := validName("namespace", name); err != nil {
		return nsProc{}, err
	}
	if name == DefaultNamespace {
		return nsProc{}, procedure.Errorf(errInvalid, "the %q namespace is built in", DefaultNamespace)
	}
	return nsProc{Namespace: name}, nil
}

// RollbackState implements procedure.StateSteps for both namespace
// procedures: their write is their last step, so a failure never follows
// it; nothing to undo.
func (n *nsProc) RollbackState(*procedure.Context, int32) error { return nil }

// States of the namespace procedures.
const (
	nsPreOperation int32 = 1
	nsWrite        int32 = 2
)

// nsChange is what tells CreateNamespace and DeleteNamespace apart: the
// check of PRE_OPERATION and the write of WRITE.
type nsChange struct {
	verb  string // "create" or "delete", for messages
	check func(r reader, ns string) error
	write func(ctx *procedure.Context, ns string) error
}

var (
	nsCreate = &nsChange{verb: "create",
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
	nsDelete = &nsChange{verb: "delete",
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
)

func (c *nsChange) execute(ctx *procedure.Context, m *procedure.StateMachine, ns string, state int32) (procedure.Flow, error) {
	switch state {
	case nsPreOperation:
		if err := c.check(ctxReader{ctx}, ns); err != nil {
			return procedure.NoMoreState, err
		}
		m.SetNextState(nsWrite)
		return procedure.HasMoreState, nil
	case nsWrite:
		ctx.SetResult([]byte("namespace " + ns + " " + c.verb + "d"))
		return procedure.NoMoreState, c.write(ctx, ns)
	}
	return procedure.NoMoreState, fmt.Errorf("%s namespace: unknown state %d", c.verb, state)
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
