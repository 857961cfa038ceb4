package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
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

func TestSampleMemoryPeaks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The third sample is the last one the window asks for (it ends
	// then); any sample after is lower and cannot move the peaks.
	samples := []memSample{{100, 40, 300}, {130, 40, 290}, {110, 45, 320}}
	calls := 0
	p := sampleMemory(ctx, time.Millisecond, func() (memSample, error) {
		calls++
		if calls > len(samples) {
			return memSample{1, 1, 1}, nil
		}
		if calls == len(samples) {
			cancel()
		}
		return samples[calls-1], nil
	})
	if p.err != nil || p.heapMB != 130 || p.liveMB != 45 || p.rssMB != 320 || p.samples < 3 {
		t.Errorf("peaks %+v, want heap 130, live 45, RSS 320 (each its own peak), at least 3 samples, no error", p)
	}

	boom := errors.New("connection refused")
	calls = 0
	p = sampleMemory(context.Background(), time.Millisecond, func() (memSample, error) {
		calls++
		if calls == 2 {
			return memSample{}, boom
		}
		return memSample{50, 20, 60}, nil
	})
	if !errors.Is(p.err, boom) || p.samples != 1 || p.heapMB != 50 {
		t.Errorf("a sample failing mid-window: %+v, want its error after 1 sample", p)
	}

	// A sample cut off by the window's end is no failure.
	ended, end := context.WithCancel(context.Background())
	p = sampleMemory(ended, time.Millisecond, func() (memSample, error) {
		end()
		return memSample{}, context.Canceled
	})
	if p.err != nil || p.samples != 0 {
		t.Errorf("a sample cut off by the window's end: %+v, want no error", p)
	}
}

func TestSnapshotFigures(t *testing.T) {
	quiet := snapshotWindow{stepsPerSec: 4000, cpuCores: 0.9, gcs: 9, mem: memPeak{memSample: memSample{heapMB: 180, liveMB: 60, rssMB: 250}, samples: 200}}
	saving := snapshotWindow{stepsPerSec: 3000, cpuCores: 1.2, gcs: 2, mem: memPeak{memSample: memSample{heapMB: 195.5, liveMB: 64, rssMB: 262}, samples: 30}}
	s := snapshotFigures(quiet, saving)
	if s.HeapGrowthMB != 15.5 || s.LiveHeapGrowthMB != 4 || s.SaveGCs != 2 || s.RSSGrowthMB != 12 || s.StepsRatio != 0.75 || s.Samples != 30 ||
		s.LoadProcedures != SnapshotLoadProcedures || s.LeaderCPUBefore != 0.9 || s.LeaderCPUDuring != 1.2 {
		t.Errorf("figures %+v: want heap +15.5 MB, live +4 MB over the save's 2 GCs, RSS +12 MB, ratio 0.75, CPU 0.9 then 1.2 cores, the save's 30 samples", s)
	}
	// GOGC 200: the goal is three times the live heap; GOGC off has none.
	if got := liveHeapMB(3*64<<20, 200); got != 64 {
		t.Errorf("live heap of a 192 MiB goal at GOGC 200 = %v MB, want 64", got)
	}
	if got := liveHeapMB(1<<30, -1); got != 0 {
		t.Errorf("live heap with GOGC off = %v, want 0", got)
	}
	if s := snapshotFigures(snapshotWindow{}, saving); s.StepsRatio != 0 {
		t.Errorf("no steps before: ratio %v, want 0 (no ratio)", s.StepsRatio)
	}
}

func TestParseSnapshotSave(t *testing.T) {
	save := `{"file":"/d/bench.snap","bytes":1234,"took_ms":80,"format_version":1,"file_bytes":1234,"regions":100000,"tables":10}`
	if d, err := parseSnapshotSave([]byte(save)); err != nil || d.Bytes != 1234 || d.FileBytes != 1234 || d.Regions != 100000 {
		t.Errorf("save --json: %+v, %v", d, err)
	}
	inspect := `{"format_version":1,"file_bytes":99,"regions":7}`
	if d, err := parseSnapshotSave([]byte(inspect)); err != nil || d.FileBytes != 99 || d.Regions != 7 || d.Bytes != 0 {
		t.Errorf("inspect --json: %+v, %v", d, err)
	}
	for _, bad := range []string{"", "saved x: 12 bytes", `{"error":{"code":"BAD_SNAPSHOT"}}`} {
		if _, err := parseSnapshotSave([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestPrintScaleSnapshot(t *testing.T) {
	row := ScaleRow{Regions: 100000, Snapshot: &ScaleSnapshot{LoadProcedures: 64, SaveSeconds: 1.25, FileMB: 20.5, Regions: 100000,
		InspectSeconds: 0.4, StepsPerSecBefore: 5000, StepsPerSecDuring: 4000, StepsRatio: 0.8,
		HeapMBBefore: 180, HeapMBPeak: 192.5, HeapGrowthMB: 12.5, RSSMBBefore: 250, RSSMBPeak: 262, RSSGrowthMB: 12,
		LiveHeapMBBefore: 60, LiveHeapMBPeak: 63, LiveHeapGrowthMB: 3, SaveGCs: 2,
		LeaderCPUBefore: 0.8, LeaderCPUDuring: 1.1, SaveCLICPUSeconds: 0.7}}
	var out strings.Builder
	PrintScale(&out, ScaleDoc{Rows: []ScaleRow{row, {Regions: 10}}})
	for _, want := range []string{"snapshot save at 100000 regions (64 no-op procedures in flight", "1.25", "20.5", "180 → 192 (+12.5)", "60 → 63 (+3.0; 2)", "5000 → 4000 (0.80x)", "0.80 → 1.10", "0.70", "0.40"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Count(out.String(), "snapshot save at") != 1 {
		t.Errorf("a row without the phase printed one:\n%s", out.String())
	}
	raw, err := json.Marshal(ScaleDoc{Rows: []ScaleRow{row, {Regions: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"snapshot":{"load_procedures":64,"save_seconds":1.25,"file_mb":20.5`, `"leader_heap_growth_mb":12.5`, `"steps_ratio":0.8`, `"inspect_seconds":0.4`, `"leader_cpu_cores_during":1.1`, `"save_cli_cpu_seconds":0.7`, `"leader_live_heap_growth_mb":3`, `"save_gcs":2`} {
		if !strings.Contains(string(raw), key) {
			t.Errorf("--json lacks %s: %s", key, raw)
		}
	}
	if strings.Count(string(raw), `"snapshot"`) != 1 {
		t.Errorf("--json: a row without the phase has a snapshot key: %s", raw)
	}
}

// Shapes of one region count are compared with the fastest of them; a
// region count measured in one shape only has nothing to compare.
func TestScaleShapeRatios(t *testing.T) {
	rows := []ScaleRow{
		{Regions: 100, Shape: "1x100", RegionsPerSecond: 400},
		{Regions: 100, Shape: "10x10", RegionsPerSecond: 100},
		{Regions: 100, TLS: true, Shape: "10x10", RegionsPerSecond: 50},
		{Regions: 1000, Shape: "10x100", RegionsPerSecond: 900},
	}
	got := scaleShapeRatiosOf(rows)
	if len(got) != 2 || got[0].Shape != "1x100" || got[0].OfFastest != 1 || got[1].Shape != "10x10" || got[1].OfFastest != 0.25 {
		t.Fatalf("shape ratios %+v, want 1x100 at 1 and 10x10 at 0.25 only", got)
	}
	if got[0].OfFastestPerMachine != 0 {
		t.Fatalf("a ratio per machine speed without baselines: %+v", got)
	}
	var b strings.Builder
	PrintScale(&b, ScaleDoc{Rows: rows, ShapeRatios: got})
	if !strings.Contains(b.String(), "100 regions, 10x10 tables x regions: 100 regions/s, 0.25x of the fastest\n") {
		t.Errorf("printed:\n%s", b.String())
	}

	// The machine ran at half speed for the slower shape's row: per
	// machine op it did half as well, not a quarter.
	rows[0].Machine.CPUOpsPerSecond, rows[1].Machine.CPUOpsPerSecond = 2e6, 1e6
	got = scaleShapeRatiosOf(rows)
	if got[0].OfFastestPerMachine != 1 || got[1].OfFastestPerMachine != 0.5 || got[1].OfFastest != 0.25 {
		t.Fatalf("shape ratios %+v, want 10x10 at 0.25 by regions/s and 0.5 per machine op", got)
	}
	b.Reset()
	PrintScale(&b, ScaleDoc{Rows: rows, ShapeRatios: got})
	if !strings.Contains(b.String(), "100 regions, 10x10 tables x regions: 100 regions/s, 0.25x of the fastest (0.50x by regions per k machine ops") {
		t.Errorf("printed:\n%s", b.String())
	}
}

// With --rounds, every other round runs the shapes backwards; each
// round's shapes are compared with that round's fastest only, and the
// summary takes each shape's medians over the rounds.
func TestScaleShapeRounds(t *testing.T) {
	o := ScaleOptions{Shapes: []Shape{{Regions: 100, TableRegions: 100}, {Regions: 100, TableRegions: 10}, {Regions: 100, TableRegions: 1}}, Rounds: 3}
	var order []string
	for round := range o.Rounds {
		for _, sh := range o.roundShapes(round) {
			order = append(order, sh.String())
		}
	}
	if want := "1x100 10x10 100x1 100x1 10x10 1x100 1x100 10x10 100x1"; strings.Join(order, " ") != want {
		t.Errorf("rows in the order %s, want %s", strings.Join(order, " "), want)
	}
	if got := o.rowShapes(); got[0].String() != "1x100" {
		t.Errorf("a reversed round reordered the options' shapes: %v", got)
	}

	// Round 2 ran on a machine twice as fast: compared across rounds, the
	// small tables of round 1 would look half as good as they are.
	rows := []ScaleRow{
		{Regions: 100, Shape: "1x100", Round: 1, RegionsPerSecond: 400},
		{Regions: 100, Shape: "100x1", Round: 1, RegionsPerSecond: 320},
		{Regions: 100, Shape: "100x1", Round: 2, RegionsPerSecond: 600},
		{Regions: 100, Shape: "1x100", Round: 2, RegionsPerSecond: 800},
		{Regions: 100, Shape: "1x100", Round: 3, RegionsPerSecond: 500},
		{Regions: 100, Shape: "100x1", Round: 3, RegionsPerSecond: 450},
	}
	ratios := scaleShapeRatiosOf(rows)
	var got []string
	for _, sr := range ratios {
		got = append(got, fmt.Sprintf("%d:%s=%.2f", sr.Round, sr.Shape, sr.OfFastest))
	}
	if want := "1:1x100=1.00 1:100x1=0.80 2:100x1=0.75 2:1x100=1.00 3:1x100=1.00 3:100x1=0.90"; strings.Join(got, " ") != want {
		t.Fatalf("ratios %s, want %s", strings.Join(got, " "), want)
	}
	sum := scaleShapeSummaryOf(ratios)
	if len(sum) != 2 {
		t.Fatalf("summary %+v, want a row per shape", sum)
	}
	small := sum[1]
	if small.Shape != "100x1" || small.Rounds != 3 || small.OfFastest != 0.8 || small.OfFastestMin != 0.75 || small.OfFastestMax != 0.9 || small.RegionsPerSecond != 450 {
		t.Errorf("100x1 over the rounds: %+v, want median 0.80 (0.75 to 0.90), 450 regions/s, 3 rounds", small)
	}
	if big := sum[0]; big.Shape != "1x100" || big.OfFastest != 1 || big.RegionsPerSecond != 500 {
		t.Errorf("1x100 over the rounds: %+v, want 1.00 at a median 500 regions/s", big)
	}
	if once := scaleShapeSummaryOf(scaleShapeRatiosOf([]ScaleRow{rows[0], rows[1]}[:1])); once != nil {
		t.Errorf("a summary of one shape: %+v", once)
	}
	var b strings.Builder
	PrintScale(&b, ScaleDoc{Rows: rows, ShapeRatios: ratios, ShapeSummary: sum})
	for _, want := range []string{
		"100 regions (round 2), 100x1 tables x regions: 600 regions/s, 0.75x of the fastest",
		"100 regions, 100x1 tables x regions: 450 regions/s, 0.80x of the fastest (0.75 to 0.90 over 3 rounds)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("printed no %q:\n%s", want, b.String())
		}
	}
}

// With --tls both and --rounds, each round's TLS row is compared with
// the same round's plaintext row.
func TestScaleTLSRatioPerRound(t *testing.T) {
	rows := []ScaleRow{
		{Regions: 100, TableRegions: 100, Shape: "1x100", Round: 1, RegionsPerSecond: 400},
		{Regions: 100, TableRegions: 100, Shape: "1x100", Round: 1, TLS: true, RegionsPerSecond: 200},
		{Regions: 100, TableRegions: 100, Shape: "1x100", Round: 2, RegionsPerSecond: 800},
		{Regions: 100, TableRegions: 100, Shape: "1x100", Round: 2, TLS: true, RegionsPerSecond: 400},
	}
	got := scaleTLSRatiosOf(rows)
	if len(got) != 2 {
		t.Fatalf("TLS ratios %+v, want one a round", got)
	}
	for i, tr := range got {
		if tr.RegionsPerSecond != 0.5 || tr.Round != i+1 {
			t.Errorf("TLS ratio %d: %+v, want 0.50 in round %d", i, tr, i+1)
		}
	}
	var b strings.Builder
	PrintScale(&b, ScaleDoc{Rows: rows, TLSRatios: got})
	if !strings.Contains(b.String(), "TLS against plaintext at 100 regions, round 2 (TLS over plaintext): regions/s 0.50x") {
		t.Errorf("printed:\n%s", b.String())
	}
}

// A round the bench stopped in, its fastest shape missing, is left out
// of the summary: its other shapes were compared with a slower one.
func TestScaleShapeSummarySkipsAPartialRound(t *testing.T) {
	rows := []ScaleRow{
		{Regions: 100, Shape: "100x1", Round: 1, RegionsPerSecond: 300},
		{Regions: 100, Shape: "10x10", Round: 1, RegionsPerSecond: 400},
		{Regions: 100, Shape: "1x100", Round: 1, RegionsPerSecond: 500},
		{Regions: 100, Shape: "1x100", Round: 2, RegionsPerSecond: 500},
		{Regions: 100, Shape: "10x10", Round: 2, RegionsPerSecond: 400},
		{Regions: 100, Shape: "100x1", Round: 2, RegionsPerSecond: 300},
		{Regions: 100, Shape: "100x1", Round: 3, RegionsPerSecond: 300}, // round 3's 1x100 failed
		{Regions: 100, Shape: "10x10", Round: 3, RegionsPerSecond: 400},
	}
	for _, ss := range scaleShapeSummaryOf(scaleShapeRatiosOf(rows)) {
		if ss.Rounds != 2 || (ss.Shape == "10x10" && ss.OfFastestMax != 0.8) {
			t.Errorf("%s over the rounds: %+v, want rounds 1 and 2 only (10x10 at 0.80)", ss.Shape, ss)
		}
	}
}

// A round without a machine baseline has no ratio per machine op: the
// median is of the rounds that have one, and none prints nothing.
func TestScaleShapeSummaryPerMachineOfBaselinesOnly(t *testing.T) {
	ratios := []ScaleShapeRatio{
		{Regions: 100, Shape: "100x1", Round: 1, RegionsPerSecond: 300, OfFastest: 0.9, OfFastestPerMachine: 0.9},
		{Regions: 100, Shape: "100x1", Round: 2, RegionsPerSecond: 300, OfFastest: 0.9},
	}
	if got := scaleShapeSummaryOf(ratios)[0].OfFastestPerMachine; got != 0.9 {
		t.Errorf("per-machine median %.2f, want 0.90", got)
	}
	none := scaleShapeSummaryOf([]ScaleShapeRatio{ratios[1], {Regions: 100, Shape: "100x1", Round: 3, RegionsPerSecond: 300, OfFastest: 0.8}})
	var b strings.Builder
	PrintScale(&b, ScaleDoc{ShapeSummary: none})
	if strings.Contains(b.String(), "per machine op") || !strings.Contains(b.String(), "(0.80 to 0.90 over 2 rounds)") {
		t.Errorf("printed:\n%s", b.String())
	}
}

// Every printed line about one row names its round (and shape) when the
// shapes ran in rounds.
func TestPrintScaleRowsNameTheirRound(t *testing.T) {
	rows := []ScaleRow{
		{Regions: 100, Shape: "1x100", Round: 1, RegionsPerSecond: 400, OpenLeader: &LeaderWork{}},
		{Regions: 100, Shape: "1x100", Round: 2, RegionsPerSecond: 800, OpenLeader: &LeaderWork{}, Failed: "boom"},
	}
	var b strings.Builder
	PrintScale(&b, ScaleDoc{Rows: rows})
	n := 0
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "machine before") || strings.HasPrefix(l, "the leader during") || strings.HasPrefix(l, "failed:") || strings.HasPrefix(l, "100 ") {
			n++
			if !strings.Contains(l, "round") {
				t.Errorf("names no round: %q", l)
			}
		}
	}
	if n != 7 {
		t.Errorf("%d lines about the rows, want 7:\n%s", n, b.String())
	}
}
