package snapdir

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

func TestNameParsesBack(t *testing.T) {
	for _, tc := range []struct {
		id    string
		at    time.Time
		index uint64
		want  string
	}{
		{"c0ffee", t0, 42, "baton-c0ffee-20250304T050607Z-42.snap"},
		{"", t0.Add(999 * time.Millisecond), 0, "baton-nocluster-20250304T050607Z-0.snap"},
		{"abc", t0.In(time.FixedZone("x", 3600)), 7, "baton-abc-20250304T050607Z-7.snap"},
	} {
		got := Name(tc.id, tc.at, tc.index)
		if got != tc.want {
			t.Errorf("Name(%q, %v, %d) = %q, want %q", tc.id, tc.at, tc.index, got, tc.want)
		}
		f, ok := Parse(got)
		id := tc.id
		if id == "" {
			id = NoCluster
		}
		if !ok || f.ClusterID != id || !f.At.Equal(tc.at.Truncate(time.Second)) || f.Index != tc.index || f.Seq != 0 {
			t.Errorf("Parse(%q) = %+v, %v", got, f, ok)
		}
	}
	if f, ok := Parse("baton-abc-20250304T050607Z-7.3.snap"); !ok || f.Seq != 3 || f.Index != 7 {
		t.Errorf("Parse of a sequenced name = %+v, %v", f, ok)
	}
	for _, bad := range []string{"baton-abc-20250304T050607Z-7.snap.tmp", ".baton-snapshot.tmp-123", "baton-a-b-20250304T050607Z-7.snap",
		"baton-abc-20250304T050607Z-7.0.snap", "baton-abc-20251304T050607Z-7.snap", "notes.txt", "baton-abc-20250304T050607Z-x.snap"} {
		if _, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) accepted a name outside the pattern", bad)
		}
	}
}

func touch(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(name), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// Retention keeps the newest retain files of the pattern, never the one
// just written even when its clock says it is the oldest, and nothing
// else in the directory.
func TestPruneKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	for i := range 6 {
		touch(t, dir, Name("c1", t0.Add(time.Duration(i)*time.Hour), uint64(10+i)))
	}
	touch(t, dir, "notes.txt")
	touch(t, dir, "baton-c1-20250304T050607Z-1.snap.bak")
	if err := os.Mkdir(filepath.Join(dir, Name("c1", t0.Add(-time.Hour), 1)), 0o700); err != nil {
		t.Fatal(err)
	}
	removed, err := Prune(dir, 3, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 3 || filepath.Base(removed[0]) != Name("c1", t0, 10) {
		t.Fatalf("removed %v", removed)
	}
	files, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, f := range files {
		got = append(got, f.Index)
	}
	if !slices.Equal(got, []uint64{13, 14, 15}) {
		t.Fatalf("kept indexes %v, want the newest three", got)
	}
	for _, n := range []string{"notes.txt", "baton-c1-20250304T050607Z-1.snap.bak", Name("c1", t0.Add(-time.Hour), 1)} {
		if !slices.Contains(names(t, dir), n) {
			t.Errorf("%s, not a snapshot file of the pattern, was removed", n)
		}
	}

	// A file written now whose clock is behind the others' is kept.
	keep := touch(t, dir, Name("c1", t0.Add(-2*time.Hour), 16))
	removed, err = Prune(dir, 1, keep)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 3 || slices.Contains(removed, keep) {
		t.Fatalf("removed %v, keep %s", removed, keep)
	}
	if files, _ := List(dir); len(files) != 1 || files[0].Path != keep {
		t.Fatalf("left %+v", files)
	}
	if _, err := Prune(dir, 0, ""); err == nil {
		t.Fatal("retain 0 accepted")
	}
}

// Create names the file from the header fill returns, and a second
// snapshot of the same second and index gets a name of its own.
func TestCreateNeverReplaces(t *testing.T) {
	dir := t.TempDir()
	h := Header{ClusterID: "c1", At: t0.Add(300 * time.Millisecond), Index: 9}
	var paths []string
	for i, content := range []string{"first", "second", "third"} {
		p, err := Create(dir, 0o600, func(f *os.File) (Header, error) {
			_, err := f.WriteString(content)
			return h, err
		})
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(p); string(b) != content {
			t.Fatalf("%s holds %q, want %q", p, b, content)
		}
		f, ok := Parse(filepath.Base(p))
		if !ok || f.Seq != i || f.Index != 9 || !f.At.Equal(t0) {
			t.Fatalf("%s parses as %+v, %v", p, f, ok)
		}
		if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v", p, st.Mode().Perm())
		}
		paths = append(paths, p)
	}
	for i, p := range paths {
		if b, _ := os.ReadFile(p); string(b) != []string{"first", "second", "third"}[i] {
			t.Fatalf("%s was replaced: %q", p, b)
		}
	}
	files, _ := List(dir)
	if len(files) != 3 || files[2].Path != paths[2] {
		t.Fatalf("listing %+v", files)
	}
	if n := len(names(t, dir)); n != 3 {
		t.Fatalf("%d entries in the directory, want the three snapshots: %v", n, names(t, dir))
	}
}

// A fill that fails (a signal, a bad read-back) leaves the directory as
// it was.
func TestCreateFailedLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	touch(t, dir, "notes.txt")
	boom := errors.New("interrupted")
	_, err := Create(dir, 0o600, func(f *os.File) (Header, error) {
		f.WriteString("half")
		return Header{}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"notes.txt"}) {
		t.Fatalf("left %v", got)
	}
	if _, err := Create(filepath.Join(dir, "missing"), 0o600, nil); err == nil {
		t.Fatal("a missing directory accepted")
	}
}
