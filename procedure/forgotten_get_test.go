package procedure

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/baton-dev/baton/store"
)

// forgetTree is a root that forgets its kids children as they succeed;
// the child at failKid fails, is rolled back alone and kept until the
// root ends; the last child waits for its gate.
func forgetTree(name string, kids, failKid int) *fgParent {
	return &fgParent{Name: name, Kids: kids, Steps: 2, FailKid: failKid, Forget: true, GateLast: true}
}

// checkSummarisedChild fails unless Get answers child c of root, ended
// in state, from the summary the tree keeps of it.
func checkSummarisedChild(t *testing.T, x *Executor, c, root uint64, state State, owner string) {
	t.Helper()
	ci, err := x.Get(c)
	if err != nil {
		t.Fatalf("Get of child %d: %v", c, err)
	}
	if !ci.SummaryOnly || ci.State != state || ci.ParentID != root || ci.RootID != root ||
		ci.Owner != owner || ci.Type != "fgchild" || ci.Updated.IsZero() || len(ci.Children) != 0 {
		t.Fatalf("Get of child %d: %+v; want the summary of a %s fgchild of root %d, owner %q",
			c, ci, state, root, owner)
	}
}

// TestGetFindsAForgottenChildWhileItsTreeRuns: a child its parent forgot
// as it succeeded has left the executor's table and the store, but its
// tree keeps its summary for the root's record; Get answers from that
// summary while the tree still runs, not only once the root has retired.
func TestGetFindsAForgottenChildWhileItsTreeRuns(t *testing.T) {
	const kids, failKid, owner = 40, 5, "alice"
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) { c.Registry = forgetRegistry(t) })
	name := uniq("P")
	var checked int
	info := treeWhileLastChildWaitsAs(t, h, forgetTree(name, kids, failKid), SubmitOptions{Owner: owner}, name, kids, func(root uint64) {
		ids := childIDs(t, h.x, root)
		if len(ids) != kids {
			t.Fatalf("%d children listed, want %d", len(ids), kids)
		}
		for i, c := range ids {
			switch i {
			case failKid:
				if ci, err := h.x.Get(c); err != nil || ci.SummaryOnly || ci.State != RolledBack {
					t.Fatalf("failed child %d: %+v, %v; want it live and ROLLEDBACK", c, ci, err)
				}
			case kids - 1:
				if ci, err := h.x.Get(c); err != nil || ci.SummaryOnly || ci.State != Waiting {
					t.Fatalf("gated child %d: %+v, %v; want it live and WAITING", c, ci, err)
				}
			default:
				checkSummarisedChild(t, h.x, c, root, Success, owner)
				checked++
			}
		}
		// An id past every procedure is not taken for a forgotten one.
		if _, err := h.x.Get(ids[kids-1] + 1000); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get of an id never handed out: %v; want ErrNotFound", err)
		}
	})
	if info.State != Success {
		t.Fatalf("root ended %s (%s)", info.State, info.Error)
	}
	if checked != kids-2 {
		t.Fatalf("%d forgotten children checked, want %d", checked, kids-2)
	}
}

// getOnDeleteStore asks the executor, from within each Delete (made by a
// finished root's end after it let go of its members, before it is
// retired), for every procedure of the tree it watches.
type getOnDeleteStore struct {
	store.DeleteMutator // not a store.Reader
	mu                  sync.Mutex
	x                   *Executor
	ids                 []uint64 // the tree's descendants, once known
	calls               int
	errs                []error
}

func (s *getOnDeleteStore) watch(x *Executor, ids []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.x, s.ids = x, ids
}

func (s *getOnDeleteStore) Delete(ids []uint64) error {
	s.mu.Lock()
	x, watched := s.x, s.ids
	s.mu.Unlock()
	if x != nil {
		var errs []error
		for _, id := range watched {
			if _, err := x.Get(id); err != nil {
				errs = append(errs, fmt.Errorf("during the delete of %v: %w", ids, err))
			}
		}
		s.mu.Lock()
		s.calls++
		s.errs = append(s.errs, errs...)
		s.mu.Unlock()
	}
	return s.DeleteMutator.Delete(ids)
}

// readerStore is a MemStore that reads its records back (store.Reader);
// getOnDeleteStore alone hides Proc, so the executor keeps each finished
// root's last record itself.
type readerStore struct {
	*getOnDeleteStore
	mem *store.MemStore
}

func (s readerStore) Proc(id uint64) ([]byte, bool) { return s.mem.Proc(id) }

// TestGetFindsEveryDescendantAsItsRootFinishes: a finished root shows
// SUCCESS once its last record is written; then it lets go of its members
// and deletes the records of those it held (here the child that failed),
// and only then is it retired. Get of any child, forgotten as it
// succeeded or held until the end, answers in between, with a store that
// reads records back and with one that does not.
func TestGetFindsEveryDescendantAsItsRootFinishes(t *testing.T) {
	for _, reads := range []bool{true, false} {
		t.Run(fmt.Sprintf("store reads back %v", reads), func(t *testing.T) {
			const kids, failKid = 30, 3
			mem := store.NewMemStore()
			hook := &getOnDeleteStore{DeleteMutator: mem}
			var st store.Store = hook
			if reads {
				st = readerStore{hook, mem}
			}
			h := startExecutor(t, st, newDomain(), func(c *Config) { c.Registry = forgetRegistry(t) })
			name := uniq("P")
			info := treeWhileLastChildWaits(t, h, forgetTree(name, kids, failKid), name, kids, func(root uint64) {
				hook.watch(h.x, childIDs(t, h.x, root))
			})
			if info.State != Success {
				t.Fatalf("root ended %s (%s)", info.State, info.Error)
			}
			hook.mu.Lock()
			defer hook.mu.Unlock()
			if hook.calls == 0 {
				t.Fatal("no delete was made once the tree was watched; the window is not tested")
			}
			for _, err := range hook.errs {
				t.Error(err)
			}
			for i, c := range hook.ids {
				state := Success
				if i == failKid {
					state = RolledBack
				}
				checkSummarisedChild(t, h.x, c, info.ID, state, "")
			}
		})
	}
}
