package procedure

import (
	"errors"
	"slices"
	"testing"
)

// heldChildEnd is a parent (func name+"-parent") that spawns one child
// (name+"-child", done in one step), then ends as then says, run on a
// writeGateStore holding the child's write of end: the window of the
// tests below, between a child's end decided and its write.
type heldChildEnd struct {
	h         *harness
	st        *writeGateStore
	id, child uint64
}

func startHeldChildEnd(t *testing.T, name string, end State, then func() (Step, error)) heldChildEnd {
	t.Helper()
	st := newWriteGateStore(func(i Info) bool { return i.ParentID != 0 && i.State == end })
	h := startExecutor(t, st, newDomain(), nil)
	t.Cleanup(st.open) // before the executor's Stop, which waits for the held write
	funcs.Store(name+"-parent", func(ctx *Context) (Step, error) {
		if len(ctx.Children()) == 0 {
			return Spawn(&funcProc{ID: name + "-child"}), nil
		}
		return then()
	})
	funcs.Store(name+"-child", func(ctx *Context) (Step, error) { return Done(), nil })
	id := h.submit(&funcProc{ID: name + "-parent"}, SubmitOptions{})
	st.waitHeld(t)
	return heldChildEnd{h: h, st: st, id: id, child: st.held.ID}
}

// finish lets the held write through and checks the root ends in want.
func (c heldChildEnd) finish(t *testing.T, want State) {
	t.Helper()
	c.st.open()
	if info := c.h.wait(c.id); info.State != want {
		t.Fatalf("root ended %v", info.State)
	}
}

// TestRolledBackChildShownOnlyOnceWritten: a child that succeeded
// (its SUCCESS written) and is then rolled back with its tree goes
// SUCCESS -> ROLLEDBACK in memory (rollback.go, the per-step path), a
// terminal-to-terminal move setStateLocked does not mark endUnwritten. Get
// and List then show ROLLEDBACK while the write carrying it (and the
// undo's own effect) has not committed: the store still holds SUCCESS, and
// a failed write restarts the rollback from there.
func TestRolledBackChildShownOnlyOnceWritten(t *testing.T) {
	c := startHeldChildEnd(t, "rv-rb", RolledBack, func() (Step, error) { return Step{}, errors.New("boom") })
	h, child := c.h, c.child
	ci, err := h.x.Get(child)
	if err != nil {
		t.Fatal(err)
	}
	if ci.State == RolledBack {
		t.Errorf("child %d shown ROLLEDBACK while the write of its ROLLEDBACK is held (the store holds SUCCESS)", child)
	}
	if l := h.x.List(Filter{States: []State{RolledBack}}); slices.ContainsFunc(l, func(i Info) bool { return i.ID == child }) {
		t.Errorf("List(ROLLEDBACK) lists child %d while its ROLLEDBACK write is held", child)
	}
	c.finish(t, RolledBack)
	if ci, _ := h.x.Get(child); ci.State != RolledBack {
		t.Errorf("child %d is %v once written, want ROLLEDBACK", child, ci.State)
	}
}

// TestWhyAgreesWithShownState: while a root's SUCCESS write is on its
// way, Get shows it RUNNABLE (not finished), but Why answers from the
// in-memory state: Reason "finished". A watch that stops on "finished"
// reads a state Get does not show yet, nor the store hold.
func TestWhyAgreesWithShownState(t *testing.T) {
	st := newWriteGateStore(func(i Info) bool { return i.ParentID == 0 && i.State == Success })
	h := startExecutor(t, st, newDomain(), nil)
	defer st.open()
	funcs.Store("rv-why-root", func(ctx *Context) (Step, error) { return Done(), nil })
	id := h.submit(&funcProc{ID: "rv-why-root"}, SubmitOptions{})
	st.waitHeld(t)
	w, err := h.x.Why(id)
	if err != nil {
		t.Fatal(err)
	}
	if w.State.Terminal() {
		t.Fatalf("Why shows %v during the write (before its write committed)", w.State)
	}
	if w.Reason == "finished" {
		t.Errorf("Why(%d): Reason %q while its Info.State is %v and its end is not written", id, w.Reason, w.State)
	}
	st.open()
	if info := h.wait(id); info.State != Success {
		t.Fatalf("root ended %v", info.State)
	}
}

// TestWhyListsChildShownUnfinished: a child whose SUCCESS write is
// on its way is shown RUNNABLE by Get, yet its parent's Why leaves it out
// of its unfinished children (it tests the in-memory state).
func TestWhyListsChildShownUnfinished(t *testing.T) {
	c := startHeldChildEnd(t, "rv-whyk", Success, func() (Step, error) { return Done(), nil })
	h, id, child := c.h, c.id, c.child
	ci, _ := h.x.Get(child)
	if ci.State.Terminal() {
		t.Fatalf("child shown %v during its write (before its write committed)", ci.State)
	}
	if w, _ := h.x.Why(id); !slices.Contains(w.Children, child) {
		t.Errorf("Why(%d) lists unfinished children %v without child %d, shown %v", id, w.Children, child, ci.State)
	}
	if w, _ := h.x.Why(child); w.Reason == "finished" {
		t.Errorf("Why(%d): Reason %q while shown %v", child, w.Reason, w.State)
	}
	c.finish(t, Success)
}

// TestBypassRefusalAgreesWithGet: cluster/domain's region repair
// bypasses a procedure and, refused, asks Get whether it ended meanwhile
// (then it moves on) or Why whether it rolls back; anything else fails the
// repair. During a child's SUCCESS write, Bypass refuses it as "already
// SUCCESS" (in-memory state) while Get shows it RUNNABLE and Why does not
// say "rolling back": the repair fails with an error although the
// procedure is finishing. Now Bypass, Abort and Pause refuse with
// ErrFinishing in that window (shown failing with endedErrLocked's
// ErrFinishing branch disabled: "already SUCCESS" for all three).
func TestBypassRefusalAgreesWithGet(t *testing.T) {
	c := startHeldChildEnd(t, "rv-bp", Success, func() (Step, error) { return Done(), nil })
	h, child := c.h, c.child
	// The child's SUCCESS write is held: Get shows it unfinished, so a
	// refusal must say the end is being written (ErrFinishing, which
	// repair_region.go takes for finished), with ErrNotAllowed's code.
	if ci, err := h.x.Get(child); err != nil || ci.State.Terminal() {
		t.Fatalf("Get(%d) during its SUCCESS write: %v %v, want it shown unfinished", child, ci.State, err)
	}
	for name, change := range map[string]func() error{
		"Bypass": func() error { return h.x.Bypass(child, BypassOptions{Force: true, KeepRollbacks: true}) },
		"Abort":  func() error { return h.x.Abort(child) },
		"Pause":  func() error { return h.x.Pause(child) },
	} {
		if err := change(); !errors.Is(err, ErrFinishing) || !errors.Is(err, ErrNotAllowed) {
			t.Errorf("%s(%d) during its SUCCESS write: %v, want ErrFinishing with ErrNotAllowed", name, child, err)
		}
	}
	c.finish(t, Success)
}
