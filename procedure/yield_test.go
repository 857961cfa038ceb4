package procedure

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// yieldSM's state 0 records Name/s0, puts domain key Name, picks state 1
// and yields. State 1 records Name/s1 with what the store held for the
// procedure and the key when it started, then finishes.
type yieldSM struct {
	StateMachine
	Name string
}

var yieldSeen sync.Map // Name -> yieldSaw

type yieldSaw struct {
	next    int32
	history []int32
	key     bool
}

func (p *yieldSM) InitialState() int32 { return 0 }

func (p *yieldSM) ExecuteState(ctx *Context, s int32) (Flow, error) {
	d := ctx.Env.(*domain)
	d.do(fmt.Sprintf("%s/s%d", p.Name, s))
	if s == 0 {
		if err := ctx.Put(p.Name, []byte("v")); err != nil {
			return NoMoreState, err
		}
		p.SetNextState(1)
		ctx.Yield()
		return HasMoreState, nil
	}
	mem := ctx.x.store.(*store.MemStore)
	var r record
	_, _ = mem.Load(func(sp store.Proc) error {
		if sp.ID == ctx.ID() {
			return r.unmarshal(sp.Data)
		}
		return nil
	})
	_, key := mem.Value(p.Name)
	yieldSeen.Store(p.Name, yieldSaw{next: r.smNext, history: r.smHistory, key: key})
	return NoMoreState, nil
}

func (p *yieldSM) RollbackState(*Context, int32) error { return nil }

// TestYieldKeepsTheStepsTransition: a state that picks the next state and
// yields gives up its worker with its transition standing: the next run is
// the state it picked, and the store already holds that transition and the
// step's domain change when it runs, so memory and store agree.
func TestYieldKeepsTheStepsTransition(t *testing.T) {
	mem := store.NewMemStore()
	d := newDomain()
	h := startExecutor(t, mem, d, func(c *Config) {
		c.Registry = lifecycleRegistry(t)
		c.Registry.MustRegister("yieldsm", 1, func() Procedure { return &yieldSM{} })
	})
	p := &yieldSM{Name: uniq("Y")}
	if info := h.wait(h.submit(p, SubmitOptions{})); info.State != Success {
		t.Fatalf("ended %s (%s)", info.State, info.Error)
	}
	if n := d.count("do", p.Name+"/s0"); n != 1 || !d.has(p.Name+"/s1") {
		t.Fatalf("state 0 ran %d times, state 1 ran: %v", n, d.has(p.Name+"/s1"))
	}
	if got := p.History(); !slices.Equal(got, []int32{0, 1}) {
		t.Fatalf("history %v, want [0 1]: the yielding state is a step like any other", got)
	}
	v, _ := yieldSeen.Load(p.Name)
	saw := v.(yieldSaw)
	if saw.next != 1 || !slices.Equal(saw.history, []int32{0}) || !saw.key {
		t.Fatalf("when state 1 ran the store held next state %d, history %v, domain change %v; want 1, [0], true",
			saw.next, saw.history, saw.key)
	}
}

// TestYieldLetsQueuedProceduresGoFirst: with one worker, a procedure that
// yields runs its next step only after the procedure queued behind it.
func TestYieldLetsQueuedProceduresGoFirst(t *testing.T) {
	d := newDomain()
	h := startExecutor(t, store.NewMemStore(), d, func(c *Config) { c.Workers = 1 })
	a, b := uniq("A"), uniq("B")
	bQueued := make(chan struct{})
	var steps int
	funcs.Store(a, func(ctx *Context) (Step, error) {
		steps++
		d.do(fmt.Sprintf("%s/%d", a, steps))
		if steps == 1 {
			<-bQueued
			return Yield(), nil
		}
		return Done(), nil
	})
	funcs.Store(b, func(ctx *Context) (Step, error) { d.do(b); return Done(), nil })
	ida := h.submit(&funcProc{ID: a}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "A running", func() bool { return d.has(a + "/1") })
	idb := h.submit(&funcProc{ID: b}, SubmitOptions{})
	close(bQueued)
	h.wait(ida)
	h.wait(idb)
	if got, want := d.order("do", ""), []string{a + "/1", b, a + "/2"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}
