package procedure

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/baton-dev/baton/store"
)

// concScenario: many roots whose children run in parallel, some failing, some
// suspending on timers, so that with several workers the stack positions of
// siblings interleave and their writes race.
func concScenario() (procs []Procedure, names []string, want []State) {
	for i := 0; i < 8; i++ {
		name := fmt.Sprintf("R%d", i)
		var p Procedure
		st := Success
		switch i % 4 {
		case 0, 1:
			h := newSteps(name, 3)
			h.SpawnAt, h.Children, h.ChildSteps = 1, 3, 3
			if i%4 == 1 {
				h.ChildFailAt = 2
				st = RolledBack
			}
			p = h
		case 2:
			m := newSM(name, 4)
			m.SpawnAt, m.Children, m.ChildSteps = 1, 3, 2
			if i == 6 {
				m.ChildFailAt = 0
				st = RolledBack
			}
			p = m
		case 3:
			h := newSteps(name, 4)
			h.SpawnAt, h.Children, h.ChildSteps, h.ChildSuspend = 0, 2, 2, time.Millisecond
			if i == 7 {
				h.FailAt = 3
				st = RolledBack
			}
			p = h
		}
		procs, names, want = append(procs, p), append(names, name), append(want, st)
	}
	return procs, names, want
}

const concWorkers = 4

func concConfig(c *Config) {
	c.Workers = concWorkers
	c.Registry = lifecycleRegistry(nil)
}

// concCleanRun is the reference: the effects a crash-free run leaves.
func concCleanRun(t *testing.T) (int, *domain) {
	cs := &crashStore{inner: store.NewMemStore(), budget: -1}
	dom := newDomain()
	h := startExecutor(t, cs, dom, concConfig)
	procs, names, want := concScenario()
	ids := make([]uint64, len(procs))
	for i, p := range procs {
		ids[i] = h.submit(p, SubmitOptions{Nonce: names[i]})
	}
	for i, id := range ids {
		if got := h.wait(id); got.State != want[i] {
			t.Fatalf("clean run: %s ended %s (%s), want %s", names[i], got.State, got.Error, want[i])
		}
	}
	_ = h.x.Stop(context.Background())
	if n := dom.sweeps(); n != 0 {
		t.Fatalf("clean run: parents swept %d effects their children's rollbacks left", n)
	}
	return cs.writes, dom
}

// TestConcurrentCrashAtPersistencePoints is TestCrashAtEveryPersistencePoint
// with 4 workers and parallel children, crashing after a sample of write
// counts; every other sample crashes a second time during recovery.
func TestConcurrentCrashAtPersistencePoints(t *testing.T) {
	total, clean := concCleanRun(t)
	if total < 60 {
		t.Fatalf("scenario too small: %d writes", total)
	}
	stride := max(3, total/40)
	sample := 0
	for n := 0; n <= total+stride; n += stride {
		double := sample%2 == 1
		sample++
		t.Run(fmt.Sprintf("crash-after-%d/double=%v", n, double), func(t *testing.T) {
			mem := store.NewMemStore()
			dom := newDomain()
			_, names, want := concScenario()
			acked := map[string]uint64{}
			var prev *crashStore
			budgets := []int{n, -1}
			if double {
				budgets = []int{n, 3 + n%13, -1}
			}
			var last *harness
			var lastCS *crashStore
			for stage, budget := range budgets {
				cs := &crashStore{inner: mem, budget: budget}
				if prev != nil {
					cs.seedFrom(&prev.endCounts)
				}
				h := startExecutor(t, cs, dom, concConfig)
				if p := h.x.Problems(); len(p) > 0 {
					t.Fatalf("stage %d: load problems: %+v", stage, p)
				}
				// Submit (or, after a crash, retry with the same nonces).
				procs, _, _ := concScenario()
				for i, p := range procs {
					id, err := h.x.Submit(p, SubmitOptions{Nonce: names[i]})
					if err != nil {
						if budget < 0 {
							t.Fatalf("stage %d: submit %s: %v", stage, names[i], err)
						}
						break
					}
					if old, ok := acked[names[i]]; ok && old != id {
						t.Fatalf("stage %d: %s: nonce retry got id %d, first was %d", stage, names[i], id, old)
					}
					acked[names[i]] = id
				}
				if budget < 0 {
					last, lastCS = h, cs
					break
				}
				h.waitCrashOrEnd(acked)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := h.x.Stop(ctx); err != nil {
					t.Fatalf("stage %d: stop: %v", stage, err)
				}
				cancel()
				prev = cs
			}
			for i, name := range names {
				info := last.wait(acked[name])
				if info.State != want[i] {
					t.Fatalf("%s ended %s, want %s (error %q)", name, info.State, want[i], info.Error)
				}
				if got := lastCS.terminals(acked[name]); got != 1 {
					t.Fatalf("%s reached a terminal state %d times", name, got)
				}
				gotFx, wantFx := dom.effectsUnder(name+"/"), clean.effectsUnder(name+"/")
				sort.Strings(gotFx)
				sort.Strings(wantFx)
				if !slices.Equal(gotFx, wantFx) {
					t.Fatalf("%s effects %v, want %v", name, gotFx, wantFx)
				}
			}
			checkUndoOrder(t, dom, "")
			// A sweep finds an effect only for a child step in flight at a
			// crash: at most one per worker per crash.
			if s := dom.sweeps(); s > concWorkers*(len(budgets)-1) {
				t.Fatalf("parents swept %d effects their children's rollbacks left", s)
			}
			_ = last.x.Stop(context.Background())
			if mem.Len() != len(names) {
				t.Fatalf("store holds %d procedures, want %d finished roots", mem.Len(), len(names))
			}
		})
	}
}
