package procedure

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// fgParent spawns Kids fgChild children in its first step and ends in its
// second. It retries until done; Forget says whether it forgets its
// children as they succeed. The child at FailKid (if ≥ 0) fails in its
// first step: it is rolled back alone, and kept.
type fgParent struct {
	Base
	Name    string
	Kids    int
	Steps   int
	FailKid int
	Forget  bool
	// GateLast: the last child waits for the gate of its name.
	GateLast bool
	Next     int
}

func (p *fgParent) RetryUntilDone() bool          { return true }
func (p *fgParent) ForgetChildrenOnSuccess() bool { return p.Forget }

func (p *fgParent) Execute(ctx *Context) (Step, error) {
	if p.Next == 0 {
		p.Next++
		kids := make([]Procedure, p.Kids)
		for i := range kids {
			c := &fgChild{Name: fmt.Sprintf("%s/c%d", p.Name, i), Steps: p.Steps}
			if i == p.FailKid {
				c.Fail = true
			}
			c.Gated = p.GateLast && i == p.Kids-1
			kids[i] = c
		}
		return Spawn(kids...), nil
	}
	if err := ctx.Put(p.Name+"/end", []byte("done")); err != nil {
		return Step{}, err
	}
	return Done(), nil
}

func (p *fgParent) Rollback(*Context) error { return errors.New("fgParent never rolls back") }

// fgRoot is an ordinary root (no retry until done) above an fgParent.
type fgRoot struct {
	Base
	Parent fgParent
	Next   int
}

func (p *fgRoot) Execute(*Context) (Step, error) {
	if p.Next == 0 {
		p.Next++
		c := p.Parent
		return Spawn(&c), nil
	}
	return Done(), nil
}

func (p *fgRoot) Rollback(*Context) error { return nil }

// fgChild writes Name/<step> with each of its Steps steps (a domain
// effect, committed with the step), or fails in its first when Fail.
type fgChild struct {
	Base
	Name  string
	Steps int
	Fail  bool
	Gated bool // waits for the gate of its name before its first step
	Next  int
}

func (p *fgChild) Execute(ctx *Context) (Step, error) {
	if p.Fail {
		return Step{}, fmt.Errorf("%s: %w", p.Name, errBoom)
	}
	if p.Gated && !gateOpen(p.Name) {
		return Suspend(OnEvent(eventFor(p.Name))), nil
	}
	if err := ctx.Put(fmt.Sprintf("%s/%d", p.Name, p.Next), []byte("x")); err != nil {
		return Step{}, err
	}
	p.Next++
	if p.Next >= p.Steps {
		return Done(), nil
	}
	return More(), nil
}

func (p *fgChild) Rollback(ctx *Context) error {
	return ctx.Delete(fmt.Sprintf("%s/%d", p.Name, p.Next))
}

func forgetRegistry(t testing.TB) *Registry {
	r := lifecycleRegistry(t)
	r.MustRegister("fgparent", 1, func() Procedure { return &fgParent{} })
	r.MustRegister("fgchild", 1, func() Procedure { return &fgChild{} })
	r.MustRegister("fgroot", 1, func() Procedure { return &fgRoot{} })
	return r
}

// childIDs are the ids of the children of id, from its Info.
func childIDs(t *testing.T, x *Executor, id uint64) []uint64 {
	t.Helper()
	info, err := x.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return info.Children
}

// TestForgetsChildrenAsTheySucceed: a parent that retries until done and
// forgets its children spawns 3,000 of them; each one's last write carries
// its effect and deletes its record, the executor lets go of it (Get
// answers from the summary the finished root keeps), the rollback stack
// is swept of them, and the parent ends
// SUCCESS with every effect in place. A child that fails is rolled back
// alone and kept, so the parent can see it ROLLEDBACK.
func TestForgetsChildrenAsTheySucceed(t *testing.T) {
	mem := store.NewMemStore()
	h := startExecutor(t, mem, newDomain(), func(c *Config) { c.Registry = forgetRegistry(t) })
	const kids = 3000
	p := &fgParent{Name: uniq("P"), Kids: kids, Steps: 2, FailKid: 7, Forget: true}
	id := h.submit(p, SubmitOptions{})
	if info := h.wait(id); info.State != Success {
		t.Fatalf("parent ended %s (%s)", info.State, info.Error)
	}
	ids := childIDs(t, h.x, id)
	if len(ids) != kids {
		t.Fatalf("%d children listed, want %d", len(ids), kids)
	}
	for i, c := range ids {
		if i == p.FailKid {
			continue // kept until the root ended, then deleted with the tree
		}
		// Its record is gone: what Get knows of it is the summary the
		// root's record keeps (childsummary_test.go).
		if ci, err := h.x.Get(c); err != nil || !ci.SummaryOnly {
			t.Fatalf("child %d (%d): Get %+v, %v; want its summary", i, c, ci, err)
		}
	}
	for i := range kids {
		for s := range 2 {
			k := fmt.Sprintf("%s/c%d/%d", p.Name, i, s)
			if _, ok := mem.Value(k); ok == (i == p.FailKid) {
				t.Fatalf("effect %s present: %v (the failed child's must be undone, every other's kept)", k, ok)
			}
		}
	}
	if mem.Len() != 1 {
		t.Fatalf("%d records stored after the tree ended, want the root's alone", mem.Len())
	}
}

// treeWhileLastChildWaits submits root, whose tree holds kids children
// (the last one gated: it suspends until the gate opens), and calls check
// while every other child has finished and the last one waits.
func treeWhileLastChildWaits(t *testing.T, h *harness, root Procedure, parentName string, kids int, check func(root uint64)) Info {
	t.Helper()
	return treeWhileLastChildWaitsAs(t, h, root, SubmitOptions{}, parentName, kids, check)
}

// treeWhileLastChildWaitsAs is treeWhileLastChildWaits, root submitted
// with opts.
func treeWhileLastChildWaitsAs(t *testing.T, h *harness, root Procedure, opts SubmitOptions, parentName string, kids int, check func(root uint64)) Info {
	t.Helper()
	gate := parentName + "/c" + fmt.Sprint(kids-1)
	id := h.submit(root, opts)
	testwait.For(t, 30*time.Second, "every child but the gated one finished", func() bool {
		h.x.mu.Lock()
		defer h.x.mu.Unlock()
		r := h.x.roots[id]
		if r == nil {
			return false
		}
		running := 0
		for _, m := range r.members {
			if m.running && m.state.Terminal() {
				// Ended, and still held by its worker: between its last
				// write and its release (where a forgetting parent lets go
				// of it) the tree is not settled yet.
				return false
			}
			if c, ok := m.proc.(*fgChild); ok && !m.state.Terminal() {
				if c.Name != gate || m.state != Waiting {
					return false
				}
				running++
			}
		}
		return running == 1 && len(r.members) > 0
	})
	check(id)
	openGate(gate)
	h.x.Wake(eventFor(gate))
	return h.wait(id)
}

// TestForgottenChildrenLeaveTheStackAndTheTree checks, while the last
// child of 2,500 waits, that the forgotten ones are out of the tree's
// members, the executor's table and the store, and that the rollback stack
// was swept of them (it holds fewer than the sweep's threshold of them).
func TestForgottenChildrenLeaveTheStackAndTheTree(t *testing.T) {
	mem := store.NewMemStore()
	h := startExecutor(t, mem, newDomain(), func(c *Config) { c.Registry = forgetRegistry(t) })
	const kids = 2500
	p := &fgParent{Name: uniq("P"), Kids: kids, Steps: 3, FailKid: -1, Forget: true, GateLast: true}
	info := treeWhileLastChildWaits(t, h, p, p.Name, kids, func(root uint64) {
		h.x.mu.Lock()
		r := h.x.roots[root]
		members, stack, procs := len(r.members), len(r.stack), len(h.x.procs)
		h.x.mu.Unlock()
		if members != 2 || procs != 2 {
			t.Errorf("tree members %d, executor table %d; want 2 (the parent and the waiting child)", members, procs)
		}
		// 3 steps a child: without the sweep 7,500 elements.
		if stack >= forgottenSweepMin+10 {
			t.Errorf("rollback stack of %d elements: the forgotten children's were not swept out", stack)
		}
		if kept := keptChildren(t, mem); kept != 1 {
			t.Errorf("%d children stored, want the waiting one alone", kept)
		}
	})
	if info.State != Success {
		t.Fatalf("parent ended %s (%s)", info.State, info.Error)
	}
}

// TestForgetNeedsEveryAncestorToRetry: below an ordinary root, whose
// rollback would undo every finished child, a forgetting parent keeps its
// children until the root ends; a parent that does not ask keeps them too.
func TestForgetNeedsEveryAncestorToRetry(t *testing.T) {
	const kids = 20
	for _, tc := range []struct {
		name   string
		root   func(p fgParent) Procedure
		forget bool
	}{
		{"ordinary root above", func(p fgParent) Procedure { return &fgRoot{Parent: p} }, true},
		{"parent does not forget", func(p fgParent) Procedure { return &p }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := store.NewMemStore()
			h := startExecutor(t, mem, newDomain(), func(c *Config) { c.Registry = forgetRegistry(t) })
			p := fgParent{Name: uniq("P"), Kids: kids, Steps: 1, FailKid: -1, Forget: tc.forget, GateLast: true}
			info := treeWhileLastChildWaits(t, h, tc.root(p), p.Name, kids, func(uint64) {
				if kept := keptChildren(t, mem); kept < kids {
					t.Errorf("%d children stored, want all %d kept", kept, kids)
				}
			})
			if info.State != Success {
				t.Fatalf("ended %s (%s)", info.State, info.Error)
			}
			if kept := keptChildren(t, mem); kept != 0 {
				t.Fatalf("%d children left stored after the root ended", kept)
			}
		})
	}
}

// keptChildren counts the child records in mem.
func keptChildren(t *testing.T, mem *store.MemStore) int {
	t.Helper()
	n := 0
	if _, err := mem.Load(func(p store.Proc) error {
		var r record
		if r.unmarshal(p.Data) == nil && r.parent != 0 {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// crashMutStore is crashStore (whose InsertAndMutate and UpdateAndMutate
// it keeps) with DeleteAndMutate: every write, whatever its kind, spends
// the budget.
type crashMutStore struct {
	crashStore
}

var _ store.DeleteMutator = (*crashMutStore)(nil)

func (c *crashMutStore) DeleteAndMutate(ids []uint64, muts []store.Mutation) error {
	if !c.allow() {
		return errCrash
	}
	return c.inner.DeleteAndMutate(ids, muts)
}

func (c *crashMutStore) Value(key string) ([]byte, bool) { return c.inner.Value(key) }
func (c *crashMutStore) ScanValues(prefix string, fn func(string, []byte) bool) {
	c.inner.ScanValues(prefix, fn)
}

// TestCrashWhileForgettingChildren drops the executor at each write of a
// forgetting tree (children that succeed and are forgotten, one that fails
// and is rolled back alone), reloads from the store, and checks that the
// root ends SUCCESS exactly once with the domain state of a clean run and
// no child record left.
func TestCrashWhileForgettingChildren(t *testing.T) {
	newTree := func() Procedure { return &fgParent{Name: "F", Kids: 4, Steps: 2, FailKid: 2, Forget: true} }
	run := func(t *testing.T, budget int, seed *crashStore, mem *store.MemStore) (*crashMutStore, *harness) {
		cs := &crashMutStore{crashStore{inner: mem, budget: budget}}
		if seed != nil {
			cs.seedFrom(&seed.endCounts)
		}
		return cs, startExecutor(t, cs, newDomain(), func(c *Config) { c.Registry, c.Workers = forgetRegistry(t), 1 })
	}
	cleanMem := store.NewMemStore()
	clean, h := run(t, -1, nil, cleanMem)
	if info := h.wait(h.submit(newTree(), SubmitOptions{Nonce: "F"})); info.State != Success {
		t.Fatalf("clean run ended %s (%s)", info.State, info.Error)
	}
	_ = h.x.Stop(t.Context())
	total := clean.writes
	want := cleanMem.Domain()
	if len(want) != 3*2+1 {
		t.Fatalf("clean run's domain %v: want three children's two steps and the parent's end", want)
	}
	for n := 0; n <= total; n++ {
		t.Run(fmt.Sprint("crash-after-", n), func(t *testing.T) {
			mem := store.NewMemStore()
			cs, h1 := run(t, n, nil, mem)
			id, err := h1.x.Submit(newTree(), SubmitOptions{Nonce: "F"})
			if err == nil {
				testwait.For(t, 10*time.Second, "crash or completion", func() bool {
					i, err := h1.x.Get(id)
					return h1.x.Err() != nil || err == nil && i.State.Terminal()
				})
			}
			_ = h1.x.Stop(t.Context())
			cs2, h2 := run(t, -1, &cs.crashStore, mem)
			id = h2.resubmitAfterCrash(newTree(), "F", cs2.terminals)
			if got := mem.Domain(); !maps.EqualFunc(got, want, func(a, b []byte) bool { return string(a) == string(b) }) {
				t.Fatalf("domain %v, want %v", got, want)
			}
			if kept := keptChildren(t, mem); kept != 0 {
				t.Fatalf("%d child records left", kept)
			}
		})
	}
}
