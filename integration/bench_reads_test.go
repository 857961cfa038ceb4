package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestBenchReads runs `baton bench reads` briefly on real processes: each
// kind measured with positive figures, the ratios to stale given, and no
// process left behind.
func TestBenchReads(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of three processes")
	}
	dir := filepath.Join(t.TempDir(), "bench")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, "bench", "reads", "--callers", "4", "--calls", "200", "--rounds", "2", "--dir", dir, "--timeout", "90s", "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench reads: %v\nstderr:\n%s", err, stderr.String())
	}
	if left := processesUnder(t, dir); len(left) > 0 {
		t.Errorf("processes left behind: %q", left)
	}
	var doc struct {
		Callers int `json:"callers"`
		Machine struct {
			CPUOpsPerSecond float64 `json:"cpu_ops_per_second"`
		} `json:"machine"`
		Kinds []struct {
			Kind             string   `json:"kind"`
			Calls            int      `json:"calls"`
			CallsPerSecond   float64  `json:"calls_per_second"`
			RatioToStale     *float64 `json:"ratio_to_stale"`
			RatioMedian      *float64 `json:"ratio_to_stale_median"`
			RatioMin         *float64 `json:"ratio_to_stale_min"`
			RatioMax         *float64 `json:"ratio_to_stale_max"`
			ClusterCPUMicros float64  `json:"cluster_cpu_us_per_call"`
		} `json:"kinds"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("--json output is not one JSON document: %v\n%s", err, stdout.String())
	}
	if doc.Error != "" || doc.Callers != 4 || !(doc.Machine.CPUOpsPerSecond > 0) {
		t.Fatalf("document %+v: want 4 callers, a machine line, no error", doc)
	}
	want := []string{"stale", "linearizable", "forwarded"}
	if len(doc.Kinds) != len(want) {
		t.Fatalf("kinds %+v: want %q", doc.Kinds, want)
	}
	for i, k := range doc.Kinds {
		if k.Kind != want[i] || k.Calls != 200 || !(k.CallsPerSecond > 0) || !(k.ClusterCPUMicros > 0) {
			t.Errorf("kind %+v: want %s, 200 calls, a rate and the masters' CPU", k, want[i])
		}
		if (k.RatioToStale == nil) != (i == 0) || (k.RatioToStale != nil && !(*k.RatioToStale > 0)) {
			t.Errorf("kind %s: ratio to stale %v: want one for every kind but stale", k.Kind, k.RatioToStale)
		}
		given := k.RatioMedian != nil && k.RatioMin != nil && k.RatioMax != nil
		if given != (i != 0) || (given && !(*k.RatioMin > 0 && *k.RatioMin <= *k.RatioMedian && *k.RatioMedian <= *k.RatioMax)) {
			t.Errorf("kind %s: ratio to stale by round: median %v in %v to %v: want least <= median <= greatest for every kind but stale", k.Kind, k.RatioMedian, k.RatioMin, k.RatioMax)
		}
	}
}
