package procedure

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

func (c *crashStore) InsertAndMutate(p store.Proc, children []store.Proc, muts []store.Mutation) error {
	if !c.allow(append([]store.Proc{p}, children...)...) {
		return errCrash
	}
	return c.inner.InsertAndMutate(p, children, muts)
}

func (c *crashStore) UpdateAndMutate(p store.Proc, muts []store.Mutation) error {
	if !c.allow(p) {
		return errCrash
	}
	return c.inner.UpdateAndMutate(p, muts)
}

func (c *crashStore) Value(key string) ([]byte, bool) { return c.inner.Value(key) }

func (c *crashStore) ScanValues(prefix string, fn func(string, []byte) bool) {
	c.inner.ScanValues(prefix, fn)
}

// counter adds 1 to a shared domain counter per step, and counts how often
// each step was applied; with FailAt it fails there and its rollback
// subtracts what it added.
type counter struct {
	Base
	Name   string
	Steps  int
	FailAt int
	Next   int
	Failed bool
}

func (p *counter) add(ctx *Context, key string, d int) error {
	v, _, err := ctx.Get(key)
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(string(v))
	return ctx.Put(key, []byte(strconv.Itoa(n+d)))
}

func (p *counter) Execute(ctx *Context) (Step, error) {
	k := p.Next
	if err := p.add(ctx, "total/"+p.Name, 1); err != nil {
		p.Failed = true
		return Step{}, err
	}
	if err := p.add(ctx, fmt.Sprintf("applied/%s/%d", p.Name, k), 1); err != nil {
		p.Failed = true
		return Step{}, err
	}
	if k == p.FailAt {
		p.Failed = true
		return Step{}, errBoom // its Puts are dropped with the failure
	}
	p.Next++
	if p.Next == p.Steps {
		return Done(), nil
	}
	if k%2 == 1 {
		return Spawn(&counter{Name: fmt.Sprintf("%s.c%d", p.Name, k), Steps: 2, FailAt: -1}), nil
	}
	return More(), nil
}

func (p *counter) Rollback(ctx *Context) error {
	if p.Failed {
		p.Failed = false
		return nil // the failed step's effects never committed
	}
	p.Next--
	if err := p.add(ctx, "total/"+p.Name, -1); err != nil {
		return err
	}
	return p.add(ctx, fmt.Sprintf("applied/%s/%d", p.Name, p.Next), -1)
}

func domainRegistry(c *Config) {
	c.Registry = NewRegistry()
	c.Registry.MustRegister("counter", 1, func() Procedure { return &counter{} })
	c.Workers = 1
}

// TestDomainEffectsExactlyOnce crashes at every persistence point and
// checks, from the domain state alone, that every step's effect was
// applied exactly once (or, after a rollback, not at all).
func TestDomainEffectsExactlyOnce(t *testing.T) {
	procs := func() []*counter {
		return []*counter{{Name: "ok", Steps: 5, FailAt: -1}, {Name: "bad", Steps: 5, FailAt: 3}}
	}
	clean := store.NewMemStore()
	h := startExecutor(t, &crashStore{inner: clean, budget: -1}, newDomain(), domainRegistry)
	for _, p := range procs() {
		h.wait(h.submit(p, SubmitOptions{Nonce: p.Name}))
	}
	total := clean.Writes()
	want := clean.Domain()
	if string(want["total/ok"]) != "5" || string(want["total/bad"]) != "0" || string(want["applied/bad/0"]) != "0" || string(want["applied/ok/4"]) != "1" {
		t.Fatalf("clean run domain %q", want)
	}
	for n := 0; n <= total; n++ {
		t.Run(fmt.Sprint("crash-after-", n), func(t *testing.T) {
			mem := store.NewMemStore()
			h1 := startExecutor(t, &crashStore{inner: mem, budget: n}, newDomain(), domainRegistry)
			for _, p := range procs() {
				if _, err := h1.x.Submit(p, SubmitOptions{Nonce: p.Name}); err != nil {
					break
				}
			}
			testwait.For(t, 10*time.Second, "crash or finish", func() bool {
				return h1.x.Err() != nil || len(h1.x.List(Filter{RootsOnly: true, States: []State{Success, RolledBack}})) == 2
			})
			_ = h1.x.Stop(context.Background())
			h2 := startExecutor(t, mem, newDomain(), domainRegistry)
			for _, p := range procs() {
				h2.wait(h2.submit(p, SubmitOptions{Nonce: p.Name}))
			}
			got := mem.Domain()
			for k, v := range want {
				if string(got[k]) != string(v) {
					t.Errorf("%s = %q, want %q (a step applied twice or lost)", k, got[k], v)
				}
			}
			if len(got) != len(want) {
				t.Errorf("domain %q, want %q", got, want)
			}
		})
	}
}

func TestDomainNeedsAMutationStore(t *testing.T) {
	dir := t.TempDir()
	w, err := store.OpenWAL(store.DefaultWALConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	h := startExecutor(t, w, newDomain(), domainRegistry)
	info := h.wait(h.submit(&counter{Name: "x", Steps: 1, FailAt: -1}, SubmitOptions{}))
	if info.State != RolledBack || !errorsContain(info.Error, ErrNoDomain.Error()) {
		t.Fatalf("state %s error %q", info.State, info.Error)
	}
}
