package procedure

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// cvParent is an ordinary procedure (it can roll back) that spawns Kids
// cvChild children in its first step and writes Name/end in its second.
// Forget and Covers say whether it forgets its children as they succeed
// and whether its rollback covers them: it deletes every key under Name/,
// whichever child wrote it, as a table create's rollback deletes every
// region of its table. FailEnd fails its second step, after every child
// ended.
type cvParent struct {
	Base
	Name    string
	Kids    int
	Steps   int
	FailKid int // the child that fails (after its gate, if it is gated); -1 for none
	GateKid int // the child that waits for the gate of its name; -1 for none
	FailEnd bool
	Forget  bool
	Covers  bool
	Next    int
}

func (p *cvParent) ForgetChildrenOnSuccess() bool { return p.Forget }
func (p *cvParent) RollbackCoversChildren() bool  { return p.Covers }

func (p *cvParent) Execute(ctx *Context) (Step, error) {
	if p.Next == 0 {
		p.Next++
		if err := ctx.Put(p.Name+"/start", []byte("x")); err != nil {
			return Step{}, err
		}
		kids := make([]Procedure, p.Kids)
		for i := range kids {
			kids[i] = &cvChild{Name: p.childName(i), Steps: p.Steps, Fail: i == p.FailKid, Gated: i == p.GateKid}
		}
		return Spawn(kids...), nil
	}
	if p.FailEnd {
		return Step{}, fmt.Errorf("%s: last step: %w", p.Name, errBoom)
	}
	if err := ctx.Put(p.Name+"/end", []byte("x")); err != nil {
		return Step{}, err
	}
	return Done(), nil
}

func (p *cvParent) childName(i int) string { return fmt.Sprintf("%s/c%d", p.Name, i) }

// Rollback deletes whatever is stored under its name: its own keys and
// every child's, forgotten or not.
func (p *cvParent) Rollback(ctx *Context) error {
	var keys []string
	if err := ctx.Scan(p.Name+"/", func(k string, _ []byte) bool {
		keys = append(keys, k)
		return true
	}); err != nil {
		return err
	}
	for _, k := range keys {
		if err := ctx.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// cvRoot is an ordinary root above a cvParent.
type cvRoot struct {
	Base
	Parent cvParent
	Next   int
}

func (p *cvRoot) Execute(*Context) (Step, error) {
	if p.Next == 0 {
		p.Next++
		c := p.Parent
		return Spawn(&c), nil
	}
	return Done(), nil
}

func (p *cvRoot) Rollback(*Context) error { return nil }

// cvChild writes Name/<step> with each of its Steps steps; Gated waits
// for the gate of its name first; Fail fails (after the gate). Its
// rollback counts itself in cvRollbacks.
type cvChild struct {
	Base
	Name  string
	Steps int
	Fail  bool
	Gated bool
	Next  int
}

func (p *cvChild) Execute(ctx *Context) (Step, error) {
	if p.Gated && !gateOpen(p.Name) {
		return Suspend(OnEvent(eventFor(p.Name))), nil
	}
	if p.Fail {
		return Step{}, fmt.Errorf("%s: %w", p.Name, errBoom)
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

func (p *cvChild) Rollback(ctx *Context) error {
	n, _ := cvRollbacks.LoadOrStore(p.Name, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	return ctx.Delete(fmt.Sprintf("%s/%d", p.Name, p.Next))
}

// cvRollbacks counts the rollback steps each cvChild (by name) ran.
var cvRollbacks sync.Map

func cvRolledBack(name string) int64 {
	if n, ok := cvRollbacks.Load(name); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

func coverRegistry(t testing.TB) *Registry {
	r := forgetRegistry(t)
	r.MustRegister("cvparent", 1, func() Procedure { return &cvParent{} })
	r.MustRegister("cvchild", 1, func() Procedure { return &cvChild{} })
	r.MustRegister("cvroot", 1, func() Procedure { return &cvRoot{} })
	return r
}

// domainUnder lists the committed domain keys under prefix.
func domainUnder(mem *store.MemStore, prefix string) []string {
	var out []string
	for k := range mem.Domain() {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// whileGatedChildWaits submits root and calls check once every child of
// the tree has ended but the gated one, which waits, and no ended one is
// still held by its worker; then opens the gate and returns the root's
// outcome.
func whileGatedChildWaits(t *testing.T, h *harness, root Procedure, gate string, check func(root uint64)) Info {
	t.Helper()
	id := h.submit(root, SubmitOptions{})
	testwait.For(t, 30*time.Second, "every child but the gated one ended", func() bool {
		h.x.mu.Lock()
		defer h.x.mu.Unlock()
		r := h.x.roots[id]
		if r == nil {
			return false
		}
		waiting := 0
		for _, m := range r.members {
			if m.running && m.state.Terminal() {
				return false
			}
			if c, ok := m.proc.(*cvChild); ok && !m.state.Terminal() {
				if c.Name != gate || m.state != Waiting {
					return false
				}
				waiting++
			}
		}
		return waiting == 1
	})
	check(id)
	openGate(gate)
	h.x.Wake(eventFor(gate))
	return h.wait(id)
}

// TestCoveringParentForgetsChildren: a parent that can roll back, whose
// rollback covers its children, forgets them as they succeed, as a root
// and below an ordinary root; one that forgets but does not cover keeps
// them (nothing else vouches that a rollback of the tree leaves none of
// their effects behind).
func TestCoveringParentForgetsChildren(t *testing.T) {
	const kids = 300
	for _, tc := range []struct {
		name   string
		covers bool
		nested bool
	}{
		{"covers, root", true, false},
		{"covers, below an ordinary root", true, true},
		{"does not cover", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := store.NewMemStore()
			h := startExecutor(t, mem, newDomain(), func(c *Config) { c.Registry = coverRegistry(t) })
			p := cvParent{Name: uniq("CV"), Kids: kids, Steps: 2, FailKid: -1, GateKid: kids - 1, Forget: true, Covers: tc.covers}
			var root Procedure = &p
			if tc.nested {
				root = &cvRoot{Parent: p}
			}
			info := whileGatedChildWaits(t, h, root, p.childName(kids-1), func(uint64) {
				want := kids
				if tc.covers {
					want = 1 // the waiting one
				}
				if kept := keptChildren(t, mem); kept != want+btoi(tc.nested) {
					t.Errorf("%d children stored, want %d", kept, want+btoi(tc.nested))
				}
			})
			if info.State != Success {
				t.Fatalf("ended %s (%s)", info.State, info.Error)
			}
			if got := len(domainUnder(mem, p.Name+"/")); got != 2*kids+2 {
				t.Fatalf("%d domain keys, want every child's two steps and the parent's two", got)
			}
			if mem.Len() != 1 {
				t.Fatalf("%d records stored after the tree ended, want the root's alone", mem.Len())
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestCoveringParentRollsBackForgottenChildren: a covering parent's tree
// rolls back after it forgot children (its last step fails after every
// child was forgotten; the gated child fails while its siblings were
// forgotten; the root is aborted while the gated child waits): its own
// rollback undoes every child's effect, the forgotten children's own
// rollback never runs, the kept child's does, and nothing is left stored
// but the root.
func TestCoveringParentRollsBackForgottenChildren(t *testing.T) {
	const kids = 200
	for _, tc := range []struct {
		name    string
		failEnd bool
		failKid bool
		abort   bool
		nested  bool
	}{
		{name: "fails after every child was forgotten", failEnd: true},
		{name: "fails after every child was forgotten, below an ordinary root", failEnd: true, nested: true},
		{name: "a child fails after its siblings were forgotten", failKid: true},
		{name: "aborted while the last child waits", abort: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := store.NewMemStore()
			h := startExecutor(t, mem, newDomain(), func(c *Config) { c.Registry = coverRegistry(t) })
			p := cvParent{Name: uniq("CV"), Kids: kids, Steps: 2, FailKid: -1, GateKid: kids - 1,
				FailEnd: tc.failEnd, Forget: true, Covers: true}
			if tc.failKid {
				p.FailKid = kids - 1
			}
			var root Procedure = &p
			if tc.nested {
				root = &cvRoot{Parent: p}
			}
			info := whileGatedChildWaits(t, h, root, p.childName(kids-1), func(id uint64) {
				if kept := keptChildren(t, mem); kept != 1+btoi(tc.nested) {
					t.Errorf("%d children stored, want the waiting one alone", kept)
				}
				if tc.abort {
					if err := h.x.Abort(id); err != nil {
						t.Fatal(err)
					}
				}
			})
			if info.State != RolledBack {
				t.Fatalf("ended %s (%s), want ROLLEDBACK", info.State, info.Error)
			}
			if left := domainUnder(mem, p.Name+"/"); len(left) != 0 {
				t.Fatalf("effects left after the rollback: %v", left)
			}
			for i := range kids - 1 {
				if n := cvRolledBack(p.childName(i)); n != 0 {
					t.Fatalf("forgotten child %d rolled back %d steps; its parent's rollback covers it", i, n)
				}
			}
			if tc.failKid || tc.abort {
				// Kept: its failed (or never run) step is undone as usual.
				if n := cvRolledBack(p.childName(kids - 1)); n == 0 {
					t.Fatalf("the kept child was not rolled back")
				}
			}
			if mem.Len() != 1 {
				t.Fatalf("%d records stored after the tree ended, want the root's alone", mem.Len())
			}
		})
	}
}

// TestCoveringTreeResumesAfterRestart stops the executor while a covering
// parent's gated child waits and the others were forgotten, and starts
// another on the store: it loads the parent with the one child left (the
// forgotten ones are simply not there), and the tree ends as it would
// have (SUCCESS with every effect; or, when the parent's last step fails,
// ROLLEDBACK with none, the forgotten children undone by the parent).
func TestCoveringTreeResumesAfterRestart(t *testing.T) {
	const kids = 100
	for _, failEnd := range []bool{false, true} {
		t.Run(fmt.Sprint("fail-end-", failEnd), func(t *testing.T) {
			mem := store.NewMemStore()
			reg := coverRegistry(t)
			h1 := startExecutor(t, mem, newDomain(), func(c *Config) { c.Registry = reg })
			p := &cvParent{Name: uniq("CV"), Kids: kids, Steps: 2, FailKid: -1, GateKid: kids - 1, FailEnd: failEnd, Forget: true, Covers: true}
			gate := p.childName(kids - 1)
			id := h1.submit(p, SubmitOptions{})
			testwait.For(t, 30*time.Second, "every child but the gated one forgotten", func() bool {
				return keptChildren(t, mem) == 1 && len(domainUnder(mem, p.Name+"/c")) == 2*(kids-1)
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := h1.x.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			resetEvent(gate)
			h2 := startExecutor(t, mem, newDomain(), func(c *Config) { c.Registry = reg })
			if pr := h2.x.Problems(); len(pr) > 0 {
				t.Fatalf("load problems: %+v", pr)
			}
			if ids := childIDs(t, h2.x, id); len(ids) != 1 {
				t.Fatalf("loaded parent lists %d children, want the one kept", len(ids))
			}
			openGate(gate)
			h2.x.Wake(eventFor(gate))
			info := h2.wait(id)
			left := domainUnder(mem, p.Name+"/")
			switch {
			case !failEnd && (info.State != Success || len(left) != 2*kids+2):
				t.Fatalf("ended %s (%s) with %d effects, want SUCCESS with %d", info.State, info.Error, len(left), 2*kids+2)
			case failEnd && (info.State != RolledBack || len(left) != 0):
				t.Fatalf("ended %s (%s) with effects %v, want ROLLEDBACK with none", info.State, info.Error, left)
			}
			for i := range kids - 1 {
				if n := cvRolledBack(p.childName(i)); n != 0 {
					t.Fatalf("forgotten child %d rolled back %d steps", i, n)
				}
			}
			if mem.Len() != 1 {
				t.Fatalf("%d records stored after the tree ended, want the root's alone", mem.Len())
			}
		})
	}
}

// TestCrashWhileCoveringParentForgets drops the executor at each write of
// a covering parent's tree (children forgotten as they succeed; then the
// parent's last step succeeds, or fails and the tree rolls back), reloads
// from the store, and checks the tree ends as a clean run does, with the
// same domain and no child record left.
func TestCrashWhileCoveringParentForgets(t *testing.T) {
	for _, failEnd := range []bool{false, true} {
		t.Run(fmt.Sprint("fail-end-", failEnd), func(t *testing.T) {
			newTree := func() Procedure {
				return &cvParent{Name: "CVX", Kids: 4, Steps: 2, FailKid: -1, GateKid: -1, FailEnd: failEnd, Forget: true, Covers: true}
			}
			wantState := Success
			if failEnd {
				wantState = RolledBack
			}
			run := func(t *testing.T, budget int, mem *store.MemStore) (*crashMutStore, *harness) {
				cs := &crashMutStore{crashStore{inner: mem, budget: budget}}
				return cs, startExecutor(t, cs, newDomain(), func(c *Config) { c.Registry, c.Workers = coverRegistry(t), 1 })
			}
			cleanMem := store.NewMemStore()
			clean, h := run(t, -1, cleanMem)
			if info := h.wait(h.submit(newTree(), SubmitOptions{Nonce: "CVX"})); info.State != wantState {
				t.Fatalf("clean run ended %s (%s)", info.State, info.Error)
			}
			_ = h.x.Stop(t.Context())
			total := clean.writes
			want := cleanMem.Domain()
			for n := 0; n <= total; n++ {
				t.Run(fmt.Sprint("crash-after-", n), func(t *testing.T) {
					mem := store.NewMemStore()
					cs, h1 := run(t, n, mem)
					id, err := h1.x.Submit(newTree(), SubmitOptions{Nonce: "CVX"})
					if err == nil {
						testwait.For(t, 10*time.Second, "crash or completion", func() bool {
							i, err := h1.x.Get(id)
							return h1.x.Err() != nil || err == nil && i.State.Terminal()
						})
					}
					_ = h1.x.Stop(t.Context())
					_, h2 := run(t, -1, mem)
					if pr := h2.x.Problems(); len(pr) > 0 {
						t.Fatalf("load problems: %+v", pr)
					}
					id, err = h2.x.Submit(newTree(), SubmitOptions{Nonce: "CVX"})
					if err != nil {
						t.Fatal(err)
					}
					if info := h2.wait(id); info.State != wantState {
						t.Fatalf("ended %s (%s), want %s", info.State, info.Error, wantState)
					}
					if terminal := cs.terminals(id); terminal > 1 {
						t.Fatalf("root reached a terminal state %d times before the crash", terminal)
					}
					if got := mem.Domain(); !maps.EqualFunc(got, want, func(a, b []byte) bool { return string(a) == string(b) }) {
						t.Fatalf("domain %v, want %v", got, want)
					}
					if kept := keptChildren(t, mem); kept != 0 {
						t.Fatalf("%d child records left", kept)
					}
				})
			}
		})
	}
}
