package procedure

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/baton-dev/baton/store"
)

// Helpers shared by the scenario tests of this package
// (scenario_<project><number>_test.go): a tree of procedures described by a
// treeSpec, the environment that counts their steps, and a store that
// fails writes on cue.

// treeSpec is one procedure of a scenario tree. Its last step sets its
// result from its children's: Name(kid results...), so the root's result
// says the whole tree ran and that each child's result survived.
type treeSpec struct {
	Name    string
	Steps   int // > SpawnAt+1: a step follows the spawn
	SpawnAt int // the step that spawns Kids; -1: none
	Kids    []treeSpec
	SM      bool // run as a state machine (spawning with AddChild)
}

// want is the result the procedure of s ends with.
func (s treeSpec) want() string {
	var kids []string
	for _, k := range s.Kids {
		kids = append(kids, k.want())
	}
	return s.Name + "(" + strings.Join(kids, ",") + ")"
}

// names lists s and every descendant's name.
func (s treeSpec) names() []string {
	out := []string{s.Name}
	for _, k := range s.Kids {
		out = append(out, k.names()...)
	}
	return out
}

// steps lists the name/step keys of every step of the tree.
func (s treeSpec) steps() []string {
	var out []string
	for k := 0; k < s.Steps; k++ {
		out = append(out, fmt.Sprintf("%s/%d", s.Name, k))
	}
	for _, k := range s.Kids {
		out = append(out, k.steps()...)
	}
	sort.Strings(out)
	return out
}

func (s treeSpec) proc() Procedure {
	if s.SM {
		return &treeSM{Spec: s}
	}
	return &treeProc{Spec: s}
}

func registerTree(r *Registry) {
	r.MustRegister("scenario-tree", 1, func() Procedure { return &treeProc{} })
	r.MustRegister("scenario-tree-sm", 1, func() Procedure { return &treeSM{} })
}

// treeEnv is the outside world of a tree: it counts every run of every
// step, and the ids each name ran under (a child spawned twice shows as a
// name with two ids).
type treeEnv struct {
	mu     sync.Mutex
	execs  map[string]int
	ids    map[string]map[uint64]bool
	onStep func(id uint64, name string, k int) // optional, called before the step's effect
}

func newTreeEnv() *treeEnv {
	return &treeEnv{execs: map[string]int{}, ids: map[string]map[uint64]bool{}}
}

func (v *treeEnv) step(id uint64, name string, k int) {
	v.mu.Lock()
	hook := v.onStep
	v.mu.Unlock()
	if hook != nil {
		hook(id, name, k)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.execs[fmt.Sprintf("%s/%d", name, k)]++
	if v.ids[name] == nil {
		v.ids[name] = map[uint64]bool{}
	}
	v.ids[name][id] = true
}

// check compares what ran with spec: every step ran, no name ran under two
// ids, and at most reruns steps ran more than once. It returns what is
// wrong, or "".
func (v *treeEnv) check(spec treeSpec, reruns int) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var problems []string
	for _, n := range spec.names() {
		if len(v.ids[n]) != 1 {
			problems = append(problems, fmt.Sprintf("%s ran as %d procedures %v", n, len(v.ids[n]), v.ids[n]))
		}
	}
	extra := 0
	for _, k := range spec.steps() {
		switch c := v.execs[k]; {
		case c == 0:
			problems = append(problems, k+" never ran")
		case c > 1:
			extra += c - 1
		}
	}
	if len(v.execs) != len(spec.steps()) {
		problems = append(problems, fmt.Sprintf("%d distinct steps ran, the tree has %d", len(v.execs), len(spec.steps())))
	}
	if extra > reruns {
		problems = append(problems, fmt.Sprintf("%d step runs repeated, at most %d allowed: %v", extra, reruns, v.execs))
	}
	return strings.Join(problems, "; ")
}

// idOf is the id name ran under (0 if none or several).
func (v *treeEnv) idOf(name string) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.ids[name]) != 1 {
		return 0
	}
	for id := range v.ids[name] {
		return id
	}
	return 0
}

// treeResult is spec's result from its children's.
func treeResult(ctx *Context, spec treeSpec) ([]byte, error) {
	var kids []string
	for _, id := range ctx.Children() {
		info, err := ctx.Executor().Get(id)
		if err != nil {
			return nil, fmt.Errorf("child %d: %w", id, err)
		}
		if info.State != Success {
			return nil, fmt.Errorf("child %d ended %s", id, info.State)
		}
		kids = append(kids, string(info.Result))
	}
	return []byte(spec.Name + "(" + strings.Join(kids, ",") + ")"), nil
}

// treeProc is a Stepper of a treeSpec.
type treeProc struct {
	Base
	Spec treeSpec
	Next int
}

func (p *treeProc) Execute(ctx *Context) (Step, error) {
	k := p.Next
	ctx.Env.(*treeEnv).step(ctx.ID(), p.Spec.Name, k)
	p.Next++
	if k == p.Spec.SpawnAt && len(p.Spec.Kids) > 0 {
		kids := make([]Procedure, len(p.Spec.Kids))
		for i, s := range p.Spec.Kids {
			kids[i] = s.proc()
		}
		return Spawn(kids...), nil
	}
	if p.Next < p.Spec.Steps {
		return More(), nil
	}
	res, err := treeResult(ctx, p.Spec)
	if err != nil {
		return Step{}, err
	}
	ctx.SetResult(res)
	return Done(), nil
}

func (p *treeProc) Rollback(*Context) error { return nil }

// treeSM is a state machine of a treeSpec: state k is step k.
type treeSM struct {
	StateMachine
	Spec treeSpec
}

func (p *treeSM) InitialState() int32 { return 0 }

func (p *treeSM) ExecuteState(ctx *Context, s int32) (Flow, error) {
	ctx.Env.(*treeEnv).step(ctx.ID(), p.Spec.Name, int(s))
	if int(s) == p.Spec.SpawnAt {
		for _, k := range p.Spec.Kids {
			ctx.AddChild(k.proc())
		}
	}
	if int(s)+1 < p.Spec.Steps {
		p.SetNextState(s + 1)
		return HasMoreState, nil
	}
	res, err := treeResult(ctx, p.Spec)
	if err != nil {
		return NoMoreState, err
	}
	ctx.SetResult(res)
	return NoMoreState, nil
}

func (p *treeSM) RollbackState(*Context, int32) error { return nil }

// faultStore passes writes to inner until fault says otherwise. It counts,
// per procedure, the committed writes that moved it into a terminal state,
// and remembers the last state committed for each.
type faultStore struct {
	inner store.Store
	// fault decides write n (1-based) of procs: err non-nil fails it, and
	// apply says whether it reached inner anyway (a store that fails after
	// persisting, which the Store contract allows). nil: every write passes.
	fault func(n int, procs []store.Proc) (err error, apply bool)

	mu     sync.Mutex
	writes int // attempted
	endCounts
	// insert is called (without mu) around each Insert that writes a
	// child, with before true ahead of it.
	insert func(before bool, n int)
}

func newFaultStore(inner store.Store, fault func(n int, procs []store.Proc) (error, bool)) *faultStore {
	return &faultStore{inner: inner, fault: fault}
}

// crashAfter fails every write after the first n, unapplied: the process
// died there (n < 0: never).
func crashAfter(n int) func(int, []store.Proc) (error, bool) {
	return func(w int, _ []store.Proc) (error, bool) {
		if n >= 0 && w > n {
			return errCrash, false
		}
		return nil, true
	}
}

func (f *faultStore) do(procs []store.Proc, write func() error) error {
	f.mu.Lock()
	f.writes++
	n := f.writes
	fault := f.fault
	f.mu.Unlock()
	var ferr error
	apply := true
	if fault != nil {
		ferr, apply = fault(n, procs)
	}
	if apply {
		if err := write(); err != nil {
			return err
		}
		f.mu.Lock()
		f.note(procs)
		f.mu.Unlock()
	}
	return ferr
}

func (f *faultStore) Load(fn func(store.Proc) error) (store.LoadInfo, error) { return f.inner.Load(fn) }

func (f *faultStore) Insert(p store.Proc, children []store.Proc) error {
	all := append([]store.Proc{p}, children...)
	return f.do(all, func() error {
		if f.insert != nil && spawns(all) {
			f.insert(true, f.written())
			defer f.insert(false, f.written())
		}
		return f.inner.Insert(p, children)
	})
}

// spawns says whether procs hold a child: the write of a spawn.
func spawns(procs []store.Proc) bool {
	for _, p := range procs {
		var r record
		if r.unmarshal(p.Data) == nil && r.parent != 0 {
			return true
		}
	}
	return false
}

func (f *faultStore) Update(p store.Proc) error {
	return f.do([]store.Proc{p}, func() error { return f.inner.Update(p) })
}

func (f *faultStore) Delete(ids []uint64) error {
	return f.do(nil, func() error { return f.inner.Delete(ids) })
}

// Close leaves inner open: the test closes (or reopens) it.
func (f *faultStore) Close() error { return nil }

func (f *faultStore) written() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// terminals is how many committed writes ended procedure id.
func (f *faultStore) terminals(id uint64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.terminal[id]
}

// seed carries the counts of a crashed executor's store to the next one's.
func (f *faultStore) seed(prev *faultStore) {
	prev.mu.Lock()
	defer prev.mu.Unlock()
	f.seedFrom(&prev.endCounts)
}

// finishAfterCrash starts an executor on st, what a crashed or stopped
// one (counting through prev) left, resubmits the tree as its client
// would, runs it to its end and checks it: one id, every step's effect
// once, every procedure stored as ended once. what names the fault in the
// failure messages.
func finishAfterCrash(t *testing.T, st store.Store, prev *faultStore, env *treeEnv, spec treeSpec, acked uint64, what string) store.LoadInfo {
	t.Helper()
	fs := newFaultStore(st, nil)
	fs.seed(prev)
	h := startExecutor(t, fs, nil, treeConfig(env))
	for _, p := range h.x.Problems() {
		t.Fatalf("%s: load problem: proc %d: %s", what, p.ID, p.Reason)
	}
	id := h.submit(spec.proc(), SubmitOptions{Nonce: "root"})
	if acked != 0 && id != acked {
		t.Fatalf("%s: resubmission got %d, the acknowledged root is %d", what, id, acked)
	}
	info := h.wait(id)
	if info.State != Success || string(info.Result) != spec.want() {
		t.Fatalf("%s: root ended %s with %q (error %q), want SUCCESS with %q",
			what, info.State, info.Result, info.Error, spec.want())
	}
	if msg := env.check(spec, 1); msg != "" {
		t.Fatalf("%s: tree after the fault: %s", what, msg)
	}
	names := spec.names()
	sort.Strings(names)
	for _, name := range names {
		if got := fs.terminals(env.idOf(name)); got != 1 {
			t.Fatalf("%s: %s (id %d) stored as ended %d times, want once", what, name, env.idOf(name), got)
		}
	}
	_ = h.x.Stop(context.Background())
	return h.x.LoadInfo()
}
