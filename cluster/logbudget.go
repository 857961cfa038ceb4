package cluster

import (
	"errors"
	"math/bits"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
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
	// lastAvg is the mean entry size of the last window that held any,
	// kept through quiet spells: a few seconds without commits (an
	// election, an idle cluster) emptied the window, and the counts went
	// back to the configured 8192 + 10240 entries, which at the 50 KB
	// entries of a million-region cluster is 900 MB of log, until the
	// next write brought them down again with a snapshot and a compaction
	// of all that, just as the new leader needed the CPU and the disk.
	lastAvg float64
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
	switch {
	case t.winEntries >= 1:
		t.lastAvg = t.winBytes / t.winEntries
	case t.lastAvg == 0:
		return lim // nothing written yet: the configured counts stand
	}
	lim.AvgEntryBytes = t.lastAvg
	n := uint64(float64(budget) / lim.AvgEntryBytes)
	clamp := func(ceiling uint64) uint64 {
		return max(min(n, ceiling), min(t.minEntries, ceiling))
	}
	lim.SnapshotThreshold, lim.TrailingLogs = clamp(t.maxThresh), clamp(t.maxTrail)
	return lim
}

// logCheckInterval is how often, at most, the node retunes its log's
// entry counts from the budget. Raft looks at SnapshotThreshold only every
// SnapshotInterval to 2×SnapshotInterval (120–240 s by default), and a
// cluster writing tens of MB a second outgrows any byte budget in that
// time; so the node also asks for a snapshot itself once the entries since
// the last one pass the threshold, in its turn (snapshotTurn), which it
// checks every snapshotTurnInterval so as not to sleep through it.
const (
	logCheckInterval     = time.Second
	snapshotTurnInterval = 100 * time.Millisecond
)

// tuneLogLoop applies the log's byte budget to raft until the node shuts
// down: it retunes the entry counts, and snapshots when raft's own check
// would come too late.
func (n *Node) tuneLogLoop(meter *logMeter, t *logTuner) {
	defer close(n.tuneDone)
	tick := time.NewTicker(min(n.cfg.SnapshotInterval, snapshotTurnInterval))
	defer tick.Stop()
	cur := logLimits{SnapshotThreshold: t.maxThresh, TrailingLogs: t.maxTrail}
	logged := cur
	var tuned time.Time
	var checked uint64 // the last index the turn was checked at
	var span float64   // the threshold's slow average (snapshotTurn)
	for {
		select {
		case <-n.shutdownCh:
			return
		case now := <-tick.C:
			if now.Sub(tuned) >= min(n.cfg.SnapshotInterval, logCheckInterval) {
				tuned = now
				cur, logged = n.retuneLog(meter, t, cur, logged)
				if span == 0 {
					span = float64(cur.SnapshotThreshold)
				} else {
					span += (float64(cur.SnapshotThreshold) - span) / 16
				}
			}
		}
		if cur.AvgEntryBytes == 0 {
			continue
		}
		last, since, ok := n.logSinceSnapshot()
		if !ok {
			continue
		}
		// Below 0.75×threshold no rule snapshots (snapshotTurn), so the
		// configuration is read and sorted only once a turn may be due.
		due := false
		if since > cur.SnapshotThreshold-cur.SnapshotThreshold/4 {
			slot, members := n.snapshotSlot()
			due = snapshotTurn(checked, last, since, cur.SnapshotThreshold, uint64(span), slot, members)
		}
		checked = last
		if due {
			if err := n.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
				n.log.Debug("snapshot for the log's byte budget failed; raft's own check will try again", "error", err)
			}
		}
	}
}

// retuneLog turns the budget into entry counts for raft, returning the
// limits in force and the last ones logged at Info (a change of less than
// half or double is logged at Debug: under load the mean entry moves every
// second).
func (n *Node) retuneLog(meter *logMeter, t *logTuner, cur, logged logLimits) (logLimits, logLimits) {
	var live int64
	if s, ok := n.fsm.WALStats(); ok {
		live = s.LiveBytes
	}
	lim := t.observe(meter.entries.Load(), meter.bytes.Load(), live)
	if lim.SnapshotThreshold == cur.SnapshotThreshold && lim.TrailingLogs == cur.TrailingLogs {
		cur.AvgEntryBytes, cur.Budget = lim.AvgEntryBytes, lim.Budget
		return cur, logged
	}
	rc := n.raft.ReloadableConfig()
	rc.SnapshotThreshold, rc.TrailingLogs = lim.SnapshotThreshold, lim.TrailingLogs
	if err := n.raft.ReloadConfig(rc); err != nil {
		n.log.Warn("cannot bound the raft log in bytes; keeping its entry counts", "error", err)
		return cur, logged
	}
	level := hclog.Debug
	if lim.SnapshotThreshold > 2*logged.SnapshotThreshold || 2*lim.SnapshotThreshold < logged.SnapshotThreshold {
		level, logged = hclog.Info, lim
	}
	n.log.Log(level, "raft log bounded in bytes",
		"budget_bytes", lim.Budget, "live_bytes", live, "avg_entry_bytes", int64(lim.AvgEntryBytes),
		"snapshot_threshold", lim.SnapshotThreshold, "trailing_logs", lim.TrailingLogs)
	return lim, logged
}

// logSinceSnapshot reads raft's last log index and how many entries the
// log holds past the last snapshot.
func (n *Node) logSinceSnapshot() (last, since uint64, ok bool) {
	st := n.raft.Stats()
	last, err1 := strconv.ParseUint(st["last_log_index"], 10, 64)
	snap, err2 := strconv.ParseUint(st["last_snapshot_index"], 10, 64)
	if err1 != nil || err2 != nil || last < snap {
		return 0, 0, false
	}
	return last, last - snap, true
}

// snapshotSlot is this node's place among the configuration's servers,
// sorted by id, and their number: the same order on every node, since
// every node reads the same configuration from the log.
func (n *Node) snapshotSlot() (slot, members int) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0, 1
	}
	servers := f.Configuration().Servers
	ids := make([]string, 0, len(servers))
	for _, s := range servers {
		ids = append(ids, string(s.ID))
	}
	slices.Sort(ids)
	i := slices.Index(ids, n.cfg.ID)
	if i < 0 {
		return 0, 1
	}
	return i, len(ids)
}

// snapshotTurn decides whether a node whose log holds since entries past
// its last snapshot, now at index last and at index checked when it last
// asked, takes a budget snapshot now.
//
// Every node reads the same log, so a plain "since > threshold" rule had
// all masters encode their whole state in the same second: on a busy
// 2-core VM that starved the leader's heartbeats past its lease and it
// stepped down, 39 times in four minutes at 300 k regions (BENCHMARKS.md).
// Instead, from 0.75×threshold on, a node waits for its turn: the log's
// indexes are cut into windows, taken by the members in id order, and a
// node starts in the first half of its window (or at its first check after
// that half began, if the log passed it between two checks). So nodes
// start their snapshots about a window apart, and each one's turn comes
// before 1.25×threshold; a node that still missed it snapshots anyway past
// 1.25×threshold, so the log's bound stays within a quarter of the
// threshold of the plain rule's. The window is a power of two near
// threshold/(2×members), so nodes whose thresholds (each derived from its
// own meter, from the same log) differ a little mostly cut the log the
// same way; when their thresholds straddle a power of two, some of their
// turns collide (TestSnapshotTurnsAcrossWindowBoundaryMostlyApart).
//
// span is what the windows are cut from: a slow average of the threshold
// (tuneLogLoop), which moves every second under load (330 to 1,100
// entries within seconds at 300 k regions) while nodes reading the same
// log average to nearly the same value (0 means the threshold). When the
// threshold dips below its average a round of turns may not fit between
// 0.75 and 1.25 of it; the node then snapshots at 1.25, counted from its
// own last snapshot, which the turns had already set apart from the
// others'. Simulated (TestSnapshotTurnsWithFluctuatingThresholds): 2.5%
// of snapshots near another node's, against 5.2% with windows cut from
// the threshold itself.
func snapshotTurn(checked, last, since, threshold, span uint64, slot, members int) bool {
	// threshold/4 < members, not threshold < 4×members: the product wraps
	// for a huge members, and the window's shift below went negative.
	if members <= 1 || threshold/4 < uint64(members) {
		return since > threshold
	}
	early, late := threshold-threshold/4, threshold+threshold/4
	switch {
	case since <= early:
		return false
	case since > late:
		return true
	}
	if span/4 < uint64(members) {
		span = threshold // as above: a window of at least 2
	}
	window := uint64(1) << (bits.Len64(span/(2*uint64(members))) - 1)
	m := uint64(members)
	if checked >= last || last-checked >= window*m {
		checked = min(checked, last-1) // a first check, or a whole round passed
		if last-checked >= window*m {
			return true
		}
	}
	// Does the first half of one of this node's windows begin or lie in
	// (checked, last]?
	for w := checked / window; w <= last/window; w++ {
		if w%m != uint64(slot) {
			continue
		}
		lo, hi := w*window, w*window+window/2 // the half [lo, hi)
		if lo <= last && hi > checked+1 {
			return true
		}
	}
	return false
}
