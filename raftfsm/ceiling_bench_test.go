package raftfsm

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/baton-dev/baton/internal/testwait"
)

// countingLogs counts the leader's log writes (raft's StoreLogs: one bolt
// transaction, one fsync each) and the entries they carried.
type countingLogs struct {
	*raftboltdb.BoltStore
	writes, entries atomic.Uint64
}

func (c *countingLogs) StoreLogs(logs []*raft.Log) error {
	c.writes.Add(1)
	c.entries.Add(uint64(len(logs)))
	return c.BoltStore.StoreLogs(logs)
}

// BenchmarkRaftCeiling is the physics under Baton's rates (issue 33, item
// 6): what one hashicorp/raft group of 3 voters on this machine commits
// with nothing above it: bolt logs with fsync in temporary directories,
// TCP on loopback, a no-op FSM, b.N Applies of size bytes from appliers
// goroutines. It reports entries/s, MB/s, entries per leader log write
// and log writes per second. MaxAppendEntries is
// Baton's default (64) and raft's most (1024): with BatchApplyCh it is
// also how many Applies one log write may carry.
//
//	go test -run '^$' -bench BenchmarkRaftCeiling -benchtime 200000x ./raftfsm/
func BenchmarkRaftCeiling(b *testing.B) {
	for _, maxAppend := range []int{64, 1024} {
		// A small record, a region's worth of Baton's writes, and an entry
		// of many records batched as Baton's RaftStore sends them.
		for _, size := range []int{100, 1400, 64 << 10} {
			for _, appliers := range []int{64, 1024} {
				b.Run(fmt.Sprintf("max-append=%d/size=%d/appliers=%d", maxAppend, size, appliers), func(b *testing.B) {
					benchCeiling(b, maxAppend, size, appliers)
				})
			}
		}
	}
}

func benchCeiling(b *testing.B, maxAppend, size, appliers int) {
	dir := b.TempDir()
	type node struct {
		r    *raft.Raft
		logs *countingLogs
	}
	var nodes []*node
	var servers []raft.Server
	var transports []*raft.NetworkTransport
	for i := range 3 {
		t, err := raft.NewTCPTransport("127.0.0.1:0", nil, 8, 10*time.Second, io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		transports = append(transports, t)
		servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprint("n", i)), Address: t.LocalAddr(), Suffrage: raft.Voter})
	}
	for i := range 3 {
		nd := filepath.Join(dir, fmt.Sprint("n", i))
		if err := os.MkdirAll(nd, 0o755); err != nil {
			b.Fatal(err)
		}
		bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(nd, "raft.db")})
		if err != nil {
			b.Fatal(err)
		}
		logs := &countingLogs{BoltStore: bolt}
		snaps, err := raft.NewFileSnapshotStore(nd, 1, io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		conf := raft.DefaultConfig()
		conf.LocalID = servers[i].ID
		conf.Logger = hclog.NewNullLogger()
		conf.MaxAppendEntries = maxAppend
		conf.BatchApplyCh = true
		// Production timings (cluster.Config's): the machine is shared,
		// and an election would be measured instead of the log.
		conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		conf.SnapshotThreshold = 1 << 62 // no snapshot during the run
		if err := raft.BootstrapCluster(conf, logs, bolt, snaps, transports[i], raft.Configuration{Servers: servers}); err != nil {
			b.Fatal(err)
		}
		r, err := raft.NewRaft(conf, &nopFSM{}, logs, bolt, snaps, transports[i])
		if err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, &node{r: r, logs: logs})
		b.Cleanup(func() {
			r.Shutdown().Error()
			transports[i].Close()
			bolt.Close()
		})
	}
	var leader *node
	testwait.For(b, 30*time.Second, "a leader", func() bool {
		for _, n := range nodes {
			if n.r.State() == raft.Leader {
				leader = n
				return true
			}
		}
		return false
	})
	payload := make([]byte, size)
	w0, e0 := leader.logs.writes.Load(), leader.logs.entries.Load()
	b.SetBytes(int64(size))
	d := runWriters(b, appliers, func(uint64) error { return leader.r.Apply(payload, 30*time.Second).Error() })
	writes, entries := leader.logs.writes.Load()-w0, leader.logs.entries.Load()-e0
	b.ReportMetric(float64(b.N)/d.Seconds(), "entries/s")
	if writes > 0 {
		b.ReportMetric(float64(entries)/float64(writes), "entries/write")
		b.ReportMetric(float64(writes)/d.Seconds(), "writes/s")
	}
}
