// Run by internal/compat/release_tests.sh inside a release's source tree
// (package procedure at that commit), not in this one: it checks that the
// release's executor loads, and ends as this tree does, a tree whose
// parent forgot its children as they succeeded (RollbackCoversChildren,
// which the release does not know; forgettingStore writes as a leader of
// this tree does). The types are forget_covers_test.go's.

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

// forgettingStore writes as a leader whose cvParent forgets its children
// (the new binary's RollbackCoversChildren): a cvchild's write that ends
// it SUCCESS deletes its record instead, with its mutations, in one write.
type forgettingStore struct {
	*crashMutStore
}

func (f *forgettingStore) forgets(p store.Proc) bool {
	var r record
	return r.unmarshal(p.Data) == nil && r.typeName == "cvchild" && r.state == Success && r.parent != 0
}

func (f *forgettingStore) Update(p store.Proc) error {
	if f.forgets(p) {
		return f.crashMutStore.DeleteAndMutate([]uint64{p.ID}, nil)
	}
	return f.crashMutStore.Update(p)
}

func (f *forgettingStore) UpdateAndMutate(p store.Proc, muts []store.Mutation) error {
	if f.forgets(p) {
		return f.crashMutStore.DeleteAndMutate([]uint64{p.ID}, muts)
	}
	return f.crashMutStore.UpdateAndMutate(p, muts)
}

func (f *forgettingStore) Value(key string) ([]byte, bool) { return f.inner.Value(key) }
func (f *forgettingStore) ScanValues(prefix string, fn func(string, []byte) bool) {
	f.inner.ScanValues(prefix, fn)
}

// TestReleaseLoadsForgottenTree: the release's executor loads a covering parent's
// tree whose children a newer leader forgot (all but a gated one), and
// ends it as the newer would.
func TestReleaseLoadsForgottenTree(t *testing.T) {
	const kids = 100
	for _, failEnd := range []bool{false, true} {
		t.Run(fmt.Sprint("fail-end-", failEnd), func(t *testing.T) {
			mem := store.NewMemStore()
			reg := coverRegistry(t)
			fs := &forgettingStore{&crashMutStore{crashStore{inner: mem, budget: -1}}}
			h1 := startExecutor(t, fs, newDomain(), func(c *Config) { c.Registry = reg })
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
			t.Logf("the release ended the loaded tree %s; %d effects left", info.State, len(left))
		})
	}
}

// TestReleaseCrashAtEveryWriteOfForgettingLeader: a forgetting leader lost at
// each of its writes, the release taking over from the store.
func TestReleaseCrashAtEveryWriteOfForgettingLeader(t *testing.T) {
	for _, failEnd := range []bool{false, true} {
		t.Run(fmt.Sprint("fail-end-", failEnd), func(t *testing.T) {
			newTree := func() Procedure {
				return &cvParent{Name: "CVX", Kids: 4, Steps: 2, FailKid: -1, GateKid: -1, FailEnd: failEnd, Forget: true, Covers: true}
			}
			wantState := Success
			if failEnd {
				wantState = RolledBack
			}
			cleanMem := store.NewMemStore()
			clean := &forgettingStore{&crashMutStore{crashStore{inner: cleanMem, budget: -1}}}
			h := startExecutor(t, clean, newDomain(), func(c *Config) { c.Registry, c.Workers = coverRegistry(t), 1 })
			if info := h.wait(h.submit(newTree(), SubmitOptions{Nonce: "CVX"})); info.State != wantState {
				t.Fatalf("clean run ended %s (%s)", info.State, info.Error)
			}
			_ = h.x.Stop(t.Context())
			total := clean.writes
			want := cleanMem.Domain()
			for n := 0; n <= total; n++ {
				t.Run(fmt.Sprint("crash-after-", n), func(t *testing.T) {
					mem := store.NewMemStore()
					fs := &forgettingStore{&crashMutStore{crashStore{inner: mem, budget: n}}}
					h1 := startExecutor(t, fs, newDomain(), func(c *Config) { c.Registry, c.Workers = coverRegistry(t), 1 })
					id, err := h1.x.Submit(newTree(), SubmitOptions{Nonce: "CVX"})
					if err == nil {
						testwait.For(t, 10*time.Second, "crash or completion", func() bool {
							i, err := h1.x.Get(id)
							return h1.x.Err() != nil || err == nil && i.State.Terminal()
						})
					}
					_ = h1.x.Stop(t.Context())
					h2 := startExecutor(t, &crashMutStore{crashStore{inner: mem, budget: -1}}, newDomain(), func(c *Config) { c.Registry, c.Workers = coverRegistry(t), 1 })
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
