// Package diag holds Baton's built-in diagnostic procedure types. They do
// nothing useful on purpose: they exist so that tests, benchmarks, demos and
// operators can exercise a cluster (submit, watch, abort, fail over) without
// a domain. Every node registers them (Register), and the admin API builds
// them from a type name and string arguments (New).
//
//	sleep   steps (default 3), delay (Go duration, default 100ms)
//	        Runs steps steps; after each it suspends with a timer of delay,
//	        so no worker is held while it "sleeps". Result: "slept N steps".
//	fail    steps (default 3), fail_at (default steps-1), delay (default 0)
//	        Runs steps 0..fail_at-1, fails at step fail_at, and the whole
//	        procedure rolls back (it ends ROLLEDBACK with the error).
//	fanout  children (default 3), steps (default 3), delay (default 100ms)
//	        Spawns children sleep procedures with the given steps and delay,
//	        waits for all of them, then finishes. Result: "N children done".
//
// Arguments are validated strictly: an unknown type, an unknown argument
// name, a value that is not a number or duration, a negative one, fail_at ≥
// steps, more than MaxChildren children, more than MaxSteps steps or a delay
// above MaxDelay are refused with an error wrapping procedure.ErrInvalid,
// which the admin API answers with INVALID_ARGUMENT.
//
// Steps have no domain effect: the executor's Context does not (yet) carry
// domain mutations, so each step only advances the procedure's own persisted
// counter (Done), which is what a test can observe. Steps are idempotent in
// the framework's sense: re-running a step after a crash only repeats a
// sleep.
package diag

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/procedure"
)

// Type names of the diagnostic procedures.
const (
	TypeSleep  = "sleep"
	TypeFail   = "fail"
	TypeFanout = "fanout"
)

// Bounds on arguments, so that a typo cannot make a node spawn a million
// procedures or sleep for a year.
const (
	MaxSteps    = 100_000
	MaxChildren = 1000
	MaxDelay    = time.Hour
)

// Defaults of the arguments.
const (
	DefaultSteps    = 3
	DefaultDelay    = 100 * time.Millisecond
	DefaultChildren = 3
)

// Types lists the diagnostic type names, sorted.
func Types() []string { return []string{TypeFail, TypeFanout, TypeSleep} }

// Register adds the diagnostic types to reg (version 1 each).
func Register(reg *procedure.Registry) error {
	for _, t := range []struct {
		name string
		f    func() procedure.Procedure
	}{
		{TypeSleep, func() procedure.Procedure { return &Sleep{} }},
		{TypeFail, func() procedure.Procedure { return &Fail{} }},
		{TypeFanout, func() procedure.Procedure { return &Fanout{} }},
	} {
		if err := reg.Register(t.name, 1, t.f); err != nil {
			return fmt.Errorf("diag: %w", err)
		}
	}
	return nil
}

// Sleep runs Steps steps, suspending for Delay after each.
type Sleep struct {
	procedure.Base
	Steps int
	Delay time.Duration
	// Done counts the steps executed so far; it is persisted with the
	// procedure.
	Done int
}

// Execute runs one step: count it, then sleep (suspend with a timer) or
// finish.
func (p *Sleep) Execute(ctx *procedure.Context) (procedure.Step, error) {
	if p.Done >= p.Steps {
		ctx.SetResult([]byte(fmt.Sprintf("slept %d steps", p.Done)))
		return procedure.Done(), nil
	}
	if err := RecordEffect(ctx, p.Done, 1); err != nil {
		return procedure.Step{}, err
	}
	p.Done++
	if p.Delay <= 0 {
		return procedure.More(), nil
	}
	return procedure.Suspend(procedure.Timeout(p.Delay)), nil
}

// Rollback undoes one step's effect.
func (p *Sleep) Rollback(ctx *procedure.Context) error {
	if p.Done > 0 {
		p.Done--
		return RecordEffect(ctx, p.Done, -1)
	}
	return nil
}

// EffectKey is the domain key under which step `step` of procedure id
// records its effect: the number of times it was applied (minus the times
// it was rolled back). Tests read these keys to check that every step took
// effect exactly once, whatever failed over meanwhile.
func EffectKey(id uint64, step int) string { return fmt.Sprintf("effects/%d/%d", id, step) }

// RecordEffect adds delta to the effect count of the running procedure's
// step. The change commits atomically with the step's outcome. On a store
// without domain state (a single-process WAL) it records nothing.
func RecordEffect(ctx *procedure.Context, step, delta int) error {
	key := EffectKey(ctx.ID(), step)
	v, _, err := ctx.Get(key)
	if errors.Is(err, procedure.ErrNoDomain) {
		return nil
	}
	if err != nil {
		return err
	}
	n := 0
	if len(v) > 0 {
		if n, err = strconv.Atoi(string(v)); err != nil {
			return fmt.Errorf("diag: effect %s holds %q: %w", key, v, err)
		}
	}
	return ctx.Put(key, []byte(strconv.Itoa(n+delta)))
}

// Fail runs FailAt steps, then fails; its root rolls back.
type Fail struct {
	procedure.Base
	Steps  int
	FailAt int
	Delay  time.Duration
	Done   int
	Failed bool
	// RolledBack counts the steps rolled back.
	RolledBack int
}

// ErrAsked is the error a fail procedure fails with.
var ErrAsked = errors.New("diag: failing as asked")

// Execute runs one step, or fails at step FailAt.
func (p *Fail) Execute(ctx *procedure.Context) (procedure.Step, error) {
	if p.Done >= p.FailAt {
		p.Failed = true
		return procedure.Step{}, fmt.Errorf("%w at step %d of %d", ErrAsked, p.Done, p.Steps)
	}
	if err := RecordEffect(ctx, p.Done, 1); err != nil {
		return procedure.Step{}, err
	}
	p.Done++
	if p.Delay > 0 {
		return procedure.Suspend(procedure.Timeout(p.Delay)), nil
	}
	return procedure.More(), nil
}

// Rollback undoes one step: the failed one had no effect (its changes
// were dropped with the failure); the others are counted back down.
func (p *Fail) Rollback(ctx *procedure.Context) error {
	p.RolledBack++
	if p.Failed {
		p.Failed = false
		return nil
	}
	if p.Done > 0 {
		p.Done--
		return RecordEffect(ctx, p.Done, -1)
	}
	return nil
}

// Fanout spawns Children sleep procedures and finishes after them.
type Fanout struct {
	procedure.Base
	Children int
	Steps    int
	Delay    time.Duration
	Spawned  bool
}

// Execute spawns the children on its first step and finishes on its second
// (which runs once every child is done).
func (p *Fanout) Execute(ctx *procedure.Context) (procedure.Step, error) {
	if p.Spawned {
		if err := RecordEffect(ctx, 1, 1); err != nil {
			return procedure.Step{}, err
		}
		ctx.SetResult([]byte(fmt.Sprintf("%d children done", p.Children)))
		return procedure.Done(), nil
	}
	if err := RecordEffect(ctx, 0, 1); err != nil {
		return procedure.Step{}, err
	}
	p.Spawned = true
	kids := make([]procedure.Procedure, p.Children)
	for i := range kids {
		kids[i] = &Sleep{Steps: p.Steps, Delay: p.Delay}
	}
	return procedure.Spawn(kids...), nil
}

// Rollback undoes the spawn step's effect (the finishing step never fails).
func (p *Fanout) Rollback(ctx *procedure.Context) error { return RecordEffect(ctx, 0, -1) }

// New builds a diagnostic procedure of type typ from string arguments. The
// error wraps procedure.ErrInvalid (and, for an unknown type, also
// procedure.ErrUnknownType) and says what is wrong.
func New(typ string, args map[string]string) (procedure.Procedure, error) {
	a := argReader{typ: typ, args: args}
	var p procedure.Procedure
	switch typ {
	case TypeSleep:
		s := &Sleep{
			Steps: a.int("steps", DefaultSteps, 0, MaxSteps),
			Delay: a.duration("delay", DefaultDelay),
		}
		p = s
	case TypeFail:
		f := &Fail{Steps: a.int("steps", DefaultSteps, 1, MaxSteps)}
		f.FailAt = a.int("fail_at", f.Steps-1, 0, MaxSteps)
		f.Delay = a.duration("delay", 0)
		if a.err == nil && f.FailAt >= f.Steps {
			a.err = procedure.Errorf(procedure.ErrInvalid, "%s: fail_at %d must be below steps %d", typ, f.FailAt, f.Steps)
		}
		p = f
	case TypeFanout:
		p = &Fanout{
			Children: a.int("children", DefaultChildren, 0, MaxChildren),
			Steps:    a.int("steps", DefaultSteps, 0, MaxSteps),
			Delay:    a.duration("delay", DefaultDelay),
		}
	default:
		return nil, procedure.WithKind(procedure.ErrInvalid, procedure.Errorf(procedure.ErrUnknownType, "unknown procedure type %q (diagnostic types: %s)", typ, strings.Join(Types(), ", ")))
	}
	if a.err == nil {
		a.checkUnused()
	}
	if a.err != nil {
		return nil, a.err
	}
	return p, nil
}

// argReader reads arguments, keeping the first error and which names were
// used.
type argReader struct {
	typ  string
	args map[string]string
	used []string
	err  error
}

func (a *argReader) get(name string) (string, bool) {
	a.used = append(a.used, name)
	v, ok := a.args[name]
	return strings.TrimSpace(v), ok
}

func (a *argReader) fail(format string, args ...any) {
	if a.err == nil {
		a.err = procedure.Errorf(procedure.ErrInvalid, "%s: %s", a.typ, fmt.Sprintf(format, args...))
	}
}

func (a *argReader) int(name string, def, lo, hi int) int {
	v, ok := a.get(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	switch {
	case err != nil:
		a.fail("argument %s=%q is not a whole number", name, v)
	case n < lo:
		a.fail("argument %s=%d is below %d", name, n, lo)
	case n > hi:
		a.fail("argument %s=%d is above the limit %d", name, n, hi)
	default:
		return n
	}
	return def
}

func (a *argReader) duration(name string, def time.Duration) time.Duration {
	v, ok := a.get(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		a.fail("argument %s=%q is not a Go duration (e.g. 100ms, 2s)", name, v)
	case d < 0:
		a.fail("argument %s=%v is negative", name, d)
	case d > MaxDelay:
		a.fail("argument %s=%v is above the limit %v", name, d, MaxDelay)
	default:
		return d
	}
	return def
}

func (a *argReader) checkUnused() {
	var unknown []string
	for k := range a.args {
		known := false
		for _, u := range a.used {
			known = known || k == u
		}
		if !known {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		used := append([]string(nil), a.used...)
		sort.Strings(used)
		a.fail("unknown argument(s) %s (known: %s)", strings.Join(unknown, ", "), strings.Join(used, ", "))
	}
}

// Arg describes one argument of a diagnostic type.
type Arg struct {
	Name    string
	Default string
	Help    string
}

// TypeDoc describes a diagnostic type for help texts.
type TypeDoc struct {
	Name    string
	Summary string
	Args    []Arg
}

// Docs describes the types New builds, sorted by name, so that help texts
// (baton proc submit -h) follow this package instead of copying it; a test
// holds it to what New accepts.
func Docs() []TypeDoc {
	return []TypeDoc{
		{TypeFail, "runs steps until fail_at, fails there and rolls back", []Arg{
			{"steps", strconv.Itoa(DefaultSteps), fmt.Sprintf("steps to run, 1 to %d", MaxSteps)},
			{"fail_at", "steps-1", "the step that fails, below steps"},
			{"delay", "0", fmt.Sprintf("Go duration slept after each step, up to %v", MaxDelay)},
		}},
		{TypeFanout, "spawns sleep children, waits for all of them", []Arg{
			{"children", strconv.Itoa(DefaultChildren), fmt.Sprintf("children to spawn, 0 to %d", MaxChildren)},
			{"steps", strconv.Itoa(DefaultSteps), "steps of each child"},
			{"delay", DefaultDelay.String(), "delay of each child's steps"},
		}},
		{TypeSleep, "runs steps, suspending for delay after each", []Arg{
			{"steps", strconv.Itoa(DefaultSteps), fmt.Sprintf("steps to run, 0 to %d", MaxSteps)},
			{"delay", DefaultDelay.String(), fmt.Sprintf("Go duration slept after each step, up to %v", MaxDelay)},
		}},
	}
}

// Progress implements procedure.Progressor: steps slept of Steps.
func (p *Sleep) Progress() procedure.Progress {
	return procedure.Progress{Done: int64(p.Done), Total: int64(p.Steps), Unit: "steps"}
}

// Progress implements procedure.Progressor: steps run of Steps.
func (p *Fail) Progress() procedure.Progress {
	return procedure.Progress{Done: int64(p.Done), Total: int64(p.Steps), Unit: "steps"}
}

// Progress implements procedure.Progressor: children ended of Children.
func (p *Fanout) Progress() procedure.Progress {
	return procedure.Progress{Total: int64(p.Children), Unit: "children done", FromChildren: true}
}
