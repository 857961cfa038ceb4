package cluster

import (
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Raft counts its log in entries (SnapshotThreshold, TrailingLogs), but a
// RaftStore entry carries a whole group commit: a few hundred bytes when
// idle, hundreds of KB under load. With the defaults (8192 + 10240
// entries) a busy cluster kept some 250 MB of log for 18 MB of live state
// (BENCHMARKS.md). The node therefore measures the mean entry size and, on
// every SnapshotInterval, turns a byte budget into entry counts that it
// hands to raft with ReloadConfig; the new threshold applies at raft's next
// snapshot check, the new trailing count at the next compaction.

// DefaultLogBytesFloor is the smallest byte budget a node derives from its
// live state (Config.LogBytesBudget 0): a small state still keeps enough
// log that a follower a few seconds behind catches up without a snapshot.
const DefaultLogBytesFloor = 16 << 20

// DefaultLogMinEntries is the fewest entries SnapshotThreshold and
// TrailingLogs are ever set to, however big the entries, so that a tiny
// budget still leaves a follower that blinks some log to catch up from.
// The byte floor does that job for ordinary budgets; at 256, 100 KB group
// commits kept 2.5 times a 20 MB live state instead of twice it.
const DefaultLogMinEntries = 64

// logEntryOverhead approximates what bolt stores per entry besides Data
// and Extensions (index key, term, type, append time, msgpack framing).
const logEntryOverhead = 48

// logMeter counts the entries the log store accepted and their bytes.
type logMeter struct {
	entries atomic.Uint64
	bytes   atomic.Uint64
}

func (m *logMeter) add(ls ...*raft.Log) {
	if m == nil {
		return
	}
	var b uint64
	for _, l := range ls {
		b += uint64(len(l.Data)+len(l.Extensions)) + logEntryOverhead
	}
	m.entries.Add(uint64(len(ls)))
	m.bytes.Add(b)
}

// logTuner turns the log's byte budget into entry counts. Not safe for
// concurrent use: one goroutine (Node.tuneLogLoop) owns it.
type logTuner struct {
	budget     int64 // Config.LogBytesBudget: 0 derives it from the live state
	floor      int64
	minEntries uint64
	maxThresh  uint64 // the configured SnapshotThreshold
	maxTrail   uint64 // the configured TrailingLogs

	// A decaying window of what the log store accepted: each observation
	// halves the past, so the mean follows the current entry size within a
	// few intervals without jumping on one quiet interval's few no-ops.
	lastEntries, lastBytes uint64
	winEntries, winBytes   float64
}

// logLimits is what one observation decided.
type logLimits struct {
	Budget            int64   // bytes allowed for each of the two parts of the log
	AvgEntryBytes     float64 // mean entry size the counts were derived from; 0 before any entry
	SnapshotThreshold uint64
	TrailingLogs      uint64
}

// observe takes the meter's totals and the live state's size and returns
// the limits to run with.
func (t *logTuner) observe(entries, bytes uint64, live int64) logLimits {
	dE, dB := entries-t.lastEntries, bytes-t.lastBytes
	t.lastEntries, t.lastBytes = entries, bytes
	t.winEntries = t.winEntries/2 + float64(dE)
	t.winBytes = t.winBytes/2 + float64(dB)

	budget := t.budget
	if budget == 0 {
		budget = max(live, t.floor)
	}
	lim := logLimits{Budget: budget, SnapshotThreshold: t.maxThresh, TrailingLogs: t.maxTrail}
	if t.winEntries < 1 {
		return lim // nothing written yet: the configured counts stand
	}
	lim.AvgEntryBytes = t.winBytes / t.winEntries
	n := uint64(float64(budget) / lim.AvgEntryBytes)
	clamp := func(ceiling uint64) uint64 {
		return max(min(n, ceiling), min(t.minEntries, ceiling))
	}
	lim.SnapshotThreshold, lim.TrailingLogs = clamp(t.maxThresh), clamp(t.maxTrail)
	return lim
}

// logCheckInterval is how often, at most, the node checks its log against
// the budget. Raft looks at SnapshotThreshold only every SnapshotInterval
// to 2×SnapshotInterval (120–240 s by default), and a cluster writing tens
// of MB a second outgrows any byte budget in that time; so the node also
// asks for a snapshot itself once the entries since the last one pass the
// threshold.
const logCheckInterval = time.Second

// tuneLogLoop applies the log's byte budget to raft until the node shuts
// down: it retunes the entry counts, and snapshots when raft's own check
// would come too late.
func (n *Node) tuneLogLoop(meter *logMeter, t *logTuner) {
	defer close(n.tuneDone)
	tick := time.NewTicker(min(n.cfg.SnapshotInterval, logCheckInterval))
	defer tick.Stop()
	cur := logLimits{SnapshotThreshold: t.maxThresh, TrailingLogs: t.maxTrail}
	for {
		select {
		case <-n.shutdownCh:
			return
		case <-tick.C:
		}
		var live int64
		if s, ok := n.fsm.WALStats(); ok {
			live = s.LiveBytes
		}
		lim := t.observe(meter.entries.Load(), meter.bytes.Load(), live)
		if lim.SnapshotThreshold != cur.SnapshotThreshold || lim.TrailingLogs != cur.TrailingLogs {
			rc := n.raft.ReloadableConfig()
			rc.SnapshotThreshold, rc.TrailingLogs = lim.SnapshotThreshold, lim.TrailingLogs
			if err := n.raft.ReloadConfig(rc); err != nil {
				n.log.Warn("cannot bound the raft log in bytes; keeping its entry counts", "error", err)
				continue
			}
			n.log.Info("raft log bounded in bytes",
				"budget_bytes", lim.Budget, "live_bytes", live, "avg_entry_bytes", int64(lim.AvgEntryBytes),
				"snapshot_threshold", lim.SnapshotThreshold, "trailing_logs", lim.TrailingLogs)
			cur = lim
		}
		if cur.AvgEntryBytes > 0 && n.entriesSinceSnapshot() > cur.SnapshotThreshold {
			if err := n.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
				n.log.Debug("snapshot for the log's byte budget failed; raft's own check will try again", "error", err)
			}
		}
	}
}

// entriesSinceSnapshot is how many entries the log holds past the last
// snapshot, from raft's stats (0 if they cannot be read).
func (n *Node) entriesSinceSnapshot() uint64 {
	st := n.raft.Stats()
	last, err1 := strconv.ParseUint(st["last_log_index"], 10, 64)
	snap, err2 := strconv.ParseUint(st["last_snapshot_index"], 10, 64)
	if err1 != nil || err2 != nil || last < snap {
		return 0
	}
	return last - snap
}
