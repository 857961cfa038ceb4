package proceduretest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/baton-dev/baton/procedure"
)

// fleet is the outside world of the tests: hosts and their state.
type fleet struct {
	mu    sync.Mutex
	hosts map[string]string
	// boots counts every boot call: a step that boots again after a
	// crash must not boot twice (it checks first).
	boots int
}

func (f *fleet) set(host, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if state == "" {
		delete(f.hosts, host)
	} else {
		f.hosts[host] = state
	}
}

func (f *fleet) snapshot() any {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for k, v := range f.hosts {
		out[k] = v
	}
	return fmt.Sprint(out, " boots=", f.boots)
}

// provision allocates a host, installs it (a domain key), boots it.
type provision struct {
	procedure.StateMachine
	Host string
	// Careless boots without checking: booting twice after a crash.
	Careless bool
}

const (
	allocate int32 = iota
	install
	boot
)

func (p *provision) InitialState() int32 { return allocate }

func (p *provision) ExecuteState(ctx *procedure.Context, s int32) (procedure.Flow, error) {
	f := ctx.Env.(*fleet)
	switch s {
	case allocate:
		f.set(p.Host, "allocated")
		p.SetNextState(install)
	case install:
		if err := ctx.Put("installed/"+p.Host, []byte("v1")); err != nil {
			return procedure.NoMoreState, err
		}
		p.SetNextState(boot)
	case boot:
		f.mu.Lock()
		if p.Careless || f.hosts[p.Host] != "up" {
			f.boots++
		}
		f.mu.Unlock()
		f.set(p.Host, "up")
		return procedure.NoMoreState, nil
	}
	return procedure.HasMoreState, nil
}

func (p *provision) RollbackState(ctx *procedure.Context, s int32) error {
	f := ctx.Env.(*fleet)
	switch s {
	case allocate:
		f.set(p.Host, "")
	case install:
		return ctx.Delete("installed/" + p.Host)
	case boot:
		f.mu.Lock()
		if f.hosts[p.Host] == "up" {
			f.boots--
		}
		f.mu.Unlock()
		f.set(p.Host, "allocated")
	}
	return nil
}

func provisionCase(careless bool) Case {
	return Case{
		Register: func(r *procedure.Registry) error {
			return r.Register("provision", 1, func() procedure.Procedure { return &provision{} })
		},
		New:     func() procedure.Procedure { return &provision{Host: "h1", Careless: careless} },
		Env:     func() any { return &fleet{hosts: map[string]string{}} },
		Effects: func(env any) any { return env.(*fleet).snapshot() },
	}
}

func TestProvisionSurvivesEveryCrash(t *testing.T) {
	c := provisionCase(false)
	clean := Clean(t, c)
	if clean.Info.State != procedure.Success || clean.Writes < 4 {
		t.Fatalf("clean run: %s after %d writes", clean.Info.State, clean.Writes)
	}
	if clean.Effects.Keys.(map[string]string)["installed/h1"] != "v1" || clean.Effects.Env != "map[h1:up] boots=1" {
		t.Fatalf("clean run's effects: %#v", clean.Effects)
	}
	RecoveryAndDoubleExecution(t, c)
	RollbackAndDoubleExecution(t, c)
}

// TestACarelessStepIsCaught: a step that applies its effect again when it
// runs again after a crash is found, and so is one whose rollback forgets
// an effect.
func TestACarelessStepIsCaught(t *testing.T) {
	c := provisionCase(true)
	clean := Clean(t, c)
	caught := false
	for n := 0; n <= clean.Writes; n++ {
		got := newRunner(t, c).run(n, false, -1)
		if fmt.Sprint(got.Effects) != fmt.Sprint(clean.Effects) {
			caught = true
		}
	}
	if !caught {
		t.Fatal("a step booting twice after a crash went unnoticed")
	}
}

// TestRollbackRunsEveryStepTwice: toggling, every rollback step runs after
// a crash that came right after it ran once.
func TestRollbackRunsEveryStepTwice(t *testing.T) {
	c := provisionCase(false)
	got := newRunner(t, c).run(2, true, 2)
	if got.Info.State != procedure.RolledBack {
		t.Fatalf("aborted after its second write: %s", got.Info.State)
	}
	if got.Restarts < got.Writes-2 {
		t.Fatalf("%d restarts for %d writes: not every write failed once", got.Restarts, got.Writes)
	}
}
