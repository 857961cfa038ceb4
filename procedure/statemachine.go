package procedure

import "fmt"

// Flow says whether a state machine has more states to run.
type Flow bool

const (
	// HasMoreState: run the state set by SetNextState next (or the same
	// state again, if none was set: a retry).
	HasMoreState Flow = true
	// NoMoreState: the machine is finished (after its children, if the
	// step added any).
	NoMoreState Flow = false
)

// StateSteps is implemented by state-machine procedures, which also embed
// StateMachine. States are small integers chosen by the type.
type StateSteps interface {
	// InitialState is the first state to run.
	InitialState() int32
	// ExecuteState runs one state and picks the next with SetNextState.
	// The same idempotency rules as Stepper.Execute apply.
	ExecuteState(ctx *Context, state int32) (Flow, error)
	// RollbackState undoes an executed state. It is called once for every
	// state in the persisted history, newest first; a state that was retried
	// several times in a row is rolled back once. It is also called for a
	// state that may not have run, or run only in part: the state a
	// procedure resumed after a crash was next to run, when it is aborted
	// before running it again (its effects outside the store may be there
	// from the executor that died). So it must undo whatever of the state
	// is there, and nothing if nothing is.
	RollbackState(ctx *Context, state int32) error
}

// RollbackSupport is optionally implemented by state machines: a state for
// which it returns false is never interrupted by an abort (the abort waits
// for a state that supports rollback). Without it every state supports it.
type RollbackSupport interface {
	IsRollbackSupported(state int32) bool
}

// DefaultMaxStateRepeats bounds how often one state may in a row return
// HasMoreState without a new state and without waiting for anything (no
// suspension, no children, no yield) before the machine is failed with
// ErrStateLoop: such a state spins on its worker and would never end. A
// state that waits, with a suspension (on an event, a timer or both), for
// children, or by yielding, is making progress and is never failed by the
// limit, however many times it runs. See StateMachine.MaxRepeats.
const DefaultMaxStateRepeats = 10000

// StateMachine is embedded in state-machine procedures. The framework
// persists its fields itself (the embedding type persists only its own), so
// they are unexported and invisible to JSON.
type StateMachine struct {
	started bool
	eof     bool
	next    int32
	nextSet bool
	// history holds one state per rollback-stack entry of this procedure.
	history []int32
	// MaxRepeats overrides DefaultMaxStateRepeats when > 0. It is not
	// persisted: set it in the factory.
	MaxRepeats int `json:"-"`
}

type stateMachineProcedure interface {
	StateSteps
	machine() *StateMachine
}

func (m *StateMachine) machine() *StateMachine { return m }

func (m *StateMachine) isProcedure() {}

// SetNextState picks the state the next step runs.
func (m *StateMachine) SetNextState(s int32) {
	m.next = s
	m.nextSet = true
}

// CurrentState is the state that runs next (or is running).
func (m *StateMachine) CurrentState() int32 { return m.next }

// History is the executed states, oldest first (consecutive repeats once).
func (m *StateMachine) History() []int32 { return append([]int32(nil), m.history...) }

// runState runs one step of a state machine. pushed reports whether the
// step is a new rollback-stack entry (false for a repeat of the state on top
// of the stack, and for the final no-op after children).
func (x *Executor) runState(ctx *Context, p stateMachineProcedure, topIsSelf bool) (step Step, pushed bool, err error) {
	m := p.machine()
	if m.eof {
		return Done(), false, nil
	}
	if !m.started {
		m.started = true
		m.next = p.InitialState()
	}
	state := m.next
	repeat := topIsSelf && len(m.history) > 0 && m.history[len(m.history)-1] == state
	if ctx.abort && rollbackSupported(p, state) {
		if ctx.e.resumed && !repeat {
			// This executor resumed the procedure from the store: the
			// state next to run may have run, in whole or in part, on the
			// executor that died before storing its outcome. As in HBase,
			// where the next state is on the stack before it runs, it is
			// rolled back too.
			m.history = append(m.history, state)
			return Step{}, true, ErrAborted
		}
		return Step{}, false, ErrAborted
	}
	if repeat {
		limit := m.MaxRepeats
		if limit <= 0 {
			limit = DefaultMaxStateRepeats
		}
		if int(ctx.spins)+1 >= limit {
			return Step{}, false, fmt.Errorf("%w: state %d asked to run again %d times in a row without waiting for anything", ErrStateLoop, state, ctx.spins+1)
		}
	} else {
		m.history = append(m.history, state)
	}
	m.nextSet = false
	flow, err := p.ExecuteState(ctx, state)
	if err != nil {
		return Step{}, !repeat, err
	}
	if ctx.suspend != nil {
		if flow == NoMoreState {
			m.eof = true
		}
		return *ctx.suspend, !repeat, nil
	}
	if flow == NoMoreState {
		m.eof = true
		if len(ctx.children) > 0 {
			return ctx.spawnStep(), !repeat, nil
		}
		return Done(), !repeat, nil
	}
	if len(ctx.children) > 0 {
		return ctx.spawnStep(), !repeat, nil
	}
	if ctx.yield {
		return Yield(), !repeat, nil // the transition stands, as with More
	}
	return More(), !repeat, nil
}

// spawnStep is the Spawn of the children the step added, with the entries
// AddLockedChild reserved for them.
func (c *Context) spawnStep() Step {
	st := Spawn(c.children...)
	st.reserved = c.reserved
	return st
}

// rollbackState undoes the newest history entry.
func rollbackState(ctx *Context, p stateMachineProcedure) error {
	m := p.machine()
	if len(m.history) == 0 {
		return nil
	}
	s := m.history[len(m.history)-1]
	if err := p.RollbackState(ctx, s); err != nil {
		return err
	}
	m.history = m.history[:len(m.history)-1]
	return nil
}

func rollbackSupported(p stateMachineProcedure, s int32) bool {
	if rs, ok := p.(RollbackSupport); ok {
		return rs.IsRollbackSupported(s)
	}
	return true
}
