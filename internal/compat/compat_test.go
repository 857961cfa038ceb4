package compat_test

import (
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// releases are the versions whose files testdata holds, each written by
// that release's own binary (golden.sh). A release adds its version here
// and its folder beside the others; every test below reads them all.
var releases = []string{"v0.1.0"}

// golden is one release's files, and what the release itself said of
// them (its --json listings just before it stopped).
type golden struct {
	version string
	dir     string
	procs   []listedProc // procs.json
	roles   roles        // roles.json
}

// listedProc is a procedure as a release's 'proc list --all --json'
// printed it.
type listedProc struct {
	ID       uint64   `json:"id"`
	ParentID uint64   `json:"parent_id"`
	RootID   uint64   `json:"root_id"`
	Type     string   `json:"type"`
	State    string   `json:"state"`
	Owner    string   `json:"owner"`
	Nonce    string   `json:"nonce"`
	Result   *string  `json:"result"`
	Error    *string  `json:"error"`
	Children []uint64 `json:"children"`
}

// roles names the procedures golden.sh left in flight.
type roles struct {
	PendingTableCreate uint64 `json:"pending_table_create"`
	HeldLock           uint64 `json:"held_lock"`
	WaitingLock        uint64 `json:"waiting_lock"`
	SleepMidway        uint64 `json:"sleep_midway"`
	SnapshotFiller     uint64 `json:"snapshot_filler"`
}

// eachRelease runs fn on every release's files, as a subtest named after
// the version.
func eachRelease(t *testing.T, fn func(t *testing.T, g *golden)) {
	t.Helper()
	for _, v := range releases {
		t.Run(v, func(t *testing.T) {
			g := &golden{version: v, dir: filepath.Join("testdata", v)}
			var list struct {
				Procedures []listedProc `json:"procedures"`
			}
			readJSON(t, g.path("procs.json"), &list)
			g.procs = list.Procedures
			readJSON(t, g.path("roles.json"), &g.roles)
			fn(t, g)
		})
	}
}

func (g *golden) path(elem ...string) string {
	return filepath.Join(append([]string{g.dir}, elem...)...)
}

// proc is the listed procedure id; the test fails if the release did not
// list it.
func (g *golden) proc(t *testing.T, id uint64) listedProc {
	t.Helper()
	for _, p := range g.procs {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("%s: procedure %d not in procs.json", g.version, id)
	return listedProc{}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// copyDir copies src into a new temporary directory: the tests open
// stores that write (a WAL rolls a segment, bolt its freelist), and
// testdata must stay as the release wrote it.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// walDir is the one local WAL directory of the FSM directory fsmDir.
func walDir(t *testing.T, fsmDir string) string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(fsmDir, "wal-*"))
	if err != nil || len(dirs) != 1 {
		t.Fatalf("%s: want one wal-* directory, got %v (%v)", fsmDir, dirs, err)
	}
	return dirs[0]
}

// registry holds every procedure type a master registers.
func registry(t *testing.T) *procedure.Registry {
	t.Helper()
	reg := procedure.NewRegistry()
	if err := diag.Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := domain.Register(reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

// openFSM loads a copy of the release's local WAL with the current FSM.
func openFSM(t *testing.T, g *golden) *raftfsm.FSM {
	t.Helper()
	f, err := raftfsm.NewFSM(raftfsm.Config{Dir: copyDir(t, g.path("datadir", "fsm")), WAL: store.WALConfig{NoSync: true}})
	if err != nil {
		t.Fatalf("%s: current FSM on the release's local WAL: %v", g.version, err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// checkProcs compares the procedures a store holds, decoded by the current
// code, with the release's own listing of them: the same ids, and for
// each the same type, state, family, owner, nonce, result, error and
// (for a finished root) children. skip names procedures left out of
// the comparison.
func checkProcs(t *testing.T, version string, stored []procedure.Info, listed []listedProc, skip ...uint64) {
	t.Helper()
	byID := map[uint64]procedure.Info{}
	for _, info := range stored {
		byID[info.ID] = info
	}
	var want []uint64
	for _, lp := range listed {
		if slices.Contains(skip, lp.ID) {
			continue
		}
		want = append(want, lp.ID)
		info, ok := byID[lp.ID]
		if !ok {
			t.Errorf("%s: procedure %d (%s %s) listed by the release, not read by the current code", version, lp.ID, lp.Type, lp.State)
			continue
		}
		state, err := procedure.ParseState(lp.State)
		if err != nil {
			t.Errorf("%s: procedure %d: the release's state %q does not parse: %v", version, lp.ID, lp.State, err)
		}
		if info.Type != lp.Type || info.State != state || info.ParentID != lp.ParentID || info.RootID != lp.RootID ||
			info.Owner != lp.Owner || info.Nonce != lp.Nonce || info.Version != 1 {
			t.Errorf("%s: procedure %d read as %s v%d %v parent %d root %d owner %q nonce %q; the release listed %s %s parent %d root %d owner %q nonce %q",
				version, lp.ID, info.Type, info.Version, info.State, info.ParentID, info.RootID, info.Owner, info.Nonce,
				lp.Type, lp.State, lp.ParentID, lp.RootID, lp.Owner, lp.Nonce)
		}
		if got, want := string(info.Result), deref(lp.Result); got != want {
			t.Errorf("%s: procedure %d result %q, the release listed %q", version, lp.ID, got, want)
		}
		if got, want := info.Error, deref(lp.Error); got != want {
			t.Errorf("%s: procedure %d error %q, the release listed %q", version, lp.ID, got, want)
		}
		if info.ParentID == 0 && state.Terminal() && !slices.Equal(info.Children, lp.Children) && len(lp.Children) > 0 {
			t.Errorf("%s: finished root %d children %v, the release listed %v", version, lp.ID, info.Children, lp.Children)
		}
	}
	var got []uint64
	for id := range byID {
		if !slices.Contains(skip, id) {
			got = append(got, id)
		}
	}
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	if !slices.Equal(got, want) {
		t.Errorf("%s: the current code reads procedures %v, the release listed %v", version, got, want)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestGoldenWAL loads the release's local WAL (store/) segments with the
// current store, then with the current FSM, and checks that every
// procedure the release listed comes back as it listed it.
func TestGoldenWAL(t *testing.T) {
	eachRelease(t, func(t *testing.T, g *golden) {
		w, err := store.OpenWAL(store.WALConfig{Dir: walDir(t, copyDir(t, g.path("datadir", "fsm"))), NoSync: true})
		if err != nil {
			t.Fatalf("%s: open the release's WAL: %v", g.version, err)
		}
		defer w.Close()
		const reserved = uint64(1) << 63 // the FSM's own images (raftfsm/fsm.go)
		var procs, images int
		var stored []procedure.Info
		info, err := w.Load(func(p store.Proc) error {
			if p.ID >= reserved {
				images++
				return nil
			}
			procs++
			pi, err := procedure.DecodeInfo(p.Data)
			if err != nil {
				t.Errorf("%s: WAL record of procedure %d: %v", g.version, p.ID, err)
				return nil
			}
			if pi.ID != p.ID {
				t.Errorf("%s: WAL record under id %d decodes as procedure %d", g.version, p.ID, pi.ID)
			}
			stored = append(stored, pi)
			return nil
		})
		if err != nil {
			t.Fatalf("%s: load the release's WAL: %v", g.version, err)
		}
		if len(info.Corruptions) != 0 {
			t.Fatalf("%s: the release's WAL loads with damage: %v", g.version, info.Corruptions)
		}
		if info.Live != procs+images || procs == 0 || images == 0 {
			t.Fatalf("%s: WAL: %d live records, %d procedures, %d FSM images", g.version, info.Live, procs, images)
		}
		checkProcs(t, g.version, stored, g.procs)
		t.Logf("%s: WAL: %d procedures, %d FSM images, %d records", g.version, procs, images, info.Records)

		// Of the procedures in flight, each has run and so stacked its
		// steps, and every child is on its parent's side of the tree.
		byID := map[uint64]procedure.Info{}
		for _, pi := range stored {
			byID[pi.ID] = pi
		}
		for _, pi := range stored {
			if pi.State.Terminal() && pi.ParentID == 0 {
				continue
			}
			if pi.StackDepth == 0 && pi.State != procedure.Runnable {
				t.Errorf("%s: procedure %d (%s %v) in flight with an empty stack", g.version, pi.ID, pi.Type, pi.State)
			}
			if pi.ParentID != 0 {
				parent, ok := byID[pi.ParentID]
				if !ok || parent.State.Terminal() || pi.RootID != parent.RootID {
					t.Errorf("%s: child %d of %d (root %d): parent %+v", g.version, pi.ID, pi.ParentID, pi.RootID, parent)
				}
			}
		}
		pending := g.roles.PendingTableCreate
		var kids int
		for _, pi := range stored {
			if pi.ParentID == pending {
				kids++
				if pi.Type != "TransitRegionState" {
					t.Errorf("%s: child %d of the pending create is a %s", g.version, pi.ID, pi.Type)
				}
			}
		}
		if kids != 4 {
			t.Errorf("%s: the pending create (4 regions) has %d children in the WAL", g.version, kids)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}

		// The FSM over the same WAL: its state, and the index the node
		// would resume Raft from.
		f := openFSM(t, g)
		if f.LoadedIndex() == 0 {
			t.Fatalf("%s: the current FSM loaded the release's WAL at index 0", g.version)
		}
		fsmInfos, err := procedure.StoredInfos(f.Procs)
		if err != nil {
			t.Fatal(err)
		}
		checkProcs(t, g.version, fsmInfos, g.procs)
	})
}
