package main

import (
	"io"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
)

// The Raft log flags reach the cluster configuration; none given leaves
// cluster's defaults; bad values are usage errors naming the flag.
func TestAgentRaftLogFlags(t *testing.T) {
	dev := []string{"--dev"}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want raftLog
		err  string
	}{
		{name: "none: cluster's defaults", args: dev},
		{name: "flags", args: append([]string{"--raft-snapshot-threshold", "64", "--raft-trailing-logs", "16", "--raft-snapshot-interval", "200ms"}, dev...),
			want: raftLog{SnapshotThreshold: 64, TrailingLogs: 16, SnapshotInterval: 200 * time.Millisecond}},
		{name: "from the environment", env: map[string]string{"BATON_RAFT_TRAILING_LOGS": "32"}, args: dev, want: raftLog{TrailingLogs: 32}},
		{name: "zero", args: append([]string{"--raft-trailing-logs", "0"}, dev...), err: `--raft-trailing-logs "0"`},
		{name: "not a number", args: append([]string{"--raft-snapshot-threshold", "many"}, dev...), err: `--raft-snapshot-threshold "many"`},
		{name: "interval too short", args: append([]string{"--raft-snapshot-interval", "1ms"}, dev...), err: `--raft-snapshot-interval "1ms"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAgentFlags(tc.args, func(k string) string { return tc.env[k] }, io.Discard, io.Discard)
			if usageErrorCase(t, err, tc.err) {
				return
			}
			if got.RaftLog != tc.want {
				t.Fatalf("raft log %+v, want %+v", got.RaftLog, tc.want)
			}
			c := cluster.DefaultConfig()
			got.RaftLog.apply(&c)
			want := tc.want
			d := cluster.DefaultConfig()
			if want.SnapshotThreshold == 0 {
				want.SnapshotThreshold = d.SnapshotThreshold
			}
			if want.TrailingLogs == 0 {
				want.TrailingLogs = d.TrailingLogs
			}
			if want.SnapshotInterval == 0 {
				want.SnapshotInterval = d.SnapshotInterval
			}
			if have := (raftLog{c.SnapshotThreshold, c.TrailingLogs, c.SnapshotInterval}); have != want {
				t.Fatalf("cluster config %+v, want %+v", have, want)
			}
		})
	}
}
