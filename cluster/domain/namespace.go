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

// ListNamespaces lists the namespaces in the local replicated state.
func (d *Domain) ListNamespaces() ([]string, error) {
	r, err := d.fsmReader()
	if err != nil {
		return nil, err
	}
	return scanNamespaces(r)
}

// NamespaceExists reports whether namespace name exists in the local replicated state.
func (d *Domain) NamespaceExists(name string) (bool, error) {
	r, err := d.fsmReader()
	if err != nil {
		return false, err
	}
	return namespaceExists(r, name)
}
