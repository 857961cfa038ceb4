package procedure

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// TestScenarioHBASE28876SchedulerStateOfFinishedTrees replays HBASE-28876
// (HBase ProcV2): the scheduler's state (the run queues of entities, lock
// entries) was cleaned up for a finished root but not for its children, so
// a master running many procedures with children accumulated queue and
// lock-table entries for procedures long gone, a leak that grew with every
// finished tree.
//
// Baton holds the line in package scheduler, which deletes a lock entry as
// soon as nobody holds or waits for it and drops an entity queue as soon
// as it is empty (Release, cancelLockWaitLocked, Remove, pollLocked), and
// in the executor, which releases every member's locks and takes every
// member out of its table when the tree ends (complete, finishRoot) and
// retires the root to its compact result, kept for ResultTTL. The test
// runs 10,000 trees (a root on its own table's queue, two children on
// region locks, a grandchild each on a server lock; roots hold their table
// exclusive for life or per step, alternately), one in ten of which rolls
// back (a grandchild fails) and one in ten of which is aborted while a
// child sleeps, all at once on four workers, and then checks that the
// scheduler's tables are empty (scheduler.Sizes), that the executor holds
// no live procedure, tree or nonce entry, only the 10,000 kept results,
// and that those go, with their records, once ResultTTL has passed.
//
// 10,000 trees take about 1 s here without -race, about 7 s with it (the
// same count: no reduction under -race).
//
// It found a defect: Abort persists each procedure it flagged after
// letting go of the executor's lock (persistIdle), and a flagged child
// could end, and its whole tree with it (its records deleted), before that
// write: the write then brought the child's record back, a record of a
// tree that no longer existed, which the store kept for good and which a
// restart, once the root's result was evicted, held as an orphan. Under
// -race it showed 1 to 3 times in 3 of 3 runs as: "kept 10000 results and
// 10003 records, want one per tree (10000)" with the leftovers logged as
// "left: 13891 parent 4187 root 4187 state ROLLEDBACK abort true". persistIdle
// now writes no child that has ended.
//
// Reintroducing the defect — in Executor.finishRoot, not forgetting the
// descendants (x.forgetLocked(id) dropped) — makes this test fail with:
// "the executor holds 39000 procedures, 0 trees and 0 nonce entries of
// finished trees, want none"; in scheduler.Release, not deleting a lock
// entry left idle, with: "the scheduler holds state of finished trees:
// {Queued:0 Queues:0 Levels:0 Locks:30012 Holders:0 LockWaiters:0
// EventWaiters:0}". (Skipping a child's release in Executor.complete does
// not leak: its tree deadlocks on its own locks, and the test times out.)
func TestScenarioHBASE28876SchedulerStateOfFinishedTrees(t *testing.T) {
	const trees = 10000
	mc := clock.NewManual(time.Unix(1e6, 0))
	env := &lockEnv{}
	mem := store.NewMemStore()
	h := startExecutor(t, mem, nil, func(c *Config) {
		c.Env, c.Clock, c.Workers = env, mc, 4
		c.ResultTTL, c.EvictInterval = time.Hour, 24*time.Hour
		c.Registry.MustRegister("scenario-locked", 1, func() Procedure { return &lockedTree{} })
	})
	x := h.x
	ids := make([]uint64, trees)
	var aborted []uint64
	want := map[uint64]State{}
	for i := range trees {
		root := newLockedTree(i)
		ids[i] = h.submit(root, SubmitOptions{Nonce: fmt.Sprint("tree-", i)})
		switch i % 10 {
		case 3:
			want[ids[i]] = RolledBack
		case 7:
			want[ids[i]] = RolledBack
			aborted = append(aborted, ids[i])
		default:
			want[ids[i]] = Success
		}
	}
	// Abort the trees whose child sleeps, once it sleeps (its root then
	// waits on it): the abort reaches the child through its parents.
	testwait.For(t, 60*time.Second, "every sleeper asleep", func() bool { return env.asleep.Load() == int64(len(aborted)) })
	for _, id := range aborted {
		if err := x.Abort(id); err != nil {
			t.Fatalf("abort %d: %v", id, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, id := range ids {
		info, err := x.Wait(ctx, id)
		if err != nil {
			// Say where the tree stands: its members, what each waits
			// for, and the scheduler's tables. It stalled in CI twice,
			// under a full suite's load: a child holding its locks for
			// life had them granted as its tree failed, ran no step, and
			// kept them, so the root's rollback waited on them for good
			// (TestHeldLockOfAMemberThatNeverRanIsLetGo).
			w, werr := x.Why(id)
			t.Fatalf("wait %d: %v; why: %+v (%v); scheduler %+v; sleepers %d", id, err, w, werr, x.Scheduler().Sizes(), env.asleep.Load())
		}
		if info.State != want[id] {
			t.Fatalf("tree %d ended %s (%q), want %s", id, info.State, info.Error, want[id])
		}
	}

	if z := x.Scheduler().Sizes(); z != (scheduler.Sizes{}) {
		t.Fatalf("the scheduler holds state of finished trees: %+v; locks %v", z, x.Scheduler().Locks())
	}
	x.mu.Lock()
	procs, roots, nonces, kept := len(x.procs), len(x.roots), len(x.nonces), len(x.finished.rows)
	x.mu.Unlock()
	if procs != 0 || roots != 0 || nonces != 0 {
		t.Fatalf("the executor holds %d procedures, %d trees and %d nonce entries of finished trees, want none", procs, roots, nonces)
	}
	if kept != trees || mem.Len() != trees {
		_, _ = mem.Load(func(p store.Proc) error {
			var r record
			if r.unmarshal(p.Data) == nil && r.parent != 0 {
				t.Logf("left: %d parent %d root %d state %s abort %v stack %v", r.id, r.parent, r.root, r.state, r.abort, r.stack)
			}
			return nil
		})
		t.Fatalf("kept %d results and %d records, want one per tree (%d)", kept, mem.Len(), trees)
	}

	// The results expire with ResultTTL, and with them the last of the
	// trees.
	mc.Advance(time.Hour + time.Second)
	if n := x.EvictExpired(); n != trees {
		t.Fatalf("evicted %d results after ResultTTL, want %d", n, trees)
	}
	x.mu.Lock()
	kept, spans, nonceRefs := len(x.finished.rows), len(x.children.spans), len(x.fin.nonces.sorted)+len(x.fin.nonces.extra)
	x.mu.Unlock()
	if kept != 0 || spans != 0 || nonceRefs != 0 || mem.Len() != 0 {
		t.Fatalf("after eviction: %d results, %d child spans, %d nonce refs and %d records kept, want none",
			kept, spans, nonceRefs, mem.Len())
	}
	if z := x.Scheduler().Sizes(); z != (scheduler.Sizes{}) {
		t.Fatalf("the scheduler holds state after eviction: %+v", z)
	}
}

// lockEnv counts the sleepers of the trees to abort.
type lockEnv struct{ asleep atomic.Int64 }

// lockedTree is one procedure of a tree that takes locks: the root its
// table's, children regions of it, grandchildren a server's.
type lockedTree struct {
	Base
	Level int // 0 root, 1 child, 2 grandchild
	Tree  int
	Index int
	Hold  bool
	Fail  bool // a grandchild that fails: the tree rolls back
	Sleep bool // a child that sleeps until aborted
	Next  int
}

func newLockedTree(i int) *lockedTree { return &lockedTree{Tree: i, Hold: i%2 == 0} }

func (p *lockedTree) ns() string    { return fmt.Sprint("ns", p.Tree%7) }
func (p *lockedTree) table() string { return fmt.Sprint("t", p.Tree) }

func (p *lockedTree) Locks() []scheduler.Lock {
	switch p.Level {
	case 0:
		return scheduler.TableLocks(p.ns(), p.table(), scheduler.Exclusive)
	case 1:
		return scheduler.RegionLocks(p.ns(), p.table(), fmt.Sprintf("%s.r%d", p.table(), p.Index))
	default:
		return scheduler.ServerLocks(fmt.Sprint("s", p.Tree%5), scheduler.Shared)
	}
}

func (p *lockedTree) HoldLock() bool { return p.Hold }

func (p *lockedTree) QueueKey() scheduler.QueueKey {
	return scheduler.QueueKey{Kind: scheduler.KindTable, Name: scheduler.TableName(p.ns(), p.table())}
}

func (p *lockedTree) Execute(ctx *Context) (Step, error) {
	k := p.Next
	p.Next++
	switch {
	case p.Sleep && k == 0:
		ctx.Env.(*lockEnv).asleep.Add(1)
		return Suspend(Timeout(24 * time.Hour)), nil
	case p.Sleep:
		return Step{}, fmt.Errorf("tree %d: the sleeper woke without its abort", p.Tree)
	case p.Level < 2 && k == 0:
		kids := make([]Procedure, 0, 2)
		n := 2
		if p.Level == 1 {
			n = 1
		}
		for j := range n {
			c := &lockedTree{Level: p.Level + 1, Tree: p.Tree, Index: j, Hold: p.Level == 0 && j == 0}
			c.Fail = c.Level == 2 && p.Tree%10 == 3 && p.Index == 1
			c.Sleep = c.Level == 1 && p.Tree%10 == 7 && j == 1
			kids = append(kids, c)
		}
		return Spawn(kids...), nil
	case p.Fail:
		return Step{}, errBoom
	}
	return Done(), nil
}

func (p *lockedTree) Rollback(*Context) error { return nil }
