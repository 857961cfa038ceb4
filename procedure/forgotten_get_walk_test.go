package procedure

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// getWatcher walks a tree through Get at every store write (before and
// after it) and from a poller, and records any id that Get answered once
// and later did not.
type getWatcher struct {
	mu    sync.Mutex
	x     *Executor
	root  uint64
	first map[uint64]Info
	// sums are the first summaries Get gave of members while the root
	// had not ended.
	sums   map[uint64]Info
	errs   []string
	checks int
}

func (w *getWatcher) set(x *Executor, root uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.x, w.root, w.first, w.sums = x, root, map[uint64]Info{}, map[uint64]Info{}
}

func (w *getWatcher) check(where string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.x == nil {
		return
	}
	w.checks++
	ids := make([]uint64, 0, len(w.first))
	for id := range w.first {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if _, err := w.x.Get(id); err != nil && len(w.errs) < 20 {
			w.errs = append(w.errs, fmt.Sprintf("%s: Get(%d), answered before as %s: %v", where, id, w.first[id].State, err))
		}
	}
	queue := []uint64{w.root}
	rootLive := false
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		info, err := w.x.Get(id)
		if err != nil {
			continue
		}
		if id == w.root {
			rootLive = !info.State.Terminal()
		}
		if _, ok := w.first[id]; !ok {
			w.first[id] = info
		}
		if _, ok := w.sums[id]; !ok && info.SummaryOnly && rootLive {
			w.sums[id] = info
		}
		queue = append(queue, info.Children...)
	}
}

// watchedStore calls its watcher around each write.
type watchedStore struct {
	store.DeleteMutator // not a store.Reader
	w                   *getWatcher
}

func (s *watchedStore) around(what string, f func() error) error {
	s.w.check("before " + what)
	err := f()
	s.w.check("after " + what)
	return err
}

func (s *watchedStore) Insert(p store.Proc, c []store.Proc) error {
	return s.around(fmt.Sprintf("Insert(%d)", p.ID), func() error { return s.DeleteMutator.Insert(p, c) })
}
func (s *watchedStore) InsertAndMutate(p store.Proc, c []store.Proc, m []store.Mutation) error {
	return s.around(fmt.Sprintf("InsertAndMutate(%d)", p.ID), func() error { return s.DeleteMutator.InsertAndMutate(p, c, m) })
}
func (s *watchedStore) Update(p store.Proc) error {
	return s.around(fmt.Sprintf("Update(%d)", p.ID), func() error { return s.DeleteMutator.Update(p) })
}
func (s *watchedStore) UpdateAndMutate(p store.Proc, m []store.Mutation) error {
	return s.around(fmt.Sprintf("UpdateAndMutate(%d)", p.ID), func() error { return s.DeleteMutator.UpdateAndMutate(p, m) })
}
func (s *watchedStore) Delete(ids []uint64) error {
	return s.around(fmt.Sprintf("Delete(%v)", ids), func() error { return s.DeleteMutator.Delete(ids) })
}
func (s *watchedStore) DeleteAndMutate(ids []uint64, m []store.Mutation) error {
	return s.around(fmt.Sprintf("DeleteAndMutate(%v)", ids), func() error { return s.DeleteMutator.DeleteAndMutate(ids, m) })
}

type watchedReaderStore struct {
	*watchedStore
	mem *store.MemStore
}

func (s watchedReaderStore) Proc(id uint64) ([]byte, bool) { return s.mem.Proc(id) }

// sameSummary compares two SummaryOnly Infos, times by instant.
func sameSummary(a, b Info) bool {
	if !a.Submitted.Equal(b.Submitted) || !a.Finished.Equal(b.Finished) || !a.Updated.Equal(b.Updated) {
		return false
	}
	a.Submitted, a.Finished, a.Updated = b.Submitted, b.Finished, b.Updated
	return reflect.DeepEqual(a, b)
}

// TestGetNeverLosesADescendant: once Get answered a member of a
// tree, it answers it at every store write that follows and at any moment
// a poller looks, through the tree's success, its rollback after it forgot
// children, an Abort, and an Ack of the root as it ends; and what it
// answered of a forgotten child while the tree ran is what it answers
// after the root's retirement.
func TestGetNeverLosesADescendant(t *testing.T) {
	const kids = 24
	type tc struct {
		name   string
		tree   func(name string) (Procedure, string) // root, gate
		abort  bool
		ack    bool
		wantSt State
	}
	cv := func(name string, failEnd, failKid, nested bool) (Procedure, string) {
		p := cvParent{Name: name, Kids: kids, Steps: 2, FailKid: -1, GateKid: kids - 1, FailEnd: failEnd, Forget: true, Covers: true}
		if failKid {
			p.FailKid = kids - 1
		}
		if nested {
			return &cvRoot{Parent: p}, p.childName(kids - 1)
		}
		return &p, p.childName(kids - 1)
	}
	cases := []tc{
		{name: "until-done parent succeeds", tree: func(n string) (Procedure, string) {
			return forgetTree(n, kids, 3), n + "/c" + fmt.Sprint(kids-1)
		}, wantSt: Success},
		{name: "until-done parent succeeds, root acked as it ends", tree: func(n string) (Procedure, string) {
			return forgetTree(n, kids, 3), n + "/c" + fmt.Sprint(kids-1)
		}, ack: true, wantSt: Success},
		{name: "covering root succeeds", tree: func(n string) (Procedure, string) { return cv(n, false, false, false) }, wantSt: Success},
		{name: "covering root fails at its end", tree: func(n string) (Procedure, string) { return cv(n, true, false, false) }, wantSt: RolledBack},
		{name: "covering parent fails at its end, nested", tree: func(n string) (Procedure, string) { return cv(n, true, false, true) }, wantSt: RolledBack},
		{name: "last kid fails after siblings forgotten", tree: func(n string) (Procedure, string) { return cv(n, false, true, false) }, wantSt: RolledBack},
		{name: "aborted while last kid waits", tree: func(n string) (Procedure, string) { return cv(n, false, false, false) }, abort: true, wantSt: RolledBack},
		{name: "aborted while last kid waits, nested, acked", tree: func(n string) (Procedure, string) { return cv(n, false, false, true) }, abort: true, ack: true, wantSt: RolledBack},
	}
	for _, c := range cases {
		for _, reads := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/reader=%v", c.name, reads), func(t *testing.T) {
				mem := store.NewMemStore()
				w := &getWatcher{}
				rs := &watchedStore{DeleteMutator: mem, w: w}
				var st store.Store = rs
				if reads {
					st = watchedReaderStore{rs, mem}
				}
				h := startExecutor(t, st, newDomain(), func(cfg *Config) { cfg.Registry = coverRegistry(t) })
				name := uniq("GW")
				root, gate := c.tree(name)
				id := h.submit(root, SubmitOptions{Owner: "bob"})
				w.set(h.x, id)
				stop := make(chan struct{})
				var wg sync.WaitGroup
				var acked atomic.Bool
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						w.check("poll")
						if c.ack && gateOpen(gate) && !acked.Load() {
							if i, err := h.x.Get(id); err == nil && i.State.Terminal() && h.x.Ack(id) == nil {
								acked.Store(true)
							}
						}
					}
				}()
				// Wait until every kid but the gated one ended and the
				// forgotten ones are forgotten.
				forgotten := kids - 1
				if strings.HasPrefix(c.name, "until") {
					forgotten-- // its kid 3 fails and is kept
				}
				waitForgotten(t, h, id, forgotten)
				// The poller has looked at the tree a few times while the
				// gate holds it (on a loaded machine it may not have, and
				// the tree ends in a few writes once the gate opens).
				testwait.For(t, 10*time.Second, "the reader polled", func() bool {
					w.mu.Lock()
					defer w.mu.Unlock()
					return w.checks >= 10
				})
				if c.abort {
					if err := h.x.Abort(id); err != nil {
						t.Fatal(err)
					}
				}
				openGate(gate)
				h.x.Wake(eventFor(gate))
				info := h.wait(id)
				w.check("after wait")
				close(stop)
				wg.Wait()
				if info.State != c.wantSt {
					t.Fatalf("root ended %s (%s), want %s", info.State, info.Error, c.wantSt)
				}
				w.mu.Lock()
				defer w.mu.Unlock()
				for _, e := range w.errs {
					t.Error(e)
				}
				if w.checks < 10 {
					t.Fatalf("only %d checks", w.checks)
				}
				compared := 0
				for cid, first := range w.sums {
					now, err := h.x.Get(cid)
					if err != nil {
						t.Errorf("child %d after retirement: %v", cid, err)
						continue
					}
					if !sameSummary(first, now) {
						t.Errorf("child %d while the tree ran:\n %+v\nafter retirement:\n %+v", cid, first, now)
					}
					compared++
				}
				if compared == 0 {
					t.Errorf("no forgotten child seen while its tree ran")
				}
				h.x.mu.Lock()
				nf, nr := len(h.x.forgetting), len(h.x.roots)
				h.x.mu.Unlock()
				if nf != 0 || nr != 0 {
					t.Errorf("after the tree ended: %d trees in forgetting, %d roots", nf, nr)
				}
			})
		}
	}
}

// waitForgotten waits until the tree of root forgot n members and no
// member is held by a worker after its end.
func waitForgotten(t *testing.T, h *harness, root uint64, n int) {
	t.Helper()
	testwait.For(t, 30*time.Second, fmt.Sprintf("%d members forgotten", n), func() bool {
		h.x.mu.Lock()
		defer h.x.mu.Unlock()
		r := h.x.roots[root]
		if r == nil || r.forgottenSums.count < n {
			return false
		}
		for _, m := range r.members {
			if m.running && m.state.Terminal() {
				return false
			}
		}
		return true
	})
}

// TestGetBelowFormat2NeverFindsThenLosesAForgottenChild: below record
// format 2 a finished root keeps no summaries, so Get does not answer a
// forgotten child from what its tree holds while it runs either: an
// answer would be lost again as the root finished, though the root is
// kept.
func TestGetBelowFormat2NeverFindsThenLosesAForgottenChild(t *testing.T) {
	const kids = 6
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) {
		c.Registry = forgetRegistry(t)
		c.RecordFormat = nil // format 1
	})
	name := uniq("F1")
	var forgotten uint64
	info := treeWhileLastChildWaits(t, h, forgetTree(name, kids, -1), name, kids, func(root uint64) {
		forgotten = childIDs(t, h.x, root)[0]
		if ci, err := h.x.Get(forgotten); !errors.Is(err, ErrNotFound) {
			t.Fatalf("while the tree runs: Get(%d) = %+v, %v; want ErrNotFound, as once its root finished", forgotten, ci, err)
		}
	})
	if info.State != Success {
		t.Fatalf("root ended %s", info.State)
	}
	if ci, err := h.x.Get(forgotten); !errors.Is(err, ErrNotFound) {
		t.Fatalf("root %d kept (%s); Get(%d) of its forgotten child: %+v, %v; want ErrNotFound", info.ID, info.State, forgotten, ci, err)
	}
}

// ilParent retries until done, forgets its children, and spawns them one
// a step; the last one, and the one at Hold if that is not 0, wait for
// the gate of their name (so that another tree can take ids in between).
type ilParent struct {
	Base
	Name string
	Kids int
	Hold int
	Next int
}

func (p *ilParent) RetryUntilDone() bool          { return true }
func (p *ilParent) ForgetChildrenOnSuccess() bool { return true }
func (p *ilParent) Rollback(*Context) error       { return nil }

func (p *ilParent) Execute(*Context) (Step, error) {
	if p.Next == p.Kids {
		return Done(), nil
	}
	c := &fgChild{Name: fmt.Sprintf("%s/c%d", p.Name, p.Next), Steps: 1, Gated: p.Next == p.Kids-1 || (p.Hold != 0 && p.Next == p.Hold)}
	p.Next++
	return Spawn(c), nil
}

// TestInterleavedForgettingTreesAnswerTheirOwnRoot: two forgetting trees run
// at once, their ids interleaved (one tree holds at its second child while
// the other spawns all of its own); Get of each forgotten child names its
// own root and owner, while both run.
func TestInterleavedForgettingTreesAnswerTheirOwnRoot(t *testing.T) {
	const kids = 60
	reg := forgetRegistry(t)
	reg.MustRegister("ilparent", 1, func() Procedure { return &ilParent{} })
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) { c.Registry = reg })
	na, nb := uniq("A"), uniq("B")
	a := h.submit(&ilParent{Name: na, Kids: kids, Hold: 1}, SubmitOptions{Owner: "a"})
	waitForgotten(t, h, a, 1) // its child 1 waits
	b := h.submit(&ilParent{Name: nb, Kids: kids}, SubmitOptions{Owner: "b"})
	waitForgotten(t, h, b, kids-1)
	hold := na + "/c1"
	openGate(hold)
	h.x.Wake(eventFor(hold))
	waitForgotten(t, h, a, kids-1)
	h.x.mu.Lock()
	ra, rb := h.x.roots[a].forgottenSums, h.x.roots[b].forgottenSums
	h.x.mu.Unlock()
	if !(ra.lo < rb.lo && rb.hi < ra.hi) {
		t.Fatalf("b's forgotten ids [%d,%d] are not within a's [%d,%d]: the trees did not interleave", rb.lo, rb.hi, ra.lo, ra.hi)
	}
	for _, tc := range []struct {
		root  uint64
		owner string
	}{{a, "a"}, {b, "b"}} {
		for i, c := range childIDs(t, h.x, tc.root) {
			if i == kids-1 {
				continue
			}
			ci, err := h.x.Get(c)
			if err != nil || !ci.SummaryOnly || ci.RootID != tc.root || ci.ParentID != tc.root || ci.Owner != tc.owner {
				t.Fatalf("Get(%d) of root %d's child: %+v, %v", c, tc.root, ci, err)
			}
		}
	}
	for _, n := range []string{na, nb} {
		g := n + "/c" + fmt.Sprint(kids-1)
		openGate(g)
		h.x.Wake(eventFor(g))
	}
	h.wait(a)
	h.wait(b)
}
