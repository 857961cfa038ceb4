package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/snapdir"
	"github.com/baton-dev/baton/proto/adminpb"
)

// fixedSnapshotServer serves the same snapshot file to every save: two
// saves get the same cluster id, time and index, as two saves of a quiet
// cluster within one second do.
type fixedSnapshotServer struct {
	adminpb.UnimplementedAdminServer
	file []byte
}

func (s *fixedSnapshotServer) SnapshotSave(_ *adminpb.SnapshotSaveRequest, stream grpc.ServerStreamingServer[adminpb.SnapshotChunk]) error {
	for b := s.file; len(b) > 0; {
		n := min(len(b), 64<<10)
		if err := stream.Send(&adminpb.SnapshotChunk{Data: b[:n]}); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func fixedSnapshot(t *testing.T, file []byte) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	adminpb.RegisterAdminServer(gs, &fixedSnapshotServer{file: file})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

func dirEntries(t *testing.T, dir string) []string {
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

// save --dir names the file as the scheduled snapshots are named, never
// replaces one of the same second and index, and --retain keeps the
// newest N of the pattern and nothing else.
func TestSnapshotSaveDirRetains(t *testing.T) {
	good, _ := goodSnapshotFile(t)
	addr := fixedSnapshot(t, good)
	dir := t.TempDir()
	old := []string{
		snapdir.Name("abc", time.Unix(-3600, 0), 1), // older than the served file's time (0)
		snapdir.Name("abc", time.Unix(-1800, 0), 2),
		snapdir.Name("abc", time.Unix(-60, 0), 3),
	}
	for _, n := range append([]string{"notes.txt", "baton-abc.snap.bak"}, old...) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	save := func() snapshotSaveJSON {
		t.Helper()
		code, stdout, stderr := runCLI(t, nil, "snapshot", "save", "--dir", dir, "--retain", "2", "--addr", addr, "--json")
		if code != 0 {
			t.Fatalf("save --dir: exit %d: %s %s", code, stdout, stderr)
		}
		var doc snapshotSaveJSON
		var raw map[string]any
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil || json.Unmarshal([]byte(stdout), &raw) != nil {
			t.Fatalf("--json: %v: %s", err, stdout)
		}
		if _, ok := raw["removed"]; !ok || doc.Removed == nil {
			t.Fatalf("--json has no removed: %s", stdout)
		}
		return doc
	}

	first := save()
	f, ok := snapdir.Parse(filepath.Base(first.File))
	if filepath.Dir(first.File) != dir || !ok || f.ClusterID != "abc" || f.Index != first.Index || f.Index != 3 || f.Seq != 0 ||
		!f.At.Equal(time.UnixMilli(0)) {
		t.Fatalf("saved as %s (%+v, %v), header %+v", first.File, f, ok, first.snapshotInspectJSON)
	}
	wantRemoved := []string{filepath.Join(dir, old[0]), filepath.Join(dir, old[1])}
	if !slices.Equal(*first.Removed, wantRemoved) {
		t.Fatalf("removed %v, want %v", *first.Removed, wantRemoved)
	}
	if st, err := os.Stat(first.File); err != nil || st.Mode().Perm() != snapshotFileMode || st.Size() != first.Bytes || st.Size() != int64(len(good)) {
		t.Fatalf("%s: %v %v", first.File, st, err)
	}
	firstInfo, _ := os.Stat(first.File)

	// The same cluster, second and index again: a name of its own.
	second := save()
	if second.File == first.File || !strings.HasSuffix(second.File, ".1.snap") {
		t.Fatalf("second save as %s, first %s", second.File, first.File)
	}
	if st, err := os.Stat(first.File); err != nil || !os.SameFile(st, firstInfo) {
		t.Fatalf("the first file was replaced: %v %v", st, err)
	}
	if !slices.Equal(*second.Removed, []string{filepath.Join(dir, old[2])}) {
		t.Fatalf("removed %v", *second.Removed)
	}
	want := []string{filepath.Base(first.File), filepath.Base(second.File), "baton-abc.snap.bak", "notes.txt"}
	slices.Sort(want)
	if got := dirEntries(t, dir); !slices.Equal(got, want) {
		t.Fatalf("directory %v, want %v", got, want)
	}

	// Without --retain nothing is removed; the human output names the file.
	code, stdout, stderr := runCLI(t, nil, "snapshot", "save", "--dir", dir, "--addr", addr)
	if code != 0 || !strings.Contains(stdout, "saved "+filepath.Join(dir, "baton-abc-19700101T000000Z-3.2.snap")) {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	if n := len(dirEntries(t, dir)); n != 5 {
		t.Fatalf("%d entries, want 5: %v", n, dirEntries(t, dir))
	}
	code, stdout, _ = runCLI(t, nil, "snapshot", "save", "--dir", dir, "--addr", addr, "--retain", "1")
	if code != 0 || !strings.Contains(stdout, "retention    kept the newest 1, removed ") {
		t.Fatalf("exit %d: %s", code, stdout)
	}
	files, _ := snapdir.List(dir)
	if len(files) != 1 || files[0].Seq != 3 {
		t.Fatalf("kept %+v, want the newest", files)
	}

	// A missing DIR is created private.
	sub := filepath.Join(dir, "new", "snaps")
	if code, _, stderr := runCLI(t, nil, "snapshot", "save", "--dir", sub, "--addr", addr); code != 0 {
		t.Fatalf("into a missing directory: exit %d: %s", code, stderr)
	}
	if st, err := os.Stat(sub); err != nil || st.Mode().Perm() != 0o700 || len(dirEntries(t, sub)) != 1 {
		t.Fatalf("%s: %v %v %v", sub, st, err, dirEntries(t, sub))
	}
}

// From a real cluster the name carries its id and the index read.
func TestSnapshotSaveDirFromCluster(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{})
	var id []byte
	fc.WaitForNil("a cluster id", func() error {
		v, ok := fc.Leader().Node().FSM().Get(cluster.ClusterIDKey)
		if !ok || len(v) == 0 {
			return fmt.Errorf("none yet")
		}
		id = v
		return nil
	})
	dir := t.TempDir()
	code, stdout, stderr := runCLI(t, nil, "snapshot", "save", "--dir", dir, "--retain", "3", "--addr", fc.AdminAddrs()[0], "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	var doc snapshotSaveJSON
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	created, err := time.Parse(time.RFC3339Nano, doc.CreatedAt)
	if err != nil {
		t.Fatalf("created_at %q: %v", doc.CreatedAt, err)
	}
	if want := filepath.Join(dir, snapdir.Name(string(id), created, doc.Index)); doc.File != want {
		t.Fatalf("saved as %s, want %s", doc.File, want)
	}
	if code, _, stderr := runCLI(t, nil, "snapshot", "inspect", doc.File); code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, stderr)
	}
}

// An interrupted save --dir leaves the directory as it was.
func TestSnapshotSaveDirInterrupted(t *testing.T) {
	addr, _ := stalledSnapshot(t)
	dir := t.TempDir()
	keep := filepath.Join(dir, snapdir.Name("abc", time.Unix(0, 0), 1))
	if err := os.WriteFile(keep, []byte("older"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb bytes.Buffer
	c := &cli{ctx: ctx, stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	codec := make(chan int, 1)
	go func() { codec <- c.run([]string{"snapshot", "save", "--dir", dir, "--retain", "1", "--addr", addr}) }()
	midTransfer(t, dir)
	cancel()
	if code := <-codec; code != exitInterrupted {
		t.Fatalf("exit %d, want %d: %s", code, exitInterrupted, errb.String())
	}
	if got := dirEntries(t, dir); !slices.Equal(got, []string{filepath.Base(keep)}) {
		t.Fatalf("directory now %v", got)
	}
	if !strings.Contains(errb.String(), dir+" left as it was, the temporary file removed") {
		t.Fatalf("stderr %q", errb.String())
	}
}

func TestSnapshotSaveDirUsage(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dead := clustertest.DeadAddr(t)
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"FILE and --dir", []string{"x", "--dir", dir}, "exclusive"},
		{"neither", nil, "exactly one FILE, or --dir DIR"},
		{"retain 0", []string{"--dir", dir, "--retain", "0"}, "--retain 0: want at least 1"},
		{"retain negative", []string{"--dir", dir, "--retain", "-3"}, "--retain -3: want at least 1"},
		{"retain not a number", []string{"--dir", dir, "--retain", "x"}, `--retain "x"`},
		{"retain with FILE", []string{filepath.Join(dir, "g"), "--retain", "2"}, "--retain prunes a --dir"},
		{"dir is a file", []string{"--dir", file}, "is not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, nil, append(append([]string{"snapshot", "save"}, tc.args...), "--addr", dead)...)
			if code != exitUsage || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit %d, want %d; stderr %q, want it to say %q", code, exitUsage, stderr, tc.stderr)
			}
		})
	}
	if got := dirEntries(t, dir); !slices.Equal(got, []string{"f"}) {
		t.Fatalf("left in the directory: %v", got)
	}
}
