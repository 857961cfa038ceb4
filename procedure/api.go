package procedure

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// SubmitOptions qualify a submission.
type SubmitOptions struct {
	// Nonce makes the submission idempotent: a later Submit with the same
	// Owner and Nonce returns the first submission's id (also after a
	// restart), for as long as the first procedure's result is kept. If the
	// first procedure's tree was held at load (see Problems), the later
	// Submit returns its id with an error wrapping ErrHeld: it never starts
	// a second one.
	Nonce string
	// Owner is who submitted it (a user or client name); part of the nonce key,
	// so it holds no NUL byte (Submit refuses one: ErrInvalid).
	Owner string
	// Submitter is the authenticated identity that submitted it, as the
	// embedder's access control knows it (the admin API's "client/ops"):
	// persisted with the procedure, so that who may later pause or abort
	// it is decided by who submitted it rather than by Owner, which the
	// caller chooses. Empty for a procedure the embedder submits itself;
	// records written before it was kept read as empty too. Not part of
	// the nonce key.
	Submitter string
	// Timeout, if > 0, aborts the procedure (rolling it back) if it has not
	// finished this long after submission. Like an abort, it takes effect at
	// a step boundary where rollback is supported. A procedure that
	// RetriesUntilDone cannot have one.
	Timeout time.Duration
	// Mutations, if set, gives domain mutations to commit in the same
	// store write as the procedure's insert, given its id: the admin
	// API's audit record of the submission, so that one write commits
	// both. It is asked for only of a store.LateMutator, as the write is
	// ordered (at most once, and it must not block); with another store,
	// or a submission answered without an insert (a known nonce), it is
	// never called, and the caller writes what it would have given itself.
	Mutations func(id uint64) []store.Mutation
}

// Info is a snapshot of one procedure.
type Info struct {
	ID, ParentID, RootID uint64
	Type                 string
	Version              int
	State                State
	Owner, Nonce         string
	Submitted, Updated   time.Time
	Finished, Acked      time.Time
	Error                string
	// ErrorCode classifies Error when the procedure failed on a
	// precondition (see ErrorCode); empty otherwise.
	ErrorCode      string
	Result         []byte
	Paused         bool
	AbortRequested bool
	Bypassed       bool
	Locked         bool
	// Children are the children whose spawn committed, in the order they
	// were spawned. A forgotten child (ForgetsChildren) is listed, and Get
	// knows it from the summary its tree keeps of it (SummaryOnly), while
	// the tree runs and once its root has finished, until the executor
	// restarts while the tree runs (the list is then rebuilt from the
	// stored records, and the summaries of the members forgotten before
	// are lost with the executor). Not below record format 2, whose
	// records keep no summaries, nor for a tree too big to summarise every
	// member (see NoSummaryError).
	Children   []uint64
	StackDepth int
	// Runs says which node (Config.Node) made which of the procedure's
	// persisted writes: one Run per stretch written by one node, so a
	// failover mid-way shows as a second Run. The executor's snapshot
	// counts a write from the moment it is sent, as History and Updated
	// do; State waits for its commit.
	Runs []Run
	// History is the procedure's timeline: one Transition per step that
	// persisted its outcome, the latest ones kept (see Transition); in
	// the executor's snapshot the last may be of a write still on its way.
	History []Transition
	// RollingBack reports whether the procedure's steps are being undone.
	RollingBack bool
	// Data is the procedure's own persisted state (JSON unless its type
	// marshals itself): its arguments and progress. Set by DecodeInfo
	// only; the executor's snapshots leave it out.
	Data []byte
	// Progress is how far the procedure is, if its type says
	// (Progressor); zero otherwise, and for a finished root.
	Progress Progress
	// UntilDone: the procedure retries a failing step until it is done
	// (RetriesUntilDone), so it can be neither aborted nor timed out.
	// False once it is finished: what it means is moot then, and a
	// finished root does not keep it.
	UntilDone bool
	// SummaryOnly: a descendant of a finished root, whose record went
	// with the root's finish, answered from the summary the root's record
	// keeps of it (ChildSummary) for as long as the root is kept, or a
	// member a live tree forgot (ForgetsChildren), answered from the
	// summary the tree keeps of it for its root's record: ID,
	// ParentID, RootID, Type, State, Submitted, Finished (and Updated) to
	// the millisecond, Error, Owner (its root's) and Children. No Data,
	// History, Runs or Result.
	SummaryOnly bool
	// Submitter is SubmitOptions.Submitter; a child's is empty (ask its
	// root). A finished root answered from the executor's index of
	// finished roots leaves it empty too: DecodeInfo of its stored
	// record has it.
	Submitter string
}

// Submit persists p as a new root procedure and queues it. It returns once
// the procedure is durable: from then on it is never lost.
func (x *Executor) Submit(p Procedure, opts SubmitOptions) (uint64, error) {
	if p == nil {
		return 0, fmt.Errorf("%w: nil procedure", ErrInvalid)
	}
	ti, err := x.reg.lookup(p)
	if err != nil {
		return 0, err
	}
	if opts.Timeout < 0 {
		return 0, fmt.Errorf("%w: negative timeout %v", ErrInvalid, opts.Timeout)
	}
	if strings.IndexByte(opts.Owner, 0) >= 0 {
		// The nonce key joins owner and nonce with a NUL: an owner holding
		// one would share keys with another owner's nonces.
		return 0, fmt.Errorf("%w: owner %q holds a NUL byte", ErrInvalid, opts.Owner)
	}
	if r, ok := p.(RetriesUntilDone); ok && opts.Timeout > 0 && r.RetryUntilDone() {
		return 0, fmt.Errorf("%w: %s retries until done: it cannot be given a timeout", ErrInvalid, ti.name)
	}
	x.mu.Lock()
	if err := x.acceptingLocked(); err != nil {
		x.unlock()
		return 0, err
	}
	var ne *nonceEntry
	nk := nonceKey(opts.Owner, opts.Nonce)
	if opts.Nonce != "" {
		if prev := x.nonces[nk]; prev != nil {
			x.unlock()
			<-prev.done
			if prev.err != nil {
				return 0, fmt.Errorf("%w: %w", ErrNonceFailed, prev.err)
			}
			if prev.held != "" {
				return prev.id, fmt.Errorf("%w: procedure %d was submitted with this nonce: %s", ErrHeld, prev.id, prev.held)
			}
			return prev.id, nil
		}
		if id, ok := x.finishedByNonceLocked(nk); ok {
			x.unlock()
			return id, nil
		}
		ne = &nonceEntry{done: make(chan struct{})}
		x.nonces[nk] = ne
	}
	now := x.clock.Now()
	e, err := x.newEntry(p, ti, 0, 0, now)
	if err != nil {
		if ne != nil {
			delete(x.nonces, nk)
			ne.err = err
			close(ne.done)
		}
		x.unlock()
		return 0, err
	}
	e.id = x.nextID
	x.nextID++
	e.root = e.id
	e.owner, e.nonce = opts.Owner, opts.Nonce
	if x.writesFormat2() {
		// Below format 2 it is not persisted (Config.RecordFormat): not
		// kept at all, so that the procedure is no one's before a
		// failover as after it.
		e.submitter = opts.Submitter
	}
	if opts.Timeout > 0 {
		e.deadline = now.Add(opts.Timeout)
	}
	x.unlock()

	if x.tracer != nil {
		x.startSpan(e, trace.SpanContext{}, false)
	}
	finishNonce := func(err error) {
		if err != nil && e.span != nil {
			endProcSpan(e.span, Failed, err.Error(), false)
		}
		if ne == nil {
			return
		}
		x.mu.Lock()
		ne.id, ne.err = e.id, err
		if err != nil {
			delete(x.nonces, nk)
		}
		x.unlock()
		close(ne.done)
	}
	rec, err := x.encode(e)
	if err != nil {
		finishNonce(err)
		return 0, fmt.Errorf("%w: serialising %s: %w", ErrInvalid, ti.name, err)
	}
	if err := x.insertRoot(rec, e.id, opts.Mutations); err != nil {
		finishNonce(err)
		x.setFatal(err)
		return 0, fmt.Errorf("%w: %w", ErrStoreFailed, err)
	}
	x.mu.Lock()
	if ne != nil {
		ne.id = e.id // before it can finish: its retirement moves the nonce by its id
	}
	x.holdLocked(e)
	root := &rootState{id: e.id, entry: e, members: map[uint64]*entry{e.id: e}, doneCh: make(chan struct{})}
	x.roots[e.id] = root
	x.armDeadlineLocked(e)
	// Listeners hear of the submission before any worker can move it on.
	h := x.hearingLocked(e)
	x.unlock()
	h.tell()
	x.mu.Lock()
	x.queueLocked(e, false)
	x.unlock()
	finishNonce(nil)
	x.metrics.submitted.WithLabelValues(ti.name).Inc()
	return e.id, nil
}

// insertRoot inserts a submitted root's record, with the mutations muts
// gives where the store takes them (SubmitOptions.Mutations).
func (x *Executor) insertRoot(rec store.Proc, id uint64, muts func(uint64) []store.Mutation) error {
	if lm, ok := x.store.(store.LateMutator); ok && muts != nil {
		return lm.InsertAndMutateLate(rec, nil, func() []store.Mutation { return muts(id) })
	}
	return x.store.Insert(rec, nil)
}

func nonceKey(owner, nonce string) string { return owner + "\x00" + nonce }

// LookupNonce returns the root procedure that a submission with owner and
// nonce created, if the executor knows of one: Submit with them would
// answer with it instead of creating another. A submission with them that
// is under way is waited for; one that failed created nothing. A caller
// that refuses new work (maintenance mode) asks it first, so that the
// retry of a submission that got through still gets its id. A finished
// procedure is known until it is evicted, as for Submit.
func (x *Executor) LookupNonce(owner, nonce string) (uint64, bool) {
	if nonce == "" {
		return 0, false
	}
	nk := nonceKey(owner, nonce)
	x.mu.Lock()
	ne := x.nonces[nk]
	if ne == nil {
		id, ok := x.finishedByNonceLocked(nk)
		x.unlock()
		return id, ok
	}
	x.unlock()
	<-ne.done
	if ne.err != nil {
		return 0, false
	}
	return ne.id, true
}

func (x *Executor) acceptingLocked() error {
	switch {
	case x.fatal != nil:
		return x.fatal
	case x.stopping:
		return ErrStopped
	case !x.started:
		return ErrNotStarted
	case !x.loaded:
		return fmt.Errorf("%w: still loading the store", ErrNotStarted)
	}
	return nil
}

func (x *Executor) armDeadlineLocked(e *entry) {
	if e.deadline.IsZero() || e.state.Terminal() {
		return
	}
	id := e.id
	e.deadlineTimer = x.clock.AfterFunc(e.deadline.Sub(x.clock.Now()), func() {
		x.mu.Lock()
		defer x.unlock()
		if e := x.procs[id]; e != nil && !e.state.Terminal() && !x.stopping {
			e.deadlineTimer = nil
			x.abortLocked(e)
		}
	})
}

// Get returns a snapshot of procedure id.
func (x *Executor) Get(id uint64) (Info, error) {
	x.mu.Lock()
	defer x.unlock()
	if f, ok := x.finished.get(id); ok {
		return x.finishedInfoLocked(id, f), nil
	}
	e, err := x.lookupLocked(id)
	if err != nil {
		return x.summaryInfoLocked(id)
	}
	return x.infoLocked(e), nil
}

// lookupLocked finds a live procedure by id (a finished root is in
// x.finished instead).
func (x *Executor) lookupLocked(id uint64) (*entry, error) {
	if e := x.procs[id]; e != nil {
		return e, nil
	}
	return nil, Errorf(ErrNotFound, "procedure %d does not exist", id)
}

// changeableLocked returns procedure id for a change: a live one, or the
// refusal finishedErrLocked gives.
func (x *Executor) changeableLocked(id uint64) (*entry, error) {
	if e := x.procs[id]; e != nil {
		return e, nil
	}
	return nil, x.finishedErrLocked(id)
}

// finishedErrLocked is the refusal of a change to finished root id, or
// ErrNotFound.
func (x *Executor) finishedErrLocked(id uint64) error {
	if f, ok := x.finished.get(id); ok {
		return Errorf(ErrNotAllowed, "procedure %d is already %s", id, f.state)
	}
	return Errorf(ErrNotFound, "procedure %d does not exist", id)
}

func (x *Executor) infoLocked(e *entry) Info { return x.infoOfLocked(e, true) }

// infoOfLocked is infoLocked, with the children listed only if children.
func (x *Executor) infoOfLocked(e *entry, children bool) Info {
	var kids []uint64
	if children {
		// The unheld ones' spawn has not committed: they may yet be
		// taken back, and nobody else can see them.
		kids = append([]uint64(nil), e.children[:len(e.children)-e.unheldChildren]...)
	}
	state, finished, result := e.shownState(), e.finishedAt, e.result
	if e.endUnwritten && !state.Terminal() {
		finished, result = time.Time{}, nil
	}
	return Info{
		ID: e.id, ParentID: e.parent, RootID: e.root, Type: e.ti.name, Version: e.shownVersion(),
		State: state, Owner: e.owner, Nonce: e.nonce, Submitter: e.submitter, Submitted: e.submitted, Updated: e.updated,
		Finished: finished, Acked: e.ackedAt, Error: e.errMsg, ErrorCode: e.errCode,
		Result: append([]byte(nil), result...), Paused: e.paused, AbortRequested: e.abort,
		Bypassed: e.bypass, Locked: e.locked, Children: kids,
		StackDepth: len(e.stack), Runs: append([]Run(nil), e.runs...), // the caller's, as Result is; only records share e.runs
		// False once finished, as the retired root's record answers.
		UntilDone: e.untilDone && !state.Terminal(),
		History:   e.history.snapshot(), RollingBack: e.rollingBack,
		Progress: e.progressLocked(),
	}
}

// Filter selects procedures for List. Zero fields match everything.
type Filter struct {
	States    []State
	Type      string
	RootsOnly bool
	// Owner matches the submitter's owner.
	Owner string
	// SubmittedAfter (inclusive) and SubmittedBefore (exclusive) bound the
	// submission time.
	SubmittedAfter, SubmittedBefore time.Time
	// AfterID and Limit page through results in id order.
	AfterID uint64
	Limit   int
}

// List returns the procedures matching f, by ascending id.
func (x *Executor) List(f Filter) []Info {
	x.mu.Lock()
	defer x.unlock()
	// The live ones, and the finished ones (kept in id order), merged.
	ids := make([]uint64, 0, len(x.procs))
	for id := range x.procs {
		if id > f.AfterID {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var out []Info
	fin := x.finished.after(f.AfterID)
	for len(ids) > 0 || fin < x.finished.len() {
		if fin < x.finished.len() && (len(ids) == 0 || x.finished.rows[fin].id < ids[0]) {
			id, row := x.finished.at(fin)
			fin++
			if x.matchFinishedLocked(id, row, f) {
				out = append(out, x.finishedInfoLocked(id, row))
				if f.Limit > 0 && len(out) == f.Limit {
					break
				}
			}
			continue
		}
		e := x.procs[ids[0]]
		ids = ids[1:]
		if f.Type != "" && e.ti.name != f.Type || f.RootsOnly && !e.isRoot() || f.Owner != "" && e.owner != f.Owner ||
			!f.submittedIn(e.submitted) {
			continue
		}
		if len(f.States) > 0 {
			match := false
			for _, s := range f.States {
				match = match || s == e.shownState()
			}
			if !match {
				continue
			}
		}
		out = append(out, x.infoLocked(e))
		if f.Limit > 0 && len(out) == f.Limit {
			break
		}
	}
	return out
}

// Wait blocks until root procedure id reaches a terminal state (or ctx
// ends) and returns its final snapshot.
func (x *Executor) Wait(ctx context.Context, id uint64) (Info, error) {
	x.mu.Lock()
	if f, ok := x.finished.get(id); ok {
		defer x.unlock()
		return x.finishedInfoLocked(id, f), nil
	}
	e, err := x.lookupLocked(id)
	if err != nil {
		x.unlock()
		return Info{}, err
	}
	root := x.roots[e.root]
	x.unlock()
	if !e.isRoot() {
		return Info{}, fmt.Errorf("%w: %d is a child; wait for its root %d", ErrInvalid, id, e.root)
	}
	select {
	case <-root.doneCh:
	case <-ctx.Done():
		return Info{}, ctx.Err()
	}
	x.mu.Lock()
	defer x.unlock()
	// root.done says the root's end was written; its in-memory state can
	// be terminal while the write of that end failed (and stopped us),
	// and an end the store does not hold is no end to report
	// (HBASE-29251: a restart resumes from the state before it).
	if !root.done && x.fatal != nil {
		return x.infoLocked(e), x.fatal
	}
	if f, ok := x.finished.get(id); ok && e.retired {
		return x.finishedInfoLocked(id, f), nil
	}
	return x.infoLocked(e), nil
}

// endedErrLocked is the refusal of a change to e, which has ended: while
// the write of that end is on its way (e shown in its state before it),
// ErrFinishing, so that a caller who then asks Get, and sees the earlier
// state, knows the end is coming rather than taking the refusal for a
// failure.
func (x *Executor) endedErrLocked(e *entry) error {
	if e.endUnwritten {
		return WithKind(ErrNotAllowed, Errorf(ErrFinishing, "procedure %d is finishing: its end (%s) is being written", e.id, e.state))
	}
	return Errorf(ErrNotAllowed, "procedure %d is already %s", e.id, e.state)
}

// Abort asks procedure id to stop and roll back its root. The abort takes
// effect at the procedure's next step boundary (for a state machine, the
// next state whose rollback is supported); a suspended procedure is woken
// for it, and an abort of a procedure waiting on children is passed on to
// them. A procedure waiting for a lock is taken out of the lock's queue:
// if it is abortable at once it fails without the lock (failing runs none
// of its code), otherwise it waits for the lock again. Children spawned by
// a step that was running when the abort came are aborted too, before
// their first step. A procedure that RetriesUntilDone is not aborted
// (ErrNotAllowed).
func (x *Executor) Abort(id uint64) error {
	x.mu.Lock()
	e, err := x.changeableLocked(id)
	if err != nil {
		x.unlock()
		return err
	}
	if e.state.Terminal() {
		err := x.endedErrLocked(e)
		x.unlock()
		return err
	}
	if e.untilDone {
		err := Errorf(ErrNotAllowed, "procedure %d (%s) cannot roll back: it retries until done", id, e.ti.name)
		x.unlock()
		return err
	}
	targets := x.abortLocked(e)
	x.unlock()
	for _, t := range targets {
		x.persistIdle(t)
	}
	return nil
}

// abortLocked flags e and its unfinished descendants, wakes suspended ones
// and takes lock waiters out of their lock's queue (an aborted procedure
// fails without waiting for its locks when it is abortable right away; see
// runProc); it returns the entries whose flag must be persisted. Children
// spawned later inherit the flag (see spawn).
func (x *Executor) abortLocked(e *entry) []*entry {
	var out []*entry
	var visit func(e *entry)
	visit = func(e *entry) {
		// A procedure that retries until done is never aborted, nor what
		// runs below it on its behalf.
		if e.state.Terminal() || e.state == Failed || e.untilDone {
			return
		}
		if !e.abort {
			e.abort = true
			out = append(out, e)
		}
		if e.childLatch > 0 {
			for _, c := range e.children {
				if ce := x.procs[c]; ce != nil {
					visit(ce)
				}
			}
			if e.state == Waiting {
				return
			}
			// Woken before its children finished (WakeAtChildren): it
			// takes the abort itself too.
		}
		if e.lockWait && e.state == Runnable {
			if root := x.roots[e.root]; root != nil && !root.failed {
				x.setLockWaitLocked(e, false)
				x.sched.CancelLockWait(e.id)
				if e.running {
					e.rerun = true // its worker is parking it: it queues it again
				} else {
					x.queueLocked(e, true)
				}
			}
			return
		}
		x.wakeLocked(e)
	}
	visit(e)
	return out
}

// persistIdle persists e from outside a worker: if a worker holds e, the
// worker's next write carries the change instead.
func (x *Executor) persistIdle(e *entry) {
	x.mu.Lock()
	if x.stopping {
		x.unlock()
		return
	}
	if e.running {
		e.dirty = true
		x.unlock()
		return
	}
	if e.retired {
		// Finished and retired since the caller changed it: only an Ack
		// changes a finished root, and its record is written as one.
		x.unlock()
		if !e.ackedAt.IsZero() {
			x.ackFinished(e.id, e.ackedAt)
		}
		return
	}
	if e.forgotten || !e.isRoot() && e.state.Terminal() {
		// Ended since the caller changed it: the write of its end carried
		// the change. Its record goes with its tree's end (finishRoot's
		// delete, or its own as it is forgotten), and a write now could
		// land after that delete and bring it back: a record of a tree
		// that no longer exists, which a restart holds as an orphan once
		// the root's result is evicted. A member that never ran is not
		// terminal when its tree ends: forgotten tells.
		x.unlock()
		return
	}
	e.running = true
	x.unlock()
	ok := x.persist(e)
	x.mu.Lock()
	if e.forgotten {
		// Its tree ended during this write, and finishRoot's delete of
		// its record may have reached the store before the write did.
		e.running = false
		x.unlock()
		if ok {
			x.deleteLateRecord(e)
		}
		return
	}
	// Another call's change during this write was left to us.
	x.writeDirtyLocked(e)
	x.unclaimLocked(e)
	x.unlock()
}

// deleteLateRecord deletes the record of e, a member of a tree that has
// ended, which an API call wrote while finishRoot deleted it. A crash
// before this delete leaves the record to the next load, which deletes it
// as a finished root's descendant, or holds it once the root's result is
// gone.
func (x *Executor) deleteLateRecord(e *entry) {
	if err := x.store.Delete([]uint64{e.id}); err != nil {
		x.setFatal(err)
	}
}

// Pause stops procedure id from running further steps until Resume. A
// running step finishes first. Pausing survives restarts.
func (x *Executor) Pause(id uint64) error {
	return x.changeAndPersist(id, func(e *entry) (bool, error) {
		if e.state.Terminal() {
			return false, x.endedErrLocked(e)
		}
		if e.paused {
			return false, nil
		}
		e.paused = true
		if root := x.roots[e.root]; root != nil && root.failed {
			// A failed tree rolls back regardless: its queued turn may be the
			// rollback's, and dropping it would strand the tree.
		} else {
			x.sched.Remove(e.id)
			if e.state == Runnable {
				e.pausedParked = true
			}
		}
		return true, nil
	})
}

// Resume undoes Pause.
func (x *Executor) Resume(id uint64) error {
	return x.changeAndPersist(id, func(e *entry) (bool, error) {
		if !e.paused {
			return false, nil
		}
		e.paused = false
		if e.pausedParked {
			e.pausedParked = false
			if e.state == Runnable {
				if e.running {
					// Its worker is parking it right now: have the worker
					// queue it again when it lets go.
					e.rerun = true
				} else {
					x.queueLocked(e, false)
				}
			}
		}
		return true, nil
	})
}

// Ack acknowledges a finished root's result: it is then kept only
// Config.AckedResultTTL longer. The ack is written before Ack returns: on
// a root whose worker is still writing its end, Ack waits for that write
// and the root's retirement first, so it must not be called from a
// Listener (which runs on that worker).
func (x *Executor) Ack(id uint64) error {
	x.mu.Lock()
	_, finished := x.finished.get(id)
	var ending chan struct{}
	if e := x.procs[id]; !finished && e != nil && e.isRoot() && e.state.Terminal() {
		if r := x.roots[id]; r != nil && r.running > 0 {
			ending = r.doneCh
		}
	}
	x.unlock()
	if ending != nil {
		// A worker is writing the root's end and will retire it: an ack
		// set now would ride on a write the worker makes after that,
		// which a Stop in between skips, losing an ack already answered
		// for. The retirement is a write away: wait for it, then ack the
		// finished root with a write of its own before answering.
		select {
		case <-ending:
		case <-x.ctx.Done():
		}
		x.mu.Lock()
		_, finished = x.finished.get(id)
		fatal := x.fatal
		x.unlock()
		if !finished {
			if fatal != nil {
				return fatal
			}
			return ErrStopped
		}
	}
	if finished {
		return x.ackFinished(id, time.Time{})
	}
	return x.changeAndPersist(id, func(e *entry) (bool, error) {
		if !e.isRoot() || !e.state.Terminal() {
			return false, Errorf(ErrNotTerminal, "procedure %d is %s, not finished", id, e.state)
		}
		if !e.ackedAt.IsZero() {
			return false, nil
		}
		e.ackedAt = x.clock.Now()
		return true, nil
	})
}

// changeAndPersist is the shape of the flag-setting calls (Pause, Resume,
// Ack): change runs on procedure id under the executor's lock and reports
// whether it changed anything; a change is then persisted outside the lock,
// as persistIdle must be, so that the flag survives a restart. A change
// that is refused, or that finds the flag already set, writes nothing.
func (x *Executor) changeAndPersist(id uint64, change func(e *entry) (bool, error)) error {
	x.mu.Lock()
	e, err := x.lookupLocked(id)
	changed := false
	if err == nil {
		changed, err = change(e)
	} else if _, ok := x.finished.get(id); ok {
		// Retired meanwhile (Ack), or finished long ago (Pause, Resume):
		// changed as a finished root.
		x.unlock()
		return x.changeFinished(id, change)
	}
	x.unlock()
	if err != nil || !changed {
		return err
	}
	x.persistIdle(e)
	return nil
}

// BypassOptions guard Bypass.
type BypassOptions struct {
	// Recursive also bypasses every unfinished descendant; without it a
	// procedure with unfinished children is refused.
	Recursive bool
	// Force allows bypassing a procedure waiting for a lock; the lock holder
	// is not touched, so the repairer must know the entity is consistent.
	Force bool
	// KeepRollbacks refuses a procedure whose tree is rolling back (its
	// root failed): a bypass would cut the rollback short, while the
	// rollback puts back what the tree did. Checked when the bypass takes
	// effect, so a failure after the caller looked is not missed.
	KeepRollbacks bool
}

// Bypass is the repair tool of last resort: the procedure (and with
// Recursive its descendants) finishes as SUCCESS at its next turn without
// running any further step, and none of its steps are rolled back later.
// The entities it touched are left as they are. It refuses what would break
// the framework's own invariants.
func (x *Executor) Bypass(id uint64, opts BypassOptions) error {
	x.mu.Lock()
	e, err := x.changeableLocked(id)
	if err != nil {
		x.unlock()
		return err
	}
	if root := x.roots[e.root]; opts.KeepRollbacks && root != nil && root.failed && !e.state.Terminal() {
		x.unlock()
		return Errorf(ErrNotAllowed, "procedure %d is rolling back (root %d failed)", id, e.root)
	}
	var targets []*entry
	var check func(e *entry) error
	check = func(e *entry) error {
		if e.state.Terminal() {
			return nil
		}
		if e.lockWait && !opts.Force {
			w := x.sched.Why(e.id)
			return Errorf(ErrNotAllowed, "procedure %d waits for lock %v held by %v; release it first or use Force", e.id, w.Lock, w.Holders)
		}
		if e.childLatch > 0 && !opts.Recursive {
			return Errorf(ErrNotAllowed, "procedure %d has %d unfinished children; use Recursive", e.id, e.childLatch)
		}
		targets = append(targets, e)
		if opts.Recursive {
			for _, c := range e.children {
				if ce := x.procs[c]; ce != nil {
					if err := check(ce); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	if err := check(e); err != nil {
		x.unlock()
		return err
	}
	if len(targets) == 0 {
		err := x.endedErrLocked(e)
		x.unlock()
		return err
	}
	for _, t := range targets {
		t.bypass = true
		if t.state == Failed {
			x.setStateLocked(t, Runnable)
		}
		if t.paused {
			t.paused = false
			t.pausedParked = false
		}
	}
	x.unlock()
	x.log.Warn("bypass requested", "id", id, "procedures", len(targets), "recursive", opts.Recursive, "force", opts.Force)
	// Persist leaves first so a crash midway never shows a bypassed parent
	// with live children.
	for i := len(targets) - 1; i >= 0; i-- {
		x.persistIdle(targets[i])
	}
	x.mu.Lock()
	for i := len(targets) - 1; i >= 0; i-- {
		t := targets[i]
		if t.lockWait {
			x.setLockWaitLocked(t, false)
			x.sched.CancelLockWait(t.id)
		}
		if t.state == Runnable && !t.running {
			x.queueLocked(t, true)
		} else {
			x.wakeLocked(t)
		}
	}
	x.unlock()
	return nil
}

// Why explains what procedure id is waiting for.
type Why struct {
	Info
	// Reason in a few words: "running", "queued", "waiting for lock",
	// "waiting for event", "waiting for children", "waiting for timer",
	// "retrying after an error" (see RetriesUntilDone; Error says which),
	// "paused", "rolling back", "finished".
	Reason string
	// Note is what the procedure said when it suspended (see Because),
	// while it waits for its timer or event; empty otherwise.
	Note     string
	Sched    scheduler.WaitInfo
	Children []uint64 // unfinished children
	Until    time.Time
}

// Why says what procedure id waits for and who holds what it waits on.
func (x *Executor) Why(id uint64) (Why, error) {
	return x.WhyUpTo(id, -1)
}

// WhyUpTo is Why with at most n of the unfinished children listed (the
// oldest first), or all of them if n < 0. With n ≥ 0, Info.Children is
// left empty (Get lists them). A poll that names only the first
// few (a watch, every 50 ms) then costs the same for a parent of ten
// thousand regions as for one of ten: Why walks every child under the
// executor's lock, which every step also takes.
func (x *Executor) WhyUpTo(id uint64, n int) (Why, error) {
	x.mu.Lock()
	if f, ok := x.finished.get(id); ok {
		w := Why{Info: x.finishedInfoLocked(id, f), Reason: "finished"}
		x.unlock()
		w.Sched = x.sched.Why(id)
		return w, nil
	}
	e, err := x.lookupLocked(id)
	if err != nil {
		x.unlock()
		return Why{}, err
	}
	// A poll that names a few children needs none of the others: a crash
	// procedure has hundreds of thousands, which would be copied at every
	// poll of every watch (megabytes a poll, for the GC to scan and free).
	w := Why{Info: x.infoOfLocked(e, n < 0), Until: e.waitUntil}
	root := x.roots[e.root]
	// held never shrinks (a failed spawn takes back only unheld children),
	// so the cursor never passes it.
	held := len(e.children) - e.unheldChildren
	for e.childrenDoneTo < held {
		if ce := x.procs[e.children[e.childrenDoneTo]]; ce != nil && !ce.shownState().Terminal() {
			break
		}
		e.childrenDoneTo++
	}
	for _, c := range e.children[e.childrenDoneTo:] {
		if n >= 0 && len(w.Children) >= n {
			break
		}
		if ce := x.procs[c]; ce != nil && !ce.shownState().Terminal() {
			w.Children = append(w.Children, c)
		}
	}
	switch {
	case e.shownState().Terminal():
		w.Reason = "finished"
	case root != nil && root.failed:
		w.Reason = "rolling back"
	case e.paused:
		w.Reason = "paused"
	case e.running:
		w.Reason = "running"
	case e.lockWait:
		w.Reason = "waiting for lock"
	case e.state == Waiting && e.childLatch > 0:
		w.Reason = "waiting for children"
	case e.retryWait:
		w.Reason = "retrying after an error"
	case e.event != nil:
		w.Reason, w.Note = "waiting for event", e.waitNote
	case e.state == WaitingTimeout:
		w.Reason, w.Note = "waiting for timer", e.waitNote
	default:
		w.Reason = "queued"
	}
	x.unlock()
	w.Sched = x.sched.Why(id)
	return w, nil
}

// LoadProblem is a persisted procedure the executor could not load. It is
// kept in the store untouched (and its whole tree is held, not run) until an
// operator deals with it.
type LoadProblem struct {
	ID     uint64
	RootID uint64 // 0 if unknown
	Type   string
	Reason string
	Raw    store.Proc
}

// Problems lists the procedures that could not be loaded, by id.
func (x *Executor) Problems() []LoadProblem {
	x.mu.Lock()
	defer x.unlock()
	out := make([]LoadProblem, 0, len(x.problems))
	for _, p := range x.problems {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// LoadInfo is what the store reported at Start.
func (x *Executor) LoadInfo() store.LoadInfo {
	x.mu.Lock()
	defer x.unlock()
	return x.loadInfo
}
