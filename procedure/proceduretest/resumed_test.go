package proceduretest

import (
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/scheduler"
)

// lockedProvision is provision with a lock on its host.
type lockedProvision struct {
	provision
	Hold bool
}

func (p *lockedProvision) Locks() []scheduler.Lock {
	return []scheduler.Lock{{Type: scheduler.LockRegion, Name: p.Host, Mode: scheduler.Exclusive}}
}

func (p *lockedProvision) HoldLock() bool { return p.Hold }

func lockedCase(hold bool) Case {
	c := provisionCase(false)
	c.Register = func(r *procedure.Registry) error {
		return r.Register("provision", 1, func() procedure.Procedure { return &lockedProvision{} })
	}
	c.New = func() procedure.Procedure { return &lockedProvision{provision: provision{Host: "h1"}, Hold: hold} }
	return c
}

func TestLockedProvisionSurvivesEveryCrash(t *testing.T) {
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprint("hold=", hold), func(t *testing.T) {
			RecoveryAndDoubleExecution(t, lockedCase(hold))
			RollbackAndDoubleExecution(t, lockedCase(hold))
		})
	}
}

// TestAbortOfAResumedProcedureRollsBackItsLostState, deterministically:
// the executor dies after allocate ran but before its outcome was stored;
// the next one resumes the procedure and it is aborted before it runs
// allocate again (while it waits for its lock, or before its first step).
// allocate's effect, left by the executor that died, must be undone.
func TestAbortOfAResumedProcedureRollsBackItsLostState(t *testing.T) {
	for _, c := range []struct {
		name    string
		hold    bool
		blocked bool // someone else holds the host's lock at the restart
	}{{"lock-wait-per-step", false, true}, {"lock-wait-held", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			cs := lockedCase(c.hold)
			r := newRunner(t, cs)
			r.store.arm(1, false) // the submission is stored; allocate runs, its write fails
			x := r.start()
			id, err := x.Submit(cs.New(), procedure.SubmitOptions{Nonce: nonce})
			if err != nil {
				t.Fatal(err)
			}
			testwait.For(t, 10*time.Second, "the executor to die at allocate's write", func() bool { return x.Err() != nil })
			stop(x)
			if got := cs.Effects(r.env); got != "map[h1:allocated] boots=0" {
				t.Fatalf("after the crash: %v", got)
			}
			r.store.arm(-1, false)

			reg := procedure.NewRegistry()
			if err := cs.Register(reg); err != nil {
				t.Fatal(err)
			}
			x2, err := procedure.New(procedure.Config{RecordFormat: version.Newest, Workers: 1, Store: r.store, Registry: reg, Env: r.env})
			if err != nil {
				t.Fatal(err)
			}
			other := uint64(1 << 40)
			if c.blocked && !x2.Scheduler().TryAcquire(other, nil, []scheduler.Lock{{Type: scheduler.LockRegion, Name: "h1", Mode: scheduler.Exclusive}}) {
				t.Fatal("the other holder's lock")
			}
			if err := x2.Start(); err != nil {
				t.Fatal(err)
			}
			defer stop(x2)
			testwait.For(t, 10*time.Second, "the resumed procedure to wait for its lock", func() bool {
				w, err := x2.Why(id)
				return err == nil && w.Reason == "waiting for lock"
			})
			if err := x2.Abort(id); err != nil {
				t.Fatal(err)
			}
			// The rollback takes the lock of each step it undoes.
			testwait.For(t, 10*time.Second, "the abort to take it out of its lock wait", func() bool {
				w, err := x2.Why(id)
				return err == nil && w.Reason != "waiting for lock"
			})
			x2.Scheduler().Release(other)
			testwait.For(t, 10*time.Second, "the rollback", func() bool {
				info, err := x2.Get(id)
				return err == nil && info.State.Terminal()
			})
			info, _ := x2.Get(id)
			if info.State != procedure.RolledBack {
				t.Fatalf("ended %s", info.State)
			}
			if got := cs.Effects(r.env); got != "map[] boots=0" {
				t.Fatalf("rolled back, but left %v: the state lost in the crash was not undone", got)
			}
		})
	}
}
