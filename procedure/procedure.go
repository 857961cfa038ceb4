package procedure

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/locked"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// State is the framework's view of a procedure.
type State uint8

// Framework states, as in Pv2.
const (
	// Initializing: created, not yet persisted.
	Initializing State = iota
	// Runnable: queued or running a step.
	Runnable
	// Waiting: suspended on its children or on an event.
	Waiting
	// WaitingTimeout: suspended until a timer fires (or an event, if it also
	// waits on one).
	WaitingTimeout
	// RolledBack: failed and every executed step was rolled back. Terminal.
	RolledBack
	// Success: finished. Terminal.
	Success
	// Failed: a step failed; rollback of the root follows.
	Failed
)

var stateNames = [...]string{"INITIALIZING", "RUNNABLE", "WAITING", "WAITING_TIMEOUT", "ROLLEDBACK", "SUCCESS", "FAILED"}

// String is the state's name, as the API and the CLI print it (RUNNABLE).
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("STATE(%d)", s)
}

// Terminal reports whether a procedure in state s will never run again.
func (s State) Terminal() bool { return s == Success || s == RolledBack }

// ParseState turns a state's name back into a State.
func ParseState(name string) (State, error) {
	for i, n := range stateNames {
		if n == name {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("procedure: unknown state %q (want one of %v)", name, stateNames)
}

// Procedure is implemented by every procedure type, and only through
// embedding: a Stepper embeds Base, a state machine embeds StateMachine (and
// implements StateSteps). The unexported method lets the compiler refuse,
// at Submit, Spawn and Register, a value that was never meant to be a
// procedure; Register still checks that the type runs one way or the other.
//
// The type's own state is persisted after every step: by StateMarshaler and
// StateUnmarshaler if it implements them, otherwise with encoding/json,
// which serialises exported fields.
//
// Threading. Once submitted (or loaded, or spawned), a procedure belongs to
// the executor; its submitter must not touch it again. The executor never
// calls two of its methods at once: a procedure is claimed by one goroutine
// at a time, and successive calls see each other's writes, so a procedure
// needs no locking of its own. The calls do come from different goroutines:
// Execute, Rollback, ExecuteState, RollbackState, OnTimeout and CanAbort on
// a worker; MarshalState on a worker or, while no worker holds the
// procedure, on the goroutine of an Executor call that persists it (Abort,
// Pause, Resume, Ack, Bypass). QueueKey, Locks, HoldLock and RetryUntilDone
// are asked when the procedure is submitted, spawned or loaded, and
// must not call back into the Executor. A step may block (honouring ctx),
// but it holds its worker meanwhile: a step that waits for something
// outside should Suspend instead. A Context is valid only during the call it
// was passed to.
type Procedure interface {
	isProcedure()
}

// Base is embedded by procedures that implement Stepper: it makes them a
// Procedure. It holds nothing and persists nothing.
type Base struct{}

func (Base) isProcedure() {}

// Stepper is a procedure that runs itself one step at a time.
type Stepper interface {
	// Execute runs one step. It must be idempotent: after a crash the step
	// whose outcome was not yet persisted runs again. It returns the step's
	// outcome; a non-nil error fails the procedure and starts the rollback
	// of its whole root.
	Execute(ctx *Context) (Step, error)
	// Rollback undoes one executed step; it is called once for each step
	// that was executed, most recent first, including a step that failed.
	// It must be idempotent too. An error is retried with backoff: rollback
	// has to succeed eventually. A step that ran on an executor that died
	// before storing its outcome, and was not run again before an abort,
	// is not rolled back: keep its effects in Context.Put, or write a state
	// machine (StateSteps.RollbackState is called for such a state).
	Rollback(ctx *Context) error
}

// StateMarshaler lets a type persist its own state instead of using JSON.
type StateMarshaler interface {
	MarshalState() ([]byte, error)
}

// StateUnmarshaler decodes state written by version (1..current) of the type.
type StateUnmarshaler interface {
	UnmarshalState(version int, data []byte) error
}

// StateDowngrader is implemented by a type registered with
// TypeOptions.Since: a version of its state that a format level
// introduced is written only once the cluster version allows that level,
// and until then DowngradeState serialises the state as version to (< the
// registered version) wrote it, byte for byte what that version's binary
// would write for the same state, so that a member still running it can
// load the procedure. Context.StateVersion tells the type's steps which
// version is written: the state must then be one version to can hold
// (see "Versions" in the package doc).
type StateDowngrader interface {
	DowngradeState(to int) ([]byte, error)
}

// StateUpgrader is implemented by a procedure whose state is a plain
// struct (persisted with encoding/json) that changed shape between
// versions of its type (Registry.Register's version, which the type's
// author bumps). When a procedure stored by an older version loads,
// UpgradeState is called instead of decoding the state as the current
// version: decode fills old, a value of the shape that version wrote (a
// struct of the author's keeping), and UpgradeState sets the receiver's
// fields from it. State written by the current version is decoded as
// usual; a type implementing StateUnmarshaler is never asked. Example:
//
//	// v1 stored Host string; v2 stores Hosts []string.
//	func (p *Provision) UpgradeState(from int, decode func(old any) error) error {
//		var v1 struct{ Host string }
//		if err := decode(&v1); err != nil {
//			return err
//		}
//		p.Hosts = []string{v1.Host}
//		return nil
//	}
type StateUpgrader interface {
	UpgradeState(fromVersion int, decode func(old any) error) error
}

// Locker is a procedure that needs entity locks to run.
type Locker interface {
	// Locks lists the locks every step needs. They are taken, all or
	// nothing, before a step runs.
	Locks() []scheduler.Lock
	// HoldLock reports whether the locks are kept from the first step until
	// the procedure finishes (true), or taken and released around each step.
	HoldLock() bool
}

// Queued is a procedure that says which scheduler queue it waits in. Others
// wait in a user-priority table queue named after their type, so types share workers round-robin.
type Queued interface {
	QueueKey() scheduler.QueueKey
}

// TimeoutHandler is a procedure that decides what a suspension's timeout
// means. Without it, a timeout simply makes the procedure runnable again.
type TimeoutHandler interface {
	// OnTimeout is called when a suspension's timer fires. Returning nil
	// makes the procedure runnable; an error fails it (and rolls back its
	// root).
	OnTimeout(ctx *Context) error
}

// Aborter is a procedure that decides whether it may be aborted now.
// Without it, an abort fails the procedure at its next step boundary.
// CanAbort is asked before a step, also before a procedure waiting for its
// locks has them (failing it then needs none).
type Aborter interface {
	CanAbort(ctx *Context) bool
}

// RetriesUntilDone is implemented by a procedure that has no meaningful
// rollback and must be driven to completion instead, like HBase's
// ServerCrashProcedure. It is asked once, when the procedure is created or
// loaded. When RetryUntilDone reports true:
//
//   - A failing step (an error, a panic, an OnTimeout error, children that
//     cannot be spawned) does not fail the procedure. The error is logged
//     (and shown as Info.Error until a step succeeds), its domain changes
//     are dropped, and the step runs again after a backoff that starts at
//     Config.RollbackBackoff and doubles up to RollbackBackoffMax. A state
//     machine runs the state that failed again: the framework takes back
//     what the failed run did to the machine (a SetNextState, its history
//     entry). The procedure's own fields stay as the failed run left them,
//     as in HBase; Context.Attempt counts the runs.
//   - Abort is refused with ErrNotAllowed, an abort of an ancestor is not
//     passed on to it or below it, and SubmitOptions.Timeout is refused.
//   - A descendant that fails does not roll the tree back: only the
//     subtree of the procedure's child it belongs to is rolled back (newest
//     step first, as usual), and that child ends ROLLEDBACK, keeping the
//     error. Meanwhile the rest of the tree waits; then it goes on, and the
//     procedure runs its next step once all its children are finished, as
//     after any child. It learns the outcome from the domain, or from
//     Executor.Get on Context.Children, and may spawn again.
//
// Such a procedure therefore never ends ROLLEDBACK when it is a root, or a
// child of another such procedure. Nested under an ordinary procedure whose
// tree rolls back, it is rolled back like any member.
type RetriesUntilDone interface {
	RetryUntilDone() bool
}

// ForgetsChildren is implemented by a procedure whose children need not
// be kept once they succeed, like HBase's ServerCrashProcedure, whose
// assignments number as many as the crashed server's regions, or a table
// create's, one per region. ForgetChildrenOnSuccess is asked once, when
// the procedure is created or loaded. When it reports true and either
//
//   - the procedure and every ancestor of it is RetriesUntilDone (so
//     nothing can ever roll a finished child back), or
//   - the procedure's own rollback undoes what its children did
//     (RollbackCoversChildren),
//
// a child that succeeds, and spawned no children of its own, is
// forgotten: its last write (its state's effect, Context.Put and Delete)
// also deletes its record, in one atomic write, and the executor lets go
// of it.
//
// Such a child is then unknown to Executor.Get and the API (NotFound), as
// a finished tree's children are once the tree ends. Context.Children and
// Info.Children list its id until the executor restarts or another takes
// over: they are rebuilt from the stored records, which no longer hold it. The tree's stored state and every snapshot of it no
// longer grow with the children it has finished. A parent that wants its
// children's outcomes from Executor.Get must not forget them; it sees a
// child that failed and was rolled back either way (only successes are
// forgotten). Stores that cannot delete with mutations in one write
// (store.DeleteMutator) keep the records until the root ends, as without
// this interface.
type ForgetsChildren interface {
	ForgetChildrenOnSuccess() bool
}

// RollbackCoversChildren is implemented by a procedure that can roll back
// and whose own rollback undoes whatever its children did, so that it can
// forget them as they succeed (ForgetsChildren) without a rollback of its
// tree leaving their effects behind: a table create, whose rollback of
// its layout closes every region of the table still open and deletes
// every region's record, whichever child opened it. When
// RollbackCoversChildren reports true (asked once, when the procedure is
// created or loaded) the procedure promises:
//
//   - Its rollback covers the effects of every child it forgot, whatever
//     state the child ended in and whenever it was forgotten: the
//     rollback of its steps (all of them run, newest first, as for any
//     member of a tree that rolls back) leaves nothing of them behind.
//   - The forgotten children's own rollback does not run: they are gone
//     from the rollback stack, the store and the executor. Children still
//     kept (running, or failed) are rolled back as usual, before the
//     parent's steps, which are older; the parent's rollback must also
//     take whatever those left as their undo.
//   - Its rollback covers them also after a restart or a failover, when
//     nothing is known of the forgotten children but what they wrote to
//     the domain: it must find what to undo there, not in its own state
//     or in Context.Children.
//
// A Bypass of the procedure skips its rollback steps, and with them the
// undo of its forgotten children. A procedure that does not implement it
// (or reports false) forgets its children only under the first rule
// above.
type RollbackCoversChildren interface {
	RollbackCoversChildren() bool
}

// Step is the outcome of one successful Execute.
type Step struct {
	kind        stepKind
	children    []Procedure
	reserved    []*entry // AddLockedChild's entries, by position in children
	event       *scheduler.Event
	timeout     time.Duration
	skipPersist bool
	because     string
	onChildren  bool
}

type stepKind uint8

const (
	stepDone stepKind = iota
	stepMore
	stepChildren
	stepSuspend
	stepYield
)

// Done finishes the procedure with success.
func Done() Step { return Step{kind: stepDone} }

// More persists the procedure and runs its next step on the same worker at
// once, without a trip through the queue.
func More() Step { return Step{kind: stepMore} }

// Spawn persists the procedure and children in one write; the children run
// first (they are queued at the front), and the procedure runs its next step
// once every child has finished. Spawn with no children is More.
func Spawn(children ...Procedure) Step {
	if len(children) == 0 {
		return More()
	}
	return Step{kind: stepChildren, children: children}
}

// Yield is More, except that the worker lets go: the step's outcome stands
// and is persisted (with its domain changes), and the procedure goes to the
// back of its queue, so the next step runs once the procedures queued
// before it had their turn (HBase's yield after an execution step).
func Yield() Step { return Step{kind: stepYield} }

// SuspendOption configures Suspend.
type SuspendOption func(*Step)

// OnEvent wakes the procedure when ev is woken (see Executor.Wake).
func OnEvent(ev *scheduler.Event) SuspendOption { return func(s *Step) { s.event = ev } }

// Timeout wakes the procedure after d plus up to 10% jitter, so that many
// procedures suspended together do not wake together.
func Timeout(d time.Duration) SuspendOption { return func(s *Step) { s.timeout = d } }

// SkipPersistence suspends without writing the procedure: for retry loops
// whose state did not change, where a write per attempt would be waste.
func SkipPersistence() SuspendOption { return func(s *Step) { s.skipPersist = true } }

// Because says, in a few words, why the procedure suspends ("no live region
// server; waiting"): Why reports it as Note until the procedure runs again,
// so that whoever waits for it can be told what it waits on rather than
// only "waiting for timer".
func Because(why string) SuspendOption { return func(s *Step) { s.because = why } }

// OnChildren wakes the procedure once its children have finished (at
// most as many unfinished as the step allowed with
// Context.WakeAtChildren), at once if they have already. It is how a
// step that ran before all its children finished waits for the rest.
func OnChildren() SuspendOption { return func(s *Step) { s.onChildren = true } }

// Suspend parks the procedure: its worker leaves, and it runs its next step
// once woken by an event or a timeout. With neither, only an explicit wake
// (Abort, Bypass, a restart) resumes it.
func Suspend(opts ...SuspendOption) Step {
	s := Step{kind: stepSuspend}
	for _, o := range opts {
		o(&s)
	}
	return s
}

// Context is what a step sees. It is valid only during the call.
type Context struct {
	context.Context
	// Env is Config.Env: the user's environment shared by all procedures.
	Env any
	// Logger carries the procedure's id and type.
	Logger  hclog.Logger
	stepLog stepLogger

	x        *Executor
	e        *entry
	children []Procedure
	// reserved are the entries AddLockedChild made, by position in
	// children (nil for AddChild's).
	reserved []*entry
	// afterSpawn are AfterSpawn's calls, not run yet.
	afterSpawn []func(SpawnOutcome)
	suspend    *Step
	yield      bool
	// childWake is what the step asked with WakeAtChildren.
	childWake int
	abort     bool  // snapshot of the abort flag at the step boundary
	repeats   int32 // snapshot of entry.repeats
	spins     int32 // snapshot of entry.spins
	muts      []store.Mutation
	// mutAt indexes muts by key (the newest of each), once a step has
	// made enough of them that Get's look-back would cost: a step that
	// writes a region record per child for thousands of children reads
	// each of them first.
	mutAt map[string]int
}

// mutIndexFrom is the number of pending mutations from which Get looks
// them up in an index instead of walking them.
const mutIndexFrom = 16

func (c *Context) addMut(m store.Mutation) {
	c.muts = append(c.muts, m)
	if c.mutAt != nil {
		c.mutAt[m.Key] = len(c.muts) - 1
	}
}

// Executor is the executor running this step. An environment that keeps
// per-executor services (a leader's, for one term) uses it to tell a step
// of the current executor from a late one of a stopped executor.
func (c *Context) Executor() *Executor { return c.x }

// Put sets a key of the domain state. The change commits atomically with
// the outcome of this step (or of this rollback step): if the step fails,
// or the process dies before its outcome is persisted, the change never
// happened. It needs a store that keeps domain state
// (store.MutationStore); others return ErrNoDomain.
func (c *Context) Put(key string, value []byte) error {
	if _, ok := c.x.store.(store.MutationStore); !ok {
		return ErrNoDomain
	}
	if key == "" {
		return fmt.Errorf("%w: empty domain key", ErrInvalid)
	}
	c.addMut(store.Mutation{Key: key, Value: append([]byte(nil), value...)})
	return nil
}

// Delete removes a key of the domain state, committed like Put.
func (c *Context) Delete(key string) error {
	if _, ok := c.x.store.(store.MutationStore); !ok {
		return ErrNoDomain
	}
	c.addMut(store.Mutation{Key: key, Delete: true})
	return nil
}

// Get reads a key of the domain state as this step sees it: the committed
// value, overlaid with this step's own Put and Delete.
func (c *Context) Get(key string) ([]byte, bool, error) {
	ds, ok := c.x.store.(store.MutationStore)
	if !ok {
		return nil, false, ErrNoDomain
	}
	if c.mutAt == nil && len(c.muts) >= mutIndexFrom {
		c.mutAt = make(map[string]int, 2*len(c.muts))
		for i, m := range c.muts {
			c.mutAt[m.Key] = i
		}
	}
	if c.mutAt != nil {
		if i, ok := c.mutAt[key]; ok {
			if m := c.muts[i]; !m.Delete {
				return m.Value, true, nil
			}
			return nil, false, nil
		}
	} else {
		for i := len(c.muts) - 1; i >= 0; i-- {
			if m := c.muts[i]; m.Key == key {
				if m.Delete {
					return nil, false, nil
				}
				return m.Value, true, nil
			}
		}
	}
	v, found := ds.Value(key)
	return v, found, nil
}

// Scan calls fn for every committed domain key with the prefix, in key
// order, until fn returns false. It does not see this step's own pending
// Put and Delete (use Get for those).
func (c *Context) Scan(prefix string, fn func(key string, value []byte) bool) error {
	ds, ok := c.x.store.(store.MutationStore)
	if !ok {
		return ErrNoDomain
	}
	ds.ScanValues(prefix, fn)
	return nil
}

// Suspend makes a state machine suspend once ExecuteState returns (HBase's
// ProcedureSuspendedException). Steppers return Suspend(...) instead.
func (c *Context) Suspend(opts ...SuspendOption) {
	s := Suspend(opts...)
	c.suspend = &s
}

// Yield makes a state machine yield once ExecuteState returns HasMoreState
// (see the Yield step): the step's transition stands and is persisted, and
// the state it picked with SetNextState (or, without one, the same state
// again) runs later, after the procedures queued before it. A suspension or
// children take precedence; with NoMoreState it has no effect. Steppers
// return Yield() instead.
func (c *Context) Yield() { c.yield = true }

// ID is the running procedure's id.
func (c *Context) ID() uint64 { return c.e.id }

// ParentID is the parent's id, 0 for a root.
func (c *Context) ParentID() uint64 { return c.e.parent }

// RootID is the id of the procedure's root (its own id for a root).
func (c *Context) RootID() uint64 { return c.e.root }

// Now is the executor's clock.
func (c *Context) Now() time.Time { return c.x.clock.Now() }

// SetResult sets the result kept with the procedure once it finishes.
func (c *Context) SetResult(b []byte) {
	c.x.mu.Lock()
	c.e.result = append([]byte(nil), b...)
	c.x.mu.Unlock()
}

// Children lists the ids of the children this procedure has spawned so far.
func (c *Context) Children() []uint64 {
	return locked.Call(&c.x.mu, func() []uint64 { return append([]uint64(nil), c.e.children...) })
}

// AddChild queues a child to be spawned when the step returns; used by
// state machines (a Stepper may return Spawn instead).
func (c *Context) AddChild(p Procedure) {
	c.children = append(c.children, p)
	if c.reserved != nil {
		c.reserved = append(c.reserved, nil)
	}
}

// AddLockedChild is AddChild for a child whose locks (procedure.Locker)
// the step takes for it now, if they are free (it never waits for them),
// and returns the id the child will have. With locked true, the child
// holds its locks from now on, as a running procedure holds them: the
// step may act on what they protect on the child's behalf (write the
// domain state in the child's name, using id), and the spawn persists the
// child holding them in the same write as the step's domain changes, so a
// new leader finds both or neither. The child must hold its locks for its
// life (HoldLock). With locked false (a lock is taken, or queued for, or
// held by the parent for its step only), the child is added like
// AddChild's and takes its locks when it runs; the step must not act for
// it. If the step fails (an error, a failed write), the locks are let go
// and the id is never used; a step that returns without the spawn (a
// suspension, a yield, More, Done) after reserving fails the same way, its
// writes unsent, since they name a child that would never exist. A state machine's step only: a Stepper's Spawn ignores it.
func (c *Context) AddLockedChild(p Procedure) (id uint64, locked bool, err error) {
	k, err := c.x.reserveChild(c.e, p)
	if err != nil {
		return 0, false, err
	}
	if c.reserved == nil {
		c.reserved = make([]*entry, len(c.children), len(c.children)+1)
	}
	c.children = append(c.children, p)
	c.reserved = append(c.reserved, k)
	return k.id, k.locked, nil
}

// SuspendChild makes child id, which this step reserved with
// AddLockedChild and holds the locks of, start suspended rather than
// runnable: as its first step would leave it with Suspend(opts...) and
// SkipPersistence, waiting for OnEvent's event or Timeout's timer (one of
// them is required; OnChildren is refused). Once woken it runs its first
// step as it would have. Its record is written runnable, as a skipped
// persistence leaves it, so a restart or a new leader runs it at once.
//
// It is for a parent that acts for its children: it writes their domain
// records in the spawn's write (AddLockedChild), and can also make their
// first remote call once that write committed (AfterSpawn), instead of
// each child running a step that would only make the call and suspend
// on its answer. A crash or a create spawns a hundred thousand such
// children; a step each is a measurable share of the leader.
func (c *Context) SuspendChild(id uint64, opts ...SuspendOption) error {
	st := Suspend(opts...)
	if st.onChildren || st.event == nil && st.timeout <= 0 {
		return Errorf(ErrInvalid, "procedure: SuspendChild(%d): it needs an event or a timeout to wake on, and no OnChildren", id)
	}
	// From the newest: a step suspends the child it just reserved, and
	// reserves thousands.
	for i := len(c.reserved) - 1; i >= 0; i-- {
		if k := c.reserved[i]; k != nil && k.id == id {
			if !k.locked {
				return Errorf(ErrInvalid, "procedure: SuspendChild(%d): its locks were not free (it takes them when it runs)", id)
			}
			st.skipPersist = true
			k.startSuspended = &st
			return nil
		}
	}
	return Errorf(ErrInvalid, "procedure: SuspendChild(%d): not a child this step reserved with AddLockedChild", id)
}

// WithdrawChild takes back child id, which this step reserved with
// AddLockedChild: it is not spawned, the locks it took (if any) are let
// go at once, and its id is never used. It is for a step that reserved
// a child to learn whether its locks were free, and does something else
// if they were not (a crash's batch of regions, one of them held by
// another procedure, goes as a child per region instead). It must not
// be called for a child the step already acted for.
func (c *Context) WithdrawChild(id uint64) error {
	for i := len(c.reserved) - 1; i >= 0; i-- {
		if k := c.reserved[i]; k != nil && k.id == id {
			c.x.releaseReserved([]*entry{k})
			c.reserved = append(c.reserved[:i], c.reserved[i+1:]...)
			c.children = append(c.children[:i], c.children[i+1:]...)
			return nil
		}
	}
	return Errorf(ErrInvalid, "procedure: WithdrawChild(%d): not a child this step reserved with AddLockedChild", id)
}

// AfterSpawn runs fn once this step's spawn is written (Committed): after
// listeners heard of the spawn, and before any child is queued or
// suspended (SuspendChild), so no child runs (an abort's rollback
// included) before fn returns. Not Committed, it runs once it is known
// the spawn will never be written (the step failed, did not spawn, or
// its write failed). It runs on the step's worker without the executor's
// locks, so it may call into the executor, and must not block. A
// parent's remote calls in its children's names go here: they must
// follow the write that records where they go, and precede anything the
// children send.
func (c *Context) AfterSpawn(fn func(SpawnOutcome)) { c.afterSpawn = append(c.afterSpawn, fn) }

// SpawnOutcome is what AfterSpawn's function is told.
type SpawnOutcome struct {
	// Committed: the spawn is written; false, it never will be.
	Committed bool
	// spans are the suspended children's spans, by id.
	spans map[uint64]trace.SpanContext
}

// ChildContext returns ctx carrying the span of child id, a child the
// step suspended (SuspendChild), if tracing gave it one: a call made in
// its name hangs under it, in its tree's trace, as a call from its own
// step would. Otherwise ctx itself.
func (o SpawnOutcome) ChildContext(ctx context.Context, id uint64) context.Context {
	if sc, ok := o.spans[id]; ok && sc.IsValid() {
		return trace.ContextWithSpanContext(ctx, sc)
	}
	return ctx
}

// WakeAtChildren lets the procedure run its next step before all its
// children have finished: once at most n of them (those of earlier steps
// too) are unfinished. It applies until the next step runs, which asks
// again or waits for them all. The step that then runs may spawn more
// children, or suspend with OnChildren to wait for the rest; it must not
// end the procedure while any is unfinished. A procedure woken this way
// is stored WAITING until it spawns or suspends, so a restart never finds
// a live child under a procedure stored as before the spawn that made it;
// a loaded procedure waits for all its children (n is not persisted).
// It pipelines waves of children: a wave is spawned while the tail of the
// one before still runs. n < 0 counts as 0.
func (c *Context) WakeAtChildren(n int) { c.childWake = max(n, 0) }

// ChildrenLeft is how many of the procedure's children have not finished
// yet: 0 unless the step was woken early (WakeAtChildren). Children
// finish while the step runs, so it may be lower by the time the step
// returns, never higher.
func (c *Context) ChildrenLeft() int {
	return locked.Call(&c.x.mu, func() int { return c.e.childLatch })
}

// Attempt is the number of consecutive times the current state (for a state
// machine) or step has run; useful with Backoff.
func (c *Context) Attempt() int { return int(c.repeats) + 1 }

// StateVersion is the version of its type's state that the procedure's
// next write stores: the registered version, or an older one while the
// cluster version is below the level that introduced it
// (TypeOptions.Since). It never goes down for a procedure, and asking
// fixes it: every later write of the procedure's state stores at least
// this version (a write that falls back to the last state that could be
// serialised stores that state in the version it was serialised in). A
// step told an older version must leave the procedure in a
// state that version holds: a state machine does not move to a state a
// newer version added, and nothing depends on a field the older shape
// lacks (its StateDowngrader drops it).
func (c *Context) StateVersion() int { return c.x.stateVersionOf(c.e) }

// Errors returned by the executor.
var (
	ErrNotFound    = errors.New("procedure: not found")
	ErrStopped     = errors.New("procedure: executor stopped")
	ErrNotStarted  = errors.New("procedure: executor not started")
	ErrUnknownType = errors.New("procedure: unknown procedure type")
	ErrAborted     = errors.New("procedure: aborted")
	ErrTimeout     = errors.New("procedure: timed out")
	ErrStateLoop   = errors.New("procedure: state repeated too many times")
	ErrNotAllowed  = errors.New("procedure: operation not allowed in this state")
	ErrStoreFailed = errors.New("procedure: store failed")
	ErrInvalid     = errors.New("procedure: invalid argument")
	ErrCorrupt     = errors.New("procedure: corrupt procedure")
	ErrNotTerminal = errors.New("procedure: not finished")
	// ErrFinishing refuses a change to a procedure that has ended while
	// the write of its end is still on its way: Get shows it in its state
	// before the end until that write commits. It comes with
	// ErrNotAllowed.
	ErrFinishing    = errors.New("procedure: finishing")
	ErrNonceFailed  = errors.New("procedure: first submission with this nonce failed")
	ErrNoDomain     = errors.New("procedure: the store keeps no domain state")
	errStopStepping = errors.New("stop stepping")
)

// ErrHeld: the procedure's tree could not be loaded and is held in the
// store until repaired (see Executor.Problems). It is an ErrNotAllowed.
var ErrHeld = fmt.Errorf("%w: procedure held at load, not run", ErrNotAllowed)

// Progressor is implemented by procedures that can say how far along they
// are, for a person watching one (`baton proc wait`, the console). The
// executor asks after each step, on the worker that ran it (and when the
// procedure is submitted or loaded), so Progress reads the procedure's
// fields without locks. It is not persisted: a new leader knows it again
// from the loaded state.
type Progressor interface {
	Progress() Progress
}

// Progress is how far a procedure is: Done of Total Units. Total 0 means
// the procedure does not know its total.
type Progress struct {
	Done, Total int64
	// Unit names what is counted, plural: "steps", "regions open".
	Unit string
	// FromChildren: Done is the number of the procedure's children that
	// have ended (the executor counts them; the procedure leaves Done 0),
	// for a parent whose work is its children's: a table create's region
	// assignments.
	FromChildren bool
	// Spawned, with FromChildren, is how many children the procedure
	// spawned so far as its own state counts them (a table create's
	// waves). A restart loads only the children still stored: those
	// forgotten before it (ForgetsChildren), each of which ended, are
	// counted in Done as Spawned less the children loaded. 0: not said.
	Spawned int64
}
