package procedure

import (
	"fmt"
	"sort"

	"github.com/baton-dev/baton/store"
)

// load rebuilds the executor's state from the store (HBase's
// ProcedureExecutor.load): trees and their rollback stacks, children
// latches, nonces, held locks, timers; then queues what can run.
func (x *Executor) load() error {
	type loaded struct {
		rec record
		raw store.Proc
	}
	var all []loaded
	info, err := x.store.Load(func(p store.Proc) error {
		var r record
		if err := r.unmarshal(p.Data); err != nil {
			x.problems[p.ID] = LoadProblem{ID: p.ID, Reason: err.Error(), Raw: p}
			return nil
		}
		if r.id != p.ID {
			x.problems[p.ID] = LoadProblem{ID: p.ID, RootID: r.root, Type: r.typeName,
				Reason: fmt.Sprintf("record holds id %d under key %d", r.id, p.ID), Raw: p}
			return nil
		}
		all = append(all, loaded{rec: r, raw: p})
		return nil
	})
	if err != nil {
		return fmt.Errorf("procedure: loading store: %w", err)
	}
	x.mu.Lock()
	defer x.unlock()
	x.loadInfo = info
	for _, c := range info.Corruptions {
		x.log.Error("store reported corruption; damaged data kept for inspection", "corruption", c.String())
	}
	maxID := info.MaxID

	// Decode every procedure; group by root.
	trees := make(map[uint64][]*entry)
	raws := make(map[uint64]store.Proc)
	recs := make(map[uint64]*record)
	badRoots := make(map[uint64]string)
	for i := range all {
		r := &all[i].rec
		maxID = max(maxID, r.id)
		raws[r.id] = all[i].raw
		recs[r.id] = r
		e, err := x.decodeEntry(r)
		if err != nil {
			x.problems[r.id] = LoadProblem{ID: r.id, RootID: r.root, Type: r.typeName, Reason: err.Error(), Raw: all[i].raw}
			badRoots[r.root] = fmt.Sprintf("member %d: %v", r.id, err)
			continue
		}
		trees[r.root] = append(trees[r.root], e)
	}
	for id, p := range x.problems {
		if p.RootID != 0 {
			if _, ok := badRoots[p.RootID]; !ok {
				badRoots[p.RootID] = fmt.Sprintf("member %d: %s", id, p.Reason)
			}
		}
	}

	rootIDs := make([]uint64, 0, len(trees))
	for id := range trees {
		rootIDs = append(rootIDs, id)
	}
	sort.Slice(rootIDs, func(i, j int) bool { return rootIDs[i] < rootIDs[j] })

	var startedQ, freshQ []*entry
	var finishedChildren []uint64
	for _, rid := range rootIDs {
		members := trees[rid]
		byID := make(map[uint64]*entry, len(members))
		for _, e := range members {
			byID[e.id] = e
		}
		reason, bad := badRoots[rid]
		if !bad {
			reason, bad = x.checkTree(rid, byID)
		}
		if bad {
			for _, e := range members {
				x.problems[e.id] = LoadProblem{ID: e.id, RootID: rid, Type: e.ti.name,
					Reason: "tree held: " + reason, Raw: raws[e.id]}
			}
			x.log.Error("procedure tree not loaded; kept in the store for repair", "root", rid, "reason", reason)
			continue
		}
		rootEntry := byID[rid]
		root := &rootState{id: rid, entry: rootEntry, members: byID, doneCh: make(chan struct{})}
		if rootEntry.state.Terminal() {
			// Finished: keep the root for its result; descendants left by a
			// crash before their delete are deleted now.
			for id := range byID {
				if id != rid {
					finishedChildren = append(finishedChildren, id)
				}
			}
			// Indexed here, as finishRoot indexes a root that ends
			// while the executor runs.
			x.indexChildrenLocked(rootEntry)
			x.retireLocked(rootEntry, raws[rid].Data)
			continue
		}
		x.rebuildStack(root)
		for _, e := range members {
			x.holdLocked(e)
			if e.parent != 0 {
				if p := byID[e.parent]; p != nil {
					p.children = append(p.children, e.id)
					if !e.state.Terminal() {
						p.childLatch++
					}
				}
			}
			if e.state == Failed {
				root.failed = true
				if root.cause == "" {
					root.cause = fmt.Sprintf("proc %d (%s): %s", e.id, e.ti.name, e.errMsg)
					root.causeCode = e.errCode
				}
			}
		}
		// A member marked rolling back (the root, or the top of a subtree
		// below a RetriesUntilDone procedure) has a rollback to finish.
		for _, e := range members {
			if e.rollingBack && !e.state.Terminal() {
				root.failed = true
				if root.cause == "" || e == rootEntry {
					root.causeCode = e.errCode
					root.cause = e.errMsg
				}
			}
		}
		x.roots[rid] = root
		x.indexNonceLocked(rootEntry)
		x.armDeadlineLocked(rootEntry)

		// Locks held for life are re-acquired root first (parents before
		// children), so inheritance holds; and only by procedures still to
		// run (HBASE-20846): a finished child let go of its lock when it
		// finished, and one written by an older binary with the flag still
		// set would otherwise hold it until its root ends, starving any
		// sibling that needs it.
		ordered := make([]*entry, len(members))
		copy(ordered, members)
		sort.Slice(ordered, func(i, j int) bool { return ordered[i].id < ordered[j].id })
		for _, e := range ordered {
			if e.locked && e.state.Terminal() {
				e.locked = false
			}
			if e.locked {
				e.locked = false
				if x.sched.Acquire(e.id, e.key, x.ancestorsLocked(e), e.locks) {
					e.locked = true
				} else {
					x.log.Warn("lock held before restart is now contended", "id", e.id)
					x.setLockWaitLocked(e, true)
				}
			}
		}
		if root.failed {
			// The rollback takes the tree's turns; it queues the rest again
			// if it undoes only subtrees (so their timers are armed below).
			startedQ = append(startedQ, rootEntry)
		}
		for _, e := range ordered {
			sort.Slice(e.children, func(i, j int) bool { return e.children[i] < e.children[j] })
			if e.progress.FromChildren && int(e.progress.Spawned) > len(e.children) {
				e.unloadedChildren = int(e.progress.Spawned) - len(e.children)
			}
			switch e.state {
			case Waiting:
				if e.childLatch > 0 {
					continue
				}
				// Suspended on an event that did not survive the restart:
				// run the step again (steps are idempotent).
				x.setStateLocked(e, Runnable)
			case WaitingTimeout:
				if e.waitUntil.After(x.clock.Now()) {
					x.armWaitLocked(e, nil)
					continue
				}
				x.setStateLocked(e, Runnable)
				e.timedOut = true
			case Runnable:
			default:
				continue
			}
			if e.paused {
				e.pausedParked = true
				continue
			}
			if e.lockWait || root.failed {
				continue
			}
			if len(e.stack) > 0 || !e.isRoot() {
				startedQ = append(startedQ, e)
			} else {
				freshQ = append(freshQ, e)
			}
		}
	}
	x.indexHeldNoncesLocked(recs)
	x.nextID = maxID + 1
	// Procedures that already started go first (they may hold locks or be
	// half-way through changing an entity), then the fresh ones.
	for _, e := range startedQ {
		x.queueLocked(e, false)
	}
	for _, e := range freshQ {
		x.queueLocked(e, false)
	}
	x.log.Info("procedures loaded", "live", len(x.procs), "problems", len(x.problems),
		"resumed", len(startedQ), "fresh", len(freshQ), "next_id", x.nextID)
	if len(finishedChildren) > 0 {
		sort.Slice(finishedChildren, func(i, j int) bool { return finishedChildren[i] < finishedChildren[j] })
		if err := x.store.Delete(finishedChildren); err != nil {
			return fmt.Errorf("procedure: deleting children of finished procedures: %w", err)
		}
	}
	return nil
}

// decodeEntry turns a record back into an entry with its procedure.
func (x *Executor) decodeEntry(r *record) (*entry, error) {
	ti, p, err := x.reg.decodeRecord(r)
	if err != nil {
		return nil, err
	}
	e := &entry{
		id: r.id, parent: r.parent, root: r.root, ti: ti, proc: p, state: r.state,
		owner: r.owner, nonce: r.nonce, submitter: r.submitter,
		submitted: fromUnixNano(r.submitted), updated: fromUnixNano(r.updated),
		deadline: fromUnixNano(r.deadline), waitUntil: fromUnixNano(r.waitUntil),
		finishedAt: fromUnixNano(r.finishedAt), ackedAt: fromUnixNano(r.ackedAt),
		stack: r.stack, locked: r.locked, errMsg: r.errMsg, errCode: r.errCode, result: r.result,
		abort: r.abort, paused: r.paused, bypass: r.bypass, rollingBack: r.rollingBack, repeats: r.repeats, spins: r.spins,
		runs: r.runs, history: loadedHistory(r.history, fromUnixNano(r.submitted)),
		traceCtx: r.trace,
	}
	// Never written again below the version it was written at.
	e.stateVersion, e.goodVersion = max(r.typeVersion, 1), r.typeVersion
	e.writtenVersion.Store(int32(max(r.typeVersion, 1)))
	if !r.finishedRoot() {
		e.goodState = r.data
		if v := x.stateVersionOf(e); r.typeVersion != v {
			// Upgraded on load: what a later write falls back to must be
			// in the shape of the version it is labelled with, the one
			// written now.
			if data, err := marshalStateAt(p, ti, v); err == nil {
				e.goodState, e.goodVersion = data, v
			}
		}
		e.resumed = !r.state.Terminal()
	}
	if r.finishedRoot() {
		// Its descendants are indexed (retireLocked) from what it names.
		e.children, e.summaries = r.children, r.summaries
		return e, nil // nor asked for its locks or queue: it never runs
	}
	if err := x.deriveLocked(e); err != nil {
		return nil, err
	}
	return e, nil
}

// checkTree finds what makes a tree unloadable: a missing root, an orphan,
// a parent from another tree, a live child of a parent stored as if it had
// not spawned it, or two steps claiming one stack position.
func (x *Executor) checkTree(rid uint64, byID map[uint64]*entry) (string, bool) {
	root := byID[rid]
	if root == nil {
		return fmt.Sprintf("root %d missing", rid), true
	}
	if root.parent != 0 {
		return fmt.Sprintf("root %d has parent %d", rid, root.parent), true
	}
	// A tree that rolls back stores parents and children at any point of
	// their undoing; the rule below is for trees that run forward.
	rolling := false
	for _, e := range byID {
		if e.state == Failed || e.rollingBack {
			rolling = true
			break
		}
	}
	seen := make(map[int32]uint64)
	for id, e := range byID {
		// A live child under a parent stored RUNNABLE: the parent's record
		// predates the spawn that made the child (the spawn's Insert was
		// not atomic, or the store was edited). Run, the parent would take
		// its spawning step again and spawn its children anew beside these,
		// each of which would then run twice (HBASE-29259's shape).
		if p := byID[e.parent]; id != rid && !rolling && p != nil && p.state == Runnable && !p.bypass &&
			!e.state.Terminal() && !e.bypass {
			return fmt.Sprintf("proc %d is live but its parent %d is stored RUNNABLE, as before the spawn that made it", id, e.parent), true
		}

		if id != rid {
			if e.parent == 0 {
				return fmt.Sprintf("proc %d claims root %d but has no parent", id, rid), true
			}
			if byID[e.parent] == nil {
				return fmt.Sprintf("orphan: proc %d's parent %d is missing", id, e.parent), true
			}
			// The parent chain must reach the root: a cycle would make
			// every walk up the tree (locks, abort) loop forever.
			p, hops := e.parent, 0
			for p != rid && hops <= len(byID) {
				if pe := byID[p]; pe != nil && pe.parent != 0 {
					p = pe.parent
				} else {
					break
				}
				hops++
			}
			if p != rid {
				return fmt.Sprintf("proc %d: parent chain does not reach root %d", id, rid), true
			}
		}
		for _, pos := range e.stack {
			if pos < 0 {
				return fmt.Sprintf("proc %d: negative stack position %d", id, pos), true
			}
			if other, dup := seen[pos]; dup {
				return fmt.Sprintf("stack position %d claimed by procs %d and %d", pos, other, id), true
			}
			seen[pos] = id
		}
		if sm, ok := e.proc.(stateMachineProcedure); ok && !e.state.Terminal() && len(sm.machine().history) != len(e.stack) {
			return fmt.Sprintf("proc %d: %d states in history but %d stack entries", id, len(sm.machine().history), len(e.stack)), true
		}
	}
	return "", false
}

// rebuildStack puts every executed step back in order. A gap in the
// positions is a step whose position was taken in memory but whose write
// was lost in the crash (that step will run again); the in-memory stack is
// compacted over it, but the positions themselves are kept and new steps
// take positions above the highest one loaded. Renumbering instead would
// let a new step reuse a position that another member's stale image still
// claims in the store, and the next load would find the tree corrupt.
// (HBase treats gaps as corruption; they are an ordinary outcome of
// concurrent children.)
func (x *Executor) rebuildStack(root *rootState) {
	type slot struct {
		pos int32
		e   *entry
	}
	var slots []slot
	for _, e := range root.members {
		sort.Slice(e.stack, func(i, j int) bool { return e.stack[i] < e.stack[j] })
		for _, pos := range e.stack {
			slots = append(slots, slot{pos, e})
		}
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i].pos < slots[j].pos })
	root.stack = make([]*entry, len(slots))
	gaps := false
	for n, s := range slots {
		if s.pos != int32(n) {
			gaps = true
		}
		root.stack[n] = s.e
	}
	if len(slots) > 0 {
		root.nextPos = slots[len(slots)-1].pos + 1
	}
	if gaps {
		// Debug, not Warn: a leader change in a bulk load finds gaps in
		// every table's tree at once, and nothing is wrong with any of them.
		x.log.Debug("rollback stack had gaps; skipped over", "root", root.id, "steps", len(slots), "next_position", root.nextPos)
	}
}

// indexHeldNoncesLocked indexes the nonce of every held tree's root whose
// record could be read: a client retrying that submission must be told
// about the held procedure, not given a second one.
func (x *Executor) indexHeldNoncesLocked(recs map[uint64]*record) {
	held := make(map[uint64]string)
	for _, p := range x.problems {
		if p.RootID != 0 && held[p.RootID] == "" {
			held[p.RootID] = p.Reason
		}
	}
	for rid, reason := range held {
		r := recs[rid]
		if r == nil || r.parent != 0 || r.nonce == "" {
			continue
		}
		if p, ok := x.problems[rid]; ok {
			reason = p.Reason // the root's own problem, or its tree's
		}
		ne := &nonceEntry{id: rid, held: reason, done: make(chan struct{})}
		close(ne.done)
		x.nonces[nonceKey(r.owner, r.nonce)] = ne
	}
}

func (x *Executor) indexNonceLocked(e *entry) {
	if e.nonce == "" {
		return
	}
	ne := &nonceEntry{id: e.id, done: make(chan struct{})}
	close(ne.done)
	x.nonces[nonceKey(e.owner, e.nonce)] = ne
}
