package cluster

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/raftfsm"
)

func TestLogTunerTurnsBytesIntoEntries(t *testing.T) {
	tu := &logTuner{floor: 16 << 20, minEntries: 256, maxThresh: 8192, maxTrail: 10240}

	// Nothing written yet: the configured counts stand.
	if lim := tu.observe(0, 0, 1<<20); lim.SnapshotThreshold != 8192 || lim.TrailingLogs != 10240 || lim.Budget != 16<<20 {
		t.Fatalf("before any entry: %+v", lim)
	}
	// 100 entries of 256 KiB under a 16 MiB floor: 64 entries, raised to the minimum.
	lim := tu.observe(100, 100*256<<10, 1<<20)
	if lim.AvgEntryBytes != 256<<10 || lim.SnapshotThreshold != 256 || lim.TrailingLogs != 256 {
		t.Fatalf("big entries: %+v", lim)
	}
	// A live state over the floor is the budget: 64 MiB of live state ÷ 16 KiB entries.
	tu = &logTuner{floor: 16 << 20, minEntries: 256, maxThresh: 8192, maxTrail: 10240}
	lim = tu.observe(1000, 1000*16<<10, 64<<20)
	if lim.Budget != 64<<20 || lim.SnapshotThreshold != 4096 || lim.TrailingLogs != 4096 {
		t.Fatalf("budget from the live state: %+v", lim)
	}
	// Small entries: the configured counts are the ceiling.
	tu = &logTuner{floor: 16 << 20, minEntries: 256, maxThresh: 8192, maxTrail: 10240}
	lim = tu.observe(1000, 1000*100, 0)
	if lim.SnapshotThreshold != 8192 || lim.TrailingLogs != 10240 {
		t.Fatalf("small entries: %+v", lim)
	}
	// A set budget wins over the live state, and the mean follows the
	// entries' new size: the past weighs half at each observation.
	tu = &logTuner{budget: 1 << 20, floor: 16 << 20, minEntries: 4, maxThresh: 8192, maxTrail: 10240}
	tu.observe(100, 100*1000, 64<<20)
	lim = tu.observe(200, 100*1000+100*4000, 64<<20)
	if lim.Budget != 1<<20 || lim.AvgEntryBytes != 3000 {
		t.Fatalf("set budget, changing entries: %+v", lim)
	}
	// A quiet interval leaves the mean as it was.
	if again := tu.observe(200, 100*1000+100*4000, 64<<20); again.AvgEntryBytes != lim.AvgEntryBytes {
		t.Fatalf("quiet interval moved the mean: %+v → %+v", lim, again)
	}
	// So do many: the window empties, the counts stay those of the last
	// entries seen, not the configured ones.
	for range 64 {
		if again := tu.observe(200, 100*1000+100*4000, 64<<20); again != lim {
			t.Fatalf("a long quiet spell changed the limits: %+v → %+v", lim, again)
		}
	}
	// and the next entries move the mean from there.
	if next := tu.observe(300, 100*1000+100*4000+100*3000, 64<<20); next.AvgEntryBytes != 3000 {
		t.Fatalf("after a quiet spell: %+v", next)
	}
}

// logBytes sums the data of the entries n's bolt log holds.
func logBytes(t *testing.T, n *Node) (entries, data uint64) {
	t.Helper()
	first, err := n.bolt.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := n.bolt.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	for i := first; i != 0 && i <= last; i++ {
		var l raft.Log
		if err := n.bolt.GetLog(i, &l); err != nil {
			continue // compacted under us
		}
		entries++
		data += uint64(len(l.Data))
	}
	return entries, data
}

// TestRaftLogBoundedInBytes: big entries (as group commits are under
// load) make the node lower raft's entry counts so that the log holds
// about the byte budget twice over (since the last snapshot, and
// trailing), not SnapshotThreshold + TrailingLogs entries; a follower
// that lagged a little catches up from that log, and one that lagged far
// from a snapshot.
func TestRaftLogBoundedInBytes(t *testing.T) {
	const (
		budget    = 256 << 10
		entrySize = 16 << 10
		keys      = 8 // rewritten over and over: the live state stays small
	)
	c := newTestCluster(t, clusterOpts{n: 3, tcp: true, tweak: func(i int, cfg *Config) {
		steadyTimings(i, cfg)
		cfg.SnapshotInterval = 100 * time.Millisecond
		cfg.LogBytesBudget = budget
		cfg.LogMinEntries = 4
	}})
	value := func(i int) string { return string(bytes.Repeat([]byte{byte('a' + i%26)}, entrySize)) }
	written := 0
	// A put is an idempotent overwrite, so one cut off by a leader change
	// (rarer at steadyTimings, still possible on a loaded machine) is
	// simply retried on the new
	// leader: the test is about the log's size, not about elections.
	write := func(k int) {
		for range k {
			key, val := fmt.Sprintf("k/%d", written%keys), value(written)
			testwait.ForNil(t, 20*time.Second, "put "+key, func() error {
				li, _ := c.leader()
				data, err := raftfsm.EncodeProcBatch(raftfsm.Write{Mutations: []raftfsm.Mutation{raftfsm.Put(key, []byte(val))}})
				if err != nil {
					t.Fatal(err)
				}
				return c.nodes[li].Raft().Apply(data, 5*time.Second).Error()
			})
			written++
		}
	}
	write(100)
	// budget ÷ entry: the counts the nodes should settle on.
	want := uint64(budget / (entrySize + 64))
	for i, n := range c.nodes {
		testwait.For(t, 20*time.Second, fmt.Sprintf("node %d to lower its counts", i), func() bool {
			rc := n.Raft().ReloadableConfig()
			return rc.SnapshotThreshold <= want+1 && rc.TrailingLogs <= want+1
		})
	}
	write(100)
	limit := uint64(2*budget + 2*entrySize)
	for i, n := range c.nodes {
		testwait.For(t, 20*time.Second, fmt.Sprintf("node %d's log to shrink to its budget", i), func() bool {
			_, b := logBytes(t, n)
			return b <= limit
		})
		e, b := logBytes(t, n)
		t.Logf("node %d: log %d entries, %d bytes (budget 2×%d); %d entries written; raft.db %d bytes",
			i, e, b, budget, written, fileSize(t, filepath.Join(c.cfgs[i].DataDir, "raft", "raft.db")))
	}

	// A little behind: the entries it lacks are still in the leader's log.
	li, _ := c.leader()
	fi := (li + 1) % 3
	if err := c.nodes[fi].Kill(); err != nil {
		t.Fatalf("kill follower: %v", err)
	}
	c.nodes[fi] = nil
	write(3)
	first, _ := c.nodes[li].bolt.FirstIndex()
	f := c.restart(fi)
	if last := f.Raft().LastIndex(); last+1 < first {
		t.Fatalf("the follower (last %d) fell behind the leader's log (first %d): not the case this step tests", last, first)
	}
	c.waitCaughtUp(f, written)

	// Far behind: the leader's log moved past the follower's, so it is
	// sent a snapshot.
	stopAt := f.Raft().LastIndex()
	if err := f.Kill(); err != nil {
		t.Fatalf("kill follower: %v", err)
	}
	c.nodes[fi] = nil
	write(60)
	li, _ = c.leader()
	testwait.For(t, 20*time.Second, "the leader to compact past the stopped follower", func() bool {
		first, _ := c.nodes[li].bolt.FirstIndex()
		return first > stopAt+1
	})
	c.waitCaughtUp(c.restart(fi), written)
}

// waitCaughtUp waits until f holds the newest value of every key written.
func (c *testCluster) waitCaughtUp(f *Node, written int) {
	c.t.Helper()
	testwait.For(c.t, 20*time.Second, "the follower to catch up", func() bool {
		for w := max(written-8, 0); w < written; w++ {
			v, ok := f.FSM().Get(fmt.Sprintf("k/%d", w%8))
			if !ok || len(v) == 0 || v[0] != byte('a'+w%26) {
				return false
			}
		}
		return true
	})
}

// TestSnapshotTurnsDoNotOverlap replays one shared log on three nodes that
// check their budget at every index and then, as a 100 ms check sees a
// fast log, only every 7th or 40th index: each node snapshots within a
// quarter of the threshold of its threshold, nodes take turns (no two
// start within a few entries of each other, however often they check),
// and a lone node keeps the plain rule.
func TestSnapshotTurnsDoNotOverlap(t *testing.T) {
	const threshold, members = 1200, 3
	for _, every := range []uint64{1, 7, 40} {
		lastSnap := make([]uint64, members)
		checked := make([]uint64, members)
		type start struct {
			index uint64
			slot  int
		}
		var starts []start
		for idx := uint64(1); idx <= 50*threshold; idx++ {
			for slot := 0; slot < members; slot++ {
				if (idx+uint64(slot))%every != 0 {
					continue
				}
				since := idx - lastSnap[slot]
				due := snapshotTurn(checked[slot], idx, since, threshold, 0, slot, members)
				checked[slot] = idx
				if !due {
					if since > threshold+threshold/4+every {
						t.Fatalf("every %d: slot %d at %d entries past its snapshot and still waiting", every, slot, since)
					}
					continue
				}
				if since <= threshold-threshold/4 {
					t.Fatalf("every %d: slot %d snapshotted %d entries after its last, before 0.75×threshold", every, slot, since)
				}
				lastSnap[slot] = idx
				starts = append(starts, start{idx, slot})
			}
		}
		if len(starts) < 3*40 {
			t.Fatalf("every %d: only %d snapshots over 50 thresholds of log", every, len(starts))
		}
		close := 0
		for i := 1; i < len(starts); i++ {
			if starts[i].index-starts[i-1].index < 60 {
				close++
			}
		}
		if close > 0 {
			t.Fatalf("every %d: %d of %d snapshots started within 60 entries (a quarter of a window) of another node's", every, close, len(starts))
		}
	}
	for _, since := range []uint64{threshold - 1, threshold, threshold + 1} {
		if got, want := snapshotTurn(since-1, since, since, threshold, 0, 0, 1), since > threshold; got != want {
			t.Fatalf("single node at %d entries: snapshot %v, want %v", since, got, want)
		}
	}
}

// snapshotTurn is total: whatever the inputs (a threshold of 0 or 1, a
// checked index past last after a snapshot restore, a slot outside the
// members, members of any size) it neither panics nor leaves the log past
// 1.25×threshold, and it never snapshots at or below 0.75×threshold when
// turns are taken (nor at or below the threshold for a lone node).
func TestSnapshotTurnEdgeInputs(t *testing.T) {
	vals := []uint64{0, 1, 2, 3, 4, 5, 8, 100, 1200, 1<<32 - 1, 1 << 32, math.MaxUint64 / 2, math.MaxUint64 - 1, math.MaxUint64}
	ints := []int{math.MinInt, -1, 0, 1, 2, 3, 7, 1<<62 + 1, math.MaxInt}
	for _, th := range vals {
		for _, m := range ints {
			for _, slot := range ints {
				for _, checked := range vals {
					for _, last := range vals {
						for _, since := range vals {
							var due bool
							func() {
								defer func() {
									if r := recover(); r != nil {
										t.Fatalf("snapshotTurn(%d, %d, %d, %d, %d, %d) panicked: %v", checked, last, since, th, slot, m, r)
									}
								}()
								due = snapshotTurn(checked, last, since, th, th/2, slot, m)
							}()
							switch {
							case since > th+th/4 && th+th/4 >= th && !due:
								t.Fatalf("snapshotTurn(%d, %d, %d, %d, %d, %d): %d entries past the snapshot and no turn", checked, last, since, th, slot, m, since)
							case m <= 1 && due != (since > th):
								t.Fatalf("lone node: snapshotTurn(%d, %d, %d, %d, %d, %d) = %v", checked, last, since, th, slot, m, due)
							case due && since <= th-th/4:
								t.Fatalf("snapshotTurn(%d, %d, %d, %d, %d, %d) snapshots at %d entries", checked, last, since, th, slot, m, since)
							}
						}
					}
				}
			}
		}
	}
}

// Each node derives its threshold from its own meter, so thresholds
// differ a little between masters, and near a power of two their windows
// do too: at 1530 and 1540 entries with three members (1530/6 = 255 and
// 1540/6 = 256) the windows are 128 and 256 entries, and some turns
// collide. The log is still bounded for each node; the collisions stay a
// minority (9% here, against every snapshot of every node at the same
// index under the plain rule). Thresholds from the same log sit on the same
// side of a boundary most of the time, so this is the worst case, not the
// usual one.
func TestSnapshotTurnsAcrossWindowBoundaryMostlyApart(t *testing.T) {
	thresholds := []uint64{1530, 1540, 1530}
	members := len(thresholds)
	for _, every := range []uint64{1, 7, 40} {
		lastSnap := make([]uint64, members)
		checked := make([]uint64, members)
		var starts []uint64
		var slots []int
		for idx := uint64(1); idx <= 100*1536; idx++ {
			for slot := 0; slot < members; slot++ {
				if (idx+uint64(slot))%every != 0 {
					continue
				}
				since := idx - lastSnap[slot]
				due := snapshotTurn(checked[slot], idx, since, thresholds[slot], 0, slot, members)
				checked[slot] = idx
				if due {
					lastSnap[slot] = idx
					starts = append(starts, idx)
					slots = append(slots, slot)
				}
			}
		}
		close := 0
		for i := 1; i < len(starts); i++ {
			if starts[i]-starts[i-1] < 60 && slots[i] != slots[i-1] {
				close++
			}
		}
		t.Logf("every %d, thresholds %v: %d of %d snapshots started within 60 entries of another node's", every, thresholds, close, len(starts))
		if close*100 > 15*len(starts) {
			t.Errorf("every %d, thresholds %v: %d of %d snapshots started within 60 entries of another node's (more than 15%%)", every, thresholds, close, len(starts))
		}
	}
}

// TestSnapshotTurnsWithFluctuatingThresholds: under load each node's
// threshold moves every second (the mean entry size does), each node's a
// little differently. Cutting the windows from the threshold itself then
// makes the nodes' windows disagree often; cutting them from the
// threshold's slow average (as tuneLogLoop does) keeps them apart.
func TestSnapshotTurnsWithFluctuatingThresholds(t *testing.T) {
	const members, base = 3, 1000
	collisions := func(smoothed bool) (close, total int) {
		rng := rand.New(rand.NewPCG(1, 2))
		lastSnap := make([]uint64, members)
		checked := make([]uint64, members)
		thresh := make([]uint64, members)
		span := make([]float64, members)
		var starts []uint64
		var slots []int
		for idx := uint64(1); idx <= 200*base; idx++ {
			if idx%50 == 1 { // a second's worth of entries: retune
				common := 0.6 + 0.8*rng.Float64() // the log's entries, seen by all
				for s := range members {
					thresh[s] = uint64(base * common * (0.95 + 0.1*rng.Float64()))
					if span[s] == 0 {
						span[s] = float64(thresh[s])
					} else {
						span[s] += (float64(thresh[s]) - span[s]) / 16
					}
				}
			}
			for s := range members {
				if (idx+uint64(s))%5 != 0 {
					continue
				}
				sp := uint64(0)
				if smoothed {
					sp = uint64(span[s])
				}
				due := snapshotTurn(checked[s], idx, idx-lastSnap[s], thresh[s], sp, s, members)
				checked[s] = idx
				if due {
					lastSnap[s] = idx
					starts = append(starts, idx)
					slots = append(slots, s)
				}
			}
		}
		for i := 1; i < len(starts); i++ {
			if starts[i]-starts[i-1] < 20 && slots[i] != slots[i-1] {
				close++
			}
		}
		return close, len(starts)
	}
	rawClose, rawTotal := collisions(false)
	avgClose, avgTotal := collisions(true)
	t.Logf("windows from the threshold: %d of %d snapshots within 20 entries of another node's; from its average: %d of %d",
		rawClose, rawTotal, avgClose, avgTotal)
	if avgClose*100 > 10*avgTotal || avgClose*2 > rawClose {
		t.Errorf("windows from the average: %d of %d collisions (from the threshold: %d of %d): want under 10%% and under half",
			avgClose, avgTotal, rawClose, rawTotal)
	}
}
