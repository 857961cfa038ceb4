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

// nextWave is the range [from, to) of the next wave, of at most size, of
// n regions, of which done were spawned already, and whether it is the
// last one. The size is what the region budget granted (regionBudget), at
// most Config.RegionWave.
func nextWave(done, size, n int) (from, to int, last bool) {
	to = min(done+size, n)
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
		names := t.regionNames(full)
		if *spawned >= len(names) {
			m.SetNextState(ttFinish)
			return procedure.HasMoreState, nil
		}
		grant, svc, ok, flow, err := takeWave(ctx, min(d.cfg.RegionWave, len(names)-*spawned))
		if !ok {
			return flow, err
		}
		// A wave whose regions need no child (a delete's, all closed)
		// is passed over in the same step, on the same grant; what the
		// wave leaves of it goes back at once.
		added := 0
		defer func() { svc.wakeAll(svc.budget.giveBack(ctx.ID(), grant-added)) }()
		for {
			from, to, last := nextWave(*spawned, grant, len(names)) // a wave passed over used none of it
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
