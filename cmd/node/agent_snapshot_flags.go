package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/baton-dev/baton/cluster/admin"
)

// minSnapshotInterval bounds --snapshot-interval from below: the files
// are named to the second.
const minSnapshotInterval = time.Second

// maxSnapshotRetain bounds --snapshot-retain: more is a typo, not a plan.
const maxSnapshotRetain = 10000

// snapshotSchedule is the agent's scheduled snapshots as given; zero
// Interval: none (admin.SnapshotSchedule).
type snapshotSchedule struct {
	Interval time.Duration
	Dir      string
	Retain   int // 0: admin.DefaultSnapshotRetain
}

// schedule is the admin server's configuration, nil when off.
func (s snapshotSchedule) schedule() *admin.SnapshotSchedule {
	if s.Interval <= 0 {
		return nil
	}
	return &admin.SnapshotSchedule{Interval: s.Interval, Dir: s.Dir, Retain: s.Retain}
}

// snapshotEnv maps the snapshot flags to their environment variables
// (merged into agentEnv, agentFlagGroupsEnv).
var snapshotEnv = map[string]string{
	"snapshot-interval": "BATON_SNAPSHOT_INTERVAL",
	"snapshot-dir":      "BATON_SNAPSHOT_DIR",
	"snapshot-retain":   "BATON_SNAPSHOT_RETAIN",
}

// snapshotFlags holds the flags' raw values until parse.
type snapshotFlags struct{ interval, dir, retain *string }

func addSnapshotFlags(str func(name, usage string) *string) snapshotFlags {
	return snapshotFlags{
		interval: str("snapshot-interval", fmt.Sprintf("while this master leads, write a snapshot of the cluster's state into --snapshot-dir every this long "+
			"(as 'baton snapshot save' does, verified after writing); at least %v; 0: none (default 0)", minSnapshotInterval)),
		dir: str("snapshot-dir", "directory of the scheduled snapshots (baton-<cluster id>-<UTC time>-<index>.snap), created 0700 if missing; required with --snapshot-interval"),
		retain: str("snapshot-retain", fmt.Sprintf("how many scheduled snapshots to keep in --snapshot-dir, the oldest removed first; 1..%d (default %d)",
			maxSnapshotRetain, admin.DefaultSnapshotRetain)),
	}
}

// parse validates the flags, naming each problem through bad.
func (f snapshotFlags) parse(bad func(format string, args ...any)) snapshotSchedule {
	var s snapshotSchedule
	if v := strings.TrimSpace(*f.interval); v != "" && v != "0" {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			bad("--snapshot-interval %q: want a duration, e.g. 1h or 30m (0: none)", v)
		case d < 0:
			bad("--snapshot-interval %q: want a positive duration, or 0 for none", v)
		case d > 0 && d < minSnapshotInterval:
			bad("--snapshot-interval %q: want at least %v (the files are named to the second), or 0 for none", v, minSnapshotInterval)
		default:
			s.Interval = d
		}
	}
	if n, given := intFlag("snapshot-retain", *f.retain, "a number of snapshots", 1, maxSnapshotRetain, bad); given {
		s.Retain = n
	}
	s.Dir = strings.TrimSpace(*f.dir)
	if s.Interval > 0 && s.Dir == "" {
		bad("--snapshot-interval needs --snapshot-dir: the directory the leader writes them into")
	}
	return s
}
