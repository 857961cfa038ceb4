package procedure

import (
	"fmt"
	"slices"
	"sort"

	"go.opentelemetry.io/otel/trace"
)

// rollback undoes a failed tree, newest step first. The caller has set
// root.rolling and counted itself in root.running; nothing else of the tree
// runs meanwhile.
//
// What rolls back is the unit of each failed member (see unitOfLocked):
// the whole tree, or, below a RetriesUntilDone procedure, the subtree of
// its child; then only the steps of those subtrees are undone, and the
// rest of the tree goes on afterwards.
func (x *Executor) rollback(w *worker, root *rootState) {
	defer func() {
		x.mu.Lock()
		root.rolling = false
		root.running--
		if root.rbRerun {
			root.rbRerun = false
			if !root.done && !x.stopping {
				x.sched.AddFront(root.id, root.entry.key)
			}
		}
		x.unlock()
	}()
	rootEntry := root.entry

	x.mu.Lock()
	units := x.failedUnitsLocked(root)
	whole := units[rootEntry.id] != nil
	x.unlock()

	for _, u := range sortedUnits(units) {
		x.mu.Lock()
		if u.e.rollingBack {
			x.unlock()
			continue
		}
		if !x.claimLocked(u.e) {
			x.unlock()
			return // an API call holds it; it re-queues it when done
		}
		u.e.rollingBack = true
		if u.e.errMsg == "" {
			u.e.errMsg = u.cause
		}
		x.unlock()
		// Persist the decision first: once any member is rolled back, the
		// FAILED member may be gone, and a restart must still know.
		ok := x.persist(u.e)
		x.mu.Lock()
		x.writeDirtyLocked(u.e)
		x.unclaimLocked(u.e)
		x.unlock()
		if !ok {
			return
		}
		x.log.Info("rolling back", "root", root.id, "subtree", u.e.id, "whole_tree", u.e == rootEntry, "cause", u.cause)
	}

	for {
		x.mu.Lock()
		if x.stopping {
			x.unlock()
			return
		}
		// A forgotten child (ForgetsChildren) succeeded below ancestors
		// that never roll back, or below a parent whose rollback, older
		// and still to come, undoes it (RollbackCoversChildren): nothing
		// of it is undone here.
		idx := len(root.stack) - 1
		for ; idx >= 0 && (root.stack[idx].forgotten || (!whole && x.unitInLocked(root.stack[idx], units) == nil)); idx-- {
		}
		if idx < 0 {
			x.unlock()
			if whole {
				x.finishRolledBack(root)
			} else {
				x.finishSubtrees(root, units)
			}
			return
		}
		top := root.stack[idx]
		if !x.claimLocked(top) {
			x.unlock()
			return
		}
		// bypass is the API's to set (Bypass sets it on a member whatever
		// holds it), so it is read here, under x.mu, and not again below,
		// where it used to be read without the lock: a racy read that -race
		// caught in CI. A Bypass that comes after this look spares the
		// steps below this one; this one is undone, as a step that is
		// running when a Bypass comes runs to its end.
		bypassed := top.bypass
		needLocks := len(top.locks) > 0 && !top.locked && !bypassed
		if needLocks {
			x.setLockWaitLocked(top, true)
		}
		anc := x.ancestorsLocked(top)
		x.unlock()

		if needLocks {
			if !x.sched.Acquire(top.id, top.key, anc, top.locks) {
				// Parked on the lock; its wake re-queues top, whose turn
				// finds the tree failed and resumes this rollback.
				x.mu.Lock()
				x.noteLockParkedLocked(top)
				x.unclaimLocked(top)
				x.unlock()
				x.notifyLockWait(top.id)
				return
			}
			x.mu.Lock()
			x.noteLocksGrantedLocked(top)
			x.setLockWaitLocked(top, false)
			top.locked = true
			x.unlock()
		}

		var err error
		if !bypassed {
			err = x.rollbackStep(top)
		}
		if err != nil {
			x.mu.Lock()
			if !top.holdLock {
				x.releaseLocksBeforeUnclaimLocked(top)
			}
			x.unclaimLocked(top)
			root.rbRerun = false // the retry timer gives the next turn
			root.rbTries++
			delay := Backoff{Base: x.cfg.RollbackBackoff, Max: x.cfg.RollbackBackoffMax, Jitter: 0.1}.Delay(root.rbTries)
			rootID := root.id
			root.rbTimer = x.clock.AfterFunc(delay, func() {
				x.mu.Lock()
				defer x.unlock()
				if r := x.roots[rootID]; r != nil && !r.done && !x.stopping {
					x.sched.AddFront(rootID, r.entry.key)
				}
			})
			x.unlock()
			x.log.Warn("rollback step failed; will retry", "id", top.id, "type", top.ti.name, "attempt", root.rbTries, "retry_in", delay, "error", err)
			return
		}

		x.mu.Lock()
		root.rbTries = 0
		root.stack = slices.Delete(root.stack, idx, idx+1)
		if n := len(top.stack); n > 0 {
			top.stack = top.stack[:n-1]
		}
		// A unit's own top finishes with its unit (finishRolledBack,
		// finishSubtrees), once its whole subtree is undone.
		if len(top.stack) == 0 && units[top.id] == nil {
			x.setStateLocked(top, RolledBack)
		}
		// A held-for-life lock goes with the last step rolled back: the
		// procedure is finished (and persisted without the lock).
		if !top.holdLock || top.state.Terminal() {
			x.releaseLocksLocked(top)
		}
		x.unlock()
		ok := x.persist(top)
		x.mu.Lock()
		x.writeDirtyLocked(top)
		x.unclaimLocked(top)
		x.unlock()
		if !ok {
			return
		}
	}
}

func (x *Executor) rollbackStep(e *entry) (err error) {
	ctx := &Context{Context: x.ctx, Env: x.cfg.Env, x: x, e: e}
	ctx.initLogger(x.log, e, true)
	if x.tracer != nil {
		x.mu.Lock()
		procSpan := x.procSpanLocked(e)
		x.unlock()
		var span trace.Span
		ctx.Context, span = x.stepSpan(e, procSpan, e.ti.rollbackSpan, 0)
		defer func() {
			if span == nil {
				return
			}
			outcome := "rolled_back"
			if err != nil {
				outcome = "failed"
			}
			endStepSpan(span, outcome, err)
		}()
	}
	err = safeCall(func() error {
		switch p := e.proc.(type) {
		case stateMachineProcedure:
			return rollbackState(ctx, p)
		case Stepper:
			return p.Rollback(ctx)
		}
		return fmt.Errorf("%w: %T cannot roll back", ErrInvalid, e.proc)
	})
	if err == nil {
		e.muts = ctx.muts // committed with the popped stack position
	}
	return err
}

func (x *Executor) finishRolledBack(root *rootState) {
	e := root.entry
	x.mu.Lock()
	if !x.claimLocked(e) {
		x.unlock()
		return
	}
	x.setStateLocked(e, RolledBack)
	e.finishedAt = x.clock.Now()
	if e.errMsg == "" {
		e.errMsg, e.errCode = root.cause, root.causeCode
	}
	x.unlock()
	x.log.Info("rolled back", "root", root.id, "type", e.ti.name, "cause", e.errMsg)
	x.finishRoot(root, e)
	x.mu.Lock()
	// An Ack that came while we held it left the write to us.
	if root.done {
		x.writeDirtyLocked(e)
	}
	x.unclaimLocked(e)
	done := root.done
	if done {
		// Its waiters, told next, find what is kept of it.
		x.retireLocked(e, e.lastRec)
	}
	x.unlock()
	if done {
		root.closeDone()
	}
}

// unit is what one failure rolls back: the subtree under e (the whole tree
// when e is the root), with the failure that started it.
type unit struct {
	e     *entry
	cause string
}

// unitOfLocked is the top of what rolls back when e fails: the child of
// e's nearest RetriesUntilDone ancestor on e's path, or the root when e
// has no such ancestor (or is the root).
func (x *Executor) unitOfLocked(e *entry) *entry {
	u := e
	for u.parent != 0 {
		p := x.procs[u.parent]
		if p == nil {
			if r := x.roots[e.root]; r != nil {
				return r.entry
			}
			break
		}
		if p.untilDone {
			return u
		}
		u = p
	}
	return u
}

// failedUnitsLocked lists, by the id of their top, the units root's
// rollback undoes: the unit of every FAILED member and every unfinished
// member marked rolling back. When one of them is the whole tree, or when
// nothing names a unit (a bypassed failure), it is the whole tree alone.
func (x *Executor) failedUnitsLocked(root *rootState) map[uint64]*unit {
	ids := make([]uint64, 0, len(root.members))
	for id := range root.members {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	units := make(map[uint64]*unit)
	add := func(top *entry, cause string) {
		if units[top.id] == nil {
			units[top.id] = &unit{e: top, cause: cause}
		}
	}
	for _, id := range ids {
		m := root.members[id]
		switch {
		case m.rollingBack && !m.state.Terminal():
			add(m, m.errMsg)
		case m.state == Failed:
			add(x.unitOfLocked(m), fmt.Sprintf("proc %d (%s): %s", m.id, m.ti.name, m.errMsg))
		}
	}
	if units[root.id] != nil || len(units) == 0 {
		return map[uint64]*unit{root.id: {e: root.entry, cause: root.cause}}
	}
	return units
}

// unitInLocked is the unit e belongs to, nil if none.
func (x *Executor) unitInLocked(e *entry, units map[uint64]*unit) *unit {
	for m := e; m != nil; m = x.procs[m.parent] {
		if u := units[m.id]; u != nil {
			return u
		}
		if m.parent == 0 {
			break
		}
	}
	return nil
}

func sortedUnits(units map[uint64]*unit) []*unit {
	out := make([]*unit, 0, len(units))
	for _, u := range units {
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].e.id < out[j].e.id })
	return out
}

// finishSubtrees ends the rollback of subtrees below RetriesUntilDone
// procedures: every unfinished member of each is ROLLEDBACK, descendants
// first and the unit's top last (a crash in between leaves the unit still
// marked, so the next load finishes it); each top's parent counts it as a
// finished child; and the rest of the tree, whose turns the rollback took
// meanwhile, is queued again.
func (x *Executor) finishSubtrees(root *rootState, units map[uint64]*unit) {
	x.mu.Lock()
	var todo []*entry
	for _, m := range root.members {
		if !m.state.Terminal() && x.unitInLocked(m, units) != nil {
			todo = append(todo, m)
		}
	}
	x.unlock()
	// Ids grow from parent to child.
	sort.Slice(todo, func(i, j int) bool { return todo[i].id > todo[j].id })
	for _, m := range todo {
		x.mu.Lock()
		if x.stopping || !x.claimLocked(m) {
			x.unlock()
			return // a claimed member is queued again by its holder
		}
		top := units[m.id]
		x.setStateLocked(m, RolledBack)
		m.finishedAt = x.clock.Now()
		if top != nil && m.errMsg == "" {
			m.errMsg = top.cause
		}
		stopTimers(m)
		if m.event != nil {
			x.sched.RemoveWaiter(m.event, m.id)
			m.event = nil
		}
		if m.lockWait {
			x.setLockWaitLocked(m, false)
			x.sched.CancelLockWait(m.id)
		}
		x.sched.Remove(m.id)
		x.releaseLocksLocked(m)
		x.unlock()
		ok := x.persist(m)
		x.mu.Lock()
		x.writeDirtyLocked(m)
		x.unclaimLocked(m)
		if ok && top != nil {
			if p := x.procs[m.parent]; p != nil && !p.state.Terminal() {
				p.childLatch = max(p.childLatch-1, 0)
				x.childrenReadyLocked(p) // queued with the rest below
			}
		}
		x.unlock()
		if !ok {
			return
		}
	}
	x.mu.Lock()
	root.failed, root.cause, root.rbTries = false, "", 0
	for _, m := range root.members {
		switch {
		case m.state != Runnable || m.lockWait:
		case m.paused:
			m.pausedParked = true
		case m.running:
			m.rerun = true
		default:
			x.queueLocked(m, false)
		}
	}
	x.unlock()
	for _, u := range sortedUnits(units) {
		x.log.Info("subtree rolled back; the rest of its tree goes on", "root", root.id, "subtree", u.e.id, "type", u.e.ti.name, "cause", u.cause)
	}
}
