// Command rollout runs procedures with children under a shared lock: a
// rollout locks its fleet exclusively and upgrades every host of it in a
// child procedure of its own; the children take the same lock, inherited
// from their parent, and run side by side, while a second rollout of the
// same fleet waits for the first to finish. A child that fails rolls back
// the whole tree: its siblings' upgrades, and the rollout's own steps.
//
//	go run ./examples/rollout
//
// Like every example it reads on its own: its states and steps are alike
// in shape to the others' but on purpose not shared with them.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// Rollout upgrades every host of a fleet to a version, one child each.
type Rollout struct {
	procedure.StateMachine
	Fleet   string
	Hosts   []string
	Version string
}

const (
	announce int32 = iota
	upgrade
	finish
)

func (r *Rollout) InitialState() int32 { return announce }

func (r *Rollout) ExecuteState(ctx *procedure.Context, s int32) (procedure.Flow, error) {
	fl := ctx.Env.(*Fleets)
	switch s {
	case announce:
		fl.Log("%s: rollout of %s starts", r.Fleet, r.Version)
		r.SetNextState(upgrade)
	case upgrade:
		for _, h := range r.Hosts {
			ctx.AddChild(&Upgrade{Fleet: r.Fleet, Host: h, Version: r.Version})
		}
		r.SetNextState(finish) // runs once every child succeeded
	case finish:
		fl.Log("%s: rollout of %s done", r.Fleet, r.Version)
		return procedure.NoMoreState, nil
	}
	return procedure.HasMoreState, nil
}

func (r *Rollout) RollbackState(ctx *procedure.Context, s int32) error {
	if s == announce {
		ctx.Env.(*Fleets).Log("%s: rollout of %s rolled back", r.Fleet, r.Version)
	}
	return nil
}

// Locks: the whole fleet, exclusively, held from the first step to the
// last (HoldLock), children included.
func (r *Rollout) Locks() []scheduler.Lock {
	return scheduler.TableLocks("fleets", r.Fleet, scheduler.Exclusive)
}

func (r *Rollout) HoldLock() bool { return true }

// Upgrade upgrades one host; it needs its fleet's lock too, which it
// inherits from the rollout that spawned it.
type Upgrade struct {
	procedure.Base
	Fleet, Host, Version string
	Old                  string
}

func (u *Upgrade) Execute(ctx *procedure.Context) (procedure.Step, error) {
	fl := ctx.Env.(*Fleets)
	old, err := fl.Install(u.Fleet, u.Host, u.Version)
	if err != nil {
		return procedure.Step{}, err
	}
	if u.Old == "" {
		u.Old = old // kept for the rollback; an idempotent re-run keeps the first
	}
	return procedure.Done(), nil
}

func (u *Upgrade) Rollback(ctx *procedure.Context) error {
	if u.Old != "" {
		_, err := ctx.Env.(*Fleets).Install(u.Fleet, u.Host, u.Old)
		return err
	}
	return nil
}

func (u *Upgrade) Locks() []scheduler.Lock {
	return scheduler.TableLocks("fleets", u.Fleet, scheduler.Exclusive)
}

// HoldLock: taken for its one step; inherited from the rollout, which
// holds it throughout.
func (u *Upgrade) HoldLock() bool { return false }

var (
	_ procedure.Locker = (*Rollout)(nil)
	_ procedure.Locker = (*Upgrade)(nil)
)

// Fleets are the hosts' installed versions, and a log of what happened.
type Fleets struct {
	mu       sync.Mutex
	versions map[string]string
	log      []string
	failing  map[string]string // host: the version it fails to install
}

// Logged says line was logged.
func (f *Fleets) Logged(line string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.log {
		if l == line {
			return true
		}
	}
	return false
}

// Log records what happened.
func (f *Fleets) Log(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, fmt.Sprintf(format, args...))
}

// Install sets host's version and returns the one it replaced.
func (f *Fleets) Install(fleet, host, version string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing[host] == version {
		f.log = append(f.log, fmt.Sprintf("%s: upgrade to %s failed", host, version))
		return "", fmt.Errorf("%s: upgrade to %s failed", host, version)
	}
	old := f.versions[fleet+"/"+host]
	f.versions[fleet+"/"+host] = version
	return old, nil
}

func (f *Fleets) Versions() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k, v := range f.versions {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rollout:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	reg := procedure.NewRegistry()
	if err := reg.Register("rollout", 1, func() procedure.Procedure { return &Rollout{} }); err != nil {
		return err
	}
	if err := reg.Register("upgrade", 1, func() procedure.Procedure { return &Upgrade{} }); err != nil {
		return err
	}
	hosts := []string{"a1", "a2", "a3"}
	fl := &Fleets{versions: map[string]string{}, failing: map[string]string{"a3": "v3"}}
	for _, h := range hosts {
		fl.versions["web/"+h] = "v1"
	}
	x, err := procedure.New(procedure.Config{Store: store.NewMemStore(), Registry: reg, Env: fl, Workers: 4, RecordFormat: version.Newest})
	if err != nil {
		return err
	}
	if err := x.Start(); err != nil {
		return err
	}
	defer x.Stop(context.Background())
	// v2 reaches every host; v3 fails on a3 and is rolled back everywhere.
	// The second rollout waits for the first: they lock the same fleet.
	first, err := x.Submit(&Rollout{Fleet: "web", Hosts: hosts, Version: "v2"}, procedure.SubmitOptions{})
	if err != nil {
		return err
	}
	// Once the first holds the fleet's lock (its first step ran), the
	// second queues behind it.
	for !fl.Logged("web: rollout of v2 starts") {
		time.Sleep(5 * time.Millisecond)
	}
	second, err := x.Submit(&Rollout{Fleet: "web", Hosts: hosts, Version: "v3"}, procedure.SubmitOptions{})
	if err != nil {
		return err
	}
	for i, id := range []uint64{first, second} {
		info, err := x.Wait(context.Background(), id)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "rollout %d: %s\n", i+1, info.State)
	}
	fl.mu.Lock()
	for _, l := range fl.log {
		fmt.Fprintln(w, l)
	}
	fl.mu.Unlock()
	fmt.Fprintln(w, "versions:", fl.Versions())
	return nil
}
