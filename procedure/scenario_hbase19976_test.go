package procedure

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// TestScenarioHBASE19976WorkersExhaustedByWaiters replays HBASE-19976
// (HBase ProcV2, "Dead lock if the worker threads in procedure executor
// are exhausted"). Every core worker thread was busy with a procedure
// whose step blocked on something that only a procedure still in the run
// queue could bring about; with no free worker that procedure never ran,
// and the master hung. HBase's answer is the WorkerMonitor: workers stuck
// on one step for long enough make it start KeepAliveWorkerThreads, which
// run the queue and leave again once idle.
//
// Baton holds the line in two places. A step that waits for something
// outside is meant to Suspend (Procedure's contract), which gives the
// worker back: suspended and lock-parked procedures hold no worker at all.
// A step that blocks anyway (the contract allows it, honouring ctx) holds
// its worker, and the stuck-worker monitor (monitor.go:
// Executor.CheckStuckWorkers, armed every Config.StuckCheckInterval) adds
// a keep-alive worker whenever half the core pool has been on one step
// longer than Config.StuckThreshold, up to Config.MaxExtraWorkers, and
// reports the stuck count in baton_executor_stuck_workers. The scenario
// runs with the defaults for all four, in a synctest bubble so that the
// monitor's seconds pass exactly and at once.
//
// Reintroducing the defect — no keep-alive worker, i.e. deleting the
// x.startWorkerLocked(true) call in monitor.go:CheckStuckWorkers — makes
// this test fail with:
//
//	--- FAIL: TestScenarioHBASE19976WorkersExhaustedByWaiters/blocking_steps
//	blocking steps: the releaser never ran: every worker stays held by a
//	step only it can release (workers 2, stuck 2)
//
// The suspending and lock-parked shapes pass with or without the monitor:
// they hold no worker to begin with.
func TestScenarioHBASE19976WorkersExhaustedByWaiters(t *testing.T) {
	const workers = 2
	// Defaults, as a master runs: the monitor's timing is the subject.
	def := Config{Workers: workers}
	def.setDefaults()
	// The keep-alive workers come within two checks of the threshold (one
	// to cross it, one more for a keep-alive that itself takes a blocking
	// step); a minute of fake time is far more, and nothing else in the
	// scenario takes time.
	deadline := time.Minute

	start := func(t *testing.T, rig *hbase19976Rig) *harness {
		return startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) {
			c.Workers = workers
			c.Registry = hbase19976Registry(t)
			c.Env = rig
		})
	}

	t.Run("blocking steps", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rig := &hbase19976Rig{release: make(chan struct{}), started: make(chan int, 8)}
			h := start(t, rig)
			// Every core worker, and the first keep-alive worker too, takes
			// a step that blocks until the releaser runs; the releaser is
			// queued behind them all, in the same FIFO queue.
			var ids []uint64
			for i := range workers + 1 {
				ids = append(ids, h.submit(&hbase19976Proc{Role: "block", N: i}, SubmitOptions{}))
			}
			rel := h.submit(&hbase19976Proc{Role: "release"}, SubmitOptions{})
			ids = append(ids, rel)
			for range workers {
				<-rig.started
			}
			began := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			if _, err := h.x.Wait(ctx, rel); err != nil {
				t.Fatalf("blocking steps: the releaser never ran: every worker stays held by a step only it can release (workers %d, stuck %v)",
					h.x.Workers(), testutil.ToFloat64(h.x.metrics.stuck))
			}
			took := time.Since(began)
			t.Logf("the releaser ran %v after every worker blocked", took)
			for _, id := range ids {
				if info, err := h.x.Wait(ctx, id); err != nil || info.State != Success {
					t.Fatalf("procedure %d: %v %v", id, info.State, err)
				}
			}
			// Two keep-alive workers were needed: the first took the third
			// blocking step and got stuck itself.
			if bound := def.StuckThreshold + 3*def.StuckCheckInterval; took > bound {
				t.Fatalf("the releaser ran %v after the workers blocked, want within %v (threshold %v, check every %v)",
					took, bound, def.StuckThreshold, def.StuckCheckInterval)
			}
			if n := h.x.Workers(); n != workers+2 {
				t.Fatalf("workers %d right after the release, want %d (two keep-alive workers added)", n, workers+2)
			}
			if v := testutil.ToFloat64(h.x.metrics.stuck); v < workers {
				t.Fatalf("baton_executor_stuck_workers %v, want at least %d: the monitor saw no stuck worker", v, workers)
			}
			// Keep-alive workers are for the emergency only: idle for
			// KeepAliveTime, they leave, and the pool is its core size.
			testwait.FakeTimeTo(time.Now(), def.KeepAliveTime+def.StuckCheckInterval)
			if n := h.x.Workers(); n != workers {
				t.Fatalf("workers %d after the keep-alive time, want the core %d", n, workers)
			}
		})
	})

	// Three times as many waiters as workers, all queued before the
	// releaser; neither shape should hold a worker while it waits.
	var suspending, lockParked []*hbase19976Proc
	for i := range 3 * workers {
		// Each suspends on the event only the releaser wakes.
		suspending = append(suspending, &hbase19976Proc{Role: "suspend", N: i})
	}
	// The holder takes the table lock for its life and suspends on the
	// event; more lock waiters than workers queue behind it, then the
	// releaser (which needs no lock).
	lockParked = append(lockParked, &hbase19976Proc{Role: "suspend", Lock: true})
	for i := range 3 * workers {
		lockParked = append(lockParked, &hbase19976Proc{Role: "quick", Lock: true, N: i})
	}
	for _, tc := range []struct {
		name, what string
		waiters    []*hbase19976Proc
	}{
		{"suspending steps", "a suspended step", suspending},
		{"lock-parked steps", "a lock-parked procedure", lockParked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rig := &hbase19976Rig{ev: scheduler.NewEvent("released by the releaser"), started: make(chan int, 64)}
				h := start(t, rig)
				var ids []uint64
				for _, p := range tc.waiters {
					ids = append(ids, h.submit(p, SubmitOptions{}))
				}
				ids = append(ids, h.submit(&hbase19976Proc{Role: "release"}, SubmitOptions{}))
				hbase19976WaitAll(t, h, ids, deadline, time.Now())
				if n := h.x.Workers(); n != workers {
					t.Fatalf("workers %d, want %d: %s should hold no worker", n, workers, tc.what)
				}
			})
		})
	}
}

// hbase19976WaitAll waits for every id to succeed, and for it to take no
// time at all: in the bubble, time passes only when every goroutine
// waits, so any elapsed time means the releaser sat queued until a timer
// (the monitor's) got it a worker.
func hbase19976WaitAll(t *testing.T, h *harness, ids []uint64, deadline time.Duration, began time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	for _, id := range ids {
		info, err := h.x.Wait(ctx, id)
		if err != nil || info.State != Success {
			why, _ := h.x.Why(id)
			t.Fatalf("procedure %d not done after %v: %v %v (%+v)", id, deadline, info.State, err, why)
		}
	}
	if took := time.Since(began); took > 0 {
		t.Fatalf("done after %v of waiting: the releaser was not run at once", took)
	}
}

// hbase19976Rig is the scenario's Env: what the releaser releases.
type hbase19976Rig struct {
	release chan struct{}    // blocking steps wait for it to close
	ev      *scheduler.Event // suspending steps wait for it
	started chan int         // a blocking step began
	once    sync.Once
}

// hbase19976Proc is one procedure of the scenario, by Role: "block" blocks
// its step until released, "suspend" suspends on the event until released
// (once), "quick" does nothing, "release" releases both.
type hbase19976Proc struct {
	Base
	Role  string
	N     int
	Lock  bool
	Woken bool
}

func (p *hbase19976Proc) Locks() []scheduler.Lock {
	if !p.Lock {
		return nil
	}
	return scheduler.TableLocks("default", "hbase19976", scheduler.Exclusive)
}

func (p *hbase19976Proc) HoldLock() bool { return true }

func (p *hbase19976Proc) Execute(ctx *Context) (Step, error) {
	rig := ctx.Env.(*hbase19976Rig)
	switch p.Role {
	case "block":
		rig.started <- p.N
		select {
		case <-rig.release:
		case <-ctx.Done():
			return Step{}, ctx.Err()
		}
	case "suspend":
		if !p.Woken {
			p.Woken = true
			return Suspend(OnEvent(rig.ev)), nil
		}
	case "release":
		rig.once.Do(func() {
			if rig.release != nil {
				close(rig.release)
			}
			if rig.ev != nil {
				ctx.Executor().Wake(rig.ev)
			}
		})
	case "quick":
	default:
		return Step{}, fmt.Errorf("role %q", p.Role)
	}
	return Done(), nil
}

func (p *hbase19976Proc) Rollback(*Context) error { return nil }

func hbase19976Registry(t testing.TB) *Registry {
	r := testRegistry(t)
	r.MustRegister("hbase19976", 1, func() Procedure { return &hbase19976Proc{} })
	return r
}
