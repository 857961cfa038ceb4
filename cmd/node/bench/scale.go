// Package bench is `baton bench`: it starts clusters of real baton
// processes on this machine (through integration/harness/process, as the
// integration tests do) and measures what their costs grow with. The CLI
// parses the command line and prints; this package runs the rows and
// makes the document (ScaleDoc) they both print. It sits a floor below
// cmd/node, which calls it.
package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Phases are the steps of a row that ScaleOptions.Skip may leave out
// (opening the regions is the row itself).
var Phases = []string{"failover", "crash", "catchup", "commit", "snapshot"}

// CommitLevels are the concurrencies of the group-commit sweep.
var CommitLevels = []int{1, 16, 64, 256}

// benchCommitSteps is the length of each procedure of the sweep.
const benchCommitSteps = 5

// ScaleOptions is the validated command line of `baton bench scale`.
type ScaleOptions struct {
	// Regions are the region counts: one row (and one fresh cluster) each,
	// in tables of TableRegions regions, unless Shapes is set.
	Regions      []int
	TableRegions int
	// Shapes, if set (--shape), are the rows instead of Regions: each its
	// region count in tables of its size.
	Shapes []Shape
	// Rounds (with Shapes) runs the shapes this many times, every other
	// round in reverse order, so that each shape meets the machine's
	// slow and fast moments alike; each round's rows are compared among
	// themselves, and ShapeSummary takes their medians. 0 or 1: once.
	Rounds      int
	Concurrency int
	// Submit is how the creates are sent: SubmitAll or SubmitWait.
	Submit        string
	RegionServers int
	// Dir holds every row's cluster, a directory each; Keep says it is
	// kept at the end (the document then names it).
	Dir          string
	Keep         bool
	Skip         map[string]bool
	PhaseTimeout time.Duration
	// Workers is each master's --workers (0: the agent's default).
	Workers int
	// TLS lists the transports each region count runs with, in order:
	// false plaintext, true mutual TLS on every channel (--tls).
	TLS []bool
	// ProfileDir, if set (--profile), receives the masters' CPU profiles
	// taken during the open and the crash recovery, each ProfileSeconds
	// long, and their heap profiles at the end of the open.
	ProfileDir     string
	ProfileSeconds int

	profile *benchProfiler
}

// The ways the open sends its creates (--submit).
const (
	// SubmitAll sends every create back to back, Concurrency calls at a
	// time, each waiting only for its acknowledgement (the procedure is
	// committed), then waits for every procedure in the order sent: the
	// cluster, not the client's round trips, sets the pace.
	SubmitAll = "all"
	// SubmitWait keeps Concurrency creates in flight, each waited for to
	// its end before the next is sent: the open of every figure before
	// issue 33.
	SubmitWait = "wait"
)

// Shape is a row's layout: Regions regions in tables of TableRegions
// (the last table holds the rest).
type Shape struct {
	Regions      int
	TableRegions int
}

// Tables is how many tables the shape creates.
func (s Shape) Tables() int { return (s.Regions + s.TableRegions - 1) / s.TableRegions }

// String names the shape as --shape takes it: tables x regions per table.
func (s Shape) String() string { return fmt.Sprintf("%dx%d", s.Tables(), s.TableRegions) }

// StandardShapes are issue 33's three layouts of 100,000 regions: a few
// big tables, some middling ones, many small ones (--shape standard).
var StandardShapes = []Shape{{100000, 10000}, {100000, 2000}, {100000, 100}}

// ParseShape reads "TxR": T tables of R regions each.
func ParseShape(s string) (Shape, error) {
	ts, rs, ok := strings.Cut(strings.TrimSpace(s), "x")
	t, terr := strconv.Atoi(ts)
	r, rerr := strconv.Atoi(rs)
	if !ok || terr != nil || rerr != nil || t < 1 || r < 1 {
		return Shape{}, fmt.Errorf("shape %q: want TABLESxREGIONS, e.g. 50x2000", s)
	}
	if t > math.MaxInt32/r {
		return Shape{}, fmt.Errorf("shape %q: %d tables of %d regions is too many regions", s, t, r)
	}
	return Shape{Regions: t * r, TableRegions: r}, nil
}

// rowShapes are the rows o asks for, in order.
func (o ScaleOptions) rowShapes() []Shape {
	if len(o.Shapes) > 0 {
		return o.Shapes
	}
	out := make([]Shape, 0, len(o.Regions))
	for _, n := range o.Regions {
		out = append(out, Shape{Regions: n, TableRegions: o.TableRegions})
	}
	return out
}

// ScaleMaster is one master's resources after the regions opened.
type ScaleMaster struct {
	ID     string  `json:"id"`
	Leader bool    `json:"leader"`
	RSSMB  float64 `json:"rss_mb"`
	// RSSAnonMB is the private part of RSSMB (the Go heap, freed or not),
	// RSSFileMB the mapped files' (bolt's raft.db).
	RSSAnonMB float64 `json:"rss_anon_mb"`
	RSSFileMB float64 `json:"rss_file_mb"`
	// LiveHeapMB is the live heap at the last collection (the heap goal
	// over 1+GOGC/100), HeapSysMB what the Go heap holds from the OS
	// (in use, free, and returned but still mapped: HeapReleasedMB).
	LiveHeapMB     float64 `json:"live_heap_mb"`
	HeapSysMB      float64 `json:"heap_sys_mb"`
	HeapReleasedMB float64 `json:"heap_released_mb"`
	DataMB         float64 `json:"data_mb"`
	RaftDBMB       float64 `json:"raft_db_mb"`
	SnapshotsMB    float64 `json:"snapshots_mb"`
	WALMB          float64 `json:"wal_mb"`
}

// ScaleCommit is one concurrency of the group-commit sweep.
type ScaleCommit struct {
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

// ScaleRow is one region count's results. A phase left out (--skip) has
// its fields absent.
type ScaleRow struct {
	Regions int `json:"regions"`
	// TLS: every channel ran mutual TLS (--tls on or both).
	TLS    bool `json:"tls"`
	Tables int  `json:"tables"`
	// TableRegions is each table's region count (the last table holds the
	// rest), Shape the two as --shape names them.
	TableRegions int    `json:"table_regions"`
	Shape        string `json:"shape"`
	// Round is the row's round (--rounds, from 1); 0 when the shapes ran
	// once.
	Round int `json:"round,omitempty"`
	// SubmitSeconds is how long sending every create took (--submit all):
	// the open's time less it is the cluster finishing what it was sent.
	SubmitSeconds    *float64      `json:"submit_seconds,omitempty"`
	OpenSeconds      float64       `json:"open_seconds"`
	RegionsPerSecond float64       `json:"regions_per_second"`
	MasterRSSMBMin   float64       `json:"master_rss_mb_min"`
	MasterRSSMBMax   float64       `json:"master_rss_mb_max"`
	DataMBMax        float64       `json:"data_mb_max"`
	Masters          []ScaleMaster `json:"masters"`
	// Machine is what the machine could do just before the row's cluster
	// started: read the row's figures against it.
	Machine MachineBaseline `json:"machine"`
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

	// OpenLeader and CrashLeader are how the leader spent the open and the
	// crash recovery (from detection), against the machine's cores and
	// fsyncs, with the profile's shares under --profile.
	OpenLeader  *LeaderWork `json:"open_leader,omitempty"`
	CrashLeader *LeaderWork `json:"crash_leader,omitempty"`

	Commit []ScaleCommit `json:"commit,omitempty"`
	// Snapshot is the snapshot save under load (--snapshot).
	Snapshot *ScaleSnapshot `json:"snapshot,omitempty"`

	// Failed says which phase failed and why; the figures of the phases
	// before it stand, the failed one's are left out, and the row is not
	// counted in the growth.
	Failed string `json:"failed,omitempty"`
}

// ScaleGrowth is the cost growth between two consecutive rows, each
// ratio scaled to a tenfold growth of the region count: 10 is linear for
// a cost that grows with the regions, 1 for a rate or a cost that should
// not grow.
type ScaleGrowth struct {
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

// ScaleTLSRatio compares the TLS row of a region count with its plaintext
// row (--tls both): each figure with TLS over the same without, so above
// 1 is faster for a rate, slower for a time.
type ScaleTLSRatio struct {
	Regions int `json:"regions"`
	// Round is the round both rows ran in (--rounds); 0 when once.
	Round            int       `json:"round,omitempty"`
	RegionsPerSecond float64   `json:"regions_per_second"`
	FailoverSeconds  *float64  `json:"failover_seconds,omitempty"`
	CrashRecovery    *float64  `json:"crash_recovery_seconds,omitempty"`
	CommitLevels     []int     `json:"commit_levels,omitempty"`
	CommitStepsPerS  []float64 `json:"commit_steps_per_second,omitempty"`
}

// ScaleShapeRatio is one row's open rate against the fastest shape of
// its region count and transport.
type ScaleShapeRatio struct {
	Regions int    `json:"regions"`
	TLS     bool   `json:"tls"`
	Shape   string `json:"shape"`
	// Round is the round compared (--rounds): the fastest is that
	// round's. 0 when the shapes ran once.
	Round            int     `json:"round,omitempty"`
	RegionsPerSecond float64 `json:"regions_per_second"`
	OfFastest        float64 `json:"of_fastest"`
	// OfFastestPerMachine is the same comparison of each row's regions
	// per second over its machine baseline's ops per second (measured
	// just before the row's cluster started): the VM's speed swings by
	// up to 2x between rows of one run, and this takes the swing out.
	// 0 when a row has no baseline.
	OfFastestPerMachine float64 `json:"of_fastest_per_machine"`
}

// ScaleShapeSummary is one shape's figures over the rounds (--rounds):
// the medians of its rounds' ScaleShapeRatio, and the spread of its ratio.
type ScaleShapeSummary struct {
	Regions             int     `json:"regions"`
	TLS                 bool    `json:"tls"`
	Shape               string  `json:"shape"`
	Rounds              int     `json:"rounds"`
	RegionsPerSecond    float64 `json:"regions_per_second"`
	OfFastest           float64 `json:"of_fastest"`
	OfFastestMin        float64 `json:"of_fastest_min"`
	OfFastestMax        float64 `json:"of_fastest_max"`
	OfFastestPerMachine float64 `json:"of_fastest_per_machine"`
}

// ScaleDoc is the --json document.
type ScaleDoc struct {
	RegionServers int           `json:"region_servers"`
	TableRegions  int           `json:"table_regions"`
	Concurrency   int           `json:"concurrency"`
	Submit        string        `json:"submit"`
	Skipped       []string      `json:"skipped"`
	Dir           string        `json:"dir,omitempty"` // kept (--dir, --keep)
	Rows          []ScaleRow    `json:"rows"`
	Growth        []ScaleGrowth `json:"growth"`
	// TLSRatios: with --tls both, each region count's TLS figures over
	// its plaintext ones.
	TLSRatios []ScaleTLSRatio `json:"tls_ratios,omitempty"`
	// ShapeRatios: each row's regions/s over the fastest row of the same
	// region count and transport, when shapes differ (--shape).
	ShapeRatios []ScaleShapeRatio `json:"shape_ratios,omitempty"`
	// ShapeSummary: with --rounds, each shape's medians over the rounds.
	ShapeSummary []ScaleShapeSummary `json:"shape_summary,omitempty"`
	Notes        []string            `json:"notes"`
	// Error says why the bench stopped before its last row; the rows
	// measured until then are still there.
	Error string `json:"error,omitempty"`
}

// Scale runs `baton bench scale`: a row per region count and transport,
// each on a fresh cluster of bin's processes in a directory of its own
// under o.Dir, and the document of their figures. It stops at the first
// row that fails, with the document's Error saying why; the rows before
// it, and the failed row's figures up to its failed phase, stand.
// progress hears of each step as it begins.
func Scale(ctx context.Context, bin string, o ScaleOptions, progress func(format string, args ...any)) ScaleDoc {
	if o.ProfileDir != "" {
		o.profile = &benchProfiler{dir: o.ProfileDir, seconds: o.ProfileSeconds}
	}
	doc := ScaleDoc{RegionServers: o.RegionServers, TableRegions: o.TableRegions, Concurrency: o.Concurrency, Submit: o.Submit, Skipped: []string{}, Rows: []ScaleRow{}}
	for _, p := range Phases {
		if o.Skip[p] {
			doc.Skipped = append(doc.Skipped, p)
		}
	}
	if o.Keep {
		doc.Dir = o.Dir
	}
	doc.Rows, doc.Error = scaleRows(ctx, bin, o, progress)
	var complete []ScaleRow
	for _, r := range doc.Rows {
		if r.Failed == "" {
			complete = append(complete, r)
		}
	}
	doc.Growth = []ScaleGrowth{}
	for _, withTLS := range o.TLS {
		var same []ScaleRow
		for _, r := range complete {
			if r.TLS == withTLS {
				same = append(same, r)
			}
		}
		doc.Growth = append(doc.Growth, scaleGrowthOf(same)...)
	}
	doc.TLSRatios = scaleTLSRatiosOf(complete)
	doc.ShapeRatios = scaleShapeRatiosOf(complete)
	doc.ShapeSummary = scaleShapeSummaryOf(doc.ShapeRatios)
	doc.Notes = scaleNotes(doc.Rows)
	return doc
}

// scaleRows runs the rows, in order, until one fails: the rows measured,
// and what failed ("" if nothing did).
func scaleRows(ctx context.Context, bin string, o ScaleOptions, progress func(string, ...any)) ([]ScaleRow, string) {
	rows := []ScaleRow{}
	for round := range max(o.Rounds, 1) {
		for _, sh := range o.roundShapes(round) {
			n := sh.Regions
			for _, withTLS := range o.TLS {
				numbered := 0
				if o.Rounds > 1 {
					numbered = round + 1
				}
				row, err := runScaleRow(ctx, bin, sh, withTLS, numbered, o, progress)
				if err != nil {
					if row.OpenSeconds > 0 {
						// What was measured before the failure is still worth
						// reading, marked as a failed row.
						row.Failed = err.Error()
						rows = append(rows, row)
					}
					return rows, fmt.Sprintf("%d regions%s: %v", n, rowOfRound(row), err)
				}
				rows = append(rows, row)
			}
		}
	}
	return rows, ""
}

// roundShapes is the rows of round (from 0): every other round runs
// them backwards, so that no shape always runs first, on the machine's
// state a fresh start leaves, or last, after the others' leftovers.
func (o ScaleOptions) roundShapes(round int) []Shape {
	shapes := o.rowShapes()
	if round%2 == 1 {
		shapes = slices.Clone(shapes)
		slices.Reverse(shapes)
	}
	return shapes
}

// rowName names a row's directory ("regions-" and it) and profiles: its
// region count, then its shape (--shape), transport and round (--rounds)
// where rows differ by them.
func rowName(o ScaleOptions, sh Shape, withTLS bool, round int) string {
	name := strconv.Itoa(sh.Regions)
	if len(o.Shapes) > 0 {
		name += "-" + sh.String()
	}
	if withTLS {
		name += "-tls"
	}
	if round > 0 {
		name += fmt.Sprintf("-round%d", round)
	}
	return name
}

// runScaleRow starts a cluster in the row's directory under o.Dir, opens
// n regions on it and runs the phases, then kills the cluster (and
// removes the directory unless kept by the caller).
func runScaleRow(ctx context.Context, bin string, sh Shape, withTLS bool, round int, o ScaleOptions, progress func(string, ...any)) (row ScaleRow, err error) {
	n := sh.Regions
	row.Regions, row.TLS, row.TableRegions, row.Shape, row.Round = n, withTLS, sh.TableRegions, sh.String(), round
	name := rowName(o, sh, withTLS, round)
	dir := filepath.Join(o.Dir, "regions-"+name)
	var tags []string
	if withTLS {
		tags = append(tags, "TLS")
	}
	if round > 0 {
		tags = append(tags, fmt.Sprintf("round %d", round))
	}
	if len(tags) > 0 {
		// Every progress line says which of the rows it is about.
		inner, label := progress, "%d regions ("+strings.Join(tags, ", ")+"):"
		progress = func(format string, args ...any) {
			inner(strings.Replace(format, "%d regions:", label, 1), args...)
		}
	}
	phase := func(name string, fn func(ctx context.Context) error) error {
		pctx, cancel := context.WithTimeout(ctx, o.PhaseTimeout)
		defer cancel()
		if err := fn(pctx); err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return fmt.Errorf("phase %s timed out after %v (--phase-timeout): %w", name, o.PhaseTimeout, err)
			}
			return fmt.Errorf("phase %s: %w", name, err)
		}
		return nil
	}

	if row.Machine, err = measureMachine(ctx, dir); err != nil {
		return row, err
	}
	progress("%d regions: machine baseline: %.0f k ops/s on %d cores, fsync %.2f ms (median)", n, row.Machine.CPUOpsPerSecond/1e3, row.Machine.CPUs, row.Machine.FsyncMs)
	progress("%d regions: starting 3 masters and %d region servers in %s", n, o.RegionServers, dir)
	c, err := startBenchCluster(bin, dir, o.RegionServers, o.Workers, withTLS)
	// Every row keeps profiles of its own: no shape, transport or round
	// overwrites another's.
	profileRow := name
	var openLeader, crashLeader *benchMaster
	defer func() {
		if c != nil {
			for _, perr := range o.profile.wait() {
				progress("%d regions: %v", n, perr)
			}
			for _, lw := range []struct {
				w     *LeaderWork
				m     *benchMaster
				phase string
			}{{row.OpenLeader, openLeader, "open"}, {row.CrashLeader, crashLeader, "crash"}} {
				if lw.w == nil || lw.m == nil || o.profile == nil {
					continue
				}
				var perr error
				if lw.w.Profile, lw.w.Allocation, perr = profileShares(o.profile.path(profileRow, lw.phase, lw.m.id)); perr != nil {
					progress("%d regions: %v", n, perr)
				}
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
		return c.waitServers(ctx, o.RegionServers)
	}); err != nil {
		return row, err
	}

	tables := tableNames(n, sh.TableRegions)
	row.Tables = len(tables)
	if o.Submit == SubmitWait {
		progress("%d regions: creating %d tables of %d regions, %d at a time, each waited for", n, len(tables), sh.TableRegions, o.Concurrency)
	} else {
		progress("%d regions: creating %d tables of %d regions, sent back to back (%d calls at a time)", n, len(tables), sh.TableRegions, o.Concurrency)
	}
	var open time.Duration
	var openMark *leaderMark
	if err := phase("open", func(ctx context.Context) (err error) {
		o.profile.start(ctx, c, profileRow, "open")
		if openMark, err = markLeader(ctx, c, row.Machine); err != nil {
			return err
		}
		openLeader = openMark.m
		if o.Submit == SubmitWait {
			open, err = openTables(ctx, c.cl, tables, o.Concurrency)
			return err
		}
		var submitted time.Duration
		open, submitted, err = submitTables(ctx, c.cl, tables, o.Concurrency)
		if err == nil {
			s := submitted.Seconds()
			row.SubmitSeconds = &s
		}
		return err
	}); err != nil {
		return row, err
	}
	row.OpenSeconds = open.Seconds()
	row.RegionsPerSecond = float64(n) / open.Seconds()
	if row.OpenLeader, err = openMark.work(ctx, c, n); err != nil {
		return row, err
	}
	if err := phase("resources", func(ctx context.Context) error { return measureMasters(ctx, c, &row) }); err != nil {
		return row, err
	}
	// After the RSS is read: the profile's collection would lower it.
	for _, perr := range o.profile.heap(ctx, c, profileRow, "open") {
		progress("%d regions: %v", n, perr)
	}
	progress("%d regions: open in %.1f s (%.0f regions/s); master RSS %.0f–%.0f MB", n, row.OpenSeconds, row.RegionsPerSecond, row.MasterRSSMBMin, row.MasterRSSMBMax)
	for _, m := range row.Masters {
		progress("%d regions: master %s%s: RSS %.0f MB (private %.0f, files %.0f); live heap %.0f MB, heap from the OS %.0f MB (%.0f returned)",
			n, m.ID, map[bool]string{true: " (leader)"}[m.Leader], m.RSSMB, m.RSSAnonMB, m.RSSFileMB, m.LiveHeapMB, m.HeapSysMB, m.HeapReleasedMB)
	}

	if !o.Skip["commit"] {
		progress("%d regions: group-commit sweep %v", n, CommitLevels)
		if err := phase("commit", func(ctx context.Context) (err error) {
			row.Commit, err = commitSweep(ctx, c)
			return err
		}); err != nil {
			return row, err
		}
	}
	if !o.Skip["snapshot"] {
		progress("%d regions: snapshot save under a load of %d procedures in flight", n, SnapshotLoadProcedures)
		if err := phase("snapshot", func(ctx context.Context) (err error) {
			row.Snapshot, err = snapshotSave(ctx, bin, c)
			return err
		}); err != nil {
			return row, err
		}
		s := row.Snapshot
		progress("%d regions: snapshot of %.1f MB saved in %.1f s; leader heap %+.1f MB, steps/s %.2fx of without a save", n, s.FileMB, s.SaveSeconds, s.HeapGrowthMB, s.StepsRatio)
	}
	if !o.Skip["failover"] {
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
	if !o.Skip["crash"] {
		progress("%d regions: region server crash (SIGKILL the one holding the most regions; its lease expires first)", n)
		if err := phase("crash", func(ctx context.Context) error {
			var mark *leaderMark
			d, detected, held, err := crashRecovery(ctx, c, tables, func() {
				o.profile.start(ctx, c, profileRow, "crash")
				// Without the mark the row only lacks the leader's
				// figures; the recovery is still measured.
				if m, err := markLeader(ctx, c, row.Machine); err == nil {
					mark, crashLeader = m, m.m
				}
			})
			if err != nil {
				return err
			}
			row.CrashRecoverySeconds, row.CrashDetectedSeconds, row.CrashedServerRegions = &d, &detected, held
			row.CrashLeader, err = mark.work(ctx, c, held)
			return err
		}); err != nil {
			return row, err
		}
		progress("%d regions: %d regions reopened %.1f s after the crash, %.1f s after its detection", n, row.CrashedServerRegions,
			*row.CrashRecoverySeconds, *row.CrashRecoverySeconds-*row.CrashDetectedSeconds)
	}
	if !o.Skip["catchup"] {
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
