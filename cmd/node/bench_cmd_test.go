package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
)

func TestBenchScaleBadFlags(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--regions", "ten"}, `--regions: "ten" is not a positive number`},
		{[]string{"--regions", ""}, "--regions is empty"},
		{[]string{"--table-regions", strconv.Itoa(client.MaxRegions + 1)}, fmt.Sprintf("--table-regions %d: want 1 to %d", client.MaxRegions+1, client.MaxRegions)},
		{[]string{"--regionservers", "1"}, "--regionservers 1: want at least 2"},
		{[]string{"--skip", "open"}, `--skip: unknown phase "open"`},
		{[]string{"--phase-timeout", "0s"}, "--phase-timeout 0s"},
		{[]string{"extra"}, "takes no arguments"},
		{[]string{"--workers", "-1"}, "--workers -1: want 1 to 4096"},
		{[]string{"--profile", t.TempDir(), "--profile-seconds", "0"}, "--profile-seconds 0: want at least 1"},
		{[]string{"--profile", filepath.Join(notDir, "profiles")}, "--profile: mkdir"},
		{[]string{"--tls", "yes"}, `--tls "yes": want off, on or both`},
	} {
		code, _, stderr := runCLI(t, nil, append([]string{"bench", "scale"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("bench scale %q: exit %d, stderr %q; want exit %d naming %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
	// Valid flags, from a test binary: refused before anything starts.
	if code, _, stderr := runCLI(t, nil, "bench", "scale", "--regions", "10"); code != exitFailed || !strings.Contains(stderr, "is a test binary") {
		t.Errorf("bench scale from a test binary: exit %d, stderr %q", code, stderr)
	}
	if code, stdout, _ := runCLI(t, nil, "bench", "scale", "-h"); code != exitOK || !strings.Contains(stdout, "--table-regions") {
		t.Errorf("bench scale -h: exit %d, stdout %q", code, stdout)
	}
	if code, _, stderr := runCLI(t, nil, "bench", "sclae"); code != exitUsage || !strings.Contains(stderr, `unknown command "sclae"`) {
		t.Errorf("bench sclae: exit %d, stderr %q", code, stderr)
	}
}

func TestTableNames(t *testing.T) {
	got := tableNames(4500, 2000)
	if len(got) != 3 || got[0].regions != 2000 || got[2].regions != 500 || got[2].name != "bench_2" {
		t.Errorf("tableNames(4500, 2000) = %+v, want 2000, 2000, 500 in bench_0..bench_2", got)
	}
}

func TestBucketQuantile(t *testing.T) {
	// 100 observations between the scrapes: 90 at or below 1 ms, 9 in
	// (1, 4] ms, 1 in (4, 16] ms; the earlier scrape's 50 do not count.
	before := map[float64]float64{0.001: 50, 0.004: 50, 0.016: 50, math.Inf(1): 50}
	after := map[float64]float64{0.001: 140, 0.004: 149, 0.016: 150, math.Inf(1): 150}
	if got := bucketQuantile(0.5, before, after); math.Abs(got-0.5e-3/0.9) > 1e-9 {
		t.Errorf("p50 = %v, want %v (interpolated in the first bucket)", got, 0.5e-3/0.9)
	}
	if got := bucketQuantile(0.99, before, after); math.Abs(got-0.004) > 1e-9 {
		t.Errorf("p99 = %v, want 0.004 (the 99th observation ends the second bucket)", got)
	}
	if got := bucketQuantile(0.99, after, after); got != 0 {
		t.Errorf("p99 of no observations = %v, want 0", got)
	}
}

func TestScaleGrowthPerTenfold(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	rows := []scaleRow{
		{Regions: 1000, OpenSeconds: 1, RegionsPerSecond: 1000, MasterRSSMBMax: 50, DataMBMax: 10, FailoverSeconds: f(1)},
		{Regions: 100000, OpenSeconds: 100, RegionsPerSecond: 1000, MasterRSSMBMax: 5000, DataMBMax: 1000, FailoverSeconds: f(4)},
	}
	g := scaleGrowthOf(rows)
	if len(g) != 1 {
		t.Fatalf("growth %+v, want one entry", g)
	}
	// 100x the regions: linear costs grow 10x per tenfold, failover 4x
	// over two tenfolds is 2x per tenfold.
	for name, got := range map[string]float64{"open": g[0].OpenSeconds, "rss": g[0].MasterRSSMBMax, "data": g[0].DataMBMax} {
		if math.Abs(got-10) > 1e-9 {
			t.Errorf("%s growth %v per 10x, want 10", name, got)
		}
	}
	if math.Abs(g[0].RegionsPerSecond-1) > 1e-9 || math.Abs(*g[0].FailoverSeconds-2) > 1e-9 || g[0].CrashRecovery != nil {
		t.Errorf("growth %+v: want regions/s 1x, failover 2x, crash absent", g[0])
	}
}

func TestMachineBaseline(t *testing.T) {
	ctx := context.Background()
	if ops := cpuOpsPerSecond(ctx, 2, 20*time.Millisecond); !(ops > 0) {
		t.Errorf("cpu baseline %v ops/s, want > 0", ops)
	}
	dir := t.TempDir()
	ms, err := fsyncMedianMs(ctx, dir, 5)
	if err != nil {
		t.Fatal(err)
	}
	if !(ms > 0) {
		t.Errorf("fsync median %v ms, want > 0", ms)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("the probe left %v behind", left)
	}
	if _, err := fsyncMedianMs(ctx, filepath.Join(dir, "f", "x"), 1); err != nil {
		t.Errorf("a missing directory is created: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fsyncMedianMs(ctx, filepath.Join(dir, "file"), 1); err == nil {
		t.Error("a file in place of the directory: no error")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := measureMachine(cancelled, dir); err == nil {
		t.Error("cancelled: no error")
	}
}
