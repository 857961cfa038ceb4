package procedure

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// entry is the executor's bookkeeping for one live procedure. Fields are
// guarded by Executor.mu, except proc (the user's object), which only the
// goroutine holding the claim (running == true) touches.
type entry struct {
	id, parent, root uint64
	ti               *typeInfo
	proc             Procedure
	key              scheduler.QueueKey
	locks            []scheduler.Lock
	holdLock         bool

	state                 State
	owner, nonce          string
	submitter             string // SubmitOptions.Submitter (roots only)
	submitted, updated    time.Time
	deadline, waitUntil   time.Time
	finishedAt, ackedAt   time.Time
	stack                 []int32
	locked                bool
	errMsg                string
	errCode               string // ErrorCode of the failure that errMsg tells, if it is one
	result                []byte
	abort, paused, bypass bool
	untilDone             bool // RetriesUntilDone: never fails, never aborted
	forgetsChildren       bool // ForgetsChildren: its children are forgotten as they succeed
	coversChildren        bool // RollbackCoversChildren: its rollback undoes its children's effects
	rollingBack           bool
	repeats               int32 // consecutive runs of the current state or step (Context.Attempt)
	spins                 int32 // of those, consecutive ones that returned More: no progress
	runs                  []Run
	history               history
	// traceCtx is the span context of the procedure's first span,
	// persisted with it (record.trace): the spans any later
	// executor makes for it hang under it, so one procedure tree stays one
	// trace across failovers. Invalid if tracing was off when it was
	// created.
	traceCtx trace.SpanContext

	// runtime only
	// startSuspended: a child reserved by its parent's step and suspended
	// there (Context.SuspendChild) parks so once its spawn is written,
	// instead of being queued.
	startSuspended *Step
	// spawning: written by its parent's spawn, whose AfterSpawn calls are
	// being made: nothing queues it until the spawn queues or parks it.
	spawning bool
	// retired: a finished root replaced by its finishedRoot (finished.go);
	// whoever still holds the entry reads it, nobody writes it again.
	retired bool
	// lastRec is a finished root's last record, kept for retirement when
	// the store cannot read it back.
	lastRec []byte
	// summaries is a finished root's record's fChildSummaries, packed by
	// its first terminal write (its tree is let go of right after) and
	// written as is by any later one (an Ack).
	summaries []byte
	// resumed: loaded from the store and not stepped since (the worker
	// running it reads and clears it): its next state may have run on the
	// executor that died, so an abort now rolls that state back too.
	resumed bool
	// goodState is the type's state as last serialised: written in its
	// place when a later state cannot be (Executor.persist).
	goodState []byte
	// goodVersion is the version of the type's state goodState is in.
	goodVersion int
	// stateVersion is the lowest version of its type's state e may be
	// written at from now on (Executor.stateVersionOf): the version it
	// was last written or loaded at, or that a step was told.
	stateVersion int
	// writtenVersion is the version of its type's state e's record was
	// last built with (encodeWith), or loaded at: what Info shows of a
	// type registered with TypeOptions.Since, which a reader of the store
	// sees too. Atomic: its holder writes it, Get reads it under x.mu.
	writtenVersion atomic.Int32

	waitNote   string   // the Because of the current suspension
	progress   Progress // as its Progressor last said (see Progressor)
	childLatch int
	// childWake is how many unfinished children e may still have when it
	// is woken to run its next step (Context.WakeAtChildren): 0, the
	// default, waits for them all. Set by each step, never persisted: a
	// loaded procedure waits for all its children.
	childWake int
	children  []uint64
	// childrenDoneTo: every child before this index in children has
	// ended for good (its end written: shownState terminal; a SUCCESS not
	// yet written may still turn FAILED if its state cannot be serialised
	// for that write), so a Why that looks for the
	// unfinished ones starts there rather than walking the thousands of a
	// big parent that are done already.
	childrenDoneTo int
	// endUnwritten: e's state was set terminal by its worker and the
	// write carrying that end (and its last step's effect) has not yet
	// committed. Until it has, e is shown in stateBeforeEnd: a caller
	// told SUCCESS must find the step's effect, and an end the store
	// does not hold is undone by a restart (HBASE-29251).
	endUnwritten   bool
	stateBeforeEnd State
	// suspendUnwritten: e's worker suspended it (WAITING or
	// WAITING_TIMEOUT) after a step, or spawned children, and the write
	// carrying that (and the step's effect) has not yet committed. Until
	// it has, e is shown RUNNABLE, as it was while the step ran: a leader
	// that died now would have the next one run the step again, and a
	// reader told WAITING would then see the procedure back before it.
	suspendUnwritten bool
	// unheldChildren are the last ones of children, added by a spawn whose
	// write has not committed: not in Executor.procs yet, and so not to be
	// taken for finished ones.
	unheldChildren int
	// unloadedChildren are the children forgotten before the load that
	// made e (Progress.Spawned less the children loaded): ended, and no
	// longer in children.
	unloadedChildren int
	// forgotten: no longer in Executor.procs nor its tree's members, and
	// its record deleted: a child that succeeded under a parent that
	// forgets its children (ForgetsChildren), by its last write; or a
	// descendant of a finished root, by finishRoot's delete. Nothing of it
	// is written again.
	forgotten     bool
	inTable       bool             // in Executor.procs, and so in Executor.live's counts
	running       bool             // claimed by a worker or an API call
	rerun         bool             // polled while claimed: queue again on release
	dirty         bool             // changed by an API call while claimed: persist on release
	muts          []store.Mutation // domain changes of the last step, committed by its persist
	lockWait      bool             // parked in a lock wait queue
	pausedParked  bool             // polled while paused
	timedOut      bool             // woken by its suspension's timer
	yielded       bool             // its step yielded: queue it at the back once released
	retryWait     bool             // RetriesUntilDone: waiting to run a failed step again
	failures      int              // RetriesUntilDone: consecutive failed runs of its step
	beforeStep    *machineSnapshot // RetriesUntilDone: where its state machine stood before the running step
	event         *scheduler.Event
	timer         clock.Timer
	deadlineTimer clock.Timer
	waitGen       uint64
	// span is the procedure's span on this executor, nil until its first
	// step here (or with tracing off); ended when it finishes or the
	// executor stops.
	span trace.Span
	// spanCtx is the executor's context carrying span, made once for the
	// steps it parents.
	spanCtx context.Context
	// stepObs are its type's step series, looked up at its first step
	// rather than at every one (stepMetrics).
	stepObs *stepSeries
	// lockWaitSince is when the procedure was first parked behind a lock
	// in its current wait (zero when it is not waiting for one): the wait
	// it ends is observed in the lock wait histogram.
	lockWaitSince time.Time
}

func (e *entry) isRoot() bool { return e.parent == 0 }

// rootState is shared by every procedure of one tree.
type rootState struct {
	id      uint64
	entry   *entry
	members map[uint64]*entry
	// stack is the rollback stack: one element per executed step, in the
	// order the steps ran, across the whole tree. It may hold forgotten
	// members (entry.forgotten), skipped by the rollback and swept out
	// once they are half of it (forgetChildLocked).
	stack []*entry
	// forgottenInStack counts the stack's elements that are forgotten.
	forgottenInStack int
	// forgottenSums summarise the members forgotten so far, for the
	// root's terminal record.
	forgottenSums forgottenSummaries
	nextPos       int32 // position of the next step pushed: above every persisted one
	running       int   // members executing a step (or the rollback)
	failed        bool  // a member failed: rollback once nothing runs
	cause         string
	causeCode     string // ErrorCode of the failure cause tells
	rolling       bool   // a worker is rolling the tree back
	rbRerun       bool   // a turn came while rolling: the roller re-queues the root
	rbTries       int
	done          bool
	rbTimer       clock.Timer
	doneCh        chan struct{}
	doneOnce      sync.Once
}

// shownState is e's state as the API answers it: the state before its end
// while that end is not written (endUnwritten).
func (e *entry) shownState() State {
	if e.endUnwritten {
		return e.stateBeforeEnd
	}
	if e.suspendUnwritten {
		return Runnable // a step runs only on a RUNNABLE procedure
	}
	return e.state
}

// shownVersion is the version of its type's state Info gives for e: the
// registered one, as always, for a type without TypeOptions.Since; for a
// gated type the one its record is written at, which is older while the
// cluster version is below the level of the registered one (a standby's
// DecodeInfo of the record says the same).
func (e *entry) shownVersion() int {
	if e.ti.since == nil {
		return e.ti.version
	}
	if w := e.writtenVersion.Load(); w > 0 {
		return int(w)
	}
	return e.ti.version
}
