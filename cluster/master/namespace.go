package master

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
		return nsProc{}, fmt.Errorf("%w: the %q namespace is built in", errInvalid, DefaultNamespace)
	}
	return nsProc{Namespace: name}, nil
}

// States of the namespace procedures.
const (
	nsPreOperation int32 = 1
	nsWrite        int32 = 2
)

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
	r := ctxReader{ctx}
	switch state {
	case nsPreOperation:
		ok, err := namespaceExists(r, p.Namespace)
		if err != nil {
			return procedure.NoMoreState, err
		}
		if ok {
			return procedure.NoMoreState, refused(procedure.ErrAlreadyExists, "master: create namespace: %s exists", p.Namespace)
		}
		p.SetNextState(nsWrite)
		return procedure.HasMoreState, nil
	case nsWrite:
		ctx.SetResult([]byte("namespace " + p.Namespace + " created"))
		return procedure.NoMoreState, ctx.Put(NamespaceKey(p.Namespace), mustJSON(Namespace{Name: p.Namespace}))
	}
	return procedure.NoMoreState, fmt.Errorf("master: create namespace: unknown state %d", state)
}

// RollbackState implements procedure.StateSteps: the write is the last
// step, so a failure never follows it; nothing to undo.
func (p *CreateNamespace) RollbackState(*procedure.Context, int32) error { return nil }

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
	r := ctxReader{ctx}
	switch state {
	case nsPreOperation:
		ok, err := namespaceExists(r, p.Namespace)
		if err != nil {
			return procedure.NoMoreState, err
		}
		if !ok {
			return procedure.NoMoreState, refused(procedure.ErrNotFound, "master: delete namespace: %s does not exist", p.Namespace)
		}
		tables, err := scanTables(r, p.Namespace)
		if err != nil {
			return procedure.NoMoreState, err
		}
		if len(tables) > 0 {
			return procedure.NoMoreState, refused(procedure.ErrFailedPrecondition, "master: delete namespace: %s is not empty (%d tables, e.g. %s)",
				p.Namespace, len(tables), sortedKeys(tables)[0])
		}
		p.SetNextState(nsWrite)
		return procedure.HasMoreState, nil
	case nsWrite:
		ctx.SetResult([]byte("namespace " + p.Namespace + " deleted"))
		return procedure.NoMoreState, ctx.Delete(NamespaceKey(p.Namespace))
	}
	return procedure.NoMoreState, fmt.Errorf("master: delete namespace: unknown state %d", state)
}

// RollbackState implements procedure.StateSteps: nothing to undo.
func (p *DeleteNamespace) RollbackState(*procedure.Context, int32) error { return nil }
