package procedure

import (
	"fmt"
)

// rollback undoes a failed tree, newest step first. The caller has set
// root.rolling and counted itself in root.running; nothing else of the tree
// runs meanwhile.
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
	needMark := !rootEntry.rollingBack
	if needMark {
		if !x.claimLocked(rootEntry) {
			x.unlock()
			return // an API call holds it; it re-queues the root when done
		}
		rootEntry.rollingBack = true
		if rootEntry.errMsg == "" {
			rootEntry.errMsg = root.cause
		}
	}
	x.unlock()
	if needMark {
		// Persist the decision first: once any member is rolled back, the
		// FAILED member may be gone, and a restart must still know.
		ok := x.persist(rootEntry)
		x.mu.Lock()
		x.unclaimLocked(rootEntry)
		x.unlock()
		if !ok {
			return
		}
		x.log.Info("rolling back", "root", root.id, "steps", len(root.stack), "cause", root.cause)
	}

	for {
		x.mu.Lock()
		if x.stopping {
			x.unlock()
			return
		}
		if len(root.stack) == 0 {
			x.unlock()
			x.finishRolledBack(root)
			return
		}
		top := root.stack[len(root.stack)-1]
		if !x.claimLocked(top) {
			x.unlock()
			return
		}
		needLocks := len(top.locks) > 0 && !top.locked && !top.bypass
		if needLocks {
			top.lockWait = true
		}
		anc := x.ancestorsLocked(top)
		x.unlock()

		if needLocks {
			if !x.sched.Acquire(top.id, top.key, anc, top.locks) {
				// Parked on the lock; its wake re-queues top, whose turn
				// finds the tree failed and resumes this rollback.
				x.mu.Lock()
				x.unclaimLocked(top)
				x.unlock()
				return
			}
			x.mu.Lock()
			top.lockWait = false
			top.locked = true
			x.unlock()
		}

		var err error
		if !top.bypass {
			err = x.rollbackStep(top)
		}
		if err != nil {
			x.mu.Lock()
			if !top.holdLock {
				x.releaseLocksLocked(top)
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
		root.stack = root.stack[:len(root.stack)-1]
		if n := len(top.stack); n > 0 {
			top.stack = top.stack[:n-1]
		}
		if len(top.stack) == 0 && top != rootEntry {
			top.state = RolledBack
		}
		// A held-for-life lock goes with the last step rolled back: the
		// procedure is finished (and persisted without the lock).
		if !top.holdLock || top.state.Terminal() {
			x.releaseLocksLocked(top)
		}
		x.unlock()
		ok := x.persist(top)
		x.mu.Lock()
		x.unclaimLocked(top)
		x.unlock()
		if !ok {
			return
		}
	}
}

func (x *Executor) rollbackStep(e *entry) error {
	ctx := &Context{Context: x.ctx, Env: x.cfg.Env, x: x, e: e,
		Logger: x.log.With("proc_id", e.id, "type", e.ti.name, "rollback", true)}
	err := safeCall(func() error {
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
	e.state = RolledBack
	e.finishedAt = x.clock.Now()
	if e.errMsg == "" {
		e.errMsg = root.cause
	}
	x.unlock()
	x.log.Info("rolled back", "root", root.id, "type", e.ti.name, "cause", e.errMsg)
	x.finishRoot(root, e)
	x.mu.Lock()
	x.unclaimLocked(e)
	done := root.done
	x.unlock()
	if done {
		root.closeDone()
	}
}
