package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/syncbuf"
	"github.com/baton-dev/baton/internal/testwait"
)

// benchScaleDoc is the part of `baton bench scale --json` the test reads.
type benchScaleDoc struct {
	Rows []struct {
		Regions              int      `json:"regions"`
		Tables               int      `json:"tables"`
		OpenSeconds          float64  `json:"open_seconds"`
		RegionsPerSecond     float64  `json:"regions_per_second"`
		MasterRSSMBMin       float64  `json:"master_rss_mb_min"`
		MasterRSSMBMax       float64  `json:"master_rss_mb_max"`
		DataMBMax            float64  `json:"data_mb_max"`
		StateMB              float64  `json:"state_mb"`
		FailoverSeconds      *float64 `json:"failover_seconds"`
		CrashRecoverySeconds *float64 `json:"crash_recovery_seconds"`
		CrashedServerRegions int      `json:"crashed_server_regions"`
		CatchUpSeconds       *float64 `json:"catch_up_seconds"`
		Machine              struct {
			CPUOpsPerSecond float64 `json:"cpu_ops_per_second"`
			CPUs            int     `json:"cpus"`
			FsyncMs         float64 `json:"fsync_ms"`
		} `json:"machine"`
		Masters []struct {
			ID       string  `json:"id"`
			RSSMB    float64 `json:"rss_mb"`
			RaftDBMB float64 `json:"raft_db_mb"`
			WALMB    float64 `json:"wal_mb"`
		} `json:"masters"`
	} `json:"rows"`
	Growth []struct {
		From, To    int
		OpenSeconds float64 `json:"open_seconds"`
	} `json:"growth"`
}

// processesUnder lists the running processes whose command line names
// dir: the agents and region servers a bench started there.
func processesUnder(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc to look for leftover processes in: %v", err)
	}
	var out []string
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmd, dir) {
			out = append(out, e.Name()+": "+cmd)
		}
	}
	return out
}

// TestBenchScale runs `baton bench scale` end to end at two small region
// counts, every phase but the commit sweep on real processes, and checks
// that the JSON has a row per count with the measured figures positive,
// and that every process the bench started is gone when it exits.
func TestBenchScale(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clusters and waits out a region server's lease (about 45 s)")
	}
	dir := filepath.Join(t.TempDir(), "bench")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, "bench", "scale", "--regions", "100,200", "--table-regions", "100",
		"--concurrency", "2", "--dir", dir, "--phase-timeout", "90s", "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench scale: %v\nstderr:\n%s", err, stderr.String())
	}
	if left := processesUnder(t, dir); len(left) > 0 {
		t.Errorf("processes left behind: %q", left)
	}
	var doc benchScaleDoc
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("--json output is not one JSON document: %v\n%s", err, stdout.String())
	}
	if len(doc.Rows) != 2 || doc.Rows[0].Regions != 100 || doc.Rows[1].Regions != 200 {
		t.Fatalf("rows %+v: want one for 100 and one for 200 regions", doc.Rows)
	}
	for _, r := range doc.Rows {
		positive := map[string]float64{
			"open_seconds": r.OpenSeconds, "regions_per_second": r.RegionsPerSecond,
			"master_rss_mb_min": r.MasterRSSMBMin, "master_rss_mb_max": r.MasterRSSMBMax,
			"data_mb_max": r.DataMBMax, "state_mb": r.StateMB, "crashed_server_regions": float64(r.CrashedServerRegions),
			"machine.cpu_ops_per_second": r.Machine.CPUOpsPerSecond, "machine.cpus": float64(r.Machine.CPUs), "machine.fsync_ms": r.Machine.FsyncMs,
		}
		for name, v := range map[string]*float64{"failover_seconds": r.FailoverSeconds, "crash_recovery_seconds": r.CrashRecoverySeconds, "catch_up_seconds": r.CatchUpSeconds} {
			if v == nil {
				t.Errorf("%d regions: %s absent", r.Regions, name)
				continue
			}
			positive[name] = *v
		}
		for name, v := range positive {
			if !(v > 0) {
				t.Errorf("%d regions: %s = %v, want > 0", r.Regions, name, v)
			}
		}
		if r.Tables != r.Regions/100 {
			t.Errorf("%d regions in %d tables, want %d of 100", r.Regions, r.Tables, r.Regions/100)
		}
		if len(r.Masters) != 3 {
			t.Errorf("%d regions: %d masters measured, want 3", r.Regions, len(r.Masters))
		}
		for _, m := range r.Masters {
			if !(m.RSSMB > 0 && m.RaftDBMB > 0 && m.WALMB > 0) {
				t.Errorf("%d regions: master %s: rss %v MB, raft.db %v MB, WAL %v MB: want all > 0", r.Regions, m.ID, m.RSSMB, m.RaftDBMB, m.WALMB)
			}
		}
	}
	if len(doc.Growth) != 1 || !(doc.Growth[0].OpenSeconds > 0) {
		t.Errorf("growth %+v: want one entry, 100 → 200, with an open time ratio", doc.Growth)
	}
	if _, err := os.Stat(filepath.Join(dir, "regions-200", "m1", "agent.log")); err != nil {
		t.Errorf("--dir: the masters' logs are not kept: %v", err)
	}
}

// TestBenchScaleTLS runs one small region count plaintext and with mutual
// TLS on every channel (--tls both): both rows measured, and their ratio.
func TestBenchScaleTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, "bench", "scale", "--regions", "100", "--table-regions", "100",
		"--skip", "crash,catchup", "--tls", "both", "--phase-timeout", "90s", "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench scale --tls both: %v\nstderr:\n%s", err, stderr.String())
	}
	var doc struct {
		Rows []struct {
			Regions          int      `json:"regions"`
			TLS              bool     `json:"tls"`
			RegionsPerSecond float64  `json:"regions_per_second"`
			FailoverSeconds  *float64 `json:"failover_seconds"`
		} `json:"rows"`
		TLSRatios []struct {
			Regions          int      `json:"regions"`
			RegionsPerSecond float64  `json:"regions_per_second"`
			FailoverSeconds  *float64 `json:"failover_seconds"`
		} `json:"tls_ratios"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("--json: %v\n%s", err, stdout.String())
	}
	if len(doc.Rows) != 2 || doc.Rows[0].TLS || !doc.Rows[1].TLS {
		t.Fatalf("rows %+v: want a plaintext row, then a TLS one", doc.Rows)
	}
	for _, r := range doc.Rows {
		if !(r.RegionsPerSecond > 0) || r.FailoverSeconds == nil || !(*r.FailoverSeconds > 0) {
			t.Errorf("row %+v: want positive regions/s and a failover time", r)
		}
	}
	if len(doc.TLSRatios) != 1 || doc.TLSRatios[0].Regions != 100 || !(doc.TLSRatios[0].RegionsPerSecond > 0) || doc.TLSRatios[0].FailoverSeconds == nil {
		t.Errorf("tls_ratios %+v: want one for 100 regions with both ratios", doc.TLSRatios)
	}
	if !strings.Contains(stderr.String(), "100 regions (TLS):") {
		t.Errorf("the TLS row's progress does not say TLS:\n%s", stderr.String())
	}
}

// TestBenchScaleRounds runs two shapes in two rounds (--rounds) on real
// processes: four rows, the second round backwards, each on a cluster
// and in a directory of its own; each round's shapes compared among
// themselves; and a summary a shape.
func TestBenchScaleRounds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four clusters")
	}
	dir := filepath.Join(t.TempDir(), "bench")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, "bench", "scale", "--shape", "1x100,2x50", "--rounds", "2", "--concurrency", "2",
		"--skip", "failover,crash,catchup", "--dir", dir, "--phase-timeout", "90s", "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench scale --rounds 2: %v\nstderr:\n%s", err, stderr.String())
	}
	if left := processesUnder(t, dir); len(left) > 0 {
		t.Errorf("processes left behind: %q", left)
	}
	var doc struct {
		Rows []struct {
			Shape            string  `json:"shape"`
			Round            int     `json:"round"`
			RegionsPerSecond float64 `json:"regions_per_second"`
		} `json:"rows"`
		ShapeRatios []struct {
			Shape     string  `json:"shape"`
			Round     int     `json:"round"`
			OfFastest float64 `json:"of_fastest"`
		} `json:"shape_ratios"`
		ShapeSummary []struct {
			Shape        string  `json:"shape"`
			Rounds       int     `json:"rounds"`
			OfFastest    float64 `json:"of_fastest"`
			OfFastestMin float64 `json:"of_fastest_min"`
			OfFastestMax float64 `json:"of_fastest_max"`
		} `json:"shape_summary"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("--json: %v\n%s", err, stdout.String())
	}
	var order []string
	for _, r := range doc.Rows {
		order = append(order, fmt.Sprintf("%s@%d", r.Shape, r.Round))
		if !(r.RegionsPerSecond > 0) {
			t.Errorf("row %+v: want positive regions/s", r)
		}
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("regions-100-%s-round%d", r.Shape, r.Round), "m1", "agent.log")); err != nil {
			t.Errorf("row %s of round %d has no directory of its own: %v", r.Shape, r.Round, err)
		}
	}
	if want := "1x100@1 2x50@1 2x50@2 1x100@2"; strings.Join(order, " ") != want {
		t.Fatalf("rows %s, want %s", strings.Join(order, " "), want)
	}
	fastest := map[int]int{}
	for _, sr := range doc.ShapeRatios {
		if sr.OfFastest == 1 {
			fastest[sr.Round]++
		}
		if !(sr.OfFastest > 0 && sr.OfFastest <= 1) {
			t.Errorf("ratio %+v: want in (0, 1]", sr)
		}
	}
	if len(doc.ShapeRatios) != 4 || fastest[1] != 1 || fastest[2] != 1 {
		t.Errorf("shape_ratios %+v: want four, one fastest in each round", doc.ShapeRatios)
	}
	if len(doc.ShapeSummary) != 2 {
		t.Fatalf("shape_summary %+v: want one a shape", doc.ShapeSummary)
	}
	for _, ss := range doc.ShapeSummary {
		if ss.Rounds != 2 || !(ss.OfFastestMin <= ss.OfFastest && ss.OfFastest <= ss.OfFastestMax && ss.OfFastestMax <= 1) {
			t.Errorf("summary %+v: want two rounds, min <= median <= max <= 1", ss)
		}
	}
	if !strings.Contains(stderr.String(), "100 regions (round 2):") {
		t.Errorf("the second round's progress does not say so:\n%s", stderr.String())
	}
}

// TestBenchScaleInterrupted sends SIGINT to a bench while it creates
// tables and checks that it exits non-zero with every process it started
// gone, and its temporary directory removed.
func TestBenchScaleInterrupted(t *testing.T) {
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, "bench", "scale", "--regions", "1000000", "--skip", "failover,crash,catchup")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stdout, stderr syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	testwait.For(t, 45*time.Second, "the bench creating tables", func() bool {
		return strings.Contains(stderr.String(), "creating")
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("interrupted bench exited 0; stderr:\n%s", stderr.String())
		}
	case <-ctx.Done():
		t.Fatalf("bench still running after SIGINT; stderr:\n%s", stderr.String())
	}
	if left := processesUnder(t, tmp); len(left) > 0 {
		t.Errorf("processes left behind: %q", left)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
		t.Errorf("temporary directory not removed: %s holds %v", tmp, ents)
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr does not say the bench was interrupted:\n%s", stderr.String())
	}
}
