package raftfsm

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// In-process Raft clusters on raft's in-memory transport and stores, with
// the fast timings raft's own tests use.

type testNode struct {
	id    raft.ServerID
	addr  raft.ServerAddress
	trans *raft.InmemTransport
	logs  *raft.InmemStore
	snaps *raft.InmemSnapshotStore
	fsm   *FSM     // nil when the cluster runs another FSM
	raw   raft.FSM // the FSM raft runs
	r     *raft.Raft
}

type clusterOpts struct {
	n            int
	newFSM       func(tb testing.TB, i int) raft.FSM // default: an FSM with a WAL in a temp dir
	trailingLogs uint64
	snapThresh   uint64
}

type testCluster struct {
	tb    testing.TB
	nodes []*testNode
	mesh  *testnet.Mesh
}

func fastConfig(id raft.ServerID, o clusterOpts) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	c.HeartbeatTimeout = 50 * time.Millisecond
	c.ElectionTimeout = 50 * time.Millisecond
	c.LeaderLeaseTimeout = 50 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.SnapshotInterval = time.Hour // snapshots only when a test asks
	c.SnapshotThreshold = 1 << 20
	if o.snapThresh > 0 {
		c.SnapshotThreshold = o.snapThresh
	}
	if o.trailingLogs > 0 {
		c.TrailingLogs = o.trailingLogs
	}
	c.Logger = hclog.New(&hclog.LoggerOptions{Name: string(id), Level: hclog.Error})
	return c
}

func testFSM(tb testing.TB, _ int) raft.FSM {
	f, err := NewFSM(Config{Dir: tb.TempDir(), WAL: store.WALConfig{NoSync: true}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}

func newCluster(tb testing.TB, o clusterOpts) *testCluster {
	tb.Helper()
	if o.n == 0 {
		o.n = 3
	}
	if o.newFSM == nil {
		o.newFSM = testFSM
	}
	c := &testCluster{tb: tb}
	var servers []raft.Server
	for i := range o.n {
		n := &testNode{id: raft.ServerID(fmt.Sprintf("node%d", i))}
		n.addr, n.trans = raft.NewInmemTransport("")
		n.logs, n.snaps = raft.NewInmemStore(), raft.NewInmemSnapshotStore()
		n.raw = o.newFSM(tb, i)
		n.fsm, _ = n.raw.(*FSM)
		servers = append(servers, raft.Server{ID: n.id, Address: n.addr, Suffrage: raft.Voter})
		c.nodes = append(c.nodes, n)
	}
	var trans []*raft.InmemTransport
	for _, n := range c.nodes {
		trans = append(trans, n.trans)
	}
	c.mesh = testnet.NewMesh(trans...)
	for _, n := range c.nodes {
		conf := fastConfig(n.id, o)
		if err := raft.BootstrapCluster(conf, n.logs, n.logs, n.snaps, n.trans, raft.Configuration{Servers: servers}); err != nil {
			tb.Fatal(err)
		}
		r, err := raft.NewRaft(conf, n.raw, n.logs, n.logs, n.snaps, n.trans)
		if err != nil {
			tb.Fatal(err)
		}
		n.r = r
	}
	tb.Cleanup(c.shutdown)
	return c
}

func (c *testCluster) shutdown() {
	for _, n := range c.nodes {
		if err := n.r.Shutdown().Error(); err != nil {
			c.tb.Logf("shutdown %s: %v", n.id, err)
		}
	}
}

// leader waits for a leader and returns it.
func (c *testCluster) leader() *testNode {
	c.tb.Helper()
	var leader *testNode
	testwait.For(c.tb, 10*time.Second, "a leader", func() bool {
		for _, n := range c.nodes {
			if n.r.State() == raft.Leader {
				leader = n
				return true
			}
		}
		return false
	})
	return leader
}

func (c *testCluster) followers(l *testNode) []*testNode {
	var out []*testNode
	for _, n := range c.nodes {
		if n != l {
			out = append(out, n)
		}
	}
	return out
}

// isolate cuts n off from every other node, both ways.
func (c *testCluster) isolate(n *testNode) { c.mesh.Partition(c.index(n)) }

// reconnect undoes isolate.
func (c *testCluster) reconnect(n *testNode) { c.mesh.Heal(c.index(n)) }

func (c *testCluster) index(n *testNode) int {
	i := slices.Index(c.nodes, n)
	if i < 0 {
		c.tb.Fatalf("node %s is not in the cluster", n.id)
	}
	return i
}

// dump is a comparable copy of an FSM's replicated state.
type dump struct {
	procs map[uint64]string
	kv    map[string]string
	maxID uint64
	index uint64
}

func dumpOf(tb testing.TB, f *FSM) dump {
	return dumpView(tb, f.View())
}

func dumpView(tb testing.TB, v View) dump {
	d := dump{procs: map[uint64]string{}, kv: map[string]string{}, maxID: v.MaxProcID(), index: v.Index()}
	var last uint64
	if err := v.Procs(func(p store.Proc) error {
		if p.ID <= last {
			tb.Errorf("Procs out of order: %d after %d", p.ID, last)
		}
		last = p.ID
		d.procs[p.ID] = string(p.Data)
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	v.Scan("", func(k string, val []byte) bool {
		d.kv[k] = string(val)
		return true
	})
	return d
}

func (d dump) equal(o dump) bool {
	return d.maxID == o.maxID && d.index == o.index && maps.Equal(d.procs, o.procs) && maps.Equal(d.kv, o.kv)
}

func (d dump) String() string {
	return fmt.Sprintf("{index %d maxID %d procs %d keys %d}", d.index, d.maxID, len(d.procs), len(d.kv))
}

// converge waits until every node's FSM holds the same state as the leader's
// and has applied the leader's last index.
func (c *testCluster) converge(l *testNode) dump {
	c.tb.Helper()
	if err := l.r.Barrier(5 * time.Second).Error(); err != nil {
		c.tb.Fatal(err)
	}
	var want, got dump
	var lagging raft.ServerID
	converged := testwait.Until(10*time.Second, func() bool {
		want = dumpOf(c.tb, l.fsm)
		for _, n := range c.nodes {
			if got = dumpOf(c.tb, n.fsm); !got.equal(want) {
				lagging = n.id
				return false
			}
		}
		return true
	})
	if !converged {
		c.tb.Fatalf("%s did not converge: %v, leader %v", lagging, got, want)
	}
	return want
}

// bufSink is a raft.SnapshotSink into memory.
type bufSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *bufSink) ID() string    { return "test" }
func (s *bufSink) Cancel() error { s.cancelled = true; return nil }
func (s *bufSink) Close() error  { s.closed = true; return nil }
