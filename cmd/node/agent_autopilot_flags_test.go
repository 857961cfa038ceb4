package main

import (
	"io"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
)

// The autopilot's flags: cluster's defaults when not given; from a flag,
// the environment or the config file; 0 stabilization promotes at once;
// a bad value is a usage error naming the flag.
func TestAgentAutopilotFlags(t *testing.T) {
	noEnv := func(string) string { return "" }
	applied := func(a autopilotSettings) cluster.Config {
		c := cluster.DefaultConfig()
		a.apply(&c)
		return c
	}
	cfg, err := parseAgentFlags([]string{"--dev"}, noEnv, io.Discard, io.Discard)
	if c := applied(cfg.Autopilot); err != nil || c.ServerStabilizationTime != cluster.DefaultServerStabilizationTime || c.DeadMemberTimeout != 0 || c.MinQuorum != cluster.DefaultMinQuorum {
		t.Fatalf("default: %+v, %v", cfg.Autopilot, err)
	}
	cfg, err = parseAgentFlags([]string{"--dev", "--server-stabilization-time", "30s", "--dead-member-timeout", "5m", "--min-quorum", "5"}, noEnv, io.Discard, io.Discard)
	if c := applied(cfg.Autopilot); err != nil || c.ServerStabilizationTime != 30*time.Second || c.DeadMemberTimeout != 5*time.Minute || c.MinQuorum != 5 {
		t.Fatalf("flags: %+v, %v", cfg.Autopilot, err)
	}
	env := map[string]string{"BATON_DEAD_MEMBER_TIMEOUT": "1m", "BATON_SERVER_STABILIZATION_TIME": "0"}
	cfg, err = parseAgentFlags([]string{"--dev"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if c := applied(cfg.Autopilot); err != nil || c.DeadMemberTimeout != time.Minute || c.ServerStabilizationTime <= 0 || c.ServerStabilizationTime >= time.Millisecond {
		t.Fatalf("environment: %+v, %v (0 stabilization: promote at once)", cfg.Autopilot, err)
	}
	conf := writeConfig(t, `{"dev": true, "min_quorum": 4, "dead-member-timeout": "90s"}`)
	cfg, err = parseAgentFlags([]string{"--config", conf}, noEnv, io.Discard, io.Discard)
	if c := applied(cfg.Autopilot); err != nil || c.MinQuorum != 4 || c.DeadMemberTimeout != 90*time.Second {
		t.Fatalf("config file: %+v, %v", cfg.Autopilot, err)
	}
	checkAgentUsageErrors(t, []agentUsageCase{
		{[]string{"--server-stabilization-time", "soon"}, `--server-stabilization-time "soon": want a duration`},
		{[]string{"--dead-member-timeout", "-1m"}, `--dead-member-timeout "-1m": want a duration`},
		{[]string{"--min-quorum", "0"}, `--min-quorum "0": want a number of voters in 1..99`},
	})
}
