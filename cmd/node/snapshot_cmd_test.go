package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// snapshotCluster is a cluster led by its second master, with a cluster
// id, a seeded table of 500 regions, a finished procedure and a running
// one: what a save through the first master (a standby) must hold.
func snapshotCluster(t *testing.T) *clustertest.Cluster {
	t.Helper()
	fc := clustertest.New(t, clustertest.Config{})
	fc.TransferLeadership(1)
	fc.WaitForNil("a cluster id", func() error {
		if v, ok := fc.Leader().Node().FSM().Get(cluster.ClusterIDKey); !ok || len(v) == 0 {
			return fmt.Errorf("none yet")
		}
		return nil
	})
	fc.SeedNamespaces([]string{"ns1", "ns2"})
	fc.SeedTable("ns1:t", domain.TableEnabled, 500, 7, func(i int) domain.Region { return domain.Region{State: domain.RegionOffline} })
	cl := fc.Client()
	done, err := cl.Submit(ctxT(t), "sleep", map[string]string{"steps": "0"}, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := cl.Wait(ctxT(t), done); err != nil || p.GetState() != "SUCCESS" {
		t.Fatalf("sleep: %v %v", p, err)
	}
	if _, err := cl.Submit(ctxT(t), "sleep", map[string]string{"steps": "1", "delay": "1h"}, "", "", 0); err != nil {
		t.Fatal(err)
	}
	return fc
}

// stateCounts counts a master's state as inspect counts a file.
func stateCounts(t *testing.T, v raftfsm.View) snapshotCounts {
	t.Helper()
	var k snapshotCounts
	if err := v.Procs(func(p store.Proc) error {
		sm, err := procedure.DecodeSummary(p.Data)
		if err != nil {
			return err
		}
		if sm.State.Terminal() {
			k.ProceduresFinished++
		} else {
			k.ProceduresLive++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	v.Scan("", func(key string, _ []byte) bool { *k.slot(key)++; return true })
	return k
}

func TestSnapshotSaveAndInspect(t *testing.T) {
	fc := snapshotCluster(t)
	standby := fc.AdminAddrs()[0]
	leader := fc.Leader()
	before := leader.Node().FSM().AppliedIndex()
	dir := t.TempDir()
	file := filepath.Join(dir, "snap.bts")

	code, stdout, stderr := runCLI(t, nil, "snapshot", "save", file, "--addr", standby, "--json")
	if code != 0 {
		t.Fatalf("save: exit %d: %s %s", code, stdout, stderr)
	}
	var saved snapshotSaveJSON
	if err := json.Unmarshal([]byte(stdout), &saved); err != nil {
		t.Fatalf("save --json: %v: %s", err, stdout)
	}
	v := leader.Node().FSM().View()
	id, _ := v.Get(cluster.ClusterIDKey)
	switch {
	case saved.ServedBy != leader.ID:
		t.Errorf("served by %q, want the leader %s", saved.ServedBy, leader.ID)
	case saved.TakenBy != "anonymous":
		t.Errorf("taken by %q, want anonymous (no access control)", saved.TakenBy)
	case saved.ClusterID != string(id):
		t.Errorf("cluster id %q, state holds %q", saved.ClusterID, id)
	case saved.Index < before || saved.Index > v.Index():
		t.Errorf("index %d: want one between %d (applied before the call) and %d (now)", saved.Index, before, v.Index())
	case saved.ClusterFormat != 2 || saved.Version == "" || saved.Term == 0:
		t.Errorf("cluster format %d, version %q, term %d", saved.ClusterFormat, saved.Version, saved.Term)
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != snapshotFileMode || st.Size() != saved.Bytes {
		t.Fatalf("file: %v %v, %d bytes saved", st, err, saved.Bytes)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}

	code, stdout, stderr = runCLI(t, nil, "snapshot", "inspect", file, "--json")
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"format_version", "cluster_id", "index", "term", "created_at", "taken_by", "served_by", "version", "cluster_format",
		"procedures_live", "procedures_finished", "namespaces", "tables", "regions", "region_servers", "acl_entries", "audit_records"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("inspect --json has no %q: %s", k, stdout)
		}
	}
	var got snapshotInspectJSON
	_ = json.Unmarshal([]byte(stdout), &got)
	want := stateCounts(t, v)
	// What nothing changes in a quiet cluster is counted as the state
	// holds it now; the members' and the audit's keys may move.
	if g := got.snapshotCounts; g.Namespaces != want.Namespaces || g.Tables != want.Tables || g.Regions != want.Regions ||
		g.ProceduresLive != want.ProceduresLive || g.ProceduresFinished != want.ProceduresFinished || g.RegionServers != want.RegionServers {
		t.Fatalf("inspect counts %+v, the state holds %+v", g, want)
	}
	if got.Regions != 500 || got.Tables != 1 || got.ProceduresLive < 1 || got.ProceduresFinished < 1 {
		t.Fatalf("counts %+v: want the seeded 500 regions, a table, a live and a finished procedure", got.snapshotCounts)
	}

	code, stdout, _ = runCLI(t, nil, "snapshot", "inspect", file)
	if code != 0 || !strings.Contains(stdout, "500 regions") || !strings.Contains(stdout, "cluster id   "+string(id)) {
		t.Fatalf("inspect: exit %d:\n%s", code, stdout)
	}
}

func TestSnapshotCLIExitCodes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "s")
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no subcommand", []string{"snapshot"}, 2, "usage: baton snapshot"},
		{"unknown subcommand", []string{"snapshot", "bogus"}, 2, "bogus"},
		{"save without FILE", []string{"snapshot", "save"}, 2, "exactly one FILE"},
		{"save two files", []string{"snapshot", "save", "a", "b"}, 2, "exactly one FILE"},
		{"save to a directory", []string{"snapshot", "save", dir, "--addr", clustertest.DeadAddr(t)}, 2, "is a directory"},
		{"save unreachable", []string{"snapshot", "save", file, "--addr", clustertest.DeadAddr(t), "--timeout", "1s"}, 3, "unavailable"},
		{"inspect without FILE", []string{"snapshot", "inspect"}, 2, "exactly one FILE"},
		{"inspect missing file", []string{"snapshot", "inspect", filepath.Join(dir, "none")}, 1, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, nil, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit %d, want %d; stderr %q, want it to say %q", code, tc.code, stderr, tc.stderr)
			}
		})
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left in the directory: %v", ents)
	}
}

// goodSnapshotFile writes a small valid snapshot file of an FSM's state.
func goodSnapshotFile(t *testing.T) ([]byte, raftfsm.View) {
	t.Helper()
	f, err := raftfsm.NewFSM(raftfsm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var muts []raftfsm.Mutation
	for i := range 50 {
		muts = append(muts, raftfsm.Put(domain.RegionKey(fmt.Sprintf("ns1:t,%05d,7", i)), []byte(`{"state":"OPEN"}`)))
	}
	muts = append(muts, raftfsm.Put(domain.TableKey("ns1:t"), []byte(`{"state":"ENABLED"}`)))
	data, err := raftfsm.EncodeProcBatch(raftfsm.Write{Mutations: muts})
	if err != nil {
		t.Fatal(err)
	}
	if r := f.Apply(&raft.Log{Index: 3, Term: 1, Type: raft.LogCommand, Data: data}); r != nil {
		t.Fatal(r)
	}
	var buf bytes.Buffer
	if err := raftfsm.WriteSnapshotFile(&buf, raftfsm.SnapshotFileHeader{ClusterID: "abc", TakenBy: "client/ops"}, f.View()); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), f.View()
}

// A damaged, cut or foreign file is refused, exit 1, naming the offset and
// the field.
func TestSnapshotInspectRefusesBadFiles(t *testing.T) {
	good, v := goodSnapshotFile(t)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if code, stdout, stderr := runCLI(t, nil, "snapshot", "inspect", write("good", good)); code != 0 || !strings.Contains(stdout, "50 regions") {
		t.Fatalf("good file: exit %d: %s %s", code, stdout, stderr)
	}
	var raftState bytes.Buffer
	if err := v.WriteSnapshot(&raftState); err != nil {
		t.Fatal(err)
	}
	rnd := make([]byte, 2048)
	for i := range rnd {
		rnd[i] = byte(rand.Uint32())
	}
	type bad struct {
		name string
		b    []byte
		says string
	}
	var cases []bad
	for _, off := range []int{0, 9, 12, 20, len(good) / 2, len(good) - 40, len(good) - 33, len(good) - 1} {
		b := bytes.Clone(good)
		b[off] ^= 0xff
		cases = append(cases, bad{fmt.Sprintf("byte %d flipped", off), b, "at offset"})
	}
	for _, n := range []int{0, 5, 13, 40, len(good) / 2, len(good) - 36, len(good) - 1} {
		cases = append(cases, bad{fmt.Sprintf("cut at %d", n), good[:n], "at offset"})
	}
	cases = append(cases,
		bad{"random bytes", rnd, "magic at offset 0"},
		bad{"a raft snapshot's state.bin", raftState.Bytes(), "raft snapshot"},
		bad{"text", []byte("hello, world\n"), "magic at offset 0"},
	)
	for _, tc := range cases {
		p := write("bad", tc.b)
		code, _, stderr := runCLI(t, nil, "snapshot", "inspect", p)
		if code != 1 || !strings.Contains(stderr, tc.says) {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 saying %q", tc.name, code, stderr, tc.says)
		}
		code, stdout, _ := runCLI(t, nil, "snapshot", "inspect", p, "--json")
		var doc map[string]map[string]any
		if code != 1 || json.Unmarshal([]byte(stdout), &doc) != nil || doc["error"]["exit_code"] != 1.0 {
			t.Errorf("%s --json: exit %d, %s", tc.name, code, stdout)
		}
	}
	t.Logf("e.g. %s", func() string {
		_, _, s := runCLI(t, nil, "snapshot", "inspect", write("cut", good[:len(good)/2]))
		return s
	}())
}

// failAfter fails every write once n bytes went through, as a full disk.
type failAfter struct {
	w io.Writer
	n int
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		k, _ := f.w.Write(p[:f.n])
		f.n = 0
		return k, &os.PathError{Op: "write", Path: "snapshot", Err: syscall.ENOSPC}
	}
	f.n -= len(p)
	return f.w.Write(p)
}

// A save that cannot write the whole file leaves nothing: no FILE, no
// temporary file, and an older FILE is kept as it was.
func TestSnapshotSaveDiskFull(t *testing.T) {
	fc := snapshotCluster(t)
	addr := fc.AdminAddrs()[1]
	dir := t.TempDir()
	file := filepath.Join(dir, "snap")
	snapshotWriteHook = func(w io.Writer) io.Writer { return &failAfter{w: w, n: 10_000} }
	code, _, stderr := runCLI(t, nil, "snapshot", "save", file, "--addr", addr)
	snapshotWriteHook = nil
	if code != 1 || !strings.Contains(stderr, "no space left") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left in the directory: %v", ents)
	}
	// An older file stays whole.
	if err := os.WriteFile(file, []byte("older"), 0o600); err != nil {
		t.Fatal(err)
	}
	snapshotWriteHook = func(w io.Writer) io.Writer { return &failAfter{w: w, n: 10_000} }
	code, _, _ = runCLI(t, nil, "snapshot", "save", file, "--addr", addr)
	snapshotWriteHook = nil
	if b, _ := os.ReadFile(file); code != 1 || string(b) != "older" {
		t.Fatalf("exit %d, file now %q", code, b)
	}

	// A real full file system, where the test may mount one.
	tiny := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(tiny, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", tiny).CombinedOutput(); err != nil {
		t.Logf("no tmpfs (%v: %s): the failing writer above stands for it", err, out)
		return
	}
	t.Cleanup(func() { _ = exec.Command("umount", tiny).Run() })
	code, _, stderr = runCLI(t, nil, "snapshot", "save", filepath.Join(tiny, "snap"), "--addr", addr, "--timeout", "20s")
	if code != 1 || !strings.Contains(stderr, "no space left") {
		t.Fatalf("on a 16 KiB tmpfs: exit %d, stderr %q", code, stderr)
	}
	if ents, _ := os.ReadDir(tiny); len(ents) != 0 {
		t.Fatalf("left on the tmpfs: %v", ents)
	}
}

// TestKeyCountOpensAuditGroups: a snapshot's summary counts each record
// of a group of audit records, none of a group that does not decode, and
// one for a record alone or any other key.
func TestKeyCountOpensAuditGroups(t *testing.T) {
	rec, err := proto.Marshal(&adminpb.AuditRecord{Id: "4-7", Method: "SubmitProcedure"})
	if err != nil {
		t.Fatal(err)
	}
	group := access.MarshalGroup([][]byte{rec, rec, rec}, 1)
	for _, tc := range []struct {
		key   string
		value []byte
		want  uint64
	}{
		{access.AuditPrefix + access.AuditGroupSuffix(4, 5, 7), group, 3},
		{access.AuditPrefix + access.AuditGroupSuffix(4, 5, 9), group, 0}, // holds fewer than its key numbers
		{access.AuditKey(4, 8), rec, 1},
		{access.RefusedPrefix + access.AuditSuffix(4, 9), rec, 1},
		{domain.TableKey("default:t"), []byte("{}"), 1},
	} {
		if got := keyCount(tc.key, tc.value); got != tc.want {
			t.Errorf("keyCount(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
}
