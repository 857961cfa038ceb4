package procedure

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// lockedSM takes table Table for each step. State 0 records Name/s0 and
// does not support rollback; state 1 records Name/s1.
type lockedSM struct {
	StateMachine
	Name, Table string
}

func (p *lockedSM) Locks() []scheduler.Lock {
	return scheduler.TableLocks("default", p.Table, scheduler.Exclusive)
}
func (p *lockedSM) HoldLock() bool                   { return false }
func (p *lockedSM) IsRollbackSupported(s int32) bool { return s != 0 }
func (p *lockedSM) InitialState() int32              { return 0 }
func (p *lockedSM) ExecuteState(ctx *Context, s int32) (Flow, error) {
	ctx.Env.(*domain).do(fmt.Sprintf("%s/s%d", p.Name, s))
	if s == 0 {
		p.SetNextState(1)
		return HasMoreState, nil
	}
	return NoMoreState, nil
}
func (p *lockedSM) RollbackState(*Context, int32) error { return nil }

// TestAbortReachesALockWaiter: an abort (or a deadline) of a procedure
// parked waiting for a lock takes effect while the holder still holds it,
// without running a step; a state machine whose next state cannot be
// aborted still runs that state only once it has the lock.
func TestAbortReachesALockWaiter(t *testing.T) {
	for _, mode := range []string{"abort", "deadline", "state not abortable"} {
		t.Run(mode, func(t *testing.T) {
			d := newDomain()
			mc := clock.NewManual(time.Unix(1e6, 0))
			h := startExecutor(t, store.NewMemStore(), d, func(c *Config) {
				c.Registry, c.Clock = lifecycleRegistry(t), mc
				c.Registry.MustRegister("lockedsm", 1, func() Procedure { return &lockedSM{} })
			})
			table := uniq("t")
			a := &lkProc{Name: uniq("A"), LockSpec: scheduler.TableLocks("default", table, scheduler.Exclusive), Gate: uniq("gate")}
			ida := h.submit(a, SubmitOptions{})
			testwait.For(t, 10*time.Second, "holder in place", func() bool { return d.has("enter:" + a.Name) })
			var b Procedure = &lkProc{Name: uniq("B"), LockSpec: a.LockSpec}
			bName := b.(*lkProc).Name
			if mode == "state not abortable" {
				b = &lockedSM{Name: uniq("B"), Table: table}
				bName = b.(*lockedSM).Name
			}
			opts := SubmitOptions{}
			if mode == "deadline" {
				opts.Timeout = time.Minute
			}
			idb := h.submit(b, opts)
			testwait.For(t, 10*time.Second, "waiter parked on the lock", func() bool {
				w, _ := h.x.Why(idb)
				return w.Reason == "waiting for lock"
			})
			if mode == "deadline" {
				mc.Advance(2 * time.Minute)
			} else if err := h.x.Abort(idb); err != nil {
				t.Fatal(err)
			}
			if mode == "state not abortable" {
				openGate(a.Gate)
				if info := h.wait(idb); info.State != RolledBack {
					t.Fatalf("waiter ended %s", info.State)
				}
				if logIndex(d, "do:"+bName+"/s0") < logIndex(d, "do:exit:"+a.Name) || d.has(bName+"/s1") {
					t.Fatalf("waiter ran without the lock, or past its abort: %v", d.log)
				}
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			info, err := h.x.Wait(ctx, idb)
			if err != nil {
				w, _ := h.x.Why(idb)
				t.Fatalf("abort did not reach the lock waiter: it is %q", w.Reason)
			}
			wantErr := ErrAborted
			if mode == "deadline" {
				wantErr = ErrTimeout
			}
			if info.State != RolledBack || !errorsContain(info.Error, wantErr.Error()) {
				t.Fatalf("waiter ended %s (%s), want ROLLEDBACK with %v", info.State, info.Error, wantErr)
			}
			if d.has("enter:"+bName) || d.has("exit:"+a.Name) {
				t.Fatalf("waiter ran a step, or the holder let go first: %v", d.log)
			}
			openGate(a.Gate)
			if info := h.wait(ida); info.State != Success {
				t.Fatalf("holder ended %s", info.State)
			}
			testwait.For(t, 10*time.Second, "no lock left", func() bool { return len(h.x.Scheduler().Locks()) == 0 })
		})
	}
}
