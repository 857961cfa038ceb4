// Package proceduretest proves that a procedure survives every crash: the
// equivalent of HBase's ProcedureTestingUtility for procedures written
// with package procedure.
//
// A procedure's steps must be idempotent, because the step whose outcome
// was not yet stored when the process died runs again after the restart;
// its rollback must be idempotent for the same reason. These helpers
// check both by brute force, on an in-memory store that survives the
// simulated crashes (as a WAL or the Raft log survives a real one):
//
//   - RecoveryAndDoubleExecution crashes the executor right after each of
//     its store writes in turn (the next write fails, as if the process
//     died there), starts a new one on the same store and the same
//     environment, and runs the procedure to its end: its final state and
//     its effects must be those of a run without crashes.
//   - RollbackAndDoubleExecution aborts the procedure after each of its
//     store writes in turn and lets every write of the rollback fail once
//     before it is let through, so that every rollback step runs twice: a
//     procedure that rolled back must leave no effect at all. The abort
//     lands after the restart that follows write k, racing the restarted
//     executor's first step: a run where it came too late is tried again.
//
// A Stepper's step lost in a crash (run, its outcome never stored) is not
// rolled back when the procedure is aborted before running it again: its
// Rollback is called once per stored step. Its effects outside the store
// then stay, and RollbackAndDoubleExecution says so. Keep such effects in
// Context.Put (they commit with the step), or write a state machine, whose
// RollbackState is called for that state too.
//
// For procedures whose environment is a cluster leader's services, the
// same method at the cluster's scale is cluster/clustertest.WriteFaults.
//
// Effects are what Case.Effects reads from the environment (the user's own
// system, which survives the crash) together with the domain keys the
// procedure wrote with Context.Put, compared with reflect.DeepEqual: a step
// whose effect is applied twice (a counter incremented again, a record
// appended again) shows as a difference.
//
//	func TestProvisionSurvivesEveryCrash(t *testing.T) {
//		c := proceduretest.Case{
//			Register: func(r *procedure.Registry) error { return r.Register("provision", 1, newProvision) },
//			New:      func() procedure.Procedure { return &Provision{Host: "h1"} },
//			Env:      func() any { return NewFleet() },
//			Effects:  func(env any) any { return env.(*Fleet).Snapshot() },
//		}
//		proceduretest.RecoveryAndDoubleExecution(t, c)
//		proceduretest.RollbackAndDoubleExecution(t, c)
//	}
package proceduretest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/locked"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/store"
)

// Case is one procedure to check.
type Case struct {
	// Register registers the procedure types the run needs (the
	// procedure's and its children's) in a fresh registry, for each
	// executor the run starts. Required.
	Register func(*procedure.Registry) error
	// New returns the procedure to submit. Required.
	New func() procedure.Procedure
	// Env returns the environment of one run (procedure.Config.Env): the
	// outside world the procedure changes. A run's executors, before and
	// after each crash, share it. Default: nil.
	Env func() any
	// Effects reads what the procedure did to env, to compare with a
	// clean run (reflect.DeepEqual). Default: nothing beyond the domain
	// keys the procedure wrote with Context.Put, which are always
	// compared.
	Effects func(env any) any
	// Keys reads what of the domain keys written with Context.Put is
	// compared. Default: all of them, as written (a key set back to its
	// first value by a rollback differs from one never written: give Keys
	// to say they are the same).
	Keys func(keys map[string]string) any
	// Configure adjusts each executor's configuration (Store, Registry
	// and Env are set by the harness). Default: one worker, so that at
	// most one step is in flight at a crash.
	Configure func(*procedure.Config)
	// Timeout bounds one run, crashes and restarts included. Default 30 s.
	Timeout time.Duration
}

// Run is what one run of a Case ended with.
type Run struct {
	// Info is the root procedure at its end.
	Info procedure.Info
	// Effects are Case.Effects of the run's environment and the domain
	// keys written, as compared.
	Effects Effects
	// Writes is the number of store writes let through.
	Writes int
	// Restarts is the number of executors started after a crash.
	Restarts int
	// AbortRefused: an abort was asked for and refused (the procedure had
	// ended, or it retries until done).
	AbortRefused bool
}

// Effects are a run's effects as compared.
type Effects struct {
	// Env is Case.Effects of the environment (nil without it).
	Env any
	// Keys are the domain keys written with Context.Put, and their values
	// (as Case.Keys reads them, if set).
	Keys any
}

// nonce is the submission's nonce: a resubmission after a crash finds the
// procedure the first submission stored, if it was stored.
const nonce = "proceduretest"

// Clean runs c once, without a crash, and returns how it ended.
func Clean(t testing.TB, c Case) Run {
	t.Helper()
	return newRunner(t, c).run(-1, false, -1)
}

// RecoveryAndDoubleExecution crashes the executor after each of a clean
// run's store writes in turn (0 to all of them), restarts it on the same
// store and environment, and checks that the procedure ends in the clean
// run's state, with its effects, and reaches that state once.
func RecoveryAndDoubleExecution(t *testing.T, c Case) {
	t.Helper()
	clean := Clean(t, c)
	for n := 0; n <= clean.Writes; n++ {
		t.Run(fmt.Sprintf("crash-after-write-%d", n), func(t *testing.T) {
			got := newRunner(t, c).run(n, false, -1)
			if got.Info.State != clean.Info.State {
				t.Fatalf("ended %s (error %q) after a crash after write %d; a clean run ends %s (error %q)",
					got.Info.State, got.Info.Error, n, clean.Info.State, clean.Info.Error)
			}
			if !reflect.DeepEqual(got.Effects, clean.Effects) {
				t.Fatalf("effects after a crash after write %d:\n  %#v\na clean run's:\n  %#v", n, got.Effects, clean.Effects)
			}
		})
	}
}

// RollbackAndDoubleExecution aborts the procedure after each of a clean
// run's store writes in turn, with every later write failing once before
// it is let through (each step of the rollback runs twice), and checks
// that a procedure that ends ROLLEDBACK leaves the effects of no run at
// all, and one that ends SUCCESS (an abort refused: too late, or a
// procedure that retries until done) the clean run's.
func RollbackAndDoubleExecution(t *testing.T, c Case) {
	t.Helper()
	clean := Clean(t, c)
	none := newRunner(t, c).effects()
	for k := 1; k < clean.Writes; k++ {
		t.Run(fmt.Sprintf("abort-after-write-%d", k), func(t *testing.T) {
			// The abort races the restarted executor's first step: a run
			// in which it came too late to act is tried again, a few
			// times, before its SUCCESS is taken as the procedure's own.
			var got Run
			for range 3 {
				if got = newRunner(t, c).run(k, true, k); got.Info.State != procedure.Success || got.AbortRefused {
					break
				}
			}
			switch got.Info.State {
			case procedure.RolledBack:
				if !reflect.DeepEqual(got.Effects, none) {
					t.Fatalf("rolled back after an abort after write %d, but left effects:\n  %#v\nwant those of no run:\n  %#v", k, got.Effects, none)
				}
			case procedure.Success:
				if !reflect.DeepEqual(got.Effects, clean.Effects) {
					t.Fatalf("succeeded despite an abort after write %d, with effects:\n  %#v\na clean run's:\n  %#v", k, got.Effects, clean.Effects)
				}
			default:
				t.Fatalf("ended %s after an abort after write %d", got.Info.State, k)
			}
		})
	}
}

// runner is one run: a store and an environment that outlive its
// executors.
type runner struct {
	t     testing.TB
	c     Case
	mem   *store.MemStore
	env   any
	store *crashStore
}

func newRunner(t testing.TB, c Case) *runner {
	if c.Register == nil || c.New == nil {
		t.Fatal("proceduretest: a Case needs Register and New")
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	r := &runner{t: t, c: c, mem: store.NewMemStore()}
	if c.Env != nil {
		r.env = c.Env()
	}
	r.store = &crashStore{inner: r.mem, budget: -1, terminal: map[uint64]int{}, last: map[uint64]procedure.State{}}
	return r
}

func (r *runner) effects() Effects {
	var e Effects
	if r.c.Effects != nil {
		e.Env = r.c.Effects(r.env)
	}
	keys := map[string]string{}
	r.mem.ScanValues("", func(k string, v []byte) bool {
		keys[k] = string(v)
		return true
	})
	e.Keys = keys
	if r.c.Keys != nil {
		e.Keys = r.c.Keys(keys)
	}
	return e
}

// run runs the case to its end: with a crash once crashAfter writes are
// stored (< 0: none); then, with toggle, every write failing once before
// it is let through; with abortAfter >= 0, the root aborted once that
// many writes are stored.
func (r *runner) run(crashAfter int, toggle bool, abortAfter int) Run {
	t := r.t
	t.Helper()
	deadline := time.Now().Add(r.c.Timeout)
	r.store.arm(crashAfter, false)
	var id uint64
	abortWanted, refused := false, false
	for restarts := 0; ; restarts++ {
		if time.Now().After(deadline) {
			t.Fatalf("proceduretest: no end within %v (%d restarts)", r.c.Timeout, restarts)
		}
		x := r.start()
		if id == 0 {
			var err error
			id, err = x.Submit(r.c.New(), procedure.SubmitOptions{Nonce: nonce})
			if err != nil && x.Err() == nil {
				t.Fatalf("proceduretest: submit: %v", err)
			}
			if err != nil {
				id = 0 // not acknowledged: submitted again after the restart
			}
		}
		for id != 0 {
			info, err := x.Get(id)
			// Ended as far as the store is concerned: an executor whose
			// last write failed may show an end it never stored.
			if err == nil && info.State.Terminal() && x.Err() == nil && r.store.stored(id).Terminal() {
				stop(x)
				if n := r.store.terminals(id); n != 1 {
					t.Fatalf("proceduretest: procedure %d stored as ended %d times, want once", id, n)
				}
				return Run{Info: info, Effects: r.effects(), Writes: r.store.written(), Restarts: restarts, AbortRefused: refused}
			}
			if abortAfter >= 0 && !abortWanted && r.store.written() >= abortAfter {
				abortWanted = true
			}
			if abortWanted && err == nil && !info.AbortRequested {
				aerr := x.Abort(id)
				switch {
				case aerr == nil, x.Err() != nil:
					// Asked, or the executor died: asked again after the
					// restart if it did not stick.
				case !errors.Is(aerr, procedure.ErrNotAllowed):
					t.Fatalf("proceduretest: abort: %v", aerr)
				case r.store.stored(id).Terminal() || !info.State.Terminal():
					// Stored as ended, or a procedure that retries until
					// done: the abort is refused for good.
					abortAfter, abortWanted, refused = -1, false, true
				}
				// Else it ended in memory only, with a write that failed:
				// the executor is dying, and the next one will be asked.
			}
			if x.Err() != nil || time.Now().After(deadline) {
				break
			}
			r.store.waitWrite(time.Millisecond)
		}
		stop(x)
		if x.Err() == nil && id != 0 {
			t.Fatalf("proceduretest: procedure %d did not end within %v", id, r.c.Timeout)
		}
		// Crashed: the next executor finds what was stored. From the
		// first crash on, a toggling run fails every write once.
		r.store.arm(-1, toggle)
	}
}

// stop stops x, giving its steps a few seconds to notice.
func stop(x *procedure.Executor) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = x.Stop(ctx)
}

func (r *runner) start() *procedure.Executor {
	t := r.t
	t.Helper()
	reg := procedure.NewRegistry()
	if err := r.c.Register(reg); err != nil {
		t.Fatalf("proceduretest: register: %v", err)
	}
	cfg := procedure.Config{RecordFormat: version.Newest, Workers: 1}
	if r.c.Configure != nil {
		r.c.Configure(&cfg)
	}
	cfg.Store, cfg.Registry, cfg.Env = r.store, reg, r.env
	x, err := procedure.New(cfg)
	if err != nil {
		t.Fatalf("proceduretest: executor: %v", err)
	}
	if err := x.Start(); err != nil {
		t.Fatalf("proceduretest: start: %v", err)
	}
	if p := x.Problems(); len(p) > 0 {
		t.Fatalf("proceduretest: problems loading the store after a crash: %+v", p)
	}
	return x
}

// errCrash is what a write fails with where the process would have died.
var errCrash = errors.New("proceduretest: simulated crash")

// crashStore lets writes through to inner until its budget is spent, and
// fails the rest, as if the process died there; toggling, it fails every
// write once before letting it through. It counts, per procedure, the
// writes that moved it into a terminal state.
type crashStore struct {
	inner *store.MemStore

	mu       sync.Mutex
	budget   int // writes this executor may still make; < 0: no limit
	writes   int
	wrote    chan struct{}
	terminal map[uint64]int
	last     map[uint64]procedure.State
}

var (
	_ store.DeleteMutator = (*crashStore)(nil)
	_ store.Reader        = (*crashStore)(nil)
)

// arm starts an executor's life: it may make writes until the store holds
// total of them (< 0: no limit); toggling, one write, so that the write
// its predecessor failed at goes through and the next one fails: every
// step runs twice, once before the crash and once after it.
func (c *crashStore) arm(total int, toggle bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case toggle:
		c.budget = 1
	case total >= 0:
		c.budget = max(total-c.writes, 0)
	default:
		c.budget = -1
	}
}

func (c *crashStore) written() int { return locked.Load(&c.mu, &c.writes) }

// stored is the state last stored for procedure id.
func (c *crashStore) stored(id uint64) procedure.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last[id]
}

func (c *crashStore) terminals(id uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.terminal[id]
}

// waitWrite waits up to d for the next write.
func (c *crashStore) waitWrite(d time.Duration) {
	c.mu.Lock()
	if c.wrote == nil {
		c.wrote = make(chan struct{})
	}
	ch := c.wrote
	c.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// allow says whether a write of procs goes through, and counts it.
func (c *crashStore) allow(procs ...store.Proc) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.budget == 0 {
		return false
	}
	if c.budget > 0 {
		c.budget--
	}
	c.writes++
	for _, p := range procs {
		if info, err := procedure.DecodeInfo(p.Data); err == nil {
			if info.State.Terminal() && !c.last[info.ID].Terminal() {
				c.terminal[info.ID]++
			}
			c.last[info.ID] = info.State
		}
	}
	if c.wrote != nil {
		close(c.wrote)
		c.wrote = nil
	}
	return true
}

func (c *crashStore) Load(fn func(store.Proc) error) (store.LoadInfo, error) {
	return c.inner.Load(fn)
}

func (c *crashStore) Insert(p store.Proc, children []store.Proc) error {
	return c.InsertAndMutate(p, children, nil)
}

func (c *crashStore) Update(p store.Proc) error { return c.UpdateAndMutate(p, nil) }

func (c *crashStore) Delete(ids []uint64) error { return c.DeleteAndMutate(ids, nil) }

func (c *crashStore) InsertAndMutate(p store.Proc, children []store.Proc, muts []store.Mutation) error {
	if !c.allow(append([]store.Proc{p}, children...)...) {
		return errCrash
	}
	return c.inner.InsertAndMutate(p, children, muts)
}

func (c *crashStore) UpdateAndMutate(p store.Proc, muts []store.Mutation) error {
	if !c.allow(p) {
		return errCrash
	}
	return c.inner.UpdateAndMutate(p, muts)
}

func (c *crashStore) DeleteAndMutate(ids []uint64, muts []store.Mutation) error {
	if !c.allow() {
		return errCrash
	}
	return c.inner.DeleteAndMutate(ids, muts)
}

func (c *crashStore) Value(key string) ([]byte, bool) { return c.inner.Value(key) }

func (c *crashStore) ScanValues(prefix string, fn func(string, []byte) bool) {
	c.inner.ScanValues(prefix, fn)
}

func (c *crashStore) Proc(id uint64) ([]byte, bool) { return c.inner.Proc(id) }

// Close does not close inner: the next executor of the run reopens it.
func (c *crashStore) Close() error { return nil }
