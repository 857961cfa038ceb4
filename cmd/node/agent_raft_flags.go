package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/cluster"
)

// Bounds of the Raft timing flags. raft refuses timeouts under 5 ms; past
// a minute a dead leader goes unnoticed for longer than any operator
// would wait, so a larger value is a typo (10m for 10s).
const (
	minRaftTiming     = 5 * time.Millisecond
	maxRaftTiming     = time.Minute
	maxRaftMultiplier = 10 // Consul's raft_multiplier bound
)

// raftTimings are the Raft timeouts of `baton agent`; zero fields take
// cluster's defaults.
type raftTimings struct {
	HeartbeatTimeout time.Duration
	ElectionTimeout  time.Duration
	LeaderLease      time.Duration
}

// apply sets the timings on a cluster configuration.
func (r raftTimings) apply(c *cluster.Config) {
	override(&c.HeartbeatTimeout, r.HeartbeatTimeout)
	override(&c.ElectionTimeout, r.ElectionTimeout)
	override(&c.LeaderLeaseTimeout, r.LeaderLease)
}

// raftTimingEnv maps the Raft timing flags to their environment variables
// (merged into agentEnv, agentFlagGroupsEnv).
var raftTimingEnv = map[string]string{
	"raft-heartbeat-timeout": "BATON_RAFT_HEARTBEAT_TIMEOUT",
	"raft-election-timeout":  "BATON_RAFT_ELECTION_TIMEOUT",
	"raft-leader-lease":      "BATON_RAFT_LEADER_LEASE",
	"raft-multiplier":        "BATON_RAFT_MULTIPLIER",
}

// raftTimingFlags holds the flags' raw values until parse.
type raftTimingFlags struct {
	heartbeat, election, lease, multiplier *string
}

// addRaftTimingFlags defines the Raft timing flags on fs; str defines a
// string flag defaulting to its environment variable.
func addRaftTimingFlags(str func(name, usage string) *string) raftTimingFlags {
	return raftTimingFlags{
		heartbeat: str("raft-heartbeat-timeout", fmt.Sprintf("a follower that hears nothing from the leader for this long (to twice it, at random) starts an election; "+
			"it bounds how fast a dead leader is replaced, and a stall of the leader or the network longer than it costs a needless election (default %v × --raft-multiplier)",
			cluster.DefaultHeartbeatTimeout)),
		election: str("raft-election-timeout", fmt.Sprintf("how long a candidate waits for votes before it tries again (default %v × --raft-multiplier)",
			cluster.DefaultElectionTimeout)),
		lease: str("raft-leader-lease", fmt.Sprintf("a leader that has not heard from a quorum for this long steps down; at most --raft-heartbeat-timeout. "+
			"Longer rides out slow followers (a busy host, a stalled disk) instead of an election; it bounds how long a cut-off leader goes on believing it leads (default %v × --raft-multiplier, at most the heartbeat timeout)",
			cluster.DefaultLeaderLeaseTimeout)),
		multiplier: str("raft-multiplier", fmt.Sprintf("scales the default Raft timings, like Consul's raft_multiplier: 1 (the defaults, for a LAN: "+
			"a dead leader replaced in under a second) to %d; raise it on a slow or shared host or a WAN, where needless elections cost more than a slower failover. "+
			"The --raft-* timings given explicitly are not scaled (default 1)", maxRaftMultiplier)),
	}
}

// parse validates the flags, naming each problem through bad. Only what
// was given (flag, environment or config file) is set, so a command line
// without them leaves every timing to cluster's defaults.
func (f raftTimingFlags) parse(bad func(format string, args ...any)) raftTimings {
	mult := 1
	multGiven := false
	if v := strings.TrimSpace(*f.multiplier); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxRaftMultiplier {
			bad("--raft-multiplier %q: want a whole number in 1..%d", v, maxRaftMultiplier)
			n = 1
		}
		mult, multGiven = n, true
	}
	dur := func(name, v string) (time.Duration, bool) {
		return durationFlag(name, v, minRaftTiming, maxRaftTiming, "500ms", bad)
	}
	hb, hbGiven := dur("raft-heartbeat-timeout", *f.heartbeat)
	el, elGiven := dur("raft-election-timeout", *f.election)
	ls, lsGiven := dur("raft-leader-lease", *f.lease)
	if !multGiven && !hbGiven && !elGiven && !lsGiven {
		return raftTimings{}
	}
	scaled := func(d time.Duration) time.Duration { return d * time.Duration(mult) }
	if !hbGiven {
		hb = scaled(cluster.DefaultHeartbeatTimeout)
	}
	if !elGiven {
		el = scaled(cluster.DefaultElectionTimeout)
	}
	if !lsGiven {
		// As cluster does: a heartbeat timeout set below the lease takes
		// the lease down with it.
		ls = min(scaled(cluster.DefaultLeaderLeaseTimeout), hb)
	} else if ls > hb {
		// raft refuses it: a leader must step down before the followers
		// elect another, or two would act as leader at once.
		bad("--raft-leader-lease %v exceeds the heartbeat timeout %v: a leader must give up before its followers elect another; raise --raft-heartbeat-timeout too", ls, hb)
	}
	return raftTimings{HeartbeatTimeout: hb, ElectionTimeout: el, LeaderLease: ls}
}
