package procedure

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// cvProgParent is a cvParent whose progress is its children's, as a
// table create's is (Progress.FromChildren).
type cvProgParent struct{ cvParent }

func (p *cvProgParent) Progress() Progress {
	spawned := 0
	if p.Next > 0 {
		spawned = p.Kids
	}
	return Progress{Total: int64(p.Kids), Unit: "children", FromChildren: true, Spawned: int64(spawned)}
}

// A covering parent's progress counts its ended children, those
// it forgot included, before and after a restart: a create's "regions
// open" must not fall back from 99 of 100 to 0 of 100 when a new leader
// takes it over.
func TestCoveringParentProgressAfterRestart(t *testing.T) {
	const kids = 100
	mem := store.NewMemStore()
	reg := coverRegistry(t)
	reg.MustRegister("cvprogparent", 1, func() Procedure { return &cvProgParent{} })
	h1 := startExecutor(t, mem, newDomain(), func(c *Config) { c.Registry = reg })
	p := &cvProgParent{cvParent{Name: uniq("CVP"), Kids: kids, Steps: 2, FailKid: -1, GateKid: kids - 1, Forget: true, Covers: true}}
	gate := p.childName(kids - 1)
	id := h1.submit(p, SubmitOptions{})
	testwait.For(t, 30*time.Second, "every child but the gated one forgotten", func() bool {
		return keptChildren(t, mem) == 1 && len(domainUnder(mem, p.Name+"/c")) == 2*(kids-1)
	})
	done := func(x *Executor) int64 {
		info, err := x.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		return info.Progress.Done
	}
	testwait.For(t, 10*time.Second, "progress before the restart", func() bool { return done(h1.x) == kids-1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h1.x.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	resetEvent(gate)
	h2 := startExecutor(t, mem, newDomain(), func(c *Config) { c.Registry = reg })
	if got := done(h2.x); got != kids-1 {
		t.Errorf("after the restart the parent's progress is %d of %d, want %d (its forgotten children ended)", got, kids, kids-1)
	}
	openGate(gate)
	h2.x.Wake(eventFor(gate))
	if info := h2.wait(id); info.State != Success {
		t.Fatalf("ended %s (%s)", info.State, info.Error)
	}
}
