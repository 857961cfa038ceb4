package procedure

import (
	"strconv"
	"testing"

	"github.com/baton-dev/baton/store"
)

// wdParent mixes AddChild and AddLockedChild, and withdraws one reserved
// child between them, as ServerCrash.spawnBatches does (a locked batch's
// own regions are AddChild'd; a batch whose locks are taken is withdrawn).
type wdParent struct {
	StateMachine
}

func (p *wdParent) InitialState() int32                 { return 1 }
func (p *wdParent) RetryUntilDone() bool                { return true }
func (p *wdParent) RollbackState(*Context, int32) error { return nil }

func (p *wdParent) ExecuteState(ctx *Context, state int32) (Flow, error) {
	if state != 1 {
		return NoMoreState, nil
	}
	ctx.AddChild(&lcChild{Key: "x"})
	id, _, err := ctx.AddLockedChild(&lcChild{Key: "a"})
	if err != nil {
		return NoMoreState, err
	}
	ctx.AddChild(&lcChild{Key: "y"})
	if err := ctx.WithdrawChild(id); err != nil {
		return NoMoreState, err
	}
	c := &lcChild{Key: "c"}
	cid, locked, err := ctx.AddLockedChild(c)
	if err != nil {
		return NoMoreState, err
	}
	if locked {
		if err := ctx.Put("owner/c", []byte(strconv.FormatUint(cid, 10))); err != nil {
			return NoMoreState, err
		}
		c.Prepared = true
	}
	p.SetNextState(2)
	return HasMoreState, nil
}

// A child withdrawn between AddChild'd ones leaves the others in
// their places: exactly x, y and c are spawned, once each, and each ends
// owning its key (c prepared in the parent's step, x and y by their own).
func TestWithdrawnChildAmongAddedChildren(t *testing.T) {
	mem := store.NewMemStore()
	h := startExecutor(t, mem, newDomain(), func(c *Config) {
		lockedChildRegistry(c)
		c.Registry.MustRegister("wdParent", 1, func() Procedure { return &wdParent{} })
	})
	parent := h.submit(&wdParent{}, SubmitOptions{})
	if info := h.wait(parent); info.State != Success {
		t.Fatalf("parent ended %v (%s)", info.State, info.Error)
	}
	info, err := h.x.Get(parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Children) != 3 {
		t.Errorf("children %v, want 3 (x, y and c)", info.Children)
	}
	// Each child's last state writes checked/<key>: exactly x, y and c ran.
	var keys []string
	dom := mem.Domain()
	for _, k := range []string{"a", "c", "x", "y"} {
		if dom["checked/"+k] != nil {
			keys = append(keys, k)
		}
	}
	if got := string(joinKeys(keys)); got != "c,x,y" {
		t.Errorf("children ran for keys %v, want c, x and y", keys)
	}
}

func joinKeys(ks []string) []byte {
	var out []byte
	for i, k := range ks {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, k...)
	}
	return out
}
