package procedure

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/store"
)

var errCrash = errors.New("simulated crash")

// endCounts counts, per procedure, the writes that moved it into a
// terminal state, and keeps the last state written for each; the store
// holding it guards it.
type endCounts struct {
	terminal map[uint64]int
	last     map[uint64]State
}

func (e *endCounts) note(procs []store.Proc) {
	if e.terminal == nil {
		e.terminal, e.last = map[uint64]int{}, map[uint64]State{}
	}
	for _, p := range procs {
		var r record
		if r.unmarshal(p.Data) == nil {
			if r.state.Terminal() && !e.last[r.id].Terminal() {
				e.terminal[r.id]++
			}
			e.last[r.id] = r.state
		}
	}
}

// seedFrom carries the counts of a crashed executor's store to the next one's.
func (e *endCounts) seedFrom(prev *endCounts) {
	e.terminal, e.last = maps.Clone(prev.terminal), maps.Clone(prev.last)
	if e.terminal == nil {
		e.terminal, e.last = map[uint64]int{}, map[uint64]State{}
	}
}

// crashStore passes the first budget writes to inner and fails every later
// one, as if the process died right there. It also counts, per procedure,
// how often a write moved it into a terminal state.
type crashStore struct {
	inner  *store.MemStore
	mu     sync.Mutex
	budget int // < 0: unlimited
	writes int
	endCounts
}

func (c *crashStore) Load(fn func(store.Proc) error) (store.LoadInfo, error) {
	return c.inner.Load(fn)
}

func (c *crashStore) allow(procs ...store.Proc) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.budget >= 0 && c.writes >= c.budget {
		return false
	}
	c.writes++
	c.note(procs)
	return true
}

func (c *crashStore) Insert(p store.Proc, children []store.Proc) error {
	if !c.allow(append([]store.Proc{p}, children...)...) {
		return errCrash
	}
	return c.inner.Insert(p, children)
}

func (c *crashStore) Update(p store.Proc) error {
	if !c.allow(p) {
		return errCrash
	}
	return c.inner.Update(p)
}

func (c *crashStore) Delete(ids []uint64) error {
	if !c.allow() {
		return errCrash
	}
	return c.inner.Delete(ids)
}

func (c *crashStore) Close() error { return nil }

func (c *crashStore) terminals(id uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.terminal[id]
}

// crashScenario is a set of procedures with children, failures and
// rollbacks; want maps each root's name to its expected end state.
func crashScenario() (procs []Procedure, names []string, want []State) {
	a := newSM("A", 4)
	a.SpawnAt, a.Children, a.ChildSteps = 1, 2, 3
	b := newSM("B", 4)
	b.SpawnAt, b.Children, b.ChildSteps, b.ChildFailAt = 1, 2, 3, 1
	c := newSteps("C", 5)
	c.FailAt = 3
	d := newSteps("D", 3)
	d.SuspendAt, d.Suspend = 0, 2*time.Millisecond
	e := newSteps("E", 4)
	e.SpawnAt, e.Children, e.ChildSteps = 2, 2, 2
	return []Procedure{a, b, c, d, e}, []string{"A", "B", "C", "D", "E"},
		[]State{Success, RolledBack, RolledBack, Success, Success}
}

// expectedEffects is what a clean run leaves in the domain for a root.
func cleanRun(t *testing.T) (writes int, dom *domain) {
	cs := &crashStore{inner: store.NewMemStore(), budget: -1}
	dom = newDomain()
	h := startExecutor(t, cs, dom, func(c *Config) { c.Workers = 1 })
	procs, _, want := crashScenario()
	for i, p := range procs {
		id := h.submit(p, SubmitOptions{Nonce: fmt.Sprint(i)})
		if got := h.wait(id).State; got != want[i] {
			t.Fatalf("clean run: root %d ended %s, want %s", i, got, want[i])
		}
	}
	_ = h.x.Stop(context.Background())
	return cs.writes, dom
}

// TestCrashAtEveryPersistencePoint drops the executor at each write of the
// scenario, reloads from the store, and checks that every acknowledged
// procedure ends exactly once in the right state, that effects match a
// clean run, and that rollbacks ran newest first.
func TestCrashAtEveryPersistencePoint(t *testing.T) {
	total, clean := cleanRun(t)
	if total < 30 {
		t.Fatalf("scenario too small: %d writes", total)
	}
	for n := 0; n <= total; n++ {
		t.Run(fmt.Sprint("crash-after-", n), func(t *testing.T) {
			mem := store.NewMemStore()
			dom := newDomain()
			cs := &crashStore{inner: mem, budget: n}
			x1 := startExecutor(t, cs, dom, func(c *Config) { c.Workers = 1 })
			procs, names, want := crashScenario()
			acked := map[string]uint64{}
			for i, p := range procs {
				id, err := x1.x.Submit(p, SubmitOptions{Nonce: names[i]})
				if err != nil {
					break // the crash came before this submission was acknowledged
				}
				acked[names[i]] = id
			}
			// Run until the crash or the end.
			x1.waitCrashOrEnd(acked)
			_ = x1.x.Stop(context.Background())
			crashed := x1.x.Err() != nil

			cs2 := &crashStore{inner: mem, budget: -1}
			cs2.seedFrom(&cs.endCounts)
			x2 := startExecutor(t, cs2, dom, func(c *Config) { c.Workers = 1 })
			if p := x2.x.Problems(); len(p) > 0 {
				t.Fatalf("load problems after crash: %+v", p)
			}
			// A client retrying its unacknowledged submissions with the same
			// nonces must not create duplicates of acknowledged ones.
			procs2, _, _ := crashScenario()
			for i, p := range procs2 {
				id, err := x2.x.Submit(p, SubmitOptions{Nonce: names[i]})
				if err != nil {
					t.Fatal(err)
				}
				if prev, ok := acked[names[i]]; ok && prev != id {
					t.Fatalf("%s: retry with nonce got id %d, first submission was %d", names[i], id, prev)
				}
				acked[names[i]] = id
			}
			for i, name := range names {
				info := x2.wait(acked[name])
				if info.State != want[i] {
					t.Fatalf("%s ended %s, want %s (crashed=%v, error %q)", name, info.State, want[i], crashed, info.Error)
				}
				if got := cs2.terminals(acked[name]); got != 1 {
					t.Fatalf("%s reached a terminal state %d times", name, got)
				}
				gotFx := dom.effectsUnder(name + "/")
				wantFx := clean.effectsUnder(name + "/")
				sort.Strings(gotFx)
				sort.Strings(wantFx)
				if !slices.Equal(gotFx, wantFx) {
					t.Fatalf("%s effects %v, want %v", name, gotFx, wantFx)
				}
				if want[i] == RolledBack {
					done := dom.order("do", name+"/")
					undone := dom.order("undo", name+"/")
					slices.Reverse(done)
					if !slices.Equal(done, undone) {
						t.Fatalf("%s rollback order %v, want reverse of %v", name, undone, dom.order("do", name+"/"))
					}
				}
			}
			// With one worker at most one step is in flight at the crash, so
			// at most one step runs twice.
			rerun := 0
			dom.mu.Lock()
			for _, c := range dom.execs {
				rerun += c - 1
			}
			dom.mu.Unlock()
			if rerun > 1 {
				t.Fatalf("%d steps re-executed after one crash", rerun)
			}
			if mem.Len() != len(names) {
				t.Fatalf("store holds %d procedures, want %d finished roots (children deleted)", mem.Len(), len(names))
			}
		})
	}
}

// TestLoadProblemsAreKept: corrupt, orphan and unknown-type procedures are
// reported, their trees held, and nothing is deleted from the store.
func TestLoadProblemsAreKept(t *testing.T) {
	mem := store.NewMemStore()
	good := record{id: 1, root: 1, typeName: "steps", typeVersion: 1, state: Runnable, data: []byte(`{"Name":"g","Steps":1,"FailAt":-1,"SpawnAt":-1,"SuspendAt":-1,"ChildFailAt":-1}`)}
	unknown := record{id: 2, root: 2, typeName: "nope", typeVersion: 1, state: Runnable}
	badState := record{id: 3, root: 3, typeName: "steps", typeVersion: 1, state: Runnable, data: []byte("{not json")}
	orphan := record{id: 5, parent: 4, root: 4, typeName: "steps", typeVersion: 1, state: Runnable, data: []byte(`{}`)}
	newer := record{id: 6, root: 6, typeName: "steps", typeVersion: 9, state: Runnable, data: []byte(`{}`)}
	dupStack1 := record{id: 7, root: 7, typeName: "steps", typeVersion: 1, state: Waiting, stack: []int32{0}, data: []byte(`{}`)}
	dupStack2 := record{id: 8, parent: 7, root: 7, typeName: "steps", typeVersion: 1, state: Runnable, stack: []int32{0}, data: []byte(`{}`)}
	for _, r := range []record{good, unknown, badState, orphan, newer, dupStack1, dupStack2} {
		if err := mem.Update(store.Proc{ID: r.id, Data: r.marshal()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := mem.Update(store.Proc{ID: 9, Data: []byte{0xff, 0xff, 0xff}}); err != nil {
		t.Fatal(err)
	}
	h := startExecutor(t, mem, newDomain(), nil)
	var ids []uint64
	for _, p := range h.x.Problems() {
		ids = append(ids, p.ID)
		if p.Reason == "" {
			t.Errorf("problem %d without reason", p.ID)
		}
	}
	if !slices.Equal(ids, []uint64{2, 3, 5, 6, 7, 8, 9}) {
		t.Fatalf("problems %v", ids)
	}
	if info := h.wait(1); info.State != Success {
		t.Fatalf("good procedure: %s", info.State)
	}
	if mem.Len() != 8 {
		t.Fatalf("store holds %d, want all 8 kept", mem.Len())
	}
}

// TestOlderVersionLoads: state written by version 1 of a type loads into
// version 2, which is told the version.
func TestOlderVersionLoads(t *testing.T) {
	mem := store.NewMemStore()
	r := record{id: 1, root: 1, typeName: "ver", typeVersion: 1, state: Runnable, data: []byte("legacy:7")}
	_ = mem.Update(store.Proc{ID: 1, Data: r.marshal()})
	cfg := Config{RecordFormat: version.Newest, Store: mem, Registry: NewRegistry(), Env: newDomain(), Workers: 1}
	cfg.Registry.MustRegister("ver", 2, func() Procedure { return &versioned{} })
	x := startBare(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := x.Wait(ctx, 1)
	if err != nil || info.State != Success || string(info.Result) != "v1:7" {
		t.Fatalf("state %s result %q err %v", info.State, info.Result, err)
	}
}

type versioned struct {
	Base
	From, Value string
}

func (v *versioned) MarshalState() ([]byte, error) { return []byte("v2:" + v.Value), nil }
func (v *versioned) UnmarshalState(version int, data []byte) error {
	switch version {
	case 1:
		_, v.Value, _ = cutString(string(data), ":")
		v.From = "v1"
	case 2:
		_, v.Value, _ = cutString(string(data), ":")
		v.From = "v2"
	default:
		return fmt.Errorf("unknown version %d", version)
	}
	return nil
}
func (v *versioned) Execute(ctx *Context) (Step, error) {
	ctx.SetResult([]byte(v.From + ":" + v.Value))
	return Done(), nil
}
func (v *versioned) Rollback(*Context) error { return nil }

func cutString(s, sep string) (string, string, bool) {
	for i := 0; i+len(sep) <= len(s); i++ {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}
