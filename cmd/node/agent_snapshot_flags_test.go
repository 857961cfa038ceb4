package main

import (
	"io"
	"testing"
	"time"
)

// The scheduled snapshots' flags: off by default; from a flag, the
// environment or the config file; a bad value is a usage error, exit 2,
// naming the flag.
func TestAgentSnapshotFlags(t *testing.T) {
	noEnv := func(string) string { return "" }
	cfg, err := parseAgentFlags([]string{"--dev"}, noEnv, io.Discard, io.Discard)
	if err != nil || cfg.Snapshots != (snapshotSchedule{}) || cfg.Snapshots.schedule() != nil {
		t.Fatalf("default: %+v, %v; want none", cfg.Snapshots, err)
	}
	cfg, err = parseAgentFlags([]string{"--dev", "--snapshot-interval", "1h", "--snapshot-dir", "/backups", "--snapshot-retain", "3"}, noEnv, io.Discard, io.Discard)
	if err != nil || cfg.Snapshots != (snapshotSchedule{Interval: time.Hour, Dir: "/backups", Retain: 3}) {
		t.Fatalf("flags: %+v, %v", cfg.Snapshots, err)
	}
	if s := cfg.Snapshots.schedule(); s == nil || s.Interval != time.Hour || s.Dir != "/backups" || s.Retain != 3 {
		t.Fatalf("schedule %+v", s)
	}
	env := map[string]string{"BATON_SNAPSHOT_INTERVAL": "30m", "BATON_SNAPSHOT_DIR": "/e"}
	cfg, err = parseAgentFlags([]string{"--dev"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err != nil || cfg.Snapshots != (snapshotSchedule{Interval: 30 * time.Minute, Dir: "/e"}) {
		t.Fatalf("environment: %+v, %v", cfg.Snapshots, err)
	}
	conf := writeConfig(t, `{"dev": true, "snapshot_interval": "2h", "snapshot-dir": "/c", "snapshot_retain": 7}`)
	cfg, err = parseAgentFlags([]string{"--config", conf}, noEnv, io.Discard, io.Discard)
	if err != nil || cfg.Snapshots != (snapshotSchedule{Interval: 2 * time.Hour, Dir: "/c", Retain: 7}) {
		t.Fatalf("config file: %+v, %v", cfg.Snapshots, err)
	}
	if cfg, err = parseAgentFlags([]string{"--dev", "--snapshot-interval", "0"}, noEnv, io.Discard, io.Discard); err != nil || cfg.Snapshots.schedule() != nil {
		t.Fatalf("interval 0: %+v, %v; want none", cfg.Snapshots, err)
	}

	checkAgentUsageErrors(t, []agentUsageCase{
		{[]string{"--snapshot-interval", "hourly", "--snapshot-dir", "/b"}, `--snapshot-interval "hourly": want a duration`},
		{[]string{"--snapshot-interval", "-1h", "--snapshot-dir", "/b"}, `--snapshot-interval "-1h": want a positive duration`},
		{[]string{"--snapshot-interval", "10ms", "--snapshot-dir", "/b"}, "want at least 1s"},
		{[]string{"--snapshot-interval", "1h"}, "--snapshot-interval needs --snapshot-dir"},
		{[]string{"--snapshot-interval", "1h", "--snapshot-dir", "/b", "--snapshot-retain", "-2"}, `--snapshot-retain "-2": want a number of snapshots in 1..10000`},
		{[]string{"--snapshot-interval", "1h", "--snapshot-dir", "/b", "--snapshot-retain", "0"}, `--snapshot-retain "0"`},
	})
}
