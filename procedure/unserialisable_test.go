package procedure

import (
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/baton-dev/baton/store"
)

// poisonProc runs Steps steps through the domain (undone by Rollback); its
// state cannot be serialised once PoisonAt steps have run, for good when
// Sticky, else only until a rollback takes it below PoisonAt again.
type poisonProc struct {
	Base
	Steps, PoisonAt, Next int
	Sticky, Poisoned      bool
}

func (p *poisonProc) Execute(ctx *Context) (Step, error) {
	ctx.Env.(*domain).do(stepKey(p.Next))
	p.Next++
	if p.Next >= p.PoisonAt {
		p.Poisoned = true
	}
	if p.Next >= p.Steps {
		return Done(), nil
	}
	return More(), nil
}

func (p *poisonProc) Rollback(ctx *Context) error {
	p.Next--
	ctx.Env.(*domain).undo(stepKey(p.Next))
	if !p.Sticky && p.Next < p.PoisonAt {
		p.Poisoned = false
	}
	return nil
}

func stepKey(n int) string { return "p/" + string(rune('0'+n)) }

// MarshalState refuses while poisoned, else writes the default JSON, which
// the default decoder (unmarshalState) reads back: no UnmarshalState.
func (p *poisonProc) MarshalState() ([]byte, error) {
	if p.Poisoned {
		return nil, errors.New("poisoned")
	}
	return json.Marshal(p)
}

func startPoison(t *testing.T, st store.Store, d *domain) *harness {
	t.Helper()
	h := startExecutor(t, st, d, func(c *Config) {
		c.Workers = 1
		c.Registry.MustRegister("poison", 1, func() Procedure { return &poisonProc{} })
	})
	return h
}

// A root whose last write (its SUCCESS) cannot be serialised has run every
// step successfully: it ends SUCCESS, written without its state. It used to
// end FAILED, with nothing rolled back and nothing left to roll it back.
func TestUnserialisableFinalStateStillSucceeds(t *testing.T) {
	st, d := store.NewMemStore(), newDomain()
	h := startPoison(t, st, d)
	id := h.submit(&poisonProc{Steps: 3, PoisonAt: 3}, SubmitOptions{})
	info := h.wait(id)
	if info.State != Success || info.Error != "" {
		t.Fatalf("state %s error %q, want SUCCESS without an error", info.State, info.Error)
	}
	if got := d.effectsUnder("p/"); len(got) != 3 {
		t.Fatalf("effects %v, want the 3 steps kept", got)
	}
	if stored := storedInfo(t, st, id); stored.State != Success || len(stored.Data) != 0 {
		t.Fatalf("stored %s with %d bytes of state, want SUCCESS without state", stored.State, len(stored.Data))
	}
	// A restart loads it as the finished procedure it is.
	h2 := startPoison(t, st, newDomain())
	if got, err := h2.x.Get(id); err != nil || got.State != Success {
		t.Fatalf("after restart: %v %v, want SUCCESS", got.State, err)
	}
}

// A step whose outcome cannot be serialised fails its root, which rolls
// back every step it ran and ends ROLLEDBACK, even when its state still
// cannot be serialised at the end of the rollback.
func TestUnserialisableStepRollsBack(t *testing.T) {
	for _, sticky := range []bool{false, true} {
		d := newDomain()
		h := startPoison(t, store.NewMemStore(), d)
		id := h.submit(&poisonProc{Steps: 4, PoisonAt: 2, Sticky: sticky}, SubmitOptions{})
		info := h.wait(id)
		if info.State != RolledBack {
			t.Fatalf("sticky=%v: state %s (error %q), want ROLLEDBACK", sticky, info.State, info.Error)
		}
		if got := d.effectsUnder("p/"); len(got) != 0 {
			t.Fatalf("sticky=%v: effects %v left, want every step undone", sticky, got)
		}
		if want := []string{"p/1", "p/0"}; !slices.Equal(d.order("undo", "p/"), want) {
			t.Fatalf("sticky=%v: undone %v, want %v", sticky, d.order("undo", "p/"), want)
		}
	}
}

// failedWritesStore keeps the records written FAILED, in order.
type failedWritesStore struct {
	*store.MemStore
	mu     sync.Mutex
	failed []record
}

func (s *failedWritesStore) Update(p store.Proc) error {
	var r record
	if err := r.unmarshal(p.Data); err == nil && r.state == Failed {
		s.mu.Lock()
		s.failed = append(s.failed, r)
		s.mu.Unlock()
	}
	return s.MemStore.Update(p)
}

// The writes of a procedure whose state stopped serialising carry the last
// state that did, not none: a restart decoded none into a zero-valued
// procedure and rolled back from that.
func TestUnserialisableWritesCarryTheLastGoodState(t *testing.T) {
	st := &failedWritesStore{MemStore: store.NewMemStore()}
	h := startPoison(t, st, newDomain())
	id := h.submit(&poisonProc{Steps: 4, PoisonAt: 2, Sticky: true}, SubmitOptions{})
	if info := h.wait(id); info.State != RolledBack {
		t.Fatalf("ended %s, want ROLLEDBACK", info.State)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.failed) == 0 {
		t.Fatal("no FAILED write seen")
	}
	for i, r := range st.failed {
		var p poisonProc
		if err := unmarshalState(&p, 1, 1, r.data); err != nil {
			t.Fatalf("FAILED write %d: %v", i, err)
		}
		// The last state that serialised: after the first step, before
		// the one that poisoned it.
		if want := (poisonProc{Steps: 4, PoisonAt: 2, Next: 1, Sticky: true}); p != want {
			t.Fatalf("FAILED write %d carries state %+v, want %+v", i, p, want)
		}
	}
}
