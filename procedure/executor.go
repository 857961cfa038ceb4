package procedure

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// Executor runs procedures. Create it with New, then Start it (which loads
// the store), submit procedures, and Stop it.
type Executor struct {
	cfg     Config
	log     hclog.Logger
	clock   clock.Clock
	store   store.Store
	reg     *Registry
	sched   *scheduler.Scheduler
	metrics *metrics
	tracer  trace.Tracer // nil: tracing off

	ctx    context.Context // cancelled by Stop: steps should return soon
	cancel context.CancelFunc

	mu     sync.Mutex
	procs  map[uint64]*entry
	roots  map[uint64]*rootState
	nonces map[string]*nonceEntry
	// finished are the finished roots kept for their results, by id; fin
	// indexes them (finished.go).
	finished finishedTable
	fin      *finishedIndex
	// children finds the finished root of a descendant it keeps a
	// summary of (childsummary.go).
	children childIndex
	// forgetting are the live trees that forgot members as they
	// succeeded (ForgetsChildren), by root id: Get finds such a member in
	// its tree's forgottenSums until finishRoot indexes the root's record
	// in children (checked first), in the same hold of mu; retirement
	// drops the tree from here.
	forgetting map[uint64]*rootState
	problems   map[uint64]LoadProblem
	nextID     uint64
	started    bool
	// loaded is set, and loadedCh closed, once Start has loaded the
	// store: ids and nonces are known only from then on.
	loaded       bool
	loadedCh     chan struct{}
	stopping     bool
	fatal        error
	listeners    []Listener
	changeLs     []ChangeListener
	lockWaiters  []LockWaitListener
	workers      map[*worker]struct{}
	extra        int
	wg           sync.WaitGroup
	evictTimer   clock.Timer
	monitorTimer clock.Timer
	loadInfo     store.LoadInfo
	toRelease    []uint64 // lock holders to release once mu is unlocked
	// live are the procedure counts a scrape reports, kept as procs
	// changes (metrics.go).
	live liveCounts

	// inFlight counts the steps running on a worker now.
	inFlight atomic.Int64
	// stuck is the newest count of stuck procedures, which the scrapes
	// that follow it closely share (metrics.go).
	stuck stuckCount
}

type nonceEntry struct {
	id   uint64
	err  error
	held string // why the procedure id was held at load; "" if it runs
	done chan struct{}
}

type worker struct {
	keepAlive bool
	stepStart atomic.Int64 // unix nanos of the running step's start, 0 if idle
	// began: the current turn's step got past its first look (the tree
	// not failed, the procedure runnable), so its code, an abort's
	// handling or a bypass may have run. Only the worker's goroutine
	// reads and writes it.
	began bool
}

// Listener is told about every persisted transition of a procedure. It runs
// on the worker that made the transition and must not block.
type Listener func(Info)

// Change is what a ChangeListener hears of a transition: which procedure
// moved, in which tree, and its state now.
type Change struct {
	ID, ParentID, RootID uint64
	Type                 string
	State                State
}

// ChangeListener is told about every transition a Listener is, with a
// Change instead of an Info: a listener that needs no more than who moved
// spares every transition of every procedure the copy of its Info (its
// runs, history, result and progress), which at hundreds of thousands of
// region children a second is a measurable share of the leader. It runs
// on the worker that made the transition and must not block.
type ChangeListener func(Change)

// LockWaitListener is told that procedure id was parked behind a
// conflicting lock. Parking is not a persisted transition (a restart parks
// it again), so Listeners never hear of it; a caller that answers "waiting"
// to its own client needs to. It runs on the worker that parked the
// procedure, without the executor's locks held, and must not block.
type LockWaitListener func(id uint64)

// New builds an executor; it does not touch the store until Start.
func New(cfg Config) (*Executor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	x := &Executor{
		cfg:        cfg,
		log:        cfg.Logger.Named("executor"),
		clock:      cfg.Clock,
		store:      cfg.Store,
		reg:        cfg.Registry,
		metrics:    m,
		tracer:     cfg.Tracer,
		procs:      make(map[uint64]*entry),
		roots:      make(map[uint64]*rootState),
		nonces:     make(map[string]*nonceEntry),
		forgetting: make(map[uint64]*rootState),
		fin:        newFinishedIndex(cfg.Store),
		problems:   make(map[uint64]LoadProblem),
		workers:    make(map[*worker]struct{}),
		nextID:     1,
		live:       newLiveCounts(),
		loadedCh:   make(chan struct{}),
	}
	x.ctx, x.cancel = context.WithCancel(context.Background())
	x.sched = scheduler.New(scheduler.Config{Wake: x.onSchedWake, Clock: x.clock})
	m.live.x.Store(x) // the newest executor on a registry is the one scraped
	return x, nil
}

// Loaded is closed once Start has loaded the store and the executor
// accepts submissions. Before, Submit fails with ErrNotStarted; a caller
// that holds the executor from before Start (a leader's services) waits
// on Loaded rather than polling. It is never closed if the load fails.
func (x *Executor) Loaded() <-chan struct{} { return x.loadedCh }

// Scheduler exposes the executor's scheduler, for events and introspection.
func (x *Executor) Scheduler() *scheduler.Scheduler { return x.sched }

// AddListener registers l for every later transition.
func (x *Executor) AddListener(l Listener) {
	x.mu.Lock()
	x.listeners = append(x.listeners, l)
	x.unlock()
}

// AddChangeListener registers l for every later transition.
func (x *Executor) AddChangeListener(l ChangeListener) {
	x.mu.Lock()
	x.changeLs = append(x.changeLs, l)
	x.unlock()
}

// AddLockWaitListener registers l for every later parking of a procedure
// behind a conflicting lock.
func (x *Executor) AddLockWaitListener(l LockWaitListener) {
	x.mu.Lock()
	x.lockWaiters = append(x.lockWaiters, l)
	x.unlock()
}

// notifyLockWait tells the lock-wait listeners that id was parked. Called
// without x.mu held.
func (x *Executor) notifyLockWait(id uint64) {
	x.mu.Lock()
	ls := x.lockWaiters
	x.unlock()
	for _, l := range ls {
		l(id)
	}
}

// Start loads every procedure from the store, then starts the workers.
func (x *Executor) Start() error {
	x.mu.Lock()
	if x.started {
		x.unlock()
		return fmt.Errorf("%w: Start called twice", ErrNotAllowed)
	}
	x.started = true
	x.unlock()
	if err := x.load(); err != nil {
		return err
	}
	x.mu.Lock()
	// Only now may Submit hand out ids: before load set nextID past every
	// stored procedure, a submission would take id 1 and its insert would
	// overwrite whatever procedure holds it (a load at a million regions
	// takes seconds, and a new leader's services submit crash procedures
	// meanwhile).
	x.loaded = true
	close(x.loadedCh)
	for i := 0; i < x.cfg.Workers; i++ {
		x.startWorkerLocked(false)
	}
	x.unlock()
	x.armEvictor()
	x.armMonitor()
	return nil
}

// Stop stops the executor gracefully: running steps finish and persist
// their outcome, nothing new starts, and every unfinished procedure stays
// resumable by the next Start. It waits for workers until ctx ends.
func (x *Executor) Stop(ctx context.Context) error {
	x.mu.Lock()
	if x.stopping {
		x.unlock()
		return x.waitWorkers(ctx)
	}
	x.stopping = true
	x.stopAllTimersLocked()
	for _, r := range x.roots {
		if r.rbTimer != nil {
			r.rbTimer.Stop()
		}
	}
	endSpans := x.endAllSpansLocked()
	x.unlock()
	x.stopMetrics()
	endSpans()
	x.cancel()
	x.sched.Close()
	return x.waitWorkers(ctx)
}

// stopMetrics takes a stopping executor out of the scrape: the next
// leader's executor reports the procedures from then on, and until it
// does, none reports them twice.
func (x *Executor) stopMetrics() {
	x.metrics.live.x.CompareAndSwap(x, nil)
	x.metrics.stuck.Set(0)
}

func (x *Executor) waitWorkers(ctx context.Context) error {
	done := make(chan struct{})
	go func() { x.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("procedure: stop: workers still running: %w", ctx.Err())
	}
}

// stopAllTimersLocked stops the executor's timers and every procedure's.
func (x *Executor) stopAllTimersLocked() {
	for _, t := range []clock.Timer{x.evictTimer, x.monitorTimer} {
		if t != nil {
			t.Stop()
		}
	}
	for _, e := range x.procs {
		stopTimers(e)
	}
}

func stopTimers(e *entry) {
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	if e.deadlineTimer != nil {
		e.deadlineTimer.Stop()
		e.deadlineTimer = nil
	}
}

// Err reports why the executor stopped on its own (a store failure), or nil.
func (x *Executor) Err() error {
	x.mu.Lock()
	defer x.unlock()
	return x.fatal
}

// setFatal stops all work after the store failed: from here on nothing is
// persisted, so nothing may run either. The store's contents are the truth
// for the next Start.
func (x *Executor) setFatal(err error) {
	x.mu.Lock()
	if x.fatal != nil {
		x.unlock()
		return
	}
	x.fatal = fmt.Errorf("%w: %w", ErrStoreFailed, err)
	x.stopping = true
	x.stopAllTimersLocked()
	roots := make([]*rootState, 0, len(x.roots))
	for _, r := range x.roots {
		roots = append(roots, r)
	}
	endSpans := x.endAllSpansLocked()
	x.unlock()
	x.stopMetrics()
	endSpans()
	x.log.Error("store failed; executor stopped, procedures resume from the store on restart", "error", err)
	x.cancel()
	x.sched.Close()
	for _, r := range roots {
		r.closeDone()
	}
}

func (r *rootState) closeDone() {
	r.doneOnce.Do(func() { close(r.doneCh) })
}

func (x *Executor) startWorkerLocked(keepAlive bool) {
	w := &worker{keepAlive: keepAlive}
	x.workers[w] = struct{}{}
	if keepAlive {
		x.extra++
	}
	x.metrics.workers.Set(float64(len(x.workers)))
	x.wg.Add(1)
	go x.workerLoop(w)
}

func (x *Executor) workerLoop(w *worker) {
	defer x.wg.Done()
	defer func() {
		x.mu.Lock()
		delete(x.workers, w)
		if w.keepAlive {
			x.extra--
		}
		x.metrics.workers.Set(float64(len(x.workers)))
		x.unlock()
	}()
	timeout := time.Duration(-1)
	if w.keepAlive {
		timeout = x.cfg.KeepAliveTime
	}
	for {
		id, ok := x.sched.Poll(timeout)
		if !ok {
			return
		}
		x.runProc(w, id)
	}
}

// claim marks e as owned by the caller; false if someone else owns it (the
// owner will queue it again when done).
func (x *Executor) claimLocked(e *entry) bool {
	if e.running {
		e.rerun = true
		return false
	}
	e.running = true
	return true
}

func (x *Executor) unclaimLocked(e *entry) {
	e.running = false
	if e.rerun && !e.spawning {
		e.rerun = false
		if e.state == Runnable || (x.roots[e.root] != nil && x.roots[e.root].failed) {
			x.sched.AddFront(e.id, e.key)
		}
	}
}

// testHookLocksTaken, set only by tests, runs in runProc once e has its
// locks, before its first step: a failure elsewhere in its tree can be
// made to land there.
var testHookLocksTaken func(e *entry)

// runProc is a worker's turn at procedure id.
func (x *Executor) runProc(w *worker, id uint64) {
	x.mu.Lock()
	e := x.procs[id]
	if e == nil || x.stopping {
		x.unlock()
		return
	}
	root := x.roots[e.root]
	if root == nil || root.done {
		x.unlock()
		return
	}
	if root.failed {
		if root.running == 0 && !root.rolling {
			root.rolling = true
			root.running++
			x.unlock()
			x.rollback(w, root)
			return
		}
		if root.rolling {
			// The roller may be past its last look at the tree (a retry
			// timer, a lock wake or an API call queued this turn as it
			// left): it takes the turn again once it is done.
			root.rbRerun = true
		}
		x.unlock()
		return
	}
	if e.state != Runnable {
		x.unlock()
		return
	}
	if e.paused {
		e.pausedParked = true
		x.unlock()
		return
	}
	if !x.claimLocked(e) {
		x.unlock()
		return
	}
	root.running++
	grantedNow := false
	// A bypassed procedure runs no step, so it needs no lock (a forced
	// Bypass is how a repairer gets a lock waiter out of the way).
	if len(e.locks) > 0 && !e.locked && !e.bypass {
		if x.abortRequestedLocked(e) {
			// Failing runs none of its code: it need not wait for locks
			// (the rollback takes those of each step it undoes).
			x.unlock()
			aborted := x.abortBeforeStep(e, root)
			x.mu.Lock()
			if aborted {
				x.endRunLocked(e, root)
				x.unlock()
				return
			}
		}
		x.setLockWaitLocked(e, true)
		anc := x.ancestorsLocked(e)
		x.unlock()
		granted := x.sched.Acquire(e.id, e.key, anc, e.locks)
		x.mu.Lock()
		if !granted {
			parked := e.lockWait
			if !parked {
				// An Abort or a Bypass took it out of the lock wait while
				// Acquire was parking it: it must not stay parked.
				x.sched.CancelLockWait(e.id)
				e.rerun = true
			} else {
				x.noteLockParkedLocked(e)
			}
			x.endRunLocked(e, root)
			x.unlock()
			if parked {
				x.notifyLockWait(e.id)
			}
			return
		}
		x.noteLocksGrantedLocked(e)
		x.setLockWaitLocked(e, false)
		e.locked = true
		grantedNow = true
	}
	x.unlock()
	if h := testHookLocksTaken; h != nil {
		h(e)
	}

	w.began = false
	for x.step(w, e, root) {
	}

	x.mu.Lock()
	// Locks held for life are let go of too when this turn took them and
	// then found the tree failed before its step began (another member
	// failed meanwhile): nothing ran under them and nothing was written
	// with them, and the rollback, which undoes only the steps on the
	// tree's stack, would not let go of them before its end, while an
	// ancestor's step it undoes may wait for them (HBASE-28876's
	// scenario, stalled in CI). Locks taken for e by its parent
	// (AddLockedChild) or kept from a step that ran stay; so do those of a
	// member with steps on the stack, taken again after a load that could
	// not (the rollback needs them for its steps).
	if e.locked && !e.state.Terminal() && (!e.holdLock || grantedNow && !w.began && root.failed && len(e.stack) == 0) {
		x.releaseLocksBeforeUnclaimLocked(e)
	}
	x.writeDirtyLocked(e)
	x.endRunLocked(e, root)
	if e.yielded {
		e.yielded = false
		switch {
		case x.stopping || root.failed || e.state != Runnable:
		case e.paused:
			e.pausedParked = true
		default:
			x.sched.AddBack(e.id, e.key)
		}
	}
	x.unlock()
}

// writeDirtyLocked writes e, claimed by the caller, again while an API
// call changed it during the caller's writes (persistIdle leaves the write
// to whoever holds e); x.mu is held on entry and on return, so the caller
// lets go of e with nothing left unwritten. A failed write stops the
// executor, which ends the loop.
func (x *Executor) writeDirtyLocked(e *entry) {
	for e.dirty && !x.stopping && !e.forgotten {
		if !e.isRoot() && e.state.Terminal() {
			// Its end is written (by the caller, before this), and what
			// changed since means nothing to an ended child; written
			// again, its record could land after its tree's end deleted
			// it, as persistIdle's would.
			e.dirty = false
			return
		}
		x.unlock()
		x.persist(e)
		x.mu.Lock()
	}
}

func (x *Executor) endRunLocked(e *entry, root *rootState) {
	root.running--
	x.unclaimLocked(e)
	if root.done && e == root.entry {
		// Its waiters, told next, find what is kept of it.
		x.retireLocked(e, e.lastRec)
		root.closeDone()
	}
	if root.failed && root.running == 0 && !root.done {
		x.sched.AddFront(root.id, root.entry.key)
	}
}

// releaseLocksLocked drops e's locks. The scheduler call is deferred to
// unlock: releasing wakes waiters through onSchedWake, which takes x.mu.
func (x *Executor) releaseLocksLocked(e *entry) {
	if e.locked {
		e.locked = false
		x.toRelease = append(x.toRelease, e.id)
	}
}

// releaseLocksBeforeUnclaimLocked drops e's locks, claimed by the caller,
// in the scheduler before the caller lets go of e: it unlocks x.mu to do
// so, and returns with x.mu held again. A release left to the unlock that
// also unclaims e (and queues it, after a yield) runs once another worker
// may have taken e again: that worker's Acquire found e's own hold and was
// granted, and the late Release dropped the locks under its running step
// (an exclusive lock shared), or it parked e behind another holder, and
// the late Release, which also takes id out of any lock wait, took e out
// of the wait queue without a wake: e stayed parked for good
// (TestScenarioCONDUCTOR1259MissedWakeUp).
func (x *Executor) releaseLocksBeforeUnclaimLocked(e *entry) {
	if !e.locked {
		return
	}
	x.releaseLocksLocked(e)
	x.unlock()
	x.mu.Lock()
}

// unlock releases x.mu, then hands the scheduler the lock releases queued
// while it was held.
func (x *Executor) unlock() {
	rel := x.toRelease
	x.toRelease = nil
	x.mu.Unlock()
	for _, id := range rel {
		x.sched.Release(id)
	}
}

// ancestorsLocked lists the ancestors of e whose locks e may share: those
// holding theirs for life. One that locks for its step lets go of its
// locks when that step ends, and the step that spawns e can still be
// ending when e runs: sharing the lock then, e would hold nothing once
// the step ends, and another procedure could take what e acts on. e waits
// for such a lock instead, as for any other holder's.
func (x *Executor) ancestorsLocked(e *entry) []uint64 {
	var anc []uint64
	for p := e.parent; p != 0; {
		pe := x.procs[p]
		if pe == nil {
			anc = append(anc, p)
			break
		}
		if pe.holdLock {
			anc = append(anc, p)
		}
		p = pe.parent
	}
	return anc
}

// step runs one step of e (claimed by the caller) and reports whether the
// next step should run at once on this worker.
func (x *Executor) step(w *worker, e *entry, root *rootState) bool {
	x.mu.Lock()
	if x.stopping || root.failed || e.state != Runnable || e.paused {
		if e.paused && e.state == Runnable {
			e.pausedParked = true
		}
		x.unlock()
		return false
	}
	w.began = true
	if e.bypass {
		x.unlock()
		x.log.Warn("procedure bypassed: finishing without running it", "id", e.id, "type", e.ti.name)
		x.complete(e, root)
		return false
	}
	timedOut := e.timedOut
	e.timedOut = false
	abort := e.abort && !e.untilDone
	if !e.deadline.IsZero() && !x.clock.Now().Before(e.deadline) && !e.untilDone {
		e.abort, abort = true, true
	}
	repeats, spins := e.repeats, e.spins
	topIsSelf := len(root.stack) > 0 && root.stack[len(root.stack)-1] == e
	x.unlock()

	ctx := &Context{Context: x.ctx, Env: x.cfg.Env, x: x, e: e, abort: abort, repeats: repeats, spins: spins}
	ctx.initLogger(x.log, e, false)
	// Children reserved by AddLockedChild that the step's spawn did not
	// write let go of their locks; their ids stay unused.
	defer func() {
		x.releaseReserved(ctx.reserved)
		for _, fn := range ctx.afterSpawn {
			fn(SpawnOutcome{}) // never spawned (spawn ran them if it wrote)
		}
	}()
	if e.untilDone {
		// A failing step runs the same state again.
		e.beforeStep = snapshotMachine(e)
		defer func() { e.beforeStep = nil }()
	}

	if timedOut {
		if th, ok := e.proc.(TimeoutHandler); ok {
			if err := safeCall(func() error { return th.OnTimeout(ctx) }); err != nil {
				x.fail(e, root, fmt.Errorf("%w: %w", ErrTimeout, err), false)
				return false
			}
		}
	}
	if abort {
		if _, sm := e.proc.(stateMachineProcedure); !sm {
			canAbort := true
			if ab, ok := e.proc.(Aborter); ok {
				canAbort = ab.CanAbort(ctx)
			}
			if canAbort {
				x.fail(e, root, x.abortCause(e), false)
				return false
			}
		}
	}

	var procSpan context.Context
	if x.tracer != nil {
		x.mu.Lock()
		procSpan = x.procSpanLocked(e)
		x.unlock()
	}

	w.stepStart.Store(x.clock.Now().UnixNano())
	x.inFlight.Add(1)
	var (
		st     Step
		pushed bool
		err    error
	)
	// The wall clock, not x.clock: the histogram measures real latency,
	// which a test's manual clock would report as zero.
	began := time.Now()
	var span trace.Span
	if x.tracer != nil {
		ctx.Context, span = x.stepSpan(e, procSpan, e.ti.stepSpan, repeats)
	}
	defer func() {
		e.stepMetrics(x.metrics).duration.Observe(time.Since(began).Seconds())
		if span != nil {
			endStepSpan(span, outcomeOf(st, err), err)
		}
	}()
	histLen := -1
	if sm, ok := e.proc.(stateMachineProcedure); ok {
		histLen = len(sm.machine().history)
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("procedure panicked: %v\n%s", r, debug.Stack())
				// The panicking step is rolled back like a failed one; for
				// a state machine only if it was a new history entry, so
				// history and stack positions stay one to one.
				pushed = histLen < 0 || len(e.proc.(stateMachineProcedure).machine().history) > histLen
			}
		}()
		switch p := e.proc.(type) {
		case stateMachineProcedure:
			st, pushed, err = x.runState(ctx, p, topIsSelf)
			if errors.Is(err, ErrAborted) {
				err = x.abortCause(e)
			}
		case Stepper:
			st, err = p.Execute(ctx)
			pushed = true // every step of a Stepper is rolled back, a failed one too
		}
	}()
	w.stepStart.Store(0)
	x.inFlight.Add(-1)
	e.stepMetrics(x.metrics).steps.Inc()
	e.resumed = false // its first step since the load has run

	if err != nil && x.ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// The step gave up because we are stopping: that is not a failure.
		// Nothing is persisted; the step runs again after restart.
		if sm, ok := e.proc.(stateMachineProcedure); ok && pushed {
			m := sm.machine()
			m.history = m.history[:len(m.history)-1]
		}
		return false
	}
	if err == nil && len(ctx.reserved) > 0 && st.kind != stepChildren {
		// The step wrote in the name of children it then did not spawn
		// (it suspended, yielded, or returned More or Done): committing
		// those writes would name ids no record holds, which a restart
		// can hand out again. The step fails instead, its writes unsent.
		err = fmt.Errorf("procedure: a step that reserved children with AddLockedChild must end by spawning them")
	}
	if err != nil {
		x.fail(e, root, err, pushed)
		return false
	}

	prog, hasProg := progressOf(e.proc)
	x.mu.Lock()
	if left := e.childLatch; st.kind == stepDone && left > 0 {
		x.unlock()
		// Woken before its children finished (WakeAtChildren), it
		// would leave them running under an ended procedure.
		x.fail(e, root, fmt.Errorf("procedure: a step ended the procedure with %d children unfinished", left), pushed)
		return false
	}
	e.childWake = ctx.childWake
	if hasProg {
		e.progress = prog
	}
	if e.failures > 0 {
		e.failures, e.errMsg, e.errCode = 0, "", ""
	}
	if pushed {
		x.pushLocked(root, e)
	} else if e.repeats < math.MaxInt32 {
		e.repeats++
	}
	// Only a state that asks to run again at once, on the same worker and
	// without anything to wait for, spins; waiting (a suspension, its wake
	// or timeout, children, a yield) is progress, however long it lasts.
	if st.kind == stepMore && !pushed {
		e.spins++
	} else if st.kind != stepMore {
		e.spins = 0
	}
	x.unlock()
	e.muts = ctx.muts // committed by the write of this step's outcome

	switch st.kind {
	case stepYield:
		// Persisted like More; then the worker lets go, and runProc puts
		// the procedure at the back of its queue once it is released.
		if !x.persist(e) {
			return false
		}
		x.mu.Lock()
		e.yielded = true
		x.unlock()
		return false
	case stepDone:
		x.complete(e, root)
		return false
	case stepMore:
		if !x.persist(e) {
			return false
		}
		return true
	case stepChildren:
		if x.spawn(e, root, st.children, st.reserved, pushed, ctx.afterSpawn) {
			ctx.reserved, ctx.afterSpawn = nil, nil // theirs now; run
		}
		return false
	case stepSuspend:
		x.suspend(e, st, abort)
		return false
	}
	return false
}

// abortRequestedLocked reports whether e's next step boundary is an abort:
// it was aborted, or its deadline passed.
func (x *Executor) abortRequestedLocked(e *entry) bool {
	if e.untilDone {
		return false
	}
	return e.abort || !e.deadline.IsZero() && !x.clock.Now().Before(e.deadline)
}

// abortBeforeStep fails e (claimed, abort requested) for its abort if it is
// abortable now without running a step: a state machine whose next state
// supports rollback, a Stepper whose CanAbort agrees. It reports whether it
// did.
func (x *Executor) abortBeforeStep(e *entry, root *rootState) bool {
	abortable, pushed := true, false
	switch p := e.proc.(type) {
	case stateMachineProcedure:
		m := p.machine()
		state := m.next
		if !m.started {
			state = p.InitialState()
		}
		abortable = !m.eof && rollbackSupported(p, state)
		if abortable && e.resumed {
			// As in runState: the state next to run may have run on the
			// executor that died; it is rolled back too.
			x.mu.Lock()
			topIsSelf := len(root.stack) > 0 && root.stack[len(root.stack)-1] == e
			x.unlock()
			if !(topIsSelf && len(m.history) > 0 && m.history[len(m.history)-1] == state) {
				m.started, m.next = true, state
				m.history = append(m.history, state)
				pushed = true
			}
		}
	default:
		if ab, ok := e.proc.(Aborter); ok {
			ctx := &Context{Context: x.ctx, Env: x.cfg.Env, x: x, e: e, abort: true}
			ctx.initLogger(x.log, e, false)
			abortable = ab.CanAbort(ctx)
		}
	}
	if !abortable {
		return false
	}
	x.mu.Lock()
	e.abort = true // a passed deadline, made durable with the failure
	x.unlock()
	e.resumed = false
	x.fail(e, root, x.abortCause(e), pushed)
	return true
}

func (x *Executor) abortCause(e *entry) error {
	x.mu.Lock()
	defer x.unlock()
	if !e.deadline.IsZero() && !x.clock.Now().Before(e.deadline) {
		return fmt.Errorf("%w: deadline %s passed", ErrTimeout, e.deadline.Format(time.RFC3339Nano))
	}
	return ErrAborted
}

func safeCall(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	return f()
}

func (x *Executor) pushLocked(root *rootState, e *entry) {
	e.stack = append(e.stack, root.nextPos)
	root.nextPos++
	root.stack = append(root.stack, e)
	e.repeats, e.spins = 0, 0
}

// unpushLocked takes back e's newest rollback-stack position. Other
// members may have pushed since: e's newest entry is its last one in the
// stack. The position stays unused, a gap like those a crash leaves.
func (x *Executor) unpushLocked(root *rootState, e *entry) {
	if len(e.stack) == 0 {
		return
	}
	e.stack = e.stack[:len(e.stack)-1]
	for i := len(root.stack) - 1; i >= 0; i-- {
		if root.stack[i] == e {
			root.stack = slices.Delete(root.stack, i, i+1)
			return
		}
	}
}

// machineSnapshot is where a state machine stood before a step.
type machineSnapshot struct {
	started, eof bool
	next         int32
	history      int
}

// snapshotMachine notes where e's state machine stands; nil for a Stepper.
func snapshotMachine(e *entry) *machineSnapshot {
	sm, ok := e.proc.(stateMachineProcedure)
	if !ok {
		return nil
	}
	m := sm.machine()
	return &machineSnapshot{started: m.started, eof: m.eof, next: m.next, history: len(m.history)}
}

// restoreMachine takes back what a failed run did to e's state machine:
// the state it picked and the history entry it added.
func restoreMachine(e *entry, s *machineSnapshot) {
	if sm, ok := e.proc.(stateMachineProcedure); ok && s != nil {
		m := sm.machine()
		m.started, m.eof, m.next, m.nextSet = s.started, s.eof, s.next, false
		m.history = m.history[:min(s.history, len(m.history))]
	}
}

// complete finishes e with success.
func (x *Executor) complete(e *entry, root *rootState) {
	x.mu.Lock()
	x.setStateLocked(e, Success)
	e.finishedAt = x.clock.Now()
	if e.isRoot() {
		e.stack = nil // nothing of a finished tree is ever rolled back
		x.unlock()
		x.finishRoot(root, e)
		return
	}
	forget := x.forgettableLocked(e)
	x.unlock()
	if forget {
		if !x.persistForgotten(e) {
			return
		}
	} else if !x.persist(e) {
		return
	}
	x.mu.Lock()
	x.releaseLocksLocked(e)
	if p := x.procs[e.parent]; p != nil {
		p.childLatch = max(p.childLatch-1, 0)
		if x.childrenReadyLocked(p) {
			x.queueLocked(p, true)
		}
	}
	if forget {
		x.forgetChildLocked(root, e)
	}
	x.unlock()
}

// forgettableLocked says e, a child that succeeded, is forgotten rather
// than kept until its root ends (ForgetsChildren): it spawned no children,
// its parent forgets its children, nothing will ever roll e back or what
// would is covered, and the store can delete e's record in the write that
// commits its last step's effect. Nothing rolls e back when every
// ancestor retries until done: a failure below such an ancestor rolls
// back only the subtree of its child, and e's subtree is done. What would
// is covered when its parent's rollback undoes its children's effects
// (RollbackCoversChildren): whatever rollback takes e in takes its parent
// too, the parent being in every unit e is in (e is never a unit's top
// below a parent that does not retry until done, and as the top below
// one that does, e's finished subtree never rolls back).
func (x *Executor) forgettableLocked(e *entry) bool {
	if _, ok := x.store.(store.DeleteMutator); !ok || e.state != Success {
		return false
	}
	// A child with children of its own is kept: their records (a rolled
	// back one's, or one a parent that does not forget keeps) would
	// outlive it and name a parent gone, which a restart's load takes for
	// a broken tree and holds.
	if len(e.children) > 0 {
		return false
	}
	p := x.procs[e.parent]
	if p == nil || !p.forgetsChildren {
		return false
	}
	if p.coversChildren {
		return true
	}
	for a := p; ; {
		if !a.untilDone {
			return false
		}
		if a.parent == 0 {
			return true
		}
		if a = x.procs[a.parent]; a == nil {
			return false
		}
	}
}

// persistForgotten is persist for a child being forgotten: its last
// step's effect and the deletion of its record, in one write. There is no
// record to write, so nothing of it can fail to serialise.
func (x *Executor) persistForgotten(e *entry) bool {
	muts := e.muts
	e.muts = nil
	if err := x.store.(store.DeleteMutator).DeleteAndMutate([]uint64{e.id}, muts); err != nil {
		x.setFatal(err)
		return false
	}
	x.written(e, nil)
	return true
}

// written is what follows a write of e that committed: a finished root
// keeps its last record (rec, nil if none was written), e's span ends if
// it is done, and the listeners hear of it.
func (x *Executor) written(e *entry, rec *store.Proc) {
	x.mu.Lock()
	e.endUnwritten, e.suspendUnwritten = false, false
	if rec != nil && x.fin.recs != nil && e.isRoot() && e.state.Terminal() {
		e.lastRec = rec.Data
	}
	var endSpan func()
	if e.span != nil {
		endSpan = x.endSpanIfDoneLocked(e)
	}
	// What the listeners hear is taken in the same hold of x.mu: one
	// lock less per write.
	h := x.hearingLocked(e)
	x.unlock()
	if endSpan != nil {
		endSpan()
	}
	h.tell()
}

// forgetChildLocked lets go of e, a child whose record its last write
// deleted: as finishRoot does for every member, but now. Its elements of
// the rollback stack are left for the rollback to skip, and swept out
// once they are half the stack, so that forgetting costs no walk of a
// stack that holds a step of each of hundreds of thousands of children.
func (x *Executor) forgetChildLocked(root *rootState, e *entry) {
	stopTimers(e)
	if e.event != nil {
		x.sched.RemoveWaiter(e.event, e.id)
		e.event = nil
	}
	// Nothing is written of it again: an API call that changed it while
	// it ran would otherwise write its record back.
	e.dirty = false
	e.forgotten = true
	root.forgottenSums.add(root.id, root.entry.submitted, summaryOf(e), e.ti)
	x.forgetting[root.id] = root
	delete(root.members, e.id)
	x.forgetLocked(e.id)
	root.forgottenInStack += len(e.stack)
	if root.forgottenInStack >= forgottenSweepMin && 2*root.forgottenInStack >= len(root.stack) {
		root.stack = slices.DeleteFunc(root.stack, func(m *entry) bool { return m.forgotten })
		root.forgottenInStack = 0
	}
}

// forgottenSweepMin is the fewest forgotten stack elements swept out at
// once: below it a sweep costs more than the pointers it frees.
const forgottenSweepMin = 1024

// finishRoot persists the root's terminal state, forgets its descendants
// (deleting them from the store) and keeps the root for its result.
func (x *Executor) finishRoot(root *rootState, e *entry) {
	if !x.persist(e) {
		return
	}
	x.mu.Lock()
	var descendants []uint64
	for id, m := range root.members {
		x.releaseLocksLocked(m)
		stopTimers(m)
		if m.event != nil {
			x.sched.RemoveWaiter(m.event, m.id)
			m.event = nil
		}
		if id != root.id {
			descendants = append(descendants, id)
			// An API call's write may be on its way (a member that never
			// ran is not terminal; see persistIdle): it must not write
			// the record again, and deletes what it wrote.
			m.forgotten, m.dirty = true, false
			x.forgetLocked(id)
			if m.span != nil {
				// Finished and persisted before the root: ended already,
				// unless its last write failed.
				m.span.End()
				m.span, m.spanCtx = nil, nil
			}
		}
	}
	if e.deadlineTimer != nil {
		e.deadlineTimer.Stop()
		e.deadlineTimer = nil
	}
	root.members = map[uint64]*entry{root.id: e}
	root.stack = nil
	root.done = true
	// Its descendants left the table above: from here Get finds them in
	// its written record's summaries, as it will once the root is retired.
	x.indexChildrenLocked(e)
	outcome := e.state.String()
	dur := e.finishedAt.Sub(e.submitted)
	x.unlock()
	if len(descendants) > 0 {
		if err := x.store.Delete(descendants); err != nil {
			x.setFatal(err)
			return
		}
	}
	x.metrics.duration.WithLabelValues(e.ti.name, outcome).Observe(dur.Seconds())
	// Waiters are released by the caller once it let go of e, so that what
	// they do next (Ack, eviction) never finds it still claimed.
}

func (x *Executor) queueLocked(e *entry, front bool) {
	if e.spawning {
		return // its spawn queues it or parks it once its AfterSpawn calls are made
	}
	if front {
		x.sched.AddFront(e.id, e.key)
	} else {
		x.sched.AddBack(e.id, e.key)
	}
}

// fail marks e FAILED and the tree as failed; the rollback starts once no
// member of the tree is running.
func (x *Executor) fail(e *entry, root *rootState, cause error, pushed bool) {
	e.muts = nil // a failed step's domain changes never commit
	if e.untilDone {
		x.retryLater(e, cause)
		return
	}
	x.mu.Lock()
	if pushed {
		x.pushLocked(root, e)
	}
	x.setStateLocked(e, Failed)
	e.errMsg, e.errCode = cause.Error(), ErrorCode(cause)
	if !root.failed {
		root.failed = true
		root.cause = fmt.Sprintf("proc %d (%s): %s", e.id, e.ti.name, e.errMsg)
		root.causeCode = e.errCode
	}
	unit := x.unitOfLocked(e).id
	x.unlock()
	x.metrics.failed.WithLabelValues(e.ti.name).Inc()
	x.log.Info("procedure failed; rolling back", "id", e.id, "type", e.ti.name, "root", e.root, "rolls_back", unit, "error", cause)
	x.persist(e)
}

// retryLater parks a RetriesUntilDone procedure whose step failed until its
// backoff passes; then the step runs again (a state machine's failed run
// is taken back first: the same state runs again). Nothing is persisted:
// the store still holds the outcome of the step before, so a restart runs
// the failed step again at once.
func (x *Executor) retryLater(e *entry, cause error) {
	restoreMachine(e, e.beforeStep)
	x.mu.Lock()
	e.failures++
	attempt := e.failures
	if e.repeats < math.MaxInt32 {
		e.repeats++
	}
	e.spins = 0
	e.errMsg, e.errCode = cause.Error(), ErrorCode(cause)
	delay := Backoff{Base: x.cfg.RollbackBackoff, Max: x.cfg.RollbackBackoffMax, Jitter: 0.1}.Delay(attempt)
	x.setStateLocked(e, WaitingTimeout)
	e.waitUntil = x.clock.Now().Add(delay)
	if e.locked && !e.holdLock {
		x.releaseLocksLocked(e)
	}
	if !x.stopping {
		x.armWaitLocked(e, nil)
		e.retryWait = true
	}
	x.unlock()
	x.log.Warn("step failed; the procedure cannot roll back, so it runs the step again", "id", e.id, "type", e.ti.name,
		"root", e.root, "attempt", attempt, "retry_in", delay, "error", cause)
}

// reserveChild makes the entry of a child that parent's running step adds
// with AddLockedChild: its id now, and its locks if they are free.
func (x *Executor) reserveChild(parent *entry, p Procedure) (*entry, error) {
	ti, err := x.reg.lookup(p)
	if err != nil {
		return nil, err
	}
	k, err := x.newEntry(p, ti, parent.root, parent.id, x.clock.Now())
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	k.id = x.nextID
	x.nextID++
	// The parent's locks are the child's only if the parent keeps them
	// for its life (ancestorsLocked): otherwise its lock counts as taken,
	// and the child takes it when it runs.
	anc := x.ancestorsLocked(k)
	x.unlock()
	if len(k.locks) > 0 && k.holdLock {
		k.locked = x.sched.TryAcquire(k.id, anc, k.locks)
	}
	return k, nil
}

// releaseReserved lets go of the locks of reserved children that were not
// spawned.
func (x *Executor) releaseReserved(reserved []*entry) {
	for _, k := range reserved {
		if k != nil && k.locked {
			k.locked = false
			x.sched.Release(k.id)
		}
	}
}

// spawn persists e (now waiting) together with its new children, and
// reports whether they were written. pushed reports that the step that
// spawned them took a rollback-stack position. reserved holds, by
// position, the entries AddLockedChild made already (their ids, and their
// locks if taken).
func (x *Executor) spawn(e *entry, root *rootState, children []Procedure, reserved []*entry, pushed bool, after []func(SpawnOutcome)) bool {
	fail := func(cause error) {
		if e.untilDone && pushed {
			// The step is run again: its position goes with it.
			x.mu.Lock()
			x.unpushLocked(root, e)
			x.unlock()
		}
		x.fail(e, root, cause, false)
	}
	now := x.clock.Now()
	kids := make([]*entry, 0, len(children))
	for i, c := range children {
		if i < len(reserved) && reserved[i] != nil {
			kids = append(kids, reserved[i])
			continue
		}
		ti, err := x.reg.lookup(c)
		if err != nil {
			fail(err)
			return false
		}
		k, err := x.newEntry(c, ti, e.root, e.id, now)
		if err != nil {
			fail(err)
			return false
		}
		kids = append(kids, k)
	}
	x.mu.Lock()
	for _, k := range kids {
		if k.id == 0 {
			k.id = x.nextID
			x.nextID++
		}
		e.children = append(e.children, k.id)
		// An abort requested of e while its step ran reaches what it spawned.
		k.abort = e.abort && !k.untilDone
	}
	x.setStateLocked(e, Waiting)
	e.suspendUnwritten = true // shown WAITING once the Insert below commits
	e.childLatch += len(kids)
	e.unheldChildren += len(kids)
	x.unlock()
	if x.tracer != nil {
		// Before the records are written: each child persists its span.
		x.childSpans(e, kids)
	}
	endKidSpans := func(cause error) {
		for _, k := range kids {
			if k.span != nil {
				endProcSpan(k.span, Failed, cause.Error(), false)
				k.span = nil
			}
		}
	}

	unspawn := func(cause error) {
		endKidSpans(cause)
		x.mu.Lock()
		x.setStateLocked(e, Runnable)
		e.suspendUnwritten = false
		e.childLatch -= len(kids)
		e.children = e.children[:len(e.children)-len(kids)]
		e.unheldChildren -= len(kids)
		x.unlock()
		fail(cause)
	}
	parentRec, err := x.encode(e)
	if err != nil {
		unspawn(err)
		return false
	}
	recs := make([]store.Proc, len(kids))
	for i, k := range kids {
		r, err := x.encode(k)
		if err != nil {
			unspawn(fmt.Errorf("encoding child %T: %w", k.proc, err))
			return false
		}
		recs[i] = r
	}
	muts := e.muts
	e.muts = nil
	if len(muts) > 0 {
		err = x.store.(store.MutationStore).InsertAndMutate(parentRec, recs, muts)
	} else {
		err = x.store.Insert(parentRec, recs)
	}
	if err != nil {
		endKidSpans(err)
		x.setFatal(err)
		return false
	}
	x.mu.Lock()
	e.suspendUnwritten = false
	for _, k := range kids {
		x.holdLocked(k)
		root.members[k.id] = k
	}
	e.unheldChildren -= len(kids)
	// An abort that came while the children were being written found
	// none of them yet: they take it now.
	var late []*entry
	for _, k := range kids {
		if e.abort && !k.abort && !k.untilDone {
			k.abort = true
			late = append(late, k)
		}
	}
	suspended := false
	for _, k := range kids {
		suspended = suspended || k.startSuspended != nil
	}
	if len(after) == 0 && !suspended {
		// Children run before anything else queued: front, in spawn order.
		for i := len(kids) - 1; i >= 0; i-- {
			x.queueLocked(kids[i], true)
		}
		if x.childrenReadyLocked(e) {
			// Few enough left, counting these (WakeAtChildren): behind them.
			x.queueLocked(e, true)
		}
		x.unlock()
		x.notify(e)
		for _, k := range kids {
			x.notify(k)
		}
		for _, k := range late {
			x.persistIdle(k)
		}
		return true
	}
	// A step that made calls in its children's names (SuspendChild,
	// AfterSpawn): listeners hear of e and its children as written, and
	// the step's AfterSpawn calls are made, before any child can run. A
	// child woken early (an abort) must find the calls its parent made in
	// its name already made: a rollback's close must not overtake the open
	// its parent sent (the dispatcher keeps each server's calls in order),
	// and a child answered at once must not have its end heard before its
	// spawn.
	hs := make([]hearing, 0, len(kids)+1)
	hs = append(hs, x.hearingLocked(e))
	out := SpawnOutcome{Committed: true}
	for _, k := range kids {
		// Until the last loop below, nothing queues it: an API call
		// (Bypass, Resume, Abort) in the window only flags it.
		k.spawning = true
		hs = append(hs, x.hearingLocked(k))
		if k.startSuspended != nil && k.span != nil && len(after) > 0 {
			if out.spans == nil {
				out.spans = map[uint64]trace.SpanContext{}
			}
			out.spans[k.id] = k.span.SpanContext()
		}
	}
	x.unlock()
	for _, h := range hs {
		h.tell()
	}
	for _, fn := range after {
		fn(out)
	}
	x.mu.Lock()
	// Children run before anything else queued: front, in spawn order;
	// those the step suspended (SuspendChild) wait first.
	for i := len(kids) - 1; i >= 0; i-- {
		k := kids[i]
		st := k.startSuspended
		k.startSuspended, k.spawning = nil, false
		switch {
		case k.running:
			// An API call holds it: it queues it as it lets go
			// (unclaimLocked), and the child runs its first step itself.
			k.rerun = true
		case k.state != Runnable:
			// An API call in the window moved it on (paused and parked
			// it, or ended it): that is what resumes it, if anything.
		case st != nil:
			k.rerun = false
			x.parkNewLocked(k, *st)
		default:
			k.rerun = false
			x.queueLocked(k, true)
		}
	}
	if x.childrenReadyLocked(e) {
		// Few enough left, counting these (WakeAtChildren): behind them.
		x.queueLocked(e, true)
	}
	x.unlock()
	for _, k := range late {
		x.persistIdle(k)
	}
	return true
}

func (x *Executor) newEntry(p Procedure, ti *typeInfo, root, parent uint64, now time.Time) (*entry, error) {
	e := &entry{parent: parent, root: root, ti: ti, proc: p, state: Runnable, submitted: now, updated: now}
	return e, x.deriveLocked(e)
}

// deriveLocked fills the fields an entry takes from its procedure's
// optional interfaces, and refuses values the scheduler cannot take.
func (x *Executor) deriveLocked(e *entry) error {
	e.progress, _ = progressOf(e.proc)
	if q, ok := e.proc.(Queued); ok {
		e.key = q.QueueKey()
		if e.key.Kind > scheduler.KindTable {
			return fmt.Errorf("%w: %s: queue kind %d (want meta, server, peer or table)", ErrInvalid, e.ti.name, e.key.Kind)
		}
	} else {
		e.key = scheduler.QueueKey{Kind: scheduler.KindTable, Name: e.ti.name, Priority: scheduler.PriorityUser}
	}
	if r, ok := e.proc.(RetriesUntilDone); ok {
		e.untilDone = r.RetryUntilDone()
	}
	if f, ok := e.proc.(ForgetsChildren); ok {
		e.forgetsChildren = f.ForgetChildrenOnSuccess()
	}
	if c, ok := e.proc.(RollbackCoversChildren); ok {
		e.coversChildren = c.RollbackCoversChildren()
	}
	if l, ok := e.proc.(Locker); ok {
		e.locks = l.Locks()
		e.holdLock = l.HoldLock()
		for _, lk := range e.locks {
			if lk.Type > scheduler.LockPeer || lk.Mode > scheduler.Exclusive {
				return fmt.Errorf("%w: %s: lock %+v", ErrInvalid, e.ti.name, lk)
			}
		}
	}
	return nil
}

// suspend parks e after a Suspend step. sawAbort is the abort flag the
// step started with: an Abort (or Bypass) that arrived while the step ran
// found e runnable and could not wake it, so it is woken here instead of
// sleeping on an event that may never come.
func (x *Executor) suspend(e *entry, st Step, sawAbort bool) {
	// A step with domain changes is persisted even when it asked not to
	// be: its effects commit only with its transition.
	write := !st.skipPersist || len(e.muts) > 0
	x.mu.Lock()
	x.setSuspendedLocked(e, st)
	// Shown once written (written clears it). A suspension that skips its
	// write is shown at once: no write will ever say it, and a restart
	// running the step again is what SkipPersistence asks for.
	e.suspendUnwritten = write
	x.unlock()
	if write && !x.persist(e) {
		return
	}
	x.mu.Lock()
	defer x.unlock()
	if x.stopping {
		return
	}
	if e.locked && !e.holdLock {
		x.releaseLocksLocked(e)
	}
	x.armWaitLocked(e, st.event)
	if e.bypass || e.abort && !sawAbort || st.onChildren && e.childLatch <= e.childWake {
		x.wakeLocked(e)
	}
}

// parkNewLocked suspends k, a child just written, as suspend parks a
// procedure after a Suspend step that skipped its persistence
// (Context.SuspendChild): nothing more is written of it.
func (x *Executor) parkNewLocked(k *entry, st Step) {
	if x.stopping {
		x.queueLocked(k, true)
		return
	}
	x.setSuspendedLocked(k, st)
	x.armWaitLocked(k, st.event)
	if k.bypass || k.abort {
		x.wakeLocked(k)
	}
}

// setSuspendedLocked puts e in the state a Suspend step st leaves it in:
// waiting, until a timeout (jittered) if st has one, noting why.
func (x *Executor) setSuspendedLocked(e *entry, st Step) {
	e.waitNote = st.because
	if st.timeout > 0 {
		x.setStateLocked(e, WaitingTimeout)
		e.waitUntil = x.clock.Now().Add(addJitter(st.timeout, 0.1))
	} else {
		x.setStateLocked(e, Waiting)
		e.waitUntil = time.Time{}
	}
}

// armWaitLocked arms the wake-ups of a suspended e: its timer and event.
func (x *Executor) armWaitLocked(e *entry, ev *scheduler.Event) {
	e.waitGen++
	gen := e.waitGen
	if e.state == WaitingTimeout {
		d := e.waitUntil.Sub(x.clock.Now())
		id := e.id
		e.timer = x.clock.AfterFunc(d, func() { x.onTimer(id, gen) })
	}
	if ev != nil {
		e.event = ev
		if !x.sched.WaitEvent(ev, e.id, e.key) {
			// Already woken before we parked: run again.
			x.wakeLocked(e)
		}
	}
}

// wakeLocked makes a suspended e runnable.
func (x *Executor) wakeLocked(e *entry) {
	if x.readyLocked(e) {
		x.queueLocked(e, true)
	}
}

// childrenReadyLocked makes e runnable if it waits for its children (not
// for a timer) and no more of them are unfinished than it asked to be
// woken at (WakeAtChildren), and reports whether it did; the caller
// queues it.
func (x *Executor) childrenReadyLocked(e *entry) bool {
	return e.state == Waiting && x.readyLocked(e)
}

// readyLocked makes a suspended e runnable, unless it waits for more of
// its children to finish, and reports whether it did; the caller queues
// it.
func (x *Executor) readyLocked(e *entry) bool {
	if e.state != Waiting && e.state != WaitingTimeout {
		return false
	}
	if e.state == Waiting && e.childLatch > e.childWake {
		return false
	}
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	if e.event != nil {
		x.sched.RemoveWaiter(e.event, e.id)
		e.event = nil
	}
	e.waitGen++
	e.retryWait = false
	x.setStateLocked(e, Runnable)
	return true
}

func (x *Executor) onTimer(id, gen uint64) {
	x.mu.Lock()
	defer x.unlock()
	e := x.procs[id]
	if e == nil || e.waitGen != gen || e.state != WaitingTimeout || x.stopping {
		return
	}
	e.timer = nil
	// A retry's backoff is the framework's own wait, not a timeout the
	// procedure asked for.
	e.timedOut = !e.retryWait
	x.wakeLocked(e)
}

// onSchedWake is the scheduler's callback for procedures leaving a lock
// wait queue or an event.
func (x *Executor) onSchedWake(id uint64) {
	x.mu.Lock()
	defer x.unlock()
	e := x.procs[id]
	if e == nil || x.stopping {
		return
	}
	if e.lockWait {
		x.setLockWaitLocked(e, false)
		x.queueLocked(e, true)
		return
	}
	if e.event != nil {
		e.event = nil
		x.wakeLocked(e)
		return
	}
	if x.roots[e.root] != nil && x.roots[e.root].failed {
		// Woken to continue a rollback that waited for this member's locks.
		x.queueLocked(e, true)
	}
}

// Wake wakes every procedure suspended on ev (and marks ev ready).
func (x *Executor) Wake(ev *scheduler.Event) { x.sched.WakeEvent(ev) }

// persist writes e's current image; e must be claimed by the caller (or not
// yet visible). On a store error the executor stops and false is returned.
func (x *Executor) persist(e *entry) bool {
	rec, err := x.encode(e)
	if err != nil {
		rec, err = x.encodeWith(e, x.unserialisable(e, err), e.goodVersion)
		if err != nil {
			x.setFatal(err)
			return false
		}
	}
	muts := e.muts
	e.muts = nil
	if len(muts) > 0 {
		err = x.store.(store.MutationStore).UpdateAndMutate(rec, muts)
	} else {
		err = x.store.Update(rec)
	}
	if err != nil {
		x.setFatal(err)
		return false
	}
	x.written(e, &rec)
	return true
}

// unserialisable decides what e becomes when its type could not serialise
// its state for a write (the procedure's failure, not the store's), and
// returns the state the write carries instead:
//
//   - A root's terminal write (SUCCESS, or ROLLEDBACK at the end of its
//     rollback) keeps its outcome and goes without a state: every step it
//     ran has succeeded, or has been undone, and a finished root never
//     needs its state again (it is never run, rolled back or decoded once
//     finished). Failing it there left a FAILED root that nothing would
//     ever roll back.
//   - A write while its tree rolls back (or of a member already FAILED)
//     keeps its outcome too: the rollback goes on, and there is nothing
//     left to fail.
//   - Any other write (a step's outcome, a child's SUCCESS) fails the
//     procedure, and its tree rolls back like after any failed step.
//
// Every write but a finished root's carries the last state that did
// serialise (entry.goodState): a restart before the rollback is done rolls
// back from it. Written without any, the record decoded into a zero-valued
// procedure, and the rollback ran on that. Every entry has one: Submit
// refuses a procedure whose first state does not serialise, and Spawn
// fails its parent's step for such a child.
func (x *Executor) unserialisable(e *entry, err error) []byte {
	x.mu.Lock()
	defer x.unlock()
	root := x.roots[e.root]
	switch {
	case e.isRoot() && e.state.Terminal():
		x.log.Error("cannot serialise a finished procedure's state; written without it", "id", e.id, "type", e.ti.name,
			"state", e.state, "error", err)
		return nil
	case e.state == Failed || root != nil && root.failed:
		x.log.Error("cannot serialise the state of a procedure rolling back; written with its last serialised state", "id", e.id,
			"type", e.ti.name, "error", err)
	default:
		x.log.Error("cannot serialise procedure state; failing it, written with its last serialised state", "id", e.id,
			"type", e.ti.name, "error", err)
		x.setStateLocked(e, Failed)
		e.errMsg, e.errCode = fmt.Sprintf("serialising state: %v", err), ""
		if root != nil && !root.failed {
			root.failed = true
			root.cause = fmt.Sprintf("proc %d (%s): %s", e.id, e.ti.name, e.errMsg)
			root.causeCode = ""
		}
	}
	return e.goodState
}

func (x *Executor) notify(e *entry) {
	x.mu.Lock()
	h := x.hearingLocked(e)
	x.unlock()
	h.tell()
}

// hearing is what the listeners of one transition are to be told, taken
// under x.mu and told without it.
type hearing struct {
	ls     []Listener
	info   Info
	cls    []ChangeListener
	change Change
}

// hearingLocked returns what the listeners are to hear of e's transition:
// its Info only if a Listener is registered.
func (x *Executor) hearingLocked(e *entry) hearing {
	h := hearing{ls: x.listeners, cls: x.changeLs}
	if len(h.ls) > 0 {
		h.info = x.infoLocked(e)
	}
	if len(h.cls) > 0 {
		h.change = Change{ID: e.id, ParentID: e.parent, RootID: e.root, Type: e.ti.name, State: e.shownState()}
	}
	return h
}

// tell runs the listeners, without x.mu.
func (h hearing) tell() {
	for _, l := range h.ls {
		l(h.info)
	}
	for _, l := range h.cls {
		l(h.change)
	}
}

// encode builds e's record, serialising the procedure's own state at the
// version the cluster version allows (stateVersionOf).
func (x *Executor) encode(e *entry) (store.Proc, error) {
	v := x.stateVersionOf(e)
	data, err := marshalStateAt(e.proc, e.ti, v)
	if err != nil {
		return store.Proc{}, err
	}
	e.goodState, e.goodVersion = data, v // only its holder encodes e: no lock needed
	return x.encodeWith(e, data, v)
}

// stateVersionOf is the version of its type's state e is written at
// now: the newest the cluster version allows (TypeOptions.Since), and
// never below one e was written at or a step of it was told
// (Context.StateVersion), which it records. Only e's holder calls it.
// Not lowered because the gate reads lower (a corrupt cluster version
// counts as format 1): a state written at the newer version may be one
// the older cannot hold.
func (x *Executor) stateVersionOf(e *entry) int {
	e.stateVersion = max(e.stateVersion, e.ti.writeVersion(x.cfg.RecordFormat))
	return e.stateVersion
}

// encodeWith builds e's record with data, version v of its type's state.
func (x *Executor) encodeWith(e *entry, data []byte, v int) (store.Proc, error) {
	e.writtenVersion.Store(int32(v))
	// The state machine is read first: it belongs to whoever claimed the
	// procedure (the caller), not to x.mu.
	sm, isSM := e.proc.(stateMachineProcedure)
	var m *StateMachine
	step := int32(-1)
	if isSM {
		m = sm.machine()
		step = m.next
	}
	x.mu.Lock()
	// The record carries every API change made so far; one made after
	// this point (during the write) sets dirty again, and the holder's
	// writeDirtyLocked writes it. Clearing it after the write instead lost
	// such a change.
	e.dirty = false
	e.updated = x.clock.Now()
	e.runs = noteWrite(e.runs, x.cfg.Node, e.updated)
	e.history.note(Transition{
		State: storedState(e), Step: step, Depth: int32(len(e.stack)), Node: x.cfg.Node, At: e.updated,
		Attempt: e.repeats, RollingBack: e.rollingBack,
	}, e.submitted)
	histEnc, histLast := e.history.encoded()
	r := record{
		id: e.id, parent: e.parent, root: e.root, typeName: e.ti.name, typeVersion: v,
		state: storedState(e), owner: e.owner, nonce: e.nonce, submitter: e.submitter,
		submitted: unixNano(e.submitted), updated: unixNano(e.updated), deadline: unixNano(e.deadline),
		waitUntil: unixNano(e.waitUntil), finishedAt: unixNano(e.finishedAt), ackedAt: unixNano(e.ackedAt),
		// Only a live procedure persists a held lock: a finished one lets go
		// of it right after this write, and a restart must not hand it back.
		stack: append([]int32(nil), e.stack...), locked: e.locked && e.holdLock && !e.state.Terminal(), errMsg: e.errMsg,
		errCode: e.errCode, result: e.result, data: data, abort: e.abort, paused: e.paused, bypass: e.bypass,
		rollingBack: e.rollingBack, repeats: e.repeats, spins: e.spins,
		runs: e.runs, historyEnc: histEnc, historyLast: histLast,
		trace: e.traceCtx,
	}
	format2 := x.writesFormat2()
	if !format2 {
		r.submitter = ""
	}
	var packSummaries func() []byte
	if r.finishedRoot() {
		// Written compactly (record.marshal): its history as a list, and
		// the children it had, whose records go with its finish, and
		// what it keeps of them (its first terminal write packs it).
		r.history = e.history.snapshot()
		r.children = append([]uint64(nil), e.children...)
		if r.summaries = e.summaries; r.summaries == nil && format2 {
			packSummaries = x.childSummariesLocked(e)
		}
	}
	x.unlock()
	if packSummaries != nil {
		// Only e's holder encodes it: e.summaries needs no lock.
		e.summaries = packSummaries()
		r.summaries = e.summaries
	}
	if isSM {
		r.sm, r.smStarted, r.smEOF, r.smNext = true, m.started, m.eof, m.next
		r.smHistory = append([]int32(nil), m.history...)
	}
	return store.Proc{ID: e.id, Data: r.marshal()}, nil
}

// storedState is the state e's record holds: a procedure woken before
// its children finished (Context.WakeAtChildren) is stored WAITING, as
// it was when it spawned them. Stored RUNNABLE, a load (this release's or
// 0.1.0's) would take its live children for ones its record predates and
// hold the tree; WAITING, the load has it wait for them, and then run
// the step it was woken for. So is one that then waits for a timer (a
// failed step's backoff, a Suspend with a Timeout): stored
// WAITING_TIMEOUT, a load would run it once the timer passed, its
// children live, which 0.1.0's procedures never expect (its server crash
// would scan for regions still on the server, find those of children
// not yet run, and spawn them again or end beside them). Called under
// x.mu.
func storedState(e *entry) State {
	if (e.state == Runnable || e.state == WaitingTimeout) && e.childLatch > 0 {
		return Waiting
	}
	return e.state
}

// writesFormat2 says whether the records x writes may carry what format 2
// added (fSubmitter, fChildSummaries): Config.RecordFormat.
func (x *Executor) writesFormat2() bool {
	return x.cfg.RecordFormat.Allows(version.Format2)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// progressOf asks p how far it is, if it can say; call it only where p is
// not running (its worker, or before it is queued).
func progressOf(p Procedure) (Progress, bool) {
	pr, ok := p.(Progressor)
	if !ok {
		return Progress{}, false
	}
	return pr.Progress(), true
}

// progressLocked is e's progress, its ended children counted for a parent
// whose progress is theirs.
func (e *entry) progressLocked() Progress {
	p := e.progress
	if p.FromChildren {
		held := len(e.children) - e.unheldChildren
		p.Done = int64(max(0, held-e.childLatch+e.unloadedChildren))
	}
	return p
}
