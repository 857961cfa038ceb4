package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/baton-dev/baton/integration/harness"
)

// runConfig bounds one chaos run.
type runConfig struct {
	maxDuration time.Duration  // the fault phase ends at the latest then
	faults      map[string]int // how many faults of each kind
	workers     int            // namespace clients
	seed        uint64
}

// The cluster of every run; a schedule names its nodes.
const (
	clusterMasters       = 3
	clusterRegionServers = 4
)

// TestChaosShort is the chaos run of every `go test ./...`: a few faults
// of each kind (about two minutes), then the liveness phase. See
// TestChaosLong for the full one. BATON_CHAOS_NEMESIS_SEED and
// BATON_CHAOS_SCHEDULE replay a run (a failing run prints how).
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: about two minutes of faults; not in -short")
	}
	cfg := runConfig{
		maxDuration: 3 * time.Minute,
		faults: map[string]int{
			FaultLeaderKill: 2, FaultPause: 2, FaultIsolate: 2, FaultSplit: 2,
			FaultRSCut: 1, FaultRSKill: 2, FaultRSPause: 1,
		},
		workers: 4,
		seed:    envUint(t, "BATON_CHAOS_NEMESIS_SEED", rand.Uint64()),
	}
	runChaos(t, cfg)
}

// TestChaosLong is `make chaos`: it runs only with BATON_CHAOS_LONG=1.
// Environment:
//
//	BATON_CHAOS_DURATION       longest fault phase (default 45m); with
//	                           every count 0, a baseline run this long
//	BATON_CHAOS_LEADER_KILLS   leader SIGKILL+restart (default 50)
//	BATON_CHAOS_PAUSES         leader SIGSTOP/SIGCONT (default 10)
//	BATON_CHAOS_ISOLATIONS     leader Raft isolated by iptables (default 10)
//	BATON_CHAOS_SPLITS         masters split 1|2 by iptables (default 10)
//	BATON_CHAOS_RS_CUTS        region server cut from the masters past its lease (default 10)
//	BATON_CHAOS_RS_KILLS       region server SIGKILL+restart (default 20)
//	BATON_CHAOS_RS_PAUSES      region server SIGSTOP/SIGCONT (default 10)
//	BATON_CHAOS_WORKERS        concurrent namespace clients (default 4)
//	BATON_CHAOS_NEMESIS_SEED   seed of the fault schedule and the clients' random
//	                           choices (logged; `make chaos SEED=…`)
//	BATON_CHAOS_SCHEDULE       a schedule file a run wrote: replays its faults at
//	                           the times they started, with its seed, duration and
//	                           workers (the variables above are then ignored;
//	                           `make chaos SCHEDULE=…`)
//	BATON_CHAOS_ARTIFACTS      where the schedule files and porcupine's
//	                           visualization go
func TestChaosLong(t *testing.T) {
	if os.Getenv("BATON_CHAOS_LONG") == "" {
		t.Skip("chaos: the long run is `make chaos` (BATON_CHAOS_LONG=1)")
	}
	d, err := time.ParseDuration(envOr("BATON_CHAOS_DURATION", "45m"))
	if err != nil {
		t.Fatalf("BATON_CHAOS_DURATION: %v", err)
	}
	cfg := runConfig{
		maxDuration: d,
		faults: map[string]int{
			FaultLeaderKill: envInt(t, countEnv[FaultLeaderKill], 50),
			FaultPause:      envInt(t, countEnv[FaultPause], 10),
			FaultIsolate:    envInt(t, countEnv[FaultIsolate], 10),
			FaultSplit:      envInt(t, countEnv[FaultSplit], 10),
			FaultRSCut:      envInt(t, countEnv[FaultRSCut], 10),
			FaultRSKill:     envInt(t, countEnv[FaultRSKill], 20),
			FaultRSPause:    envInt(t, countEnv[FaultRSPause], 10),
		},
		workers: envInt(t, "BATON_CHAOS_WORKERS", 4),
		seed:    envUint(t, "BATON_CHAOS_NEMESIS_SEED", rand.Uint64()),
	}
	runChaos(t, cfg)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envInt(t *testing.T, k string, def int) int {
	v, err := strconv.Atoi(envOr(k, strconv.Itoa(def)))
	if err != nil || v < 0 {
		t.Fatalf("%s: want a count ≥ 0, got %q", k, os.Getenv(k))
	}
	return v
}

func envUint(t *testing.T, k string, def uint64) uint64 {
	v, err := strconv.ParseUint(envOr(k, strconv.FormatUint(def, 10)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", k, err)
	}
	return v
}

// namespaces are the keys of the linearizability check: few, so that
// clients collide on them.
var namespaces = []string{"ns-a", "ns-b", "ns-c", "ns-d", "ns-e"}

func runChaos(t *testing.T, cfg runConfig) {
	began := time.Now()
	var fw *Firewall
	base := uint32(0)
	if ok, why := Available(); ok {
		fw = NewFirewall(t)
		base = uidBase()
	} else {
		t.Logf("chaos: no partitions in this run: %s", why)
		for _, k := range []string{FaultIsolate, FaultSplit, FaultRSCut} {
			cfg.faults[k] = 0
		}
	}
	plan := NewPlan(cfg.seed, PlanConfig{Test: t.Name(), MaxDuration: cfg.maxDuration, Faults: cfg.faults,
		Workers: cfg.workers, Masters: clusterMasters, RegionServers: clusterRegionServers})
	if path := os.Getenv("BATON_CHAOS_SCHEDULE"); path != "" {
		p, err := ReadPlan(path)
		if err != nil {
			t.Fatal(err)
		}
		if p.Masters != clusterMasters || p.RegionServers != clusterRegionServers {
			t.Fatalf("chaos: schedule %s is for %d masters and %d region servers; this run has %d and %d",
				path, p.Masters, p.RegionServers, clusterMasters, clusterRegionServers)
		}
		p.Test = t.Name()
		plan = p
		cfg.seed, cfg.maxDuration, cfg.workers, cfg.faults = p.Seed, p.MaxDuration(), p.Workers, p.Counts()
		t.Logf("chaos: replaying schedule %s (BATON_CHAOS_SCHEDULE)", path)
	}
	t.Logf("chaos: seed %d (BATON_CHAOS_NEMESIS_SEED), faults %v, at most %v", cfg.seed, cfg.faults, cfg.maxDuration)
	t.Logf("chaos: %s", plan.Log())
	dir := artifactsDir(t)
	planPath := filepath.Join(dir, "schedule-"+sanitize(t.Name())+".json")
	recordPath := filepath.Join(dir, "schedule-"+sanitize(t.Name())+".ran.json")
	if err := WritePlan(planPath, plan); err != nil {
		t.Errorf("chaos: %v", err)
	} else {
		t.Logf("chaos: schedule written to %s", planPath)
	}
	var nem *Nemesis
	t.Cleanup(func() {
		// The record of what ran is the file that replays this run's
		// timing: written however the run ended.
		if nem != nil {
			if err := WritePlan(recordPath, nem.Record()); err != nil {
				t.Logf("chaos: %v", err)
			}
		}
		if t.Failed() {
			bySeed, bySchedule := ReplayCommands(plan, recordPath)
			if nem == nil {
				bySchedule = strings.Replace(bySchedule, recordPath, planPath, 1)
			}
			t.Logf("chaos: replay this run's schedule with\n  %s\nor its faults at the times they started with\n  %s", bySeed, bySchedule)
		}
	})

	// Everything below is bounded: the fault phase by maxDuration, the
	// workers' last operations by their own deadlines, the liveness phase
	// by livenessBound.
	ctx, cancel := context.WithTimeout(context.Background(), cfg.maxDuration+livenessBound+8*time.Minute)
	defer cancel()
	c := harness.New(t, harness.Options{Binary: nodeBin, Nodes: clusterMasters, UIDBase: base})
	c.WaitLeader(ctx)
	c.StartRegionServers(clusterRegionServers, harness.RSOptions{OpLatency: 10 * time.Millisecond})
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	if _, err := c.WaitRegionServers(wctx); err != nil {
		t.Fatal(err)
	}
	wcancel()

	var err error
	nem, err = NewNemesis(c, fw, plan, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer nem.Close()
	// Whatever happens, leave no rule and no stopped process behind for
	// the end-state checks (the harness kills the processes afterwards).
	defer func() {
		if err := nem.HealAll(); err != nil {
			t.Logf("chaos: heal: %v", err)
		}
	}()

	ak := newAcked()
	tw := newTableWorker(t, c, ak)
	tw.setup(ctx)

	hist := NewHistory(namespaces)
	sampler := NewSampler(c, time.Second)

	runCtx, stopRun := context.WithTimeout(ctx, cfg.maxDuration)
	defer stopRun()
	var wg sync.WaitGroup
	StartWorkers(runCtx, ctx, &wg, c, hist, cfg.workers, cfg.seed, ak.add, ak.done)
	wg.Add(1)
	go func() { defer wg.Done(); tw.run(runCtx, ctx, cfg.seed) }()
	samplerDone := make(chan struct{})
	go func() { defer close(samplerDone); sampler.Run(runCtx, 150*time.Millisecond) }()

	// The schedule's offsets count from here, the workload's start.
	faultStart := time.Now()
	nemErrs := make(chan error, 2)
	var nwg sync.WaitGroup
	for _, rs := range []bool{false, true} {
		nwg.Add(1)
		go func() {
			defer nwg.Done()
			if err := nem.Run(runCtx, faultStart, rs); err != nil {
				nemErrs <- err
			}
		}()
	}
	nwg.Wait()
	if len(plan.Steps) == 0 {
		// No fault at all: a baseline run of the whole duration.
		<-runCtx.Done()
	}
	faultPhase := time.Since(faultStart)
	close(nemErrs)
	for err := range nemErrs {
		t.Errorf("chaos: the cluster did not recover: %v", err)
	}

	// Liveness: heal whatever is left, stop the workload (the clients
	// finish what they started), and from the heal on every convergence
	// condition must hold within livenessBound.
	if err := nem.HealAll(); err != nil {
		t.Errorf("chaos: heal: %v", err)
	}
	healed := time.Now()
	stopRun()
	<-samplerDone
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
	k := &checks{c: c, cl: c.Client(), acked: ak, deleted: tw.deletedTables, workers: workersDone}
	cv := converge(ctx, k.round, healed, livenessBound)
	cv.acked = ak.count()
	settle := time.Since(healed)
	<-workersDone // bounded by the workers' own deadlines

	// Linearizability of the namespace history.
	// Per namespace; a long run's histories are longer.
	checkTimeout := 2 * time.Minute
	if cfg.maxDuration > 10*time.Minute {
		checkTimeout = 4 * time.Minute
	}
	res, err := hist.Check(checkTimeout, dir, "namespaces-"+sanitize(t.Name()))
	if err != nil {
		t.Errorf("chaos: %v", err)
	}
	samples, doubles, reports := sampler.Result()
	took, missed := nem.Counts()
	ok, failed, unknown := hist.Counts()
	tOK, tFailed, tUnknown := tw.counts()

	var b strings.Builder
	fmt.Fprintf(&b, "\n=== chaos summary (%s, seed %d) ===\n", t.Name(), cfg.seed)
	fmt.Fprintf(&b, "  %-32s %5s %6s %7s\n", "operations", "ok", "failed", "unknown")
	fmt.Fprintf(&b, "  %-32s %5d %6d %7d\n", "namespace create/delete/list", ok, failed, unknown)
	fmt.Fprintf(&b, "  %-32s %5d %6d %7d\n", "table/region procedures", tOK, tFailed, tUnknown)
	fmt.Fprintf(&b, "  (namespaces: %s; noop = create found it, delete did not; table \"failed\" = rolled back)\n", hist.Detail())
	fmt.Fprintf(&b, "  faults (took effect)\n%s", Summary(took, missed))
	fmt.Fprintf(&b, "  anomalies\n")
	fmt.Fprintf(&b, "  %-32s %5s (%s, %d per-key ops)\n", "non-linearizable", yesNo(res.Result), res.Result, res.Ops)
	fmt.Fprintf(&b, "  %-32s %5d\n", "stale per-key reads (certain)", res.Stale)
	fmt.Fprintf(&b, "  %-32s %5d (in %d samples)\n", "double-open region samples", doubles, samples)
	fmt.Fprintf(&b, "  %-32s %5d\n", "end-state doubles", len(cv.doubles))
	fmt.Fprintf(&b, "  convergence after healing (bound %v)\n", livenessBound)
	for _, cond := range convergenceConds {
		d, met := cv.took[cond]
		switch {
		case !met:
			fmt.Fprintf(&b, "  %-44s %9s (%d unmet)\n", cond, "NOT MET", len(cv.unmet[cond]))
		case cond == condAcked:
			fmt.Fprintf(&b, "  %-44s %9v (%d acknowledged)\n", cond, d.Round(100*time.Millisecond), cv.acked)
		default:
			fmt.Fprintf(&b, "  %-44s %9v\n", cond, d.Round(100*time.Millisecond))
		}
	}
	fmt.Fprintf(&b, "  (bound = %s)\n", livenessDerivation())
	fmt.Fprintf(&b, "  schedule: %s (as run: %s)\n", planPath, recordPath)
	fmt.Fprintf(&b, "  elapsed: %v (faults %v, settling %v)\n", time.Since(began).Round(time.Second), faultPhase.Round(time.Second), settle.Round(time.Second))
	t.Log(b.String())

	if res.Result == porcupine.Illegal {
		t.Errorf("NOT LINEARIZABLE: namespace history of %d per-key operations; %d reads certainly stale, e.g.:\n  %s\nvisualization: %s",
			res.Ops, res.Stale, strings.Join(res.Samples, "\n  "), strings.Join(res.Visualizations, " "))
	}
	if doubles > 0 {
		t.Errorf("SAFETY VIOLATION: %d samples found a region open on two region servers at once:\n  %s", doubles, strings.Join(reports, "\n  "))
	}
	if len(cv.doubles) > 0 {
		t.Errorf("SAFETY VIOLATION at the end: %s", strings.Join(cv.doubles, "; "))
	}
	var late []string
	for _, cond := range convergenceConds {
		if d, met := cv.took[cond]; !met {
			late = append(late, fmt.Sprintf("%s: not within %v:\n    %s", cond, livenessBound, strings.Join(firstN(cv.unmet[cond], 20), "\n    ")))
		} else if d > livenessBound {
			late = append(late, fmt.Sprintf("%s: took %v, over the bound %v", cond, d.Round(100*time.Millisecond), livenessBound))
		}
	}
	if len(late) > 0 && len(cv.doubles) == 0 {
		t.Errorf("LIVENESS: the cluster did not converge within %v of healing:\n  %s", livenessBound, strings.Join(late, "\n  "))
	}
	for k, want := range cfg.faults {
		if took[k] < want && faultPhase < cfg.maxDuration {
			t.Logf("chaos: only %d of %d %s faults took effect", took[k], want, k)
		}
	}
}

func yesNo(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Illegal:
		return "YES"
	case porcupine.Ok:
		return "no"
	}
	return "?"
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			return r
		}
		return '_'
	}, s)
}

// artifactsDir is $BATON_CHAOS_ARTIFACTS, or a new directory under
// os.TempDir() (t.TempDir would be removed with the test's end).
func artifactsDir(t *testing.T) string {
	if d := os.Getenv("BATON_CHAOS_ARTIFACTS"); d != "" {
		return d
	}
	d, err := os.MkdirTemp("", "baton-chaos-artifacts-")
	if err != nil {
		t.Logf("chaos: artifacts: %v", err)
		return filepath.Join(os.TempDir(), "baton-chaos-artifacts")
	}
	t.Logf("chaos: artifacts go to %s", d)
	return d
}
