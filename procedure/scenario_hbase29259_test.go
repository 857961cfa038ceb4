package procedure

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// TestScenarioHBASE29259UninitializedChildAfterCrash replays HBASE-29259
// (HBase ProcV2): a parent's step adds children, and the children reach the
// procedure store before they are fully set up (no state or stack yet, not
// counted in the parent's child count). The master dies there; on reload
// the executor meets a child it cannot run, or a parent whose child count
// does not match what the store holds, and the parent hangs or fails.
//
// Baton holds the line in Executor.spawn: a child's entry is built whole
// (newEntry: RUNNABLE, its type and state encoded) before anything is
// written, and the parent, now WAITING with its latch raised, goes to the
// store in the same atomic Insert as its children, so no store holds a
// child without the parent's spawn or the reverse (store.WAL writes the
// Insert as one checksummed record, and a crash inside it leaves a torn
// tail that Load truncates). On load, Executor.load recomputes each
// parent's latch from the children the store holds rather than trusting a
// count. The test crashes the executor at every store write of a tree whose
// root spawns four children, two of which spawn in turn (one of those a
// state machine whose child spawns again), on a MemStore and on a real
// WAL; it also cuts the WAL inside each spawn's record, as a process dying
// in the middle of write(2) would. Each time it restarts on what was stored
// and checks the tree: every procedure ran under one id (no child spawned
// twice, none lost), every step ran, at most one step ran twice (the one
// whose outcome the crash lost), every procedure was stored as ended once,
// the root's result names every child's result, and only the root is left
// in the store.
//
// A store that broke Insert's atomicity (or was edited) could still hold
// children beside their parent's record of before the spawn. Loading that
// ran the parent's spawning step again, and every child twice, silently:
// the torn-order subtest builds the shape by hand and found it. Executor's
// checkTree (load.go) now holds such a tree and reports it, as it does an
// orphan's, and runs none of it.
//
// Reintroducing the defect — in Executor.spawn, writing the children with
// their own Insert and then the parent with an Update, so that a crash
// between the two leaves the children without the spawn that made them —
// makes this test fail with (the load check removed too, as before the fix):
// "crash after write 3: root ended SUCCESS with "root(a(),b(b0(),b1(b1x())),
// c(c0(),c1()),d(),a(),b(b0(),b1(b1x())),c(c0(),c1()),d())" ... want SUCCESS
// with "root(a(),b(b0(),b1(b1x())),c(c0(),c1()),d())"" (the restarted root
// spawned all four children again); and with the load check in place:
// "crash after write 3: load problem: proc 1: tree held: proc 2 is live but
// its parent 1 is stored RUNNABLE, as before the spawn that made it".
// Removing that check alone fails the torn-order subtest with "held map[],
// want the root 1 and its 4 children".
func TestScenarioHBASE29259UninitializedChildAfterCrash(t *testing.T) {
	spec := treeSpec{Name: "root", Steps: 3, SpawnAt: 1, Kids: []treeSpec{
		{Name: "a", Steps: 2, SpawnAt: -1},
		{Name: "b", Steps: 3, SpawnAt: 0, Kids: []treeSpec{
			{Name: "b0", Steps: 1, SpawnAt: -1},
			{Name: "b1", Steps: 3, SpawnAt: 1, SM: true, Kids: []treeSpec{
				{Name: "b1x", Steps: 2, SpawnAt: -1},
			}},
		}},
		{Name: "c", Steps: 2, SpawnAt: 0, SM: true, Kids: []treeSpec{
			{Name: "c0", Steps: 1, SpawnAt: -1},
			{Name: "c1", Steps: 1, SpawnAt: -1},
		}},
		{Name: "d", Steps: 1, SpawnAt: -1},
	}}
	kinds := []struct {
		name string
		// open opens the store of dir (the same one again after a crash).
		open  func(t *testing.T, dir string) store.Store
		close func(store.Store)
		live  func(t *testing.T, dir string, st store.Store) int
	}{
		{"mem",
			func(t *testing.T, dir string) store.Store { return memOf(dir) },
			func(store.Store) {},
			func(t *testing.T, dir string, st store.Store) int { return st.(*store.MemStore).Len() }},
		{"wal",
			func(t *testing.T, dir string) store.Store { return openTestWAL(t, dir, true) },
			func(st store.Store) { _ = st.Close() },
			func(t *testing.T, dir string, st store.Store) int {
				st.(*store.WAL).Close()
				w := openTestWAL(t, dir, true)
				defer w.Close()
				info, err := w.Load(func(store.Proc) error { return nil })
				if err != nil {
					t.Fatal(err)
				}
				return info.Live
			}},
	}
	t.Run("torn-order", func(t *testing.T) { tornOrder29259(t, spec) })
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			// A clean run: how many writes, and which ones spawn.
			dir := t.TempDir()
			st := k.open(t, dir)
			var spawns []int
			fs := newFaultStore(st, nil)
			fs.insert = func(before bool, n int) {
				if before {
					spawns = append(spawns, n)
				}
			}
			env := newTreeEnv()
			h := startExecutor(t, fs, nil, treeConfig(env))
			id := h.submit(spec.proc(), SubmitOptions{Nonce: "root"})
			if info := h.wait(id); info.State != Success || string(info.Result) != spec.want() {
				t.Fatalf("clean run ended %s with %q (error %q), want SUCCESS with %q", info.State, info.Result, info.Error, spec.want())
			}
			_ = h.x.Stop(context.Background())
			k.close(st)
			total := fs.written()
			if len(spawns) != 4 {
				t.Fatalf("clean run spawned at writes %v, want 4 spawns", spawns)
			}
			for n := 0; n <= total; n++ {
				t.Run(fmt.Sprint("crash-after-", n), func(t *testing.T) {
					dir := t.TempDir()
					st := k.open(t, dir)
					env := newTreeEnv()
					fs1 := newFaultStore(st, crashAfter(n))
					id := runToCrash(t, fs1, env, spec)
					k.close(st)
					st = k.open(t, dir)
					finishAfterCrash(t, st, fs1, env, spec, id, fmt.Sprintf("crash after write %d", n))
					if got := k.live(t, dir, st); got != 1 {
						t.Fatalf("store holds %d procedures after the tree ended, want only the root", got)
					}
				})
			}
			if k.name != "wal" {
				return
			}
			// The process dies inside the write(2) of a spawn's record: the
			// WAL is cut at offsets inside it.
			for _, sw := range spawns {
				t.Run(fmt.Sprint("torn-spawn-", sw), func(t *testing.T) {
					dir := t.TempDir()
					st := k.open(t, dir)
					env := newTreeEnv()
					fs1 := newFaultStore(st, crashAfter(sw))
					var seg string
					var from, to int64
					// The world as the process left it, dying inside the
					// write: nothing after the spawn ran.
					var world *treeEnv
					fs1.insert = func(before bool, n int) {
						if n != sw {
							return
						}
						p, size := newestSegment(t, dir)
						if before {
							seg, from, world = p, size, env.clone()
						} else if p == seg {
							to = size
						}
					}
					id := runToCrash(t, fs1, env, spec)
					k.close(st)
					if to <= from+1 {
						t.Fatalf("spawn write %d: no record seen in %s (%d..%d)", sw, seg, from, to)
					}
					image, err := os.ReadFile(seg)
					if err != nil {
						t.Fatal(err)
					}
					stride := max((to-from)/12, 1)
					for cut := from + 1; cut < to; cut += stride {
						tdir := t.TempDir()
						copyDir(t, dir, tdir)
						tseg := filepath.Join(tdir, filepath.Base(seg))
						if err := os.WriteFile(tseg, image[:cut], 0o644); err != nil {
							t.Fatal(err)
						}
						tenv := world.clone()
						st := k.open(t, tdir)
						if li := finishAfterCrash(t, st, fs1, tenv, spec, id, fmt.Sprintf("crash after write %d", sw)); len(li.Corruptions) == 0 {
							t.Fatalf("cut at %d (record %d..%d): the WAL loaded whole, so the cut missed the record", cut, from, to)
						}
						if got := k.live(t, tdir, st); got != 1 {
							t.Fatalf("cut at %d: store holds %d procedures after the tree ended, want only the root", cut, got)
						}
					}
				})
			}
		})
	}
}

// tornOrder29259 builds the shape no store of Baton's writes (Insert is
// atomic): the root's children in the store beside the root's record of
// before its spawn. Loading it must not run anything: the tree is held and
// reported, every record kept, as for an orphan.
func tornOrder29259(t *testing.T, spec treeSpec) {
	before, after := store.NewMemStore(), store.NewMemStore()
	env := newTreeEnv()
	// Writes: the root's insert, its step 0, then the spawn (write 3).
	id := runToCrash(t, newFaultStore(before, crashAfter(2)), env, spec)
	runToCrash(t, newFaultStore(after, crashAfter(3)), newTreeEnv(), spec)
	kids := 0
	if _, err := after.Load(func(p store.Proc) error {
		var r record
		if err := r.unmarshal(p.Data); err != nil {
			return err
		}
		if r.parent == 0 {
			return nil
		}
		kids++
		return before.Update(p)
	}); err != nil {
		t.Fatal(err)
	}
	if kids != len(spec.Kids) {
		t.Fatalf("the spawn stored %d children, want %d", kids, len(spec.Kids))
	}
	world := env.clone()
	h := startExecutor(t, newFaultStore(before, nil), nil, treeConfig(env))
	held := map[uint64]bool{}
	for _, p := range h.x.Problems() {
		if p.RootID != id {
			t.Fatalf("problem outside the torn tree: %+v", p)
		}
		held[p.ID] = true
	}
	if len(held) != 1+len(spec.Kids) {
		t.Fatalf("held %v, want the root %d and its %d children", held, id, len(spec.Kids))
	}
	if _, err := h.x.Submit(spec.proc(), SubmitOptions{Nonce: "root"}); !errors.Is(err, ErrHeld) {
		t.Fatalf("resubmitting the held root: %v, want ErrHeld", err)
	}
	_ = h.x.Stop(context.Background())
	if !reflect.DeepEqual(env.execs, world.execs) {
		t.Fatalf("steps ran in a held tree: %v, before the load %v", env.execs, world.execs)
	}
	if before.Len() != 1+len(spec.Kids) {
		t.Fatalf("store holds %d records, want all %d kept", before.Len(), 1+len(spec.Kids))
	}
}

// memOf keeps one MemStore per test directory: a crash keeps it, as a
// disk keeps a WAL.
var memStores = map[string]*store.MemStore{}

func memOf(dir string) *store.MemStore {
	if m := memStores[dir]; m != nil {
		return m
	}
	m := store.NewMemStore()
	memStores[dir] = m
	return m
}

func treeConfig(env *treeEnv) func(*Config) {
	return func(c *Config) {
		c.Env, c.Workers = env, 1
		registerTree(c.Registry)
	}
}

// runToCrash submits spec's tree on fs and runs it until the store fails
// or the tree ends; it returns the root's id, 0 if the submission was not
// acknowledged.
func runToCrash(t *testing.T, fs *faultStore, env *treeEnv, spec treeSpec) uint64 {
	t.Helper()
	h := startExecutor(t, fs, nil, treeConfig(env))
	id, err := h.x.Submit(spec.proc(), SubmitOptions{Nonce: "root"})
	if err != nil {
		id = 0 // the crash came first: the client submits again
	}
	testwait.For(t, 10*time.Second, "crash or end", func() bool {
		if h.x.Err() != nil {
			return true
		}
		info, err := h.x.Get(id)
		return err == nil && info.State.Terminal()
	})
	_ = h.x.Stop(context.Background())
	return id
}

// clone copies what env counted so far: a run resumed from a copy of the
// store resumes from a copy of the world too.
func (v *treeEnv) clone() *treeEnv {
	v.mu.Lock()
	defer v.mu.Unlock()
	c := newTreeEnv()
	for k, n := range v.execs {
		c.execs[k] = n
	}
	for k, ids := range v.ids {
		c.ids[k] = map[uint64]bool{}
		for id := range ids {
			c.ids[k][id] = true
		}
	}
	return c
}

// newestSegment is the WAL segment being written, and its size.
func newestSegment(t *testing.T, dir string) (string, int64) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "pv2-*.log"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no WAL segment in %s: %v", dir, err)
	}
	sort.Strings(segs)
	fi, err := os.Stat(segs[len(segs)-1])
	if err != nil {
		t.Fatal(err)
	}
	return segs[len(segs)-1], fi.Size()
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
