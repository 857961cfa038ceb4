package bench

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

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
	rows := []ScaleRow{
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
