package procedure

import (
	"testing"
	"time"

	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// waitLoopSM runs state 0 Times times, each time waiting the way Mode says
// ("timer": a tiny timeout; "event": an event that is already woken;
// "children": a child), then finishes in state 1.
type waitLoopSM struct {
	StateMachine
	Mode  string
	Times int
	Runs  int
}

func (p *waitLoopSM) InitialState() int32 { return 0 }

func (p *waitLoopSM) ExecuteState(ctx *Context, s int32) (Flow, error) {
	if s == 1 {
		return NoMoreState, nil
	}
	p.Runs++
	if p.Runs > p.Times {
		p.SetNextState(1)
		return HasMoreState, nil
	}
	switch p.Mode {
	case "timer":
		ctx.Suspend(Timeout(time.Microsecond))
	case "event":
		ev := scheduler.NewEvent("ready")
		ctx.x.Wake(ev)
		ctx.Suspend(OnEvent(ev), SkipPersistence())
	case "children":
		ctx.AddChild(&noopProc{})
	}
	return HasMoreState, nil // state 0 again
}

func (p *waitLoopSM) RollbackState(*Context, int32) error { return nil }

// TestWaitingStateIsNotARepeat: a state that waits (on a timer, an event,
// or its children) and runs again far more often than the repeat limit is
// not failed by it; a state that spins without waiting still is.
func TestWaitingStateIsNotARepeat(t *testing.T) {
	const limit = 5
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) {
		c.Registry = lifecycleRegistry(t)
		c.Registry.MustRegister("waitloop", 1, func() Procedure { return &waitLoopSM{} })
	})
	for _, mode := range []string{"timer", "event", "children"} {
		p := &waitLoopSM{Mode: mode, Times: 10 * limit}
		p.MaxRepeats = limit
		id := h.submit(p, SubmitOptions{})
		if info := h.wait(id); info.State != Success {
			t.Fatalf("%s: a waiting state ended %s after %d runs (%s)", mode, info.State, p.Runs, info.Error)
		}
	}
	id := h.submit(&loopSM{}, SubmitOptions{}) // spins with MaxRepeats 5
	if info := h.wait(id); info.State != RolledBack || !errorsContain(info.Error, ErrStateLoop.Error()) {
		t.Fatalf("a spinning state ended %s (%s)", info.State, info.Error)
	}
}

// TestSpinCountIsPersisted: the count the repeat limit is checked against
// survives a restart, so a spinning state cannot escape the limit by
// crashing now and then.
func TestSpinCountIsPersisted(t *testing.T) {
	in := record{id: 1, root: 1, typeName: "sm", repeats: 7, spins: 3}
	var out record
	if err := out.unmarshal(in.marshal()); err != nil {
		t.Fatal(err)
	}
	if out.repeats != 7 || out.spins != 3 {
		t.Fatalf("decoded repeats %d spins %d, want 7 and 3", out.repeats, out.spins)
	}
}
