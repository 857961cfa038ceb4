package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"go.etcd.io/bbolt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/proto/adminpb"
)

const benchUsage = `usage: baton bench <command> [flags]

commands:
  scale   start a cluster of real processes on this machine (3 masters and
          --regionservers region servers on loopback) for each region count
          of --regions, and print how opening the regions, the masters'
          memory and disk, leader failover, a region server crash and a
          wiped master's catch-up cost as the count grows

Run 'baton bench <command> -h' for its flags.
`

// bench runs `baton bench ...`.
func (c *cli) bench(args []string) int {
	return c.subcommands("bench", benchUsage, args, map[string]func([]string) int{
		"scale": c.benchScale,
	})
}

// benchPhases are the steps of a row that --skip may leave out (opening
// the regions is the row itself).
var benchPhases = []string{"failover", "crash", "catchup", "commit"}

// benchCommitLevels are the concurrencies of the group-commit sweep.
var benchCommitLevels = []int{1, 16, 64, 256}

// benchCommitSteps is the length of each procedure of the sweep.
const benchCommitSteps = 5

// scaleOptions is the validated command line of `baton bench scale`.
type scaleOptions struct {
	regions       []int
	tableRegions  int
	concurrency   int
	regionServers int
	dir           string
	keep          bool
	json          bool
	skip          map[string]bool
	phaseTimeout  time.Duration
	// workers is each master's --workers (0: the agent's default).
	workers int
	// tls lists the transports each region count runs with, in order:
	// false plaintext, true mutual TLS on every channel (--tls).
	tls []bool
	// profile, if set (--profile), takes the masters' CPU profiles during
	// the open and the crash recovery.
	profile *benchProfiler
}

// scaleMaster is one master's resources after the regions opened.
type scaleMaster struct {
	ID          string  `json:"id"`
	Leader      bool    `json:"leader"`
	RSSMB       float64 `json:"rss_mb"`
	DataMB      float64 `json:"data_mb"`
	RaftDBMB    float64 `json:"raft_db_mb"`
	SnapshotsMB float64 `json:"snapshots_mb"`
	WALMB       float64 `json:"wal_mb"`
}

// scaleCommit is one concurrency of the group-commit sweep.
type scaleCommit struct {
	Procedures    int     `json:"procedures"` // in flight at once
	Steps         float64 `json:"steps"`
	Fsyncs        float64 `json:"fsyncs"`
	StepsPerFsync float64 `json:"steps_per_fsync"`
	// OfConcurrency is StepsPerFsync over Procedures: 1 when every log
	// write carries a step of each procedure in flight.
	OfConcurrency float64 `json:"of_concurrency"`
	StepP99Ms     float64 `json:"step_p99_ms"`
	StepsPerSec   float64 `json:"steps_per_second"`
	// LeaderChanges counts the runs of this level discarded because the
	// leader changed during them; the figures are zero if every run was.
	LeaderChanges int `json:"leader_changes"`
}

// scaleRow is one region count's results. A phase left out (--skip) has
// its fields absent.
type scaleRow struct {
	Regions int `json:"regions"`
	// TLS: every channel ran mutual TLS (--tls on or both).
	TLS              bool          `json:"tls"`
	Tables           int           `json:"tables"`
	OpenSeconds      float64       `json:"open_seconds"`
	RegionsPerSecond float64       `json:"regions_per_second"`
	MasterRSSMBMin   float64       `json:"master_rss_mb_min"`
	MasterRSSMBMax   float64       `json:"master_rss_mb_max"`
	DataMBMax        float64       `json:"data_mb_max"`
	Masters          []scaleMaster `json:"masters"`
	// Machine is what the machine could do just before the row's cluster
	// started: read the row's figures against it.
	Machine machineBaseline `json:"machine"`
	// StateMB is the live state: the leader's local WAL's live bytes,
	// what a compaction would keep, against which raft.db's size reads.
	StateMB float64 `json:"state_mb"`

	FailoverSeconds      *float64 `json:"failover_seconds,omitempty"`
	CrashRecoverySeconds *float64 `json:"crash_recovery_seconds,omitempty"`
	CrashedServerRegions int      `json:"crashed_server_regions,omitempty"`
	// CrashDetectedSeconds is how long after the SIGKILL the leader listed
	// the server's lease as no longer live (its lease expiring): the
	// recovery proper is CrashRecoverySeconds minus this.
	CrashDetectedSeconds *float64 `json:"crash_detected_seconds,omitempty"`
	CatchUpSeconds       *float64 `json:"catch_up_seconds,omitempty"`
	// CatchUpFromSnapshot: the wiped master installed the leader's
	// snapshot (else the leader's log still held everything).
	CatchUpFromSnapshot *bool `json:"catch_up_from_snapshot,omitempty"`
	// RaftDBStoppedMB is the wiped master's raft.db just before the wipe,
	// RaftDBFreeMB the part of it no bucket uses: pages bolt reuses but
	// never gives back.
	RaftDBStoppedMB *float64 `json:"raft_db_stopped_mb,omitempty"`
	RaftDBFreeMB    *float64 `json:"raft_db_free_mb,omitempty"`

	Commit []scaleCommit `json:"commit,omitempty"`

	// Failed says which phase failed and why; the figures of the phases
	// before it stand, the failed one's are left out, and the row is not
	// counted in the growth.
	Failed string `json:"failed,omitempty"`
}

// scaleGrowth is the cost growth between two consecutive rows, each
// ratio scaled to a tenfold growth of the region count: 10 is linear for
// a cost that grows with the regions, 1 for a rate or a cost that should
// not grow.
type scaleGrowth struct {
	From             int      `json:"from"`
	To               int      `json:"to"`
	OpenSeconds      float64  `json:"open_seconds"`
	RegionsPerSecond float64  `json:"regions_per_second"`
	MasterRSSMBMax   float64  `json:"master_rss_mb_max"`
	DataMBMax        float64  `json:"data_mb_max"`
	FailoverSeconds  *float64 `json:"failover_seconds,omitempty"`
	CrashRecovery    *float64 `json:"crash_recovery_seconds,omitempty"`
	CatchUpSeconds   *float64 `json:"catch_up_seconds,omitempty"`
}

// scaleTLSRatio compares the TLS row of a region count with its plaintext
// row (--tls both): each figure with TLS over the same without, so above
// 1 is faster for a rate, slower for a time.
type scaleTLSRatio struct {
	Regions          int       `json:"regions"`
	RegionsPerSecond float64   `json:"regions_per_second"`
	FailoverSeconds  *float64  `json:"failover_seconds,omitempty"`
	CrashRecovery    *float64  `json:"crash_recovery_seconds,omitempty"`
	CommitLevels     []int     `json:"commit_levels,omitempty"`
	CommitStepsPerS  []float64 `json:"commit_steps_per_second,omitempty"`
}

// scaleDoc is the --json document.
type scaleDoc struct {
	RegionServers int           `json:"region_servers"`
	TableRegions  int           `json:"table_regions"`
	Concurrency   int           `json:"concurrency"`
	Skipped       []string      `json:"skipped"`
	Dir           string        `json:"dir,omitempty"` // kept (--dir, --keep)
	Rows          []scaleRow    `json:"rows"`
	Growth        []scaleGrowth `json:"growth"`
	// TLSRatios: with --tls both, each region count's TLS figures over
	// its plaintext ones.
	TLSRatios []scaleTLSRatio `json:"tls_ratios,omitempty"`
	Notes     []string        `json:"notes"`
	// Error says why the bench stopped before its last row; the rows
	// measured until then are still there.
	Error string `json:"error,omitempty"`
}

func parseScaleFlags(c *cli, args []string) (scaleOptions, error) {
	fs := flag.NewFlagSet("baton bench scale", flag.ContinueOnError)
	newUsageOut(fs, c.stdout, c.stderr)
	regions := fs.String("regions", "10000,100000,1000000", "region counts, comma-separated: one row (and one fresh cluster) each")
	o := scaleOptions{}
	fs.IntVar(&o.tableRegions, "table-regions", 2000, fmt.Sprintf("regions per table, 1 to %d (the most one table may have)", client.MaxRegions))
	fs.IntVar(&o.concurrency, "concurrency", 4, "tables created at once")
	fs.IntVar(&o.workers, "workers", 0, fmt.Sprintf("each master's executor workers (agent --workers), 1 to %d; 0: the agent's default (%d)", maxAgentWorkers, cluster.DefaultWorkers))
	fs.IntVar(&o.regionServers, "regionservers", 3, "region servers (baton regionserver processes), at least 2: the crash phase kills one")
	fs.StringVar(&o.dir, "dir", "", "put the clusters' data and logs here, and keep them (default: a temporary directory, removed at the end)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (its path is printed)")
	fs.BoolVar(&o.json, "json", false, "print exactly one JSON document on stdout")
	skip := fs.String("skip", "", "phases to leave out, comma-separated: "+strings.Join(benchPhases, ", ")+" (commit, the group-commit sweep, is left out unless --commit)")
	commit := fs.Bool("commit", false, fmt.Sprintf("also run the group-commit sweep: %v no-op procedures in flight, steps per leader log fsync and p99 step latency", benchCommitLevels))
	fs.DurationVar(&o.phaseTimeout, "phase-timeout", 30*time.Minute, "give up (exit 1) when one phase of a row (start, open, failover, crash, catch-up, commit) takes longer")
	profileDir := fs.String("profile", "", "write each master's CPU profile, taken from the start of the open and from the crash's detection, into this directory as <regions>-<phase>-<master>.pprof (read with 'go tool pprof')")
	profileSeconds := fs.Int("profile-seconds", 30, "length of each --profile profile, in seconds")
	tlsMode := fs.String("tls", "off", "off: plaintext; on: mutual TLS on every channel (a CA and certificates made in the row's directory); both: each region count twice, plaintext then TLS, and their ratios")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: baton bench scale [--regions N,N,...] [flags]

For each region count N, starts 3 masters ('baton agent') and region servers
('baton regionserver') of this binary on loopback, in a directory of their
own, and measures:
  open          creating tables of --table-regions regions until N regions are
                open: the time, regions per second
  resources     each master's RSS, its data directory (raft.db, snapshots, the
                local WAL) and the live state beside raft.db
  failover      SIGKILL the leader; time until a one-step procedure submitted to
                the survivors succeeds (the killed master is restarted)
  crash         SIGKILL the region server holding the most regions; time until
                every region is open again (the server's lease must expire
                first: 15 s by default)
  catchup       stop a follower, wipe its data directory, start it again; time
                until it has applied the leader's index
  commit        (--commit) the group-commit sweep
Every process is killed, and the directory removed (unless --dir or --keep),
at the end, on error and on Ctrl-C. The machine's other load shows in every
figure: compare rows of one run, not runs on different machines.

flags:
`)
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return o, err
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if len(pos) > 0 {
		bad("takes no arguments, got %q", pos)
	}
	for _, f := range strings.Split(*regions, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			bad("--regions: %q is not a positive number", f)
			continue
		}
		o.regions = append(o.regions, n)
	}
	if len(o.regions) == 0 {
		bad("--regions is empty: give region counts, e.g. --regions 10000,100000")
	}
	if o.tableRegions < 1 || o.tableRegions > client.MaxRegions {
		bad("--table-regions %d: want 1 to %d", o.tableRegions, client.MaxRegions)
	}
	if o.concurrency < 1 {
		bad("--concurrency %d: want at least 1", o.concurrency)
	}
	if o.workers < 0 || o.workers > maxAgentWorkers {
		bad("--workers %d: want 1 to %d, or 0 for the agent's default", o.workers, maxAgentWorkers)
	}
	if o.regionServers < 2 {
		bad("--regionservers %d: want at least 2 (the crash phase kills one, the others reopen its regions)", o.regionServers)
	}
	if o.phaseTimeout <= 0 {
		bad("--phase-timeout %v: want a positive duration", o.phaseTimeout)
	}
	switch *tlsMode {
	case "off":
		o.tls = []bool{false}
	case "on":
		o.tls = []bool{true}
	case "both":
		o.tls = []bool{false, true}
	default:
		bad("--tls %q: want off, on or both", *tlsMode)
	}
	o.skip = map[string]bool{"commit": !*commit}
	for _, p := range strings.Split(*skip, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		known := false
		for _, q := range benchPhases {
			known = known || p == q
		}
		if !known {
			bad("--skip: unknown phase %q (phases: %s)", p, strings.Join(benchPhases, ", "))
		}
		o.skip[p] = true
	}
	if *profileDir != "" {
		if *profileSeconds < 1 {
			bad("--profile-seconds %d: want at least 1", *profileSeconds)
		} else if err := os.MkdirAll(*profileDir, 0o755); err != nil {
			bad("--profile: %v", err)
		} else {
			o.profile = &benchProfiler{dir: *profileDir, seconds: *profileSeconds}
		}
	}
	if len(problems) > 0 {
		return o, usagef("%s", strings.Join(problems, "; "))
	}
	return o, nil
}

// benchScale runs `baton bench scale`.
func (c *cli) benchScale(args []string) int {
	o, err := parseScaleFlags(c, args)
	if err != nil {
		return c.flagsFailed("bench scale", err)
	}
	bin, err := os.Executable()
	if err != nil {
		fmt.Fprintf(c.stderr, "baton bench scale: the path of this binary, to start the cluster with: %v\n", err)
		return exitFailed
	}
	// The masters and region servers are this binary run again. A Go test
	// binary run with "agent ..." runs its tests instead, the one that got
	// here among them, which starts more: refuse rather than fork without
	// end.
	if strings.HasSuffix(filepath.Base(bin), ".test") {
		fmt.Fprintf(c.stderr, "baton bench scale: %s is a test binary, not baton: the cluster is started from the running binary, so run bench scale from a built baton\n", bin)
		return exitFailed
	}
	// Ctrl-C is c.ctx's end already; SIGTERM too, so that the deferred
	// kills run either way.
	ctx, stop := signal.NotifyContext(c.ctx, syscall.SIGTERM)
	defer stop()

	base := o.dir
	keep := o.keep || o.dir != ""
	if base == "" {
		if base, err = os.MkdirTemp("", "baton-bench-scale-"); err != nil {
			fmt.Fprintf(c.stderr, "baton bench scale: %v\n", err)
			return exitFailed
		}
	} else if err := os.MkdirAll(base, 0o755); err != nil {
		fmt.Fprintf(c.stderr, "baton bench scale: %v\n", err)
		return exitFailed
	}
	defer func() {
		if keep {
			fmt.Fprintf(c.stderr, "bench: data and logs kept in %s\n", base)
			return
		}
		_ = os.RemoveAll(base)
	}()

	doc := scaleDoc{RegionServers: o.regionServers, TableRegions: o.tableRegions, Concurrency: o.concurrency, Skipped: []string{}, Rows: []scaleRow{}}
	for _, p := range benchPhases {
		if o.skip[p] {
			doc.Skipped = append(doc.Skipped, p)
		}
	}
	if keep {
		doc.Dir = base
	}
	progress := func(format string, args ...any) {
		fmt.Fprintf(c.stderr, "bench: "+format+"\n", args...)
	}
	code := exitOK
rows:
	for _, n := range o.regions {
		for _, withTLS := range o.tls {
			sub := fmt.Sprintf("regions-%d", n)
			if withTLS {
				sub += "-tls"
			}
			row, err := runScaleRow(ctx, bin, filepath.Join(base, sub), n, withTLS, o, progress)
			if err != nil {
				doc.Error = fmt.Sprintf("%d regions: %v", n, err)
				fmt.Fprintf(c.stderr, "baton bench scale: %s\n", doc.Error)
				if !keep {
					fmt.Fprintf(c.stderr, "  (rerun with --keep to keep the processes' logs)\n")
				}
				if ctx.Err() != nil {
					fmt.Fprintf(c.stderr, "  interrupted: every process the bench started is killed\n")
				}
				code = exitFailed
				if row.OpenSeconds > 0 {
					// What was measured before the failure is still worth
					// reading, marked as a failed row.
					row.Failed = err.Error()
					doc.Rows = append(doc.Rows, row)
				}
				break rows
			}
			doc.Rows = append(doc.Rows, row)
		}
	}
	if code != exitOK && len(doc.Rows) == 0 && !o.json {
		return code
	}
	var complete []scaleRow
	for _, r := range doc.Rows {
		if r.Failed == "" {
			complete = append(complete, r)
		}
	}
	doc.Growth = []scaleGrowth{}
	for _, withTLS := range o.tls {
		var same []scaleRow
		for _, r := range complete {
			if r.TLS == withTLS {
				same = append(same, r)
			}
		}
		doc.Growth = append(doc.Growth, scaleGrowthOf(same)...)
	}
	doc.TLSRatios = scaleTLSRatiosOf(complete)
	doc.Notes = scaleNotes(doc.Rows)
	if o.json {
		c.printJSON(doc)
	} else {
		printScale(c, doc)
	}
	return code
}

// runScaleRow starts a cluster in dir, opens n regions on it and runs the
// phases, then kills the cluster (and removes dir unless kept by the
// caller).
func runScaleRow(ctx context.Context, bin, dir string, n int, withTLS bool, o scaleOptions, progress func(string, ...any)) (row scaleRow, err error) {
	row.Regions, row.TLS = n, withTLS
	if withTLS {
		// Every progress line says which of the two rows it is about.
		inner := progress
		progress = func(format string, args ...any) {
			inner(strings.Replace(format, "%d regions:", "%d regions (TLS):", 1), args...)
		}
	}
	phase := func(name string, fn func(ctx context.Context) error) error {
		pctx, cancel := context.WithTimeout(ctx, o.phaseTimeout)
		defer cancel()
		if err := fn(pctx); err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return fmt.Errorf("phase %s timed out after %v (--phase-timeout): %w", name, o.phaseTimeout, err)
			}
			return fmt.Errorf("phase %s: %w", name, err)
		}
		return nil
	}

	if row.Machine, err = measureMachine(ctx, dir); err != nil {
		return row, err
	}
	progress("%d regions: machine baseline: %.0f k ops/s on %d cores, fsync %.2f ms (median)", n, row.Machine.CPUOpsPerSecond/1e3, row.Machine.CPUs, row.Machine.FsyncMs)
	progress("%d regions: starting 3 masters and %d region servers in %s", n, o.regionServers, dir)
	c, err := startBenchCluster(bin, dir, o.regionServers, o.workers, withTLS)
	defer func() {
		if c != nil {
			for _, perr := range o.profile.wait() {
				progress("%d regions: %v", n, perr)
			}
			if serr := c.stop(); serr != nil && err == nil {
				err = serr
			}
		}
	}()
	if err != nil {
		return row, err
	}
	if err := phase("start", func(ctx context.Context) error {
		if _, err := c.waitLeader(ctx); err != nil {
			return err
		}
		return c.waitServers(ctx, o.regionServers)
	}); err != nil {
		return row, err
	}

	tables := tableNames(n, o.tableRegions)
	row.Tables = len(tables)
	progress("%d regions: creating %d tables, %d at a time", n, len(tables), o.concurrency)
	var open time.Duration
	if err := phase("open", func(ctx context.Context) (err error) {
		o.profile.start(ctx, c, n, "open")
		open, err = openTables(ctx, c.cl, tables, o.concurrency)
		return err
	}); err != nil {
		return row, err
	}
	row.OpenSeconds = open.Seconds()
	row.RegionsPerSecond = float64(n) / open.Seconds()
	if err := phase("resources", func(ctx context.Context) error { return measureMasters(ctx, c, &row) }); err != nil {
		return row, err
	}
	progress("%d regions: open in %.1f s (%.0f regions/s); master RSS %.0f–%.0f MB", n, row.OpenSeconds, row.RegionsPerSecond, row.MasterRSSMBMin, row.MasterRSSMBMax)

	if !o.skip["commit"] {
		progress("%d regions: group-commit sweep %v", n, benchCommitLevels)
		if err := phase("commit", func(ctx context.Context) (err error) {
			row.Commit, err = commitSweep(ctx, c)
			return err
		}); err != nil {
			return row, err
		}
	}
	if !o.skip["failover"] {
		progress("%d regions: failover (SIGKILL the leader)", n)
		if err := phase("failover", func(ctx context.Context) error {
			d, err := failover(ctx, c)
			if err == nil {
				row.FailoverSeconds = &d
			}
			return err
		}); err != nil {
			return row, err
		}
		progress("%d regions: failover in %.2f s", n, *row.FailoverSeconds)
	}
	if !o.skip["crash"] {
		progress("%d regions: region server crash (SIGKILL the one holding the most regions; its lease expires first)", n)
		if err := phase("crash", func(ctx context.Context) error {
			d, detected, held, err := crashRecovery(ctx, c, tables, func() { o.profile.start(ctx, c, n, "crash") })
			if err == nil {
				row.CrashRecoverySeconds, row.CrashDetectedSeconds, row.CrashedServerRegions = &d, &detected, held
			}
			return err
		}); err != nil {
			return row, err
		}
		progress("%d regions: %d regions reopened %.1f s after the crash, %.1f s after its detection", n, row.CrashedServerRegions,
			*row.CrashRecoverySeconds, *row.CrashRecoverySeconds-*row.CrashDetectedSeconds)
	}
	if !o.skip["catchup"] {
		// The catch-up stops a master: a profile still being taken of it
		// (the crash's, when the recovery was shorter than the profile)
		// would be cut off, and it loads the master being measured.
		for _, perr := range o.profile.wait() {
			progress("%d regions: %v", n, perr)
		}
		progress("%d regions: catch-up of a wiped follower", n)
		if err := phase("catchup", func(ctx context.Context) error { return catchUp(ctx, c, &row) }); err != nil {
			return row, err
		}
	}
	return row, nil
}

// benchTable is one table the open phase creates.
type benchTable struct {
	name    string
	regions int
}

// tableNames splits n regions into tables of per regions (the last one
// holds the rest).
func tableNames(n, per int) []benchTable {
	var out []benchTable
	for i := 0; n > 0; i++ {
		k := min(per, n)
		out = append(out, benchTable{name: fmt.Sprintf("bench_%d", i), regions: k})
		n -= k
	}
	return out
}

// openTables creates every table, concurrency at a time, and returns how
// long it took until the last create succeeded (a create succeeds once
// its regions are open).
func openTables(ctx context.Context, cl *client.Client, tables []benchTable, concurrency int) (time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan benchTable)
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for t := range next {
				// The nonce makes the client's retries of one create
				// one procedure.
				id, err := cl.CreateTable(ctx, "", t.name, t.regions, "bench-create-"+t.name)
				if err == nil {
					err = waitSuccess(ctx, cl, id)
				}
				if err != nil {
					cancel(fmt.Errorf("create table %s (%d regions): %w", t.name, t.regions, err))
					return
				}
			}
		})
	}
feed:
	for _, t := range tables {
		select {
		case next <- t:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// waitSuccess waits for procedure id to end, re-watching through errors
// (an election) until ctx ends; it fails unless the procedure succeeded.
func waitSuccess(ctx context.Context, cl *client.Client, id uint64) error {
	for {
		p, err := cl.Wait(ctx, id)
		if err == nil && client.Terminal(p.GetState()) {
			if p.GetState() != client.StateSuccess {
				return fmt.Errorf("procedure %d ended %s: %s", id, p.GetState(), p.GetError())
			}
			return nil
		}
		if status.Code(err) == codes.NotFound {
			return fmt.Errorf("procedure %d: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("procedure %d not done: %w (last: %v)", id, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// measureMasters records each master's RSS and data sizes, and the live
// state size from the leader's local WAL.
func measureMasters(ctx context.Context, c *benchCluster, row *scaleRow) error {
	l, err := c.waitLeader(ctx)
	if err != nil {
		return err
	}
	row.Masters = nil
	row.MasterRSSMBMin, row.MasterRSSMBMax, row.DataMBMax = math.Inf(1), 0, 0
	for _, m := range c.masters {
		sm := scaleMaster{
			ID: m.id, Leader: m == l, RSSMB: rssMB(m.Pid()), DataMB: dirMB(m.dataDir),
			RaftDBMB:    dirMB(filepath.Join(m.dataDir, "raft", "raft.db")),
			SnapshotsMB: dirMB(filepath.Join(m.dataDir, "snapshots")),
			WALMB:       dirMB(filepath.Join(m.dataDir, "fsm")),
		}
		row.Masters = append(row.Masters, sm)
		row.MasterRSSMBMin = min(row.MasterRSSMBMin, sm.RSSMB)
		row.MasterRSSMBMax = max(row.MasterRSSMBMax, sm.RSSMB)
		row.DataMBMax = max(row.DataMBMax, sm.DataMB)
	}
	live, err := c.scrapeMetric(ctx, l, "baton_wal_live_bytes")
	if err != nil {
		return err
	}
	row.StateMB = live["baton_wal_live_bytes"] / (1 << 20)
	return nil
}

// failover SIGKILLs the leader and returns the time until a one-step
// procedure, submitted to the survivors as soon as the kill returned,
// succeeded. The killed master is then restarted and waited for.
func failover(ctx context.Context, c *benchCluster) (float64, error) {
	l, err := c.waitLeader(ctx)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := l.Kill(); err != nil {
		return 0, err
	}
	var id uint64
	err = poll(ctx, 50*time.Millisecond, "submitting a procedure to the surviving masters", func() (bool, string, error) {
		var err error
		id, err = c.cl.Submit(ctx, "sleep", map[string]string{"steps": "1", "delay": "0s"}, "bench-failover", "bench", 0)
		if err != nil && status.Code(err) == codes.InvalidArgument {
			return false, "", err
		}
		return err == nil, fmt.Sprint(err), nil
	})
	if err == nil {
		err = waitSuccess(ctx, c.cl, id)
	}
	d := time.Since(start).Seconds()
	if err != nil {
		return d, err
	}
	if err := l.start(); err != nil {
		return d, err
	}
	return d, c.waitCaughtUp(ctx, l)
}

// waitCaughtUp waits until master m has applied the leader's commit index
// as it was when the wait began.
func (c *benchCluster) waitCaughtUp(ctx context.Context, m *benchMaster) error {
	l, err := c.waitLeader(ctx)
	if err != nil {
		return err
	}
	lst, err := c.status(ctx, l)
	if err != nil {
		return err
	}
	return poll(ctx, 50*time.Millisecond, m.id+" catching up with the leader", func() (bool, string, error) {
		if m.Crashed() {
			return false, "", fmt.Errorf("%s exited; see its log %s", m.name, m.logPath)
		}
		st, err := c.status(ctx, m)
		if err != nil {
			return false, err.Error(), nil
		}
		return st.AppliedIndex >= lst.CommitIndex, fmt.Sprintf("applied %d of %d", st.AppliedIndex, lst.CommitIndex), nil
	})
}

// crashRecovery SIGKILLs the region server holding the most regions and
// returns the time until every region is open elsewhere, the time until
// the leader saw its lease expire, and how many regions it held.
func crashRecovery(ctx context.Context, c *benchCluster, tables []benchTable, onDetected func()) (total, detected float64, held int, err error) {
	// After a failover the new leader shows every server unconfirmed
	// until it heartbeats.
	if err := c.waitServers(ctx, len(c.servers)); err != nil {
		return 0, 0, 0, err
	}
	ss, err := c.cl.ListServers(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	var victim *adminpb.Server
	for _, s := range ss {
		if s.GetLeaseState() == "live" && (victim == nil || s.GetRegionCount() > victim.GetRegionCount()) {
			victim = s
		}
	}
	if victim == nil {
		return 0, 0, 0, errors.New("no live region server")
	}
	var proc *benchProc
	for _, s := range c.servers {
		if s.name == "region server "+victim.GetId() {
			proc = s
		}
	}
	if proc == nil {
		return 0, 0, 0, fmt.Errorf("region server %s is not one the bench started", victim.GetId())
	}
	start := time.Now()
	kill := start.Add(-time.Second) // the masters' clocks are this machine's
	if err := proc.Kill(); err != nil {
		return 0, 0, 0, err
	}
	err = pollPaced(ctx, 100*time.Millisecond, "the leader noticing "+victim.GetId()+"'s crash", func() (bool, string, error) {
		ss, err := c.cl.ListServers(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, s := range ss {
			if s.GetId() == victim.GetId() && s.GetStartCode() == victim.GetStartCode() && s.GetLeaseState() != "expired" {
				return false, "its lease is " + s.GetLeaseState(), nil
			}
		}
		return true, "", nil
	})
	if err != nil {
		return 0, 0, 0, err
	}
	detected = time.Since(start).Seconds()
	onDetected()
	pending := map[string]bool{}
	for _, t := range tables {
		pending[t.name] = true
	}
	// The crash procedure ends only once no region is left on the dead
	// incarnation and every one it moved is open: waiting for it costs the
	// leader a procedure get per poll, where counting the regions costs a
	// scan of them all (at 1 M regions a seventh of the leader's CPU,
	// taken from the very recovery measured). The count is then taken
	// once, and polled only if it finds regions not open yet.
	if err := waitServerCrash(ctx, c.cl, victim, kill); err != nil {
		return 0, 0, 0, err
	}
	err = pollPaced(ctx, 250*time.Millisecond, "reopening the regions of "+victim.GetId(), func() (bool, string, error) {
		left, err := regionsNotReopened(ctx, c.cl, pending, victim.GetId())
		if err != nil {
			return false, err.Error(), nil
		}
		return left == 0, fmt.Sprintf("%d regions not open elsewhere yet", left), nil
	})
	return time.Since(start).Seconds(), detected, int(victim.GetRegionCount()), err
}

// waitServerCrash waits for the ServerCrash procedure of the victim's
// incarnation, submitted after since, to succeed.
func waitServerCrash(ctx context.Context, cl *client.Client, victim *adminpb.Server, since time.Time) error {
	var id uint64
	want := domain.ServerRef{ID: victim.GetId(), StartCode: victim.GetStartCode()}
	other := map[uint64]bool{} // crash procedures of other incarnations, read once
	err := pollEvery(ctx, 100*time.Millisecond, false, "the crash procedure of "+victim.GetId(), func() (bool, string, error) {
		procs, _, err := cl.List(ctx, client.ListOptions{Type: domain.TypeServerCrash, RootsOnly: true, NewestFirst: true, SubmittedAfter: since, PageSize: 100})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, p := range procs {
			if other[p.GetId()] {
				continue
			}
			full, err := cl.Get(ctx, p.GetId())
			if err != nil {
				return false, err.Error(), nil
			}
			var scp domain.ServerCrash
			if err := json.Unmarshal(full.GetData(), &scp); err != nil {
				return false, "", fmt.Errorf("crash procedure %d: arguments: %w", p.GetId(), err)
			}
			if scp.Server == want {
				id = p.GetId()
				return true, "", nil
			}
			other[p.GetId()] = true
		}
		return false, "not submitted yet", nil
	})
	if err != nil {
		return err
	}
	if err := waitSuccess(ctx, cl, id); err != nil {
		return fmt.Errorf("the crash procedure of %s: %w", victim.GetId(), err)
	}
	return nil
}

// regionsNotReopened counts the regions of the pending tables that are not
// OPEN on a server other than dead, and drops from pending each table whose
// regions all are (they stay so: nothing else moves them while the bench
// runs). It reads the tables' region groups (counts per state and server),
// one table list per call rather than every region: at 1 M regions listing
// them all four times a second was a good part of the leader's CPU, in the
// very recovery it measures. A pending table missing from the list is an
// error, never "all reopened".
func regionsNotReopened(ctx context.Context, cl *client.Client, pending map[string]bool, dead string) (int, error) {
	left := 0
	seen := 0
	for t, err := range cl.Tables(ctx, &adminpb.ListTablesRequest{}) {
		if err != nil {
			return 0, err
		}
		name := t.GetName()
		if !pending[name] {
			name = t.GetNamespace() + ":" + t.GetName()
			if !pending[name] {
				continue
			}
		}
		seen++
		n := 0
		for _, g := range t.GetRegionGroups() {
			if g.GetState() != "OPEN" || g.GetServer() == dead {
				n += int(g.GetCount())
			}
		}
		if n == 0 {
			delete(pending, name)
		}
		left += n
	}
	if seen < len(pending) {
		return 0, fmt.Errorf("%d of the %d tables not reopened yet are missing from the table list", len(pending)-seen, len(pending))
	}
	return left, nil
}

// catchUp stops a follower, reads the free space inside its raft.db, wipes
// its data directory and starts it again, timing until it has applied the
// leader's commit index.
func catchUp(ctx context.Context, c *benchCluster, row *scaleRow) error {
	l, err := c.waitLeader(ctx)
	if err != nil {
		return err
	}
	var f *benchMaster
	for _, m := range c.masters {
		if m != l && m.Running() {
			f = m
			break
		}
	}
	if f == nil {
		return errors.New("no running follower")
	}
	if err := f.Kill(); err != nil {
		return err
	}
	db := filepath.Join(f.dataDir, "raft", "raft.db")
	if free, err := boltFreeMB(db); err == nil {
		size := dirMB(db)
		row.RaftDBStoppedMB, row.RaftDBFreeMB = &size, &free
	}
	if err := os.RemoveAll(f.dataDir); err != nil {
		return err
	}
	start := time.Now()
	if err := f.start(); err != nil {
		return err
	}
	err = c.waitCaughtUp(ctx, f)
	d := time.Since(start).Seconds()
	row.CatchUpSeconds = &d
	log, rerr := os.ReadFile(f.logPath)
	snap := rerr == nil && strings.Contains(string(log), "Installed remote snapshot")
	row.CatchUpFromSnapshot = &snap
	return err
}

// boltFreeMB opens a stopped master's raft.db read-only and returns the
// bytes of the file no bucket uses: pages freed by log compaction, which
// bolt reuses for new entries but never returns to the file system. (The
// freelist itself is not read: raft-boltdb may not persist it.)
func boltFreeMB(path string) (float64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var used int64
	err = db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bbolt.Bucket) error {
			st := b.Stats()
			pages := st.BranchPageN + st.BranchOverflowN + st.LeafPageN + st.LeafOverflowN
			used += int64(pages) * int64(db.Info().PageSize)
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	return float64(max(fi.Size()-used, 0)) / (1 << 20), nil
}

// commitSweep runs no-op diagnostic procedures at each concurrency of
// benchCommitLevels and reads, from the leader's metrics, how many steps
// each write of its Raft log carried (raft's dispatch of new entries: one
// log store write, one fsync) and the step latency's 99th percentile.
func commitSweep(ctx context.Context, c *benchCluster) ([]scaleCommit, error) {
	var out []scaleCommit
	for _, procs := range benchCommitLevels {
		// A level across a leader change counts two masters' metrics (and
		// an election): it runs again, up to benchCommitAttempts times,
		// and is reported without figures if the leader never held.
		var r scaleCommit
		for attempt := range benchCommitAttempts {
			var err error
			r, err = commitLevel(ctx, c, procs, attempt)
			if errors.Is(err, errLeaderChanged) {
				r = scaleCommit{Procedures: procs, LeaderChanges: attempt + 1}
				continue
			}
			if err != nil {
				return out, err
			}
			r.LeaderChanges = attempt
			break
		}
		out = append(out, r)
	}
	return out, nil
}

// benchCommitAttempts bounds the runs of one sweep level.
const benchCommitAttempts = 3

// errLeaderChanged: the leader changed while a sweep level ran.
var errLeaderChanged = errors.New("the leader changed during the measurement")

// commitLevel runs one level of the group-commit sweep: procs procedures
// in flight (attempt tells the nonces of a rerun apart).
func commitLevel(ctx context.Context, c *benchCluster, procs, attempt int) (scaleCommit, error) {
	const (
		stepsMetric  = "baton_procedure_step_duration_seconds_count"
		fsyncsMetric = "baton_raft_leader_dispatch_duration_seconds_count"
		bucketMetric = "baton_procedure_step_duration_seconds_bucket"
	)
	var out scaleCommit
	l, err := c.waitLeader(ctx)
	if err != nil {
		return out, err
	}
	st0, err := c.status(ctx, l)
	if err != nil {
		return out, err
	}
	before, err := c.scrapeMetric(ctx, l, stepsMetric, fsyncsMetric)
	if err != nil {
		return out, err
	}
	bBefore, err := c.scrapeBuckets(ctx, l, bucketMetric)
	if err != nil {
		return out, err
	}
	total := max(8*procs, 64)
	start := time.Now()
	if err := runSleeps(ctx, c.cl, procs, total, fmt.Sprintf("bench-commit-%d-%d-", procs, attempt)); err != nil {
		return out, err
	}
	d := time.Since(start)
	after, err := c.scrapeMetric(ctx, l, stepsMetric, fsyncsMetric)
	if err != nil {
		return out, err
	}
	bAfter, err := c.scrapeBuckets(ctx, l, bucketMetric)
	if err != nil {
		return out, err
	}
	st1, err := c.status(ctx, l)
	if err != nil {
		return out, err
	}
	if st1.Term != st0.Term || st1.LeaderID != l.id {
		return out, fmt.Errorf("%d in flight: %w (%s term %d, then %s term %d)", procs, errLeaderChanged, l.id, st0.Term, st1.LeaderID, st1.Term)
	}
	r := scaleCommit{Procedures: procs, Steps: after[stepsMetric] - before[stepsMetric], Fsyncs: after[fsyncsMetric] - before[fsyncsMetric]}
	if r.Fsyncs > 0 {
		r.StepsPerFsync = r.Steps / r.Fsyncs
		r.OfConcurrency = r.StepsPerFsync / float64(procs)
	}
	r.StepsPerSec = r.Steps / d.Seconds()
	r.StepP99Ms = 1000 * bucketQuantile(0.99, bBefore, bAfter)
	return r, nil
}

// runSleeps runs total one-after-another no-op procedures of
// benchCommitSteps steps from procs goroutines.
func runSleeps(ctx context.Context, cl *client.Client, procs, total int, noncePrefix string) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next sync.Mutex
	issued := 0
	var wg sync.WaitGroup
	args := map[string]string{"steps": strconv.Itoa(benchCommitSteps), "delay": "0s"}
	for range procs {
		wg.Go(func() {
			for {
				next.Lock()
				i := issued
				issued++
				next.Unlock()
				if i >= total || ctx.Err() != nil {
					return
				}
				id, err := cl.Submit(ctx, "sleep", args, noncePrefix+strconv.Itoa(i), "bench", 0)
				if err == nil {
					err = waitSuccess(ctx, cl, id)
				}
				if err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// scrapeBuckets reads the cumulative buckets of histogram metric (summed
// over its label sets) from master m's /metrics, by upper bound.
func (c *benchCluster) scrapeBuckets(ctx context.Context, m *benchMaster, metric string) (map[float64]float64, error) {
	body, err := c.get(ctx, m, "/metrics")
	if err != nil {
		return nil, err
	}
	defer body.Close()
	raw, err := io.ReadAll(io.LimitReader(body, 16<<20))
	if err != nil {
		return nil, err
	}
	out := map[float64]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, metric+"{") {
			continue
		}
		_, rest, ok := strings.Cut(line, `le="`)
		if !ok {
			continue
		}
		le, rest, ok := strings.Cut(rest, `"`)
		if !ok {
			continue
		}
		bound, err := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		if v, err := strconv.ParseFloat(rest[i+1:], 64); err == nil {
			out[bound] += v
		}
	}
	return out, nil
}

// bucketQuantile is the q-quantile of the observations made between two
// scrapes of a cumulative histogram, interpolated linearly inside its
// bucket (the last finite bound if it falls in +Inf): as exact as the
// buckets, which grow fourfold.
func bucketQuantile(q float64, before, after map[float64]float64) float64 {
	var bounds []float64
	for b := range after {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return 0
	}
	total := after[bounds[len(bounds)-1]] - before[bounds[len(bounds)-1]]
	if total <= 0 {
		return 0
	}
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for _, b := range bounds {
		cnt := after[b] - before[b]
		if cnt >= rank {
			if math.IsInf(b, 1) {
				return prevBound
			}
			if cnt == prevCount {
				return b
			}
			return prevBound + (b-prevBound)*(rank-prevCount)/(cnt-prevCount)
		}
		prevBound, prevCount = b, cnt
	}
	return prevBound
}

// scaleTLSRatiosOf pairs each region count's TLS row with its plaintext
// row.
func scaleTLSRatiosOf(rows []scaleRow) []scaleTLSRatio {
	var out []scaleTLSRatio
	for _, t := range rows {
		if !t.TLS {
			continue
		}
		for _, p := range rows {
			if p.TLS || p.Regions != t.Regions {
				continue
			}
			r := scaleTLSRatio{Regions: t.Regions, RegionsPerSecond: ratioOf(p.RegionsPerSecond, t.RegionsPerSecond)}
			r.FailoverSeconds = optRatio(ratioOf, p.FailoverSeconds, t.FailoverSeconds)
			r.CrashRecovery = optRatio(ratioOf, p.CrashRecoverySeconds, t.CrashRecoverySeconds)
			for i := range min(len(p.Commit), len(t.Commit)) {
				r.CommitLevels = append(r.CommitLevels, t.Commit[i].Procedures)
				r.CommitStepsPerS = append(r.CommitStepsPerS, ratioOf(p.Commit[i].StepsPerSec, t.Commit[i].StepsPerSec))
			}
			out = append(out, r)
			break
		}
	}
	return out
}

// optRatio is ratio of two figures a phase may have left out (nil).
func optRatio(ratio func(a, b float64) float64, a, b *float64) *float64 {
	if a == nil || b == nil {
		return nil
	}
	v := ratio(*a, *b)
	return &v
}

// ratioOf is b/a, 0 when either is not positive.
func ratioOf(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return b / a
}

// scaleGrowthOf is the growth of each cost between consecutive rows.
func scaleGrowthOf(rows []scaleRow) []scaleGrowth {
	out := []scaleGrowth{}
	for i := 1; i < len(rows); i++ {
		a, b := rows[i-1], rows[i]
		if a.Regions == b.Regions {
			continue
		}
		per10 := 1 / math.Log10(float64(b.Regions)/float64(a.Regions))
		ratio := func(x, y float64) float64 {
			if x <= 0 || y <= 0 {
				return 0
			}
			return math.Pow(y/x, per10)
		}
		opt := func(x, y *float64) *float64 { return optRatio(ratio, x, y) }
		out = append(out, scaleGrowth{
			From: a.Regions, To: b.Regions,
			OpenSeconds:      ratio(a.OpenSeconds, b.OpenSeconds),
			RegionsPerSecond: ratio(a.RegionsPerSecond, b.RegionsPerSecond),
			MasterRSSMBMax:   ratio(a.MasterRSSMBMax, b.MasterRSSMBMax),
			DataMBMax:        ratio(a.DataMBMax, b.DataMBMax),
			FailoverSeconds:  opt(a.FailoverSeconds, b.FailoverSeconds),
			CrashRecovery:    opt(a.CrashRecoverySeconds, b.CrashRecoverySeconds),
			CatchUpSeconds:   opt(a.CatchUpSeconds, b.CatchUpSeconds),
		})
	}
	return out
}

// scaleNotes says how to read the figures.
func scaleNotes(rows []scaleRow) []string {
	notes := []string{
		"cost growth per 10x: each cost's ratio between consecutive rows, scaled to a tenfold region count; linear is 10x for times and sizes, 1x for regions/s and failover",
		"machine: a fixed unit of master-like work (encode a region record as JSON, hash it) per second on every core, and the median 4 KiB append+fsync, measured before each row's cluster starts; the same machine kind differs by up to 2x from day to day, so compare runs by their figures over this baseline",
		"crash recovery includes the region server's lease expiring (15 s by default) before its regions are reassigned; after detection counts from the moment the leader listed that lease expired",
	}
	for _, r := range rows {
		if r.RaftDBFreeMB == nil {
			continue
		}
		notes = append(notes, fmt.Sprintf("%d regions: raft.db %.1f MB (the wiped master's, at the end) against %.1f MB of live state (the leader's local WAL's live records after the open); %.1f MB of it free pages: bolt reuses the pages log compaction frees but never shrinks the file",
			r.Regions, *r.RaftDBStoppedMB, r.StateMB, *r.RaftDBFreeMB))
	}
	return notes
}

// printScale prints doc as tables.
func printScale(c *cli, doc scaleDoc) {
	w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	secs := func(v *float64) string {
		if v == nil {
			return "skipped"
		}
		return fmt.Sprintf("%.1f", *v)
	}
	fmt.Fprintln(w, "regions\ttls\topen (s)\tregions/s\tmaster RSS (MB)\tdata/master (MB)\traft.db / snapshots / WAL (MB)\tstate (MB)\tfailover (s)\tRS crash (s)\tcatch-up (s)\t")
	for _, r := range doc.Rows {
		var db, sn, wal float64
		for _, m := range r.Masters {
			db, sn, wal = max(db, m.RaftDBMB), max(sn, m.SnapshotsMB), max(wal, m.WALMB)
		}
		catch := secs(r.CatchUpSeconds)
		if r.CatchUpFromSnapshot != nil && *r.CatchUpFromSnapshot {
			catch += " (snapshot)"
		}
		crash := secs(r.CrashRecoverySeconds)
		if r.CrashRecoverySeconds != nil {
			crash += fmt.Sprintf(" (%d regions", r.CrashedServerRegions)
			if r.CrashDetectedSeconds != nil {
				crash += fmt.Sprintf("; %.1f after detection", *r.CrashRecoverySeconds-*r.CrashDetectedSeconds)
			}
			crash += ")"
		}
		tlsCol := "off"
		if r.TLS {
			tlsCol = "on"
		}
		fmt.Fprintf(w, "%d\t%s\t%.1f\t%.0f\t%.0f–%.0f\t%.1f\t%.1f / %.1f / %.1f\t%.2f\t%s\t%s\t%s\t\n",
			r.Regions, tlsCol, r.OpenSeconds, r.RegionsPerSecond, r.MasterRSSMBMin, r.MasterRSSMBMax, r.DataMBMax, db, sn, wal, r.StateMB,
			secs(r.FailoverSeconds), crash, catch)
	}
	w.Flush()
	for _, g := range doc.Growth {
		x := func(v float64) string { return fmt.Sprintf("%.2fx", v) }
		ox := func(v *float64) string {
			if v == nil {
				return "-"
			}
			return x(*v)
		}
		fmt.Fprintf(c.stdout, "cost growth per 10x (%d → %d regions): open time %s, regions/s %s, master RSS %s, data %s, failover %s, RS crash %s, catch-up %s\n",
			g.From, g.To, x(g.OpenSeconds), x(g.RegionsPerSecond), x(g.MasterRSSMBMax), x(g.DataMBMax), ox(g.FailoverSeconds), ox(g.CrashRecovery), ox(g.CatchUpSeconds))
	}
	for _, r := range doc.Rows {
		if len(r.Commit) == 0 {
			continue
		}
		mode := ""
		if r.TLS {
			mode = ", TLS"
		}
		fmt.Fprintf(c.stdout, "\ngroup commit at %d regions%s (no-op procedures of %d steps; leader's log writes, each one fsync):\n", r.Regions, mode, benchCommitSteps)
		w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "in flight\tsteps\tfsyncs\tsteps/fsync\tof in flight\tp99 step (ms)\tsteps/s\t")
		for _, cm := range r.Commit {
			if cm.Fsyncs == 0 && cm.LeaderChanges > 0 {
				fmt.Fprintf(w, "%d\tleader changed during each of %d runs\t\t\t\t\t\t\n", cm.Procedures, cm.LeaderChanges)
				continue
			}
			note := ""
			if cm.LeaderChanges > 0 {
				note = fmt.Sprintf(" (leader changed: reruns %d)", cm.LeaderChanges)
			}
			fmt.Fprintf(w, "%d\t%.0f\t%.0f\t%.1f\t%.2f\t%.1f\t%.0f%s\t\n", cm.Procedures, cm.Steps, cm.Fsyncs, cm.StepsPerFsync, cm.OfConcurrency, cm.StepP99Ms, cm.StepsPerSec, note)
		}
		w.Flush()
	}
	for _, tr := range doc.TLSRatios {
		fmt.Fprintf(c.stdout, "\nTLS against plaintext at %d regions (TLS over plaintext): regions/s %.2fx", tr.Regions, tr.RegionsPerSecond)
		if tr.FailoverSeconds != nil {
			fmt.Fprintf(c.stdout, ", failover time %.2fx", *tr.FailoverSeconds)
		}
		if tr.CrashRecovery != nil {
			fmt.Fprintf(c.stdout, ", crash recovery time %.2fx", *tr.CrashRecovery)
		}
		for i, lvl := range tr.CommitLevels {
			fmt.Fprintf(c.stdout, ", steps/s at %d in flight %.2fx", lvl, tr.CommitStepsPerS[i])
		}
		fmt.Fprintln(c.stdout)
	}
	fmt.Fprintln(c.stdout)
	for _, r := range doc.Rows {
		m := r.Machine
		mode := ""
		if r.TLS {
			mode = " (TLS)"
		}
		fmt.Fprintf(c.stdout, "machine before %d regions%s: %.0f k ops/s on %d cores, fsync %.2f ms; open: %.2f regions per k ops\n",
			r.Regions, mode, m.CPUOpsPerSecond/1e3, m.CPUs, m.FsyncMs, r.RegionsPerSecond/(m.CPUOpsPerSecond/1e3))
	}
	for _, r := range doc.Rows {
		if r.Failed != "" {
			fmt.Fprintf(c.stdout, "failed: %d regions: %s (the figures before it stand)\n", r.Regions, r.Failed)
		}
	}
	for _, n := range doc.Notes {
		fmt.Fprintf(c.stdout, "note: %s\n", n)
	}
}
