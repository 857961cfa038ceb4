package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/raftfsm"
)

// saveSnapshotFile writes node n's state as a snapshot file, as the leader
// serves 'baton snapshot save'.
func saveSnapshotFile(t *testing.T, n *Node, path string) raftfsm.SnapshotFileHeader {
	t.Helper()
	var buf bytes.Buffer
	id, _ := n.FSM().Get(ClusterIDKey)
	h := raftfsm.SnapshotFileHeader{ClusterID: string(id), Term: n.Raft().CurrentTerm(), ServedBy: n.ID(), TakenBy: "test"}
	if err := raftfsm.WriteSnapshotFile(&buf, h, n.FSM().View()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	sr, err := raftfsm.OpenSnapshotFile(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	return sr.Header()
}

// TestRestoreDataDir: a snapshot file of a three-member cluster, with
// procedures finished and in flight, is restored into three new members'
// directories with new addresses. They start without bootstrapping, elect
// a leader in a term above the snapshot's, hold every procedure, finish
// the ones in flight, and have left out the old cluster id and the old
// members' records.
func TestRestoreDataDir(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3, tcp: true})
	li, x := c.leader()
	done := submit(t, x, 10, 2, 0)
	c.waitAllSuccess(done, 2)
	const inflightSteps = 30
	inflight := submit(t, x, 5, inflightSteps, 20*time.Millisecond)
	c.waitMidFlight(inflight)
	keys := map[string]string{ClusterIDKey: "old-cluster", AdminAddrKey("m0"): "a:1", VersionKey("m1"): "v", "nodes/m2/removed": "x", "table/t1": "kept"}
	var muts []raftfsm.Mutation
	for k, v := range keys {
		muts = append(muts, raftfsm.Put(k, []byte(v)))
	}
	cmd, err := raftfsm.EncodeProcBatch(raftfsm.Write{Mutations: muts})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[li].Raft().Apply(cmd, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "snap.baton")
	h := saveSnapshotFile(t, c.nodes[li], file)
	if h.ClusterID != "old-cluster" || h.Procs != uint64(len(done)+len(inflight)) {
		t.Fatalf("saved header %+v", h)
	}
	c.shutdownAll()
	c.nodes = nil

	// The new members: new ids, new addresses, fresh directories.
	base := t.TempDir()
	var peers []Peer
	for i := range 3 {
		peers = append(peers, Peer{ID: fmt.Sprintf("r%d", i), Address: testnet.FreeAddr(t)})
	}
	var cfgs []Config
	logs := make([]lockedLog, len(peers))
	for i, p := range peers {
		dir := filepath.Join(base, p.ID)
		if i == 0 {
			// An empty directory that exists is fine.
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		res, err := RestoreDataDir(RestoreConfig{File: file, DataDir: dir, ID: p.ID, Peers: peers, Logger: testLogger(t, p.ID)})
		if err != nil {
			t.Fatalf("restore %s: %v", p.ID, err)
		}
		if res.Index != h.Index || res.Term != h.Term || res.DroppedKeys != 4 || res.Keys != h.Keys-4 || res.RestoredFrom != "old-cluster" {
			t.Fatalf("restore result %+v for header %+v", res, h)
		}
		cfg := fastConfig(t, p.ID, c.rec)
		cfg.DataDir, cfg.RaftAddr, cfg.TransportTimeout = dir, p.Address, 2*time.Second
		cfg.Peers = peers // as an operator would leave --peers in place: ignored
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: p.ID, Level: hclog.Info, Output: &logs[i]})
		cfgs = append(cfgs, cfg)
	}
	entries, _ := os.ReadDir(base)
	if len(entries) != 3 {
		t.Fatalf("restore left %d entries in %s, want the 3 directories", len(entries), base)
	}

	c2 := &testCluster{t: t, rec: c.rec, cfgs: cfgs}
	for i := range cfgs {
		n, err := NewNode(cfgs[i])
		if err != nil {
			t.Fatalf("start %s: %v", cfgs[i].ID, err)
		}
		c2.nodes = append(c2.nodes, n)
	}
	t.Cleanup(c2.shutdownAll)
	li, _ = c2.leader()
	for i := range logs {
		if l := logs[i].String(); strings.Contains(l, "bootstrapped cluster") || !strings.Contains(l, "restarting from existing raft state") {
			t.Fatalf("%s did not start from the restored raft state:\n%s", peers[i].ID, l)
		}
	}
	if term := c2.nodes[li].Raft().CurrentTerm(); term <= h.Term {
		t.Fatalf("leader's term %d, want above the snapshot's %d", term, h.Term)
	}
	if got := voters(t, c2.nodes[li]); len(got) != 3 || got[0] != "r0" {
		t.Fatalf("voters %v", got)
	}
	c2.waitAllSuccess(done, 2)
	c2.waitAllSuccess(inflight, inflightSteps)
	for _, n := range c2.nodes {
		testwait.For(t, 10*time.Second, n.ID()+" to apply everything", func() bool {
			return n.FSM().AppliedIndex() >= c2.nodes[li].FSM().AppliedIndex()
		})
		for k, v := range keys {
			got, ok := n.FSM().Get(k)
			if want := k == "table/t1"; ok != want || (ok && string(got) != v) {
				t.Fatalf("%s: key %s = %q (present %v), want present %v", n.ID(), k, got, ok, want)
			}
		}
		if n.FSM().WALIndex() < h.Index {
			t.Fatalf("%s: local WAL at %d, want the snapshot restored into it (%d)", n.ID(), n.FSM().WALIndex(), h.Index)
		}
	}
}

// lockedLog is a log output read while nodes write to it.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A directory that holds anything is refused and left as it was; so is a
// damaged or truncated file, before anything is created.
func TestRestoreDataDirRefusals(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 1, tcp: true})
	_, x := c.leader()
	c.waitAllSuccess(submit(t, x, 3, 1, 0), 1)
	base := t.TempDir()
	file := filepath.Join(base, "snap.baton")
	saveSnapshotFile(t, c.nodes[0], file)
	peers := []Peer{{ID: "a", Address: "127.0.0.1:7001"}, {ID: "b", Address: "127.0.0.1:7002"}}

	full := filepath.Join(base, "full")
	if err := os.MkdirAll(filepath.Join(full, "raft"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "node-id"), []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := RestoreDataDir(RestoreConfig{File: file, DataDir: full, ID: "a", Peers: peers})
	if !errors.Is(err, ErrDataDirNotEmpty) || !strings.Contains(err.Error(), "node-id, raft") {
		t.Fatalf("restore into a directory with data: %v, want ErrDataDirNotEmpty naming node-id and raft", err)
	}
	if b, _ := os.ReadFile(filepath.Join(full, "node-id")); string(b) != "old\n" {
		t.Fatalf("refused restore changed node-id: %q", b)
	}

	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)-50] ^= 1
	for name, b := range map[string][]byte{"truncated": good[:len(good)-10], "corrupted": flipped, "foreign": []byte("not a snapshot at all")} {
		t.Run(name, func(t *testing.T) {
			bad := filepath.Join(base, name+".baton")
			if err := os.WriteFile(bad, b, 0o600); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(base, "new-"+name)
			_, err := RestoreDataDir(RestoreConfig{File: bad, DataDir: dir, ID: "a", Peers: peers})
			if !errors.Is(err, raftfsm.ErrBadSnapshotFile) {
				t.Fatalf("restore of a %s file: %v, want ErrBadSnapshotFile", name, err)
			}
			t.Logf("refused: %v", err)
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("refused restore created %s (%v)", dir, err)
			}
			if m, _ := filepath.Glob(dir + ".tmp-*"); len(m) > 0 {
				t.Fatalf("refused restore left %v", m)
			}
		})
	}

	for name, cfg := range map[string]RestoreConfig{
		"id not a member": {File: file, DataDir: filepath.Join(base, "x"), ID: "z", Peers: peers},
		"no members":      {File: file, DataDir: filepath.Join(base, "x"), ID: "a"},
		"twice the same":  {File: file, DataDir: filepath.Join(base, "x"), ID: "a", Peers: append(peers, peers[0])},
	} {
		if _, err := RestoreDataDir(cfg); err == nil {
			t.Fatalf("%s: restored", name)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused restore created a directory (%v)", err)
	}
}
