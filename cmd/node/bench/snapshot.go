package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ScaleSnapshot is the snapshot phase's figures (--snapshot): `baton
// snapshot save` against the leader while a steady step-commit load runs,
// then `baton snapshot inspect` of the file. Issue 31 asks that a save
// grows the leader's heap by a few tens of MB at most, whatever the
// state's size, and that the cluster keeps serving meanwhile.
type ScaleSnapshot struct {
	// LoadProcedures are the no-op procedures kept in flight throughout.
	LoadProcedures int     `json:"load_procedures"`
	SaveSeconds    float64 `json:"save_seconds"`
	FileMB         float64 `json:"file_mb"`
	// Regions are the regions inspect counted in the file.
	Regions        uint64  `json:"regions"`
	InspectSeconds float64 `json:"inspect_seconds"`
	// StepsPerSecBefore is the leader's step rate over a window of
	// snapshotQuietWindow without a save, StepsPerSecDuring the same
	// during the save; StepsRatio is during over before.
	StepsPerSecBefore float64 `json:"steps_per_second_before"`
	StepsPerSecDuring float64 `json:"steps_per_second_during"`
	StepsRatio        float64 `json:"steps_ratio"`
	// The leader's heap in use (go_memstats_heap_inuse_bytes) and RSS,
	// sampled every snapshotSampleEvery: the peak over the window without
	// a save (under the same load, the top of its GC sawtooth), the peak
	// during the save, and the second less the first.
	HeapMBBefore float64 `json:"leader_heap_inuse_mb_before"`
	HeapMBPeak   float64 `json:"leader_heap_inuse_mb_peak"`
	HeapGrowthMB float64 `json:"leader_heap_growth_mb"`
	RSSMBBefore  float64 `json:"leader_rss_mb_before"`
	RSSMBPeak    float64 `json:"leader_rss_mb_peak"`
	RSSGrowthMB  float64 `json:"leader_rss_growth_mb"`
	// The leader's live heap as of its last collection (the collector's
	// goal, go_memstats_next_gc_bytes, over 1+GOGC/100): unlike the heap
	// in use it does not saw with the garbage between collections, so a
	// save that holds memory shows here once a collection ran during it
	// (SaveGCs says how many did).
	LiveHeapMBBefore float64 `json:"leader_live_heap_mb_before"`
	LiveHeapMBPeak   float64 `json:"leader_live_heap_mb_peak"`
	LiveHeapGrowthMB float64 `json:"leader_live_heap_growth_mb"`
	SaveGCs          int     `json:"save_gcs"`
	// LeaderCPUBefore and LeaderCPUDuring are the leader's CPU use in
	// cores (process_cpu_seconds_total over the window), and
	// SaveCLICPUSeconds the CPU the `snapshot save` process used
	// (receiving, writing, reading back to verify): on a machine of few
	// cores it competes with the masters for them.
	LeaderCPUBefore   float64 `json:"leader_cpu_cores_before"`
	LeaderCPUDuring   float64 `json:"leader_cpu_cores_during"`
	SaveCLICPUSeconds float64 `json:"save_cli_cpu_seconds"`
	// Samples are the memory samples taken during the save.
	Samples int `json:"samples"`
	// LeaderChanges counts the attempts discarded because the leader
	// changed during them.
	LeaderChanges int `json:"leader_changes,omitempty"`
}

const (
	// SnapshotLoadProcedures are the snapshot phase's load: the commit
	// sweep's middle level, where the leader's log writes already carry
	// many steps each.
	SnapshotLoadProcedures = 64
	// snapshotWarmUp lets the load reach its pace before the first window.
	snapshotWarmUp = 3 * time.Second
	// snapshotQuietWindow is the window without a save the rate and the
	// memory during the save are read against.
	snapshotQuietWindow = 10 * time.Second
	// snapshotSampleEvery is the memory sampling interval: a save of
	// 100,000 regions lasts about a second.
	snapshotSampleEvery = 50 * time.Millisecond
	snapshotFile        = "bench.snap"
)

// snapshotSave runs the snapshot phase, again (up to benchCommitAttempts
// times) if the leader changed during an attempt.
func snapshotSave(ctx context.Context, bin string, c *benchCluster) (*ScaleSnapshot, error) {
	for attempt := range benchCommitAttempts {
		s, err := snapshotAttempt(ctx, bin, c, attempt)
		if errors.Is(err, errLeaderChanged) {
			continue
		}
		if err != nil {
			return nil, err
		}
		s.LeaderChanges = attempt
		return s, nil
	}
	return nil, fmt.Errorf("snapshot: %w in each of %d attempts", errLeaderChanged, benchCommitAttempts)
}

// errLoadStopped ends the load when the measurement is over.
var errLoadStopped = errors.New("load stopped")

func snapshotAttempt(ctx context.Context, bin string, c *benchCluster, attempt int) (*ScaleSnapshot, error) {
	const (
		stepsMetric = "baton_procedure_step_duration_seconds_count"
		cpuMetric   = "process_cpu_seconds_total"
		gcsMetric   = "go_gc_duration_seconds_count"
		heapMetric  = "go_memstats_heap_inuse_bytes"
	)
	l, err := c.waitLeader(ctx)
	if err != nil {
		return nil, err
	}
	st0, err := c.status(ctx, l)
	if err != nil {
		return nil, err
	}

	loadCtx, stopLoad := context.WithCancelCause(ctx)
	defer stopLoad(errLoadStopped)
	loadDone := make(chan error, 1)
	go func() {
		loadDone <- runSleeps(loadCtx, c.cl, SnapshotLoadProcedures, math.MaxInt, fmt.Sprintf("bench-snapshot-%d-", attempt))
	}()
	// wait sleeps for d unless the load fails first.
	wait := func(d time.Duration) error {
		select {
		case err := <-loadDone:
			return fmt.Errorf("the load of %d procedures: %w", SnapshotLoadProcedures, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	counters := func() (map[string]float64, error) { return c.scrapeMetric(ctx, l, stepsMetric, cpuMetric, gcsMetric) }
	// The heap is the leader's own word (/metrics, which costs it a little
	// at each sample, in both windows alike); the RSS is read from /proc.
	sample := func() (memSample, error) {
		m, err := c.scrapeMetric(ctx, l, heapMetric, goalMetric, gogcMetric)
		if err != nil {
			return memSample{}, err
		}
		return memSample{heapMB: m[heapMetric] / (1 << 20), liveMB: liveHeapMB(m[goalMetric], m[gogcMetric]), rssMB: rssMB(l.Pid())}, nil
	}
	// window runs during (a wait or the save) while sampling the leader's
	// memory, and returns its step rate and the memory peaks.
	window := func(during func() error) (w snapshotWindow, err error) {
		s0, err := counters()
		if err != nil {
			return w, err
		}
		sctx, stopSampling := context.WithCancel(ctx)
		sampled := make(chan memPeak, 1)
		go func() { sampled <- sampleMemory(sctx, snapshotSampleEvery, sample) }()
		start := time.Now()
		err = during()
		d := time.Since(start)
		stopSampling()
		w.mem = <-sampled
		if err != nil {
			return w, err
		}
		if w.mem.err != nil {
			return w, fmt.Errorf("sampling the leader's memory: %w", w.mem.err)
		}
		s1, err := counters()
		if err != nil {
			return w, err
		}
		w.stepsPerSec = (s1[stepsMetric] - s0[stepsMetric]) / d.Seconds()
		w.cpuCores = (s1[cpuMetric] - s0[cpuMetric]) / d.Seconds()
		w.gcs = int(s1[gcsMetric] - s0[gcsMetric])
		return w, nil
	}

	if err := wait(snapshotWarmUp); err != nil {
		return nil, err
	}
	quiet, err := window(func() error { return wait(snapshotQuietWindow) })
	if err != nil {
		return nil, err
	}
	path := filepath.Join(c.dir, snapshotFile)
	var saved snapshotSaveDoc
	var saveTook, saveCPU time.Duration
	saving, err := window(func() error {
		start := time.Now()
		out, cpu, err := runBaton(ctx, bin, append([]string{"snapshot", "save", path, "--addr", l.grpcAddr, "--json"}, c.cliArgs...))
		saveTook, saveCPU = time.Since(start), cpu
		if err != nil {
			return err
		}
		saved, err = parseSnapshotSave(out)
		return err
	})
	if err != nil {
		return nil, err
	}
	stopLoad(errLoadStopped)
	if err := <-loadDone; err != nil && !errors.Is(err, errLoadStopped) {
		return nil, fmt.Errorf("the load of %d procedures: %w", SnapshotLoadProcedures, err)
	}
	st1, err := c.status(ctx, l)
	if err != nil {
		return nil, err
	}
	if st1.Term != st0.Term || st1.LeaderID != l.id {
		return nil, fmt.Errorf("%w (%s term %d, then %s term %d)", errLeaderChanged, l.id, st0.Term, st1.LeaderID, st1.Term)
	}

	start := time.Now()
	out, _, err := runBaton(ctx, bin, []string{"snapshot", "inspect", path, "--json"})
	inspectTook := time.Since(start)
	if err != nil {
		return nil, err
	}
	inspected, err := parseSnapshotSave(out)
	if err != nil {
		return nil, err
	}
	if inspected.Regions != saved.Regions || inspected.FileBytes != saved.Bytes {
		return nil, fmt.Errorf("inspect of %s counts %d regions in %d bytes; save wrote %d regions in %d bytes", path, inspected.Regions, inspected.FileBytes, saved.Regions, saved.Bytes)
	}
	s := snapshotFigures(quiet, saving)
	s.SaveSeconds, s.InspectSeconds, s.SaveCLICPUSeconds = saveTook.Seconds(), inspectTook.Seconds(), saveCPU.Seconds()
	s.FileMB, s.Regions = float64(saved.Bytes)/(1<<20), saved.Regions
	return &s, nil
}

// snapshotWindow is what one window measured of the leader.
type snapshotWindow struct {
	stepsPerSec, cpuCores float64
	gcs                   int
	mem                   memPeak
}

// snapshotFigures is the phase's figures from its window without a save
// (quiet) and its window of the save.
func snapshotFigures(quiet, saving snapshotWindow) ScaleSnapshot {
	return ScaleSnapshot{
		LoadProcedures:    SnapshotLoadProcedures,
		StepsPerSecBefore: quiet.stepsPerSec, StepsPerSecDuring: saving.stepsPerSec, StepsRatio: ratioOf(quiet.stepsPerSec, saving.stepsPerSec),
		HeapMBBefore: quiet.mem.heapMB, HeapMBPeak: saving.mem.heapMB, HeapGrowthMB: saving.mem.heapMB - quiet.mem.heapMB,
		RSSMBBefore: quiet.mem.rssMB, RSSMBPeak: saving.mem.rssMB, RSSGrowthMB: saving.mem.rssMB - quiet.mem.rssMB,
		LiveHeapMBBefore: quiet.mem.liveMB, LiveHeapMBPeak: saving.mem.liveMB, LiveHeapGrowthMB: saving.mem.liveMB - quiet.mem.liveMB,
		SaveGCs:         saving.gcs,
		LeaderCPUBefore: quiet.cpuCores, LeaderCPUDuring: saving.cpuCores,
		Samples: saving.mem.samples,
	}
}

// memSample is one sample of the leader's memory.
type memSample struct{ heapMB, liveMB, rssMB float64 }

// liveHeapMB is the live heap at the last collection, from the goal the
// collector set then: goal = live × (1 + GOGC/100). 0 if GOGC is off.
func liveHeapMB(goalBytes, gogcPercent float64) float64 {
	if gogcPercent <= 0 {
		return 0
	}
	return goalBytes / (1 + gogcPercent/100) / (1 << 20)
}

// memPeak is the highest of a window's memory samples, each figure's own.
type memPeak struct {
	memSample
	samples int
	err     error // the first failed sample's
}

// sampleMemory samples at once, then every interval until ctx ends, and
// returns the peaks; it stops at the first failed sample.
func sampleMemory(ctx context.Context, interval time.Duration, sample func() (memSample, error)) memPeak {
	var p memPeak
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		m, err := sample()
		if err != nil {
			if ctx.Err() == nil {
				p.err = err
			}
			return p
		}
		p.heapMB, p.liveMB, p.rssMB = max(p.heapMB, m.heapMB), max(p.liveMB, m.liveMB), max(p.rssMB, m.rssMB)
		p.samples++
		select {
		case <-ctx.Done():
			return p
		case <-t.C:
		}
	}
}

// snapshotSaveDoc is what the bench reads of `snapshot save --json` and
// `snapshot inspect --json` (the second has no bytes, the first both).
type snapshotSaveDoc struct {
	Bytes     int64  `json:"bytes"`
	FileBytes int64  `json:"file_bytes"`
	Regions   uint64 `json:"regions"`
}

func parseSnapshotSave(out []byte) (snapshotSaveDoc, error) {
	var d snapshotSaveDoc
	if err := json.Unmarshal(out, &d); err != nil {
		return d, fmt.Errorf("reading the snapshot command's --json: %w (%q)", err, truncate(string(out), 200))
	}
	if d.FileBytes <= 0 {
		return d, fmt.Errorf("the snapshot command's --json names no file_bytes: %q", truncate(string(out), 200))
	}
	return d, nil
}

// runBaton runs bin (this baton) with args, as a user would, and returns
// its stdout and the CPU it used; a failure names its exit and stderr.
func runBaton(ctx context.Context, bin string, args []string) ([]byte, time.Duration, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = benchEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, 0, fmt.Errorf("baton %s: %w: %s", strings.Join(args[:2], " "), err, truncate(strings.TrimSpace(stderr.String()), 500))
	}
	return stdout.Bytes(), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
