package main

import (
	"fmt"
	"math"
	"time"

	"github.com/baton-dev/baton/cluster"
)

// raftLog is how often the agent compacts its Raft log; zero fields take
// cluster's defaults. The log is otherwise bounded by a byte budget the
// node tunes itself (cluster/logbudget.go), which keeps the counts at or
// below these: they are ceilings, so a small value compacts sooner.
//
// An operator rarely needs them; they exist so that a member that
// replaced its disk can be made to catch up by snapshot with a small
// cluster (the disaster drills, docs/operations.md), which the defaults
// reach only after thousands of writes.
type raftLog struct {
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotInterval  time.Duration
}

// apply sets the counts on a cluster configuration.
func (r raftLog) apply(c *cluster.Config) {
	override(&c.SnapshotThreshold, r.SnapshotThreshold)
	override(&c.TrailingLogs, r.TrailingLogs)
	override(&c.SnapshotInterval, r.SnapshotInterval)
}

// Raft's own minimum for the snapshot check's interval.
const minRaftSnapshotInterval = 5 * time.Millisecond

// raftLogEnv maps the Raft log flags to their environment variables
// (merged into agentEnv, agentFlagGroupsEnv).
var raftLogEnv = map[string]string{
	"raft-snapshot-threshold": "BATON_RAFT_SNAPSHOT_THRESHOLD",
	"raft-trailing-logs":      "BATON_RAFT_TRAILING_LOGS",
	"raft-snapshot-interval":  "BATON_RAFT_SNAPSHOT_INTERVAL",
}

// raftLogFlags holds the flags' raw values until parse.
type raftLogFlags struct {
	threshold, trailing, interval *string
}

func addRaftLogFlags(str func(name, usage string) *string) raftLogFlags {
	return raftLogFlags{
		threshold: str("raft-snapshot-threshold", fmt.Sprintf("at most this many Raft log entries since the last snapshot before the next (the log's byte budget may snapshot sooner) (default %d)", cluster.DefaultSnapshotThreshold)),
		trailing:  str("raft-trailing-logs", fmt.Sprintf("at most this many Raft log entries kept after a snapshot: a follower further behind catches up by installing the leader's snapshot (default %d)", cluster.DefaultTrailingLogs)),
		interval:  str("raft-snapshot-interval", fmt.Sprintf("how often Raft checks --raft-snapshot-threshold (at random, to twice it) (default %v)", cluster.DefaultSnapshotInterval)),
	}
}

func (f raftLogFlags) parse(bad func(format string, args ...any)) raftLog {
	var r raftLog
	count := func(name, v string) uint64 {
		n, ok := intFlag(name, v, "a number of log entries", 1, math.MaxInt32, bad)
		if !ok || n < 1 {
			return 0
		}
		return uint64(n)
	}
	r.SnapshotThreshold = count("raft-snapshot-threshold", *f.threshold)
	r.TrailingLogs = count("raft-trailing-logs", *f.trailing)
	r.SnapshotInterval, _ = durationFlag("raft-snapshot-interval", *f.interval, minRaftSnapshotInterval, time.Hour, "30s", bad)
	return r
}
