package procedure

import (
	"encoding/json"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// endThenFailChild finishes in its first step, but its state
// cannot be serialised for the SUCCESS write: complete sets SUCCESS, then
// persist's unserialisable turns it FAILED. Its rollback waits for the test.
type endThenFailChild struct {
	Base
	Ran bool
}

// endThenFailGate is the current test's: set afresh by each run.
type endThenFailGate struct {
	marshalEntered, marshalRelease chan struct{}
	rollbackIn, rollbackGo         chan struct{}
	armed, rbOnce                  atomic.Bool
}

var endThenFail atomic.Pointer[endThenFailGate]

func (p *endThenFailChild) Execute(ctx *Context) (Step, error) {
	p.Ran = true
	return Done(), nil
}

func (p *endThenFailChild) Rollback(ctx *Context) error {
	g := endThenFail.Load()
	if g.rbOnce.CompareAndSwap(false, true) {
		close(g.rollbackIn)
	}
	<-g.rollbackGo
	return nil
}

func (p *endThenFailChild) MarshalState() ([]byte, error) {
	if g := endThenFail.Load(); p.Ran && g.armed.CompareAndSwap(true, false) {
		close(g.marshalEntered) // the entry is SUCCESS already
		<-g.marshalRelease
		return nil, errors.New("cannot serialise")
	}
	if p.Ran {
		return nil, errors.New("cannot serialise")
	}
	return json.Marshal(p) // the default's JSON, which unmarshalState reads back
}

// TestWhyUpToKeepsAChildWhoseSuccessFails: a child seen SUCCESS by a
// WhyUpTo while its SUCCESS write is being made can still turn FAILED (its
// state cannot be serialised for that write), unfinished again: the
// parent's cursor must not have passed it, and Why lists it while the
// tree rolls back.
func TestWhyUpToKeepsAChildWhoseSuccessFails(t *testing.T) {
	g := &endThenFailGate{marshalEntered: make(chan struct{}), marshalRelease: make(chan struct{}),
		rollbackIn: make(chan struct{}), rollbackGo: make(chan struct{})}
	endThenFail.Store(g)
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) {
		c.Registry.MustRegister("end-then-fail", 1, func() Procedure { return &endThenFailChild{} })
	})
	defer func() {
		select {
		case <-g.rollbackGo:
		default:
			close(g.rollbackGo)
		}
	}()
	funcs.Store("end-then-fail-parent", func(ctx *Context) (Step, error) {
		if len(ctx.Children()) == 0 {
			return Spawn(&endThenFailChild{}), nil
		}
		return Done(), nil
	})
	g.armed.Store(true)
	id := h.submit(&funcProc{ID: "end-then-fail-parent"}, SubmitOptions{})
	select {
	case <-g.marshalEntered:
	case <-time.After(20 * time.Second):
		t.Fatal("child's SUCCESS write never encoded")
	}
	info, _ := h.x.Get(id)
	child := info.Children[0]
	// SUCCESS in memory, not shown so until written (TestEndIsShownOnlyOnceWritten).
	if ci, _ := h.x.Get(child); ci.State.Terminal() {
		t.Fatalf("child %d is shown %v during its SUCCESS write", child, ci.State)
	}
	// A watch poll now: the cursor must not walk past the (for now)
	// SUCCESS child, which is listed as unfinished, as Get shows it.
	if w, err := h.x.WhyUpTo(id, 64); err != nil || !slices.Equal(w.Children, []uint64{child}) {
		t.Fatalf("WhyUpTo during the write: %v %v, want [%d]", w.Children, err, child)
	}
	close(g.marshalRelease)
	select {
	case <-g.rollbackIn:
	case <-time.After(20 * time.Second):
		t.Fatal("the child's rollback never started")
	}
	ci, _ := h.x.Get(child)
	if ci.State != Failed {
		t.Fatalf("child is %v, want FAILED (rolling back)", ci.State)
	}
	var w Why
	testwait.For(t, 5*time.Second, "rolling back", func() bool {
		w, _ = h.x.Why(id)
		return w.Reason == "rolling back"
	})
	if !slices.Contains(w.Children, child) {
		t.Errorf("Why(%d) lists unfinished children %v; child %d is %v (not terminal) and was skipped", id, w.Children, child, ci.State)
	}
	close(g.rollbackGo)
	if info := h.wait(id); info.State != RolledBack {
		t.Fatalf("root ended %v", info.State)
	}
}
