package procedure

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// fgTop retries until done and forgets its children: it spawns an fgMid
// and a gated fgChild, then ends.
type fgTop struct {
	Base
	Name string
	// Nested: the first child is a forgetting fgParent whose first child
	// fails (kept ROLLEDBACK), instead of an fgMid.
	Nested bool
	Next   int
}

func (p *fgTop) RetryUntilDone() bool          { return true }
func (p *fgTop) ForgetChildrenOnSuccess() bool { return true }
func (p *fgTop) Execute(ctx *Context) (Step, error) {
	if p.Next == 0 {
		p.Next++
		var first Procedure = &fgMid{Name: p.Name + "/mid"}
		if p.Nested {
			first = &fgParent{Name: p.Name + "/mid", Kids: 2, Steps: 1, FailKid: 0, Forget: true}
		}
		return Spawn(first, &fgChild{Name: p.Name + "/gated", Steps: 1, Gated: true}), nil
	}
	return Done(), nil
}
func (p *fgTop) Rollback(*Context) error { return errors.New("never") }

// fgMid is an ordinary procedure with one child of its own.
type fgMid struct {
	Base
	Name string
	Next int
}

func (p *fgMid) Execute(ctx *Context) (Step, error) {
	if p.Next == 0 {
		p.Next++
		return Spawn(&fgChild{Name: p.Name + "/g", Steps: 1}), nil
	}
	return Done(), nil
}
func (p *fgMid) Rollback(*Context) error { return nil }

func fgNestedRegistry(t testing.TB) *Registry {
	r := forgetRegistry(t)
	r.MustRegister("fgtop", 1, func() Procedure { return &fgTop{} })
	r.MustRegister("fgmid", 1, func() Procedure { return &fgMid{} })
	return r
}

// TestChildWithChildrenIsNotForgotten: a child that spawned children of
// its own (kept ones: an ordinary parent's, or a forgetting parent's child
// that was rolled back) is not forgotten, though its parent forgets: their
// records would name a parent gone, and a restart's load would hold the
// whole tree as broken. Restarted while the last child waits, the tree
// loads and ends SUCCESS.
func TestChildWithChildrenIsNotForgotten(t *testing.T) {
	for _, nested := range []bool{false, true} {
		t.Run(fmt.Sprint("nested=", nested), func(t *testing.T) { testOrphans(t, nested) })
	}
}

func testOrphans(t *testing.T, nested bool) {
	mem := store.NewMemStore()
	mod := func(c *Config) { c.Registry = fgNestedRegistry(t) }
	h := startExecutor(t, mem, newDomain(), mod)
	top := &fgTop{Name: uniq("T"), Nested: nested}
	id := h.submit(top, SubmitOptions{})
	testwait.For(t, 10*time.Second, "the first child finished", func() bool {
		kids := childIDs(t, h.x, id)
		if len(kids) != 2 {
			return false
		}
		i, err := h.x.Get(kids[0])
		if errors.Is(err, ErrNotFound) {
			t.Fatalf("child %d, which has children, was forgotten", kids[0])
		}
		return err == nil && i.State == Success
	})
	_ = h.x.Stop(t.Context())

	h2 := startExecutor(t, mem, newDomain(), mod)
	if p := h2.x.Problems(); len(p) > 0 {
		t.Errorf("after restart: %d load problems, first: %s", len(p), p[0].Reason)
	}
	openGate(top.Name + "/gated")
	h2.x.Wake(eventFor(top.Name + "/gated"))
	if _, err := h2.x.Get(id); err != nil {
		t.Fatalf("root %d after restart: %v", id, err)
	}
	if info := h2.wait(id); info.State != Success {
		t.Fatalf("root ended %s", info.State)
	}
}
