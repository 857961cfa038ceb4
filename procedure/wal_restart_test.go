package procedure

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// walMix is a mix of procedures for the WAL restart tests. hold names the
// gate of procedures that wait for it (nil: none do).
type walCase struct {
	name string
	p    Procedure
	want State
}

func walMix(gate string, timers time.Duration) []walCase {
	kids := newSteps("kids", 4)
	kids.SpawnAt, kids.Children, kids.ChildSteps = 1, 3, 2
	kidfail := newSteps("kidfail", 3)
	kidfail.SpawnAt, kidfail.Children, kidfail.ChildSteps, kidfail.ChildFailAt = 1, 3, 3, 1
	fail := newSteps("fail", 4)
	fail.FailAt = 2
	sm := newSM("sm", 4)
	sm.SpawnAt, sm.Children, sm.ChildSteps = 1, 2, 2
	smfail := newSM("smfail", 4)
	smfail.FailAt = 2
	timer := newSteps("timer", 3)
	timer.SuspendAt, timer.Suspend = 1, timers/2
	timerkids := newSteps("timerkids", 2)
	timerkids.SpawnAt, timerkids.Children, timerkids.ChildSteps, timerkids.ChildSuspend = 0, 2, 2, timers
	out := []walCase{
		{"ok", newSteps("ok", 3), Success},
		{"kids", kids, Success},
		{"kidfail", kidfail, RolledBack},
		{"fail", fail, RolledBack},
		{"sm", sm, Success},
		{"smfail", smfail, RolledBack},
		{"timer", timer, Success},
		{"timerkids", timerkids, Success},
	}
	if gate != "" {
		held := newSteps("held", 3)
		held.HoldAt, held.Gate = 1, gate
		paused := newSteps("paused", 3)
		paused.HoldAt, paused.Gate = 1, gate+"/p"
		out = append(out, walCase{"held", held, Success}, walCase{"paused", paused, Success})
	}
	return out
}

// expectedEffects is what a procedure of walMix leaves when it ends in want.
func expectedEffects(p Procedure, want State) []string {
	if want != Success {
		return nil
	}
	var out []string
	switch p := p.(type) {
	case *stepsProc:
		for k := 0; k < p.Steps; k++ {
			out = append(out, p.key(k))
		}
		for i := 0; i < p.Children; i++ {
			for k := 0; k < p.ChildSteps; k++ {
				out = append(out, fmt.Sprintf("%s/c%d/%d", p.Name, i, k))
			}
		}
	case *smProc:
		for s := int32(0); s < p.States; s++ {
			out = append(out, p.key(s))
		}
		for i := 0; i < p.Children; i++ {
			for k := 0; k < p.ChildSteps; k++ {
				out = append(out, fmt.Sprintf("%s/c%d/%d", p.Name, i, k))
			}
		}
	}
	sort.Strings(out)
	return out
}

func openTestWAL(t *testing.T, dir string, noSync bool) *store.WAL {
	t.Helper()
	cfg := store.DefaultWALConfig(dir)
	cfg.NoSync = noSync
	w, err := store.OpenWAL(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestWALGracefulRestart stops an executor on a real WAL midway (procedures
// suspended on events, on timers, paused, and whatever else is in flight),
// closes and reopens the WAL, and resumes: everything ends as it should,
// with every step run once (but the ones waiting on an event, which do not
// survive a restart and run again).
func TestWALGracefulRestart(t *testing.T) {
	dir := t.TempDir()
	d := newDomain()
	mc := clock.NewManual(time.Unix(1e6, 0))
	mod := func(c *Config) {
		c.Registry, c.Clock, c.Workers = lifecycleRegistry(t), mc, 4
		c.ResultTTL, c.EvictInterval = 24*time.Hour, 24*time.Hour
	}
	gate := uniq("walgate")
	mix := walMix(gate, 10*time.Minute)

	w1 := openTestWAL(t, dir, false)
	h := startExecutor(t, w1, d, mod)
	ids := map[string]uint64{}
	for _, c := range mix {
		ids[c.name] = h.submit(c.p, SubmitOptions{Nonce: c.name, Owner: "t"})
	}
	why := func(id uint64) string { w, _ := h.x.Why(id); return w.Reason }
	testwait.For(t, 10*time.Second, "held procedures suspended, timers armed", func() bool {
		w, _ := h.x.Why(ids["timerkids"])
		if w.Reason != "waiting for children" || len(w.Children) != 2 {
			return false
		}
		for _, c := range w.Children {
			if why(c) != "waiting for timer" {
				return false
			}
		}
		return why(ids["held"]) == "waiting for event" && why(ids["paused"]) == "waiting for event" &&
			why(ids["timer"]) == "waiting for timer"
	})
	if err := h.x.Pause(ids["paused"]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.x.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w1.Close(); err != nil {
		t.Fatal(err)
	}
	// While down: "timer" (5 min) expires, "timerkids" (10 min) does not.
	mc.Advance(6 * time.Minute)
	resetEvent(gate)
	resetEvent(gate + "/p")

	w2 := openTestWAL(t, dir, false)
	t.Cleanup(func() { _ = w2.Close() })
	h = startExecutor(t, w2, d, mod)
	if p := h.x.Problems(); len(p) > 0 {
		t.Fatalf("load problems: %+v", p)
	}
	if c := h.x.LoadInfo().Corruptions; len(c) > 0 {
		t.Fatalf("WAL corruptions after a clean close: %v", c)
	}
	why = func(id uint64) string { w, _ := h.x.Why(id); return w.Reason }
	if r := why(ids["paused"]); r != "paused" {
		t.Fatalf("paused procedure after restart: %q", r)
	}
	testwait.For(t, 10*time.Second, "held suspended again (its event did not survive)", func() bool { return why(ids["held"]) == "waiting for event" })
	testwait.For(t, 10*time.Second, "expired timer ran", func() bool { i, _ := h.x.Get(ids["timer"]); return i.State == Success })
	w, _ := h.x.Why(ids["timerkids"])
	for _, c := range w.Children {
		if r := why(c); r != "waiting for timer" {
			t.Fatalf("timerkids child %d after restart: %q, want its timer re-armed", c, r)
		}
	}
	// A retried submission finds the first one.
	if id, err := h.x.Submit(newSteps("dup", 1), SubmitOptions{Nonce: "ok", Owner: "t"}); err != nil || id != ids["ok"] {
		t.Fatalf("nonce after restart: %d %v, want %d", id, err, ids["ok"])
	}
	mc.Advance(5 * time.Minute)
	openGate(gate)
	openGate(gate + "/p")
	h.x.Wake(eventFor(gate))
	if err := h.x.Resume(ids["paused"]); err != nil {
		t.Fatal(err)
	}
	for _, c := range mix {
		info := h.wait(ids[c.name])
		if info.State != c.want {
			t.Fatalf("%s ended %s (%q), want %s", c.name, info.State, info.Error, c.want)
		}
		got := d.effectsUnder(c.name + "/")
		sort.Strings(got)
		if want := expectedEffects(c.p, c.want); !slices.Equal(got, want) {
			t.Fatalf("%s effects %v, want %v", c.name, got, want)
		}
	}
	d.mu.Lock()
	for k, n := range d.execs {
		if n > 1 && k != "held/1" && k != "paused/1" {
			t.Errorf("step %s ran %d times across a graceful restart", k, n)
		}
	}
	d.mu.Unlock()
	checkUndoOrder(t, d, "")
	stopAndCheckWAL(t, h, w2, dir, len(mix))
}

// stopAndCheckWAL stops h's executor and closes its WAL w (in dir), which
// must then hold the roots finished alone.
func stopAndCheckWAL(t *testing.T, h *harness, w *store.WAL, dir string, roots int) {
	t.Helper()
	if err := h.x.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := walLive(t, dir); n != roots {
		t.Fatalf("WAL holds %d procedures, want the %d finished roots", n, roots)
	}
}

func walLive(t *testing.T, dir string) int {
	t.Helper()
	w := openTestWAL(t, dir, true)
	defer w.Close()
	n := 0
	if _, err := w.Load(func(store.Proc) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// budgetStore fails every write after the first budget ones, as if the
// process died there, and counts terminal transitions like crashStore.
type budgetStore struct {
	store.Store
	cs *crashStore // only its accounting is used
}

func newBudgetStore(inner store.Store, budget int, prev *budgetStore) *budgetStore {
	cs := &crashStore{budget: budget}
	if prev != nil {
		cs.seedFrom(&prev.cs.endCounts)
	}
	return &budgetStore{Store: inner, cs: cs}
}

func (b *budgetStore) Insert(p store.Proc, children []store.Proc) error {
	if !b.cs.allow(append([]store.Proc{p}, children...)...) {
		return errCrash
	}
	return b.Store.Insert(p, children)
}

func (b *budgetStore) Update(p store.Proc) error {
	if !b.cs.allow(p) {
		return errCrash
	}
	return b.Store.Update(p)
}

func (b *budgetStore) Delete(ids []uint64) error {
	if !b.cs.allow() {
		return errCrash
	}
	return b.Store.Delete(ids)
}

// TestWALHardCrash: the WAL stops taking writes after N of them (the process
// "died"), is closed and reopened, and a new executor resumes; clients retry
// their submissions with nonces. Every root ends once, as expected.
func TestWALHardCrash(t *testing.T) {
	mod := func(c *Config) { c.Registry, c.Workers = lifecycleRegistry(t), 4 }
	// Writes of a crash-free run, for the sample.
	total := func() int {
		w := openTestWAL(t, t.TempDir(), true)
		defer w.Close()
		bs := newBudgetStore(w, -1, nil)
		h := startExecutor(t, bs, newDomain(), mod)
		var ids []uint64
		for _, c := range walMix("", time.Millisecond) {
			ids = append(ids, h.submit(c.p, SubmitOptions{Nonce: c.name}))
		}
		for _, id := range ids {
			h.wait(id)
		}
		_ = h.x.Stop(context.Background())
		return bs.cs.writes
	}()
	for n := 1; n < total; n += max(1, total/8) {
		t.Run(fmt.Sprint("crash-after-", n), func(t *testing.T) {
			dir := t.TempDir()
			d := newDomain()
			w1 := openTestWAL(t, dir, true)
			bs1 := newBudgetStore(w1, n, nil)
			h := startExecutor(t, bs1, d, mod)
			mix := walMix("", time.Millisecond)
			acked := map[string]uint64{}
			for _, c := range mix {
				id, err := h.x.Submit(c.p, SubmitOptions{Nonce: c.name})
				if err != nil {
					break
				}
				acked[c.name] = id
			}
			h.waitCrashOrEnd(acked)
			if err := h.x.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := w1.Close(); err != nil {
				t.Fatal(err)
			}

			w2 := openTestWAL(t, dir, true)
			bs2 := newBudgetStore(w2, -1, bs1)
			h = startExecutor(t, bs2, d, mod)
			if p := h.x.Problems(); len(p) > 0 {
				t.Fatalf("load problems: %+v", p)
			}
			for _, c := range walMix("", time.Millisecond) {
				id, err := h.x.Submit(c.p, SubmitOptions{Nonce: c.name})
				if err != nil {
					t.Fatal(err)
				}
				if old, ok := acked[c.name]; ok && old != id {
					t.Fatalf("%s: retry got id %d, first submission was %d", c.name, id, old)
				}
				acked[c.name] = id
			}
			for _, c := range mix {
				info := h.wait(acked[c.name])
				if info.State != c.want {
					t.Fatalf("%s ended %s (%q), want %s", c.name, info.State, info.Error, c.want)
				}
				if got := bs2.cs.terminals(acked[c.name]); got != 1 {
					t.Fatalf("%s reached a terminal state %d times", c.name, got)
				}
				got := d.effectsUnder(c.name + "/")
				sort.Strings(got)
				if want := expectedEffects(c.p, c.want); !slices.Equal(got, want) {
					t.Fatalf("%s effects %v, want %v", c.name, got, want)
				}
			}
			if s := d.sweeps(); s > 4 {
				t.Fatalf("parents swept %d effects their children's rollbacks left", s)
			}
			stopAndCheckWAL(t, h, w2, dir, len(mix))
		})
	}
}
