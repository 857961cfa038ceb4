package main

import (
	"fmt"
	"time"

	"github.com/baton-dev/baton/cluster"
)

// maxAutopilotTiming bounds --server-stabilization-time and
// --dead-member-timeout: past a day the wait is a typo (10h for 10s), and
// a dead member's removal that late is no autopilot.
const maxAutopilotTiming = 24 * time.Hour

// autopilotSettings are the autopilot flags of `baton agent` (docs/
// operations.md, "Members that manage themselves"); unset fields keep
// cluster's defaults.
type autopilotSettings struct {
	Stabilization    time.Duration
	StabilizationSet bool
	DeadMember       time.Duration
	MinQuorum        int
	// ReadyMaxLag is --ready-max-lag (0: cluster's default). It sits
	// with the autopilot's settings as its measure of caught up does.
	ReadyMaxLag uint64
}

// apply sets the settings on a cluster configuration.
func (a autopilotSettings) apply(c *cluster.Config) {
	if a.StabilizationSet {
		c.ServerStabilizationTime = a.Stabilization
		if a.Stabilization == 0 {
			// 0 given: promote at once, not cluster's zero-means-default.
			c.ServerStabilizationTime = time.Nanosecond
		}
	}
	c.DeadMemberTimeout = a.DeadMember
	override(&c.MinQuorum, a.MinQuorum)
	override(&c.ReadyMaxLag, a.ReadyMaxLag)
}

// autopilotEnv maps the autopilot flags to their environment variables
// (merged into agentEnv, agentFlagGroupsEnv).
var autopilotEnv = map[string]string{
	"server-stabilization-time": "BATON_SERVER_STABILIZATION_TIME",
	"dead-member-timeout":       "BATON_DEAD_MEMBER_TIMEOUT",
	"min-quorum":                "BATON_MIN_QUORUM",
	"ready-max-lag":             "BATON_READY_MAX_LAG",
}

// autopilotFlags holds the flags' raw values until parse.
type autopilotFlags struct {
	stabilization, deadMember, minQuorum, readyMaxLag *string
}

func addAutopilotFlags(str func(name, usage string) *string) autopilotFlags {
	return autopilotFlags{
		stabilization: str("server-stabilization-time", fmt.Sprintf("a member that joins is a non-voter until it has caught up and stayed healthy this long; then the leader makes it a voter (default %v, as Consul; "+
			"applies once every member runs 0.2.0 or later, before that members join as voters)", cluster.DefaultServerStabilizationTime)),
		deadMember: str("dead-member-timeout", "the leader removes a voter that has not answered it for this long, once enough other voters are healthy that at least --min-quorum remain (0: never, the default)"),
		minQuorum:  str("min-quorum", fmt.Sprintf("the fewest voters the leader leaves when it removes a dead one (--dead-member-timeout) (default %d, as Consul's min_quorum)", cluster.DefaultMinQuorum)),
		readyMaxLag: str("ready-max-lag", fmt.Sprintf("a follower is ready (/readyz 200) only while it has applied the log to within this many entries of the leader's commit index "+
			"(default %d, the autopilot's caught-up measure; 1..1000000)", cluster.DefaultReadyMaxLag)),
	}
}

// parse validates the flags, naming each problem through bad.
func (f autopilotFlags) parse(bad func(format string, args ...any)) autopilotSettings {
	var a autopilotSettings
	dur := func(name, v string) (time.Duration, bool) {
		return durationFlag(name, v, 0, maxAutopilotTiming, "10s", bad)
	}
	a.Stabilization, a.StabilizationSet = dur("server-stabilization-time", *f.stabilization)
	a.DeadMember, _ = dur("dead-member-timeout", *f.deadMember)
	if n, ok := intFlag("min-quorum", *f.minQuorum, "a number of voters", 1, 99, bad); ok {
		a.MinQuorum = n
	}
	if n, ok := intFlag("ready-max-lag", *f.readyMaxLag, "a number of log entries", 1, 1000000, bad); ok {
		a.ReadyMaxLag = uint64(n)
	}
	return a
}
