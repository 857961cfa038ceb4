package cluster

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/raftfsm"
)

// dirSize sums the sizes of the regular files under dir.
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n += fi.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDiskAgainstLiveState measures raft.db, the local WAL and the
// snapshots against the live state for region-like keys written once, and
// a hot 1% of them rewritten many times, through a 3-node cluster, with the raft log bounded in bytes
// and without (the entry counts alone, as before). A measurement for
// BENCHMARKS.md, so it runs only with BATON_DISK_MEASURE set (to the
// number of keys; 1 selects 100 000): it writes some 120 MB per node.
func TestDiskAgainstLiveState(t *testing.T) {
	env := os.Getenv("BATON_DISK_MEASURE")
	if env == "" {
		t.Skip("set BATON_DISK_MEASURE=1 (or a key count) to measure")
	}
	keys, err := strconv.Atoi(env)
	if err != nil || keys < 1 {
		t.Fatalf("BATON_DISK_MEASURE %q: want a key count", env)
	}
	if keys == 1 {
		keys = 100_000
	}
	for _, tc := range []struct {
		name   string
		budget int64
	}{{"entry counts only", -1}, {"log bounded in bytes", 0}} {
		t.Run(tc.name, func(t *testing.T) { measureDisk(t, keys, tc.budget) })
	}
}

func measureDisk(t *testing.T, keys int, budget int64) {
	const (
		perEntry = 500 // keys per raft entry: a group commit under load
		rounds   = 6   // every key written once, then five passes' worth of rewrites of a hot 1%
		valSize  = 160 // a region's meta row, about
	)
	c := newTestCluster(t, clusterOpts{n: 3, tcp: true, tweak: func(_ int, cfg *Config) {
		cfg.SnapshotInterval = time.Second
		cfg.LogBytesBudget = budget
		// The defaults, not the tests' 50 ms: writing 30 MB/s on a loaded
		// machine cost the leader its lease at 50 ms.
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
		cfg.ElectionTimeout = DefaultElectionTimeout
		cfg.LeaderLeaseTimeout = DefaultLeaderLeaseTimeout
	}})
	li, _ := c.leader()
	val := make([]byte, valSize)
	for r := range rounds {
		for start := 0; start < keys; start += perEntry {
			var muts []raftfsm.Mutation
			for k := start; k < min(start+perEntry, keys); k++ {
				for i := range val {
					val[i] = byte('a' + (k+r+i)%26)
				}
				key := k
				if r > 0 {
					// Later passes rewrite a hot 1%: most regions' rows are
					// written once and pin the WAL segments they landed in.
					key = k % max(keys/100, 1)
				}
				muts = append(muts, raftfsm.Put(fmt.Sprintf("region/table-%03d/%012d", key%100, key), append([]byte(nil), val...)))
			}
			data, err := raftfsm.EncodeProcBatch(raftfsm.Write{Mutations: muts})
			if err != nil {
				t.Fatal(err)
			}
			// Rewrites of the same value are harmless, so an entry whose
			// leader stepped down is simply proposed again to the next.
			testwait.ForNil(t, 60*time.Second, "an entry to commit", func() error {
				err := c.nodes[li].Raft().Apply(data, 30*time.Second).Error()
				if err != nil {
					li, _ = c.leader()
				}
				return err
			})
		}
	}
	li, _ = c.leader()
	last := c.nodes[li].Raft().LastIndex()
	for i, n := range c.nodes {
		testwait.For(t, 60*time.Second, fmt.Sprintf("node %d to apply everything", i), func() bool {
			return n.FSM().AppliedIndex() >= last
		})
	}
	// Let raft's snapshot checks (every 1–2 s) act on the last writes.
	if budget >= 0 {
		for i, n := range c.nodes {
			testwait.For(t, 60*time.Second, fmt.Sprintf("node %d's log within its budget", i), func() bool {
				s, _ := n.FSM().WALStats()
				_, b := logBytes(t, n)
				return int64(b) <= 2*max(s.LiveBytes, DefaultLogBytesFloor)+(1<<20)
			})
		}
	}
	mb := func(b int64) float64 { return float64(b) / (1 << 20) }
	for i, n := range c.nodes {
		ws, _ := n.FSM().WALStats()
		live := ws.LiveBytes
		dbPath := filepath.Join(c.cfgs[i].DataDir, "raft", "raft.db")
		db := fileSize(t, dbPath)
		e, lb := logBytes(t, n)
		// A snapshot now, to measure one against the live state.
		if err := n.Raft().Snapshot().Error(); err != nil {
			t.Logf("node %d: snapshot: %v", i, err)
		}
		snapDir := filepath.Join(c.cfgs[i].DataDir, "snapshots")
		metas, err := n.snaps.List()
		if err != nil || len(metas) == 0 {
			t.Fatalf("node %d: no snapshot (%v)", i, err)
		}
		one := metas[0].Size
		all := dirSize(t, snapDir)
		rc := n.Raft().ReloadableConfig()
		t.Logf("node %d: live %.1f MB | raft.db %.1f MB (%.2f×), log %d entries %.1f MB (%.2f×) | WAL %d segments %.1f MB (%.2f×) | one snapshot %.1f MB (%.2f×), snapshots/ %.1f MB (%.2f×, %d kept) | threshold %d trailing %d",
			i, mb(live), mb(db), float64(db)/float64(live), e, mb(int64(lb)), float64(lb)/float64(live),
			ws.Segments, mb(ws.SegmentBytes), float64(ws.SegmentBytes)/float64(live),
			mb(one), float64(one)/float64(live), mb(all), float64(all)/float64(live), len(metas),
			rc.SnapshotThreshold, rc.TrailingLogs)
	}
}
