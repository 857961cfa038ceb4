package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cmd/node/bench"
)

const benchUsage = `usage: baton bench <command> [flags]

commands:
  scale   start a cluster of real processes on this machine (3 masters and
          --regionservers region servers on loopback) for each region count
          of --regions, and print how opening the regions, the masters'
          memory and disk, leader failover, a region server crash and a
          wiped master's catch-up cost as the count grows
  reads   start three masters, each a process of its own, and compare the
          rate of stale, linearizable and forwarded reads

Run 'baton bench <command> -h' for its flags.
`

func init() {
	topLevel.add(topCommand{
		name: "bench", rank: 140, run: (*cli).bench,
		summary: `scale [--regions N,N,...]: start real clusters on this machine and
print how opening regions, memory, disk, failover, a region
server crash and a wiped master's catch-up grow with the regions`,
	})
}

// bench runs `baton bench ...`.
func (c *cli) bench(args []string) int {
	return c.subcommands("bench", benchUsage, args, map[string]func([]string) int{
		"scale": c.benchScale,
		"reads": c.benchReads,
	})
}

// maxScaleRounds bounds --rounds: each round starts a cluster per shape.
const maxScaleRounds = 20

// scaleOptions is the validated command line of `baton bench scale`:
// the bench's options, and how to print its document.
type scaleOptions struct {
	bench.ScaleOptions
	json bool
}

func parseScaleFlags(c *cli, args []string) (scaleOptions, error) {
	fs := flag.NewFlagSet("baton bench scale", flag.ContinueOnError)
	newUsageOut(fs, c.stdout, c.stderr)
	regions := fs.String("regions", "10000,100000,1000000", "region counts, comma-separated: one row (and one fresh cluster) each")
	o := scaleOptions{}
	fs.IntVar(&o.TableRegions, "table-regions", 2000, fmt.Sprintf("regions per table, 1 to %d (the most one table may have)", client.MaxRegions))
	fs.IntVar(&o.Concurrency, "concurrency", 4, "create calls in flight at once (--submit wait: tables in flight, each waited for)")
	shapes := fs.String("shape", "", "rows of given layouts instead of --regions and --table-regions: TABLESxREGIONS, comma-separated (e.g. 50x2000,1000x100), or 'standard' for 10x10000,50x2000,1000x100")
	fs.IntVar(&o.Rounds, "rounds", 1, "with --shape: run the shapes this many times, 1 to 20, every other round in reverse order, each row on a fresh cluster; each round's shapes are compared with that round's fastest, and the medians over the rounds printed (shape_summary)")
	fs.StringVar(&o.Submit, "submit", bench.SubmitAll, "all: send every create back to back, then wait for them in order; wait: each of --concurrency creates waited for to its end before the next (figures before issue 33)")
	fs.IntVar(&o.Workers, "workers", 0, fmt.Sprintf("each master's executor workers (agent --workers), 1 to %d; 0: the agent's default (%d)", maxAgentWorkers, cluster.DefaultWorkers))
	fs.IntVar(&o.RegionServers, "regionservers", 3, "region servers (baton regionserver processes), at least 2: the crash phase kills one")
	fs.StringVar(&o.Dir, "dir", "", "put the clusters' data and logs here, and keep them (default: a temporary directory, removed at the end)")
	fs.BoolVar(&o.Keep, "keep", false, "keep the temporary directory (its path is printed)")
	fs.BoolVar(&o.json, "json", false, "print exactly one JSON document on stdout")
	skip := fs.String("skip", "", "phases to leave out, comma-separated: "+strings.Join(bench.Phases, ", ")+" (commit, the group-commit sweep, and snapshot are left out unless --commit, --snapshot)")
	commit := fs.Bool("commit", false, fmt.Sprintf("also run the group-commit sweep: %v no-op procedures in flight, steps per leader log fsync and p99 step latency", bench.CommitLevels))
	snapshot := fs.Bool("snapshot", false, fmt.Sprintf("also run the snapshot phase: 'baton snapshot save' against the leader under a load of %d no-op procedures in flight; the save's time, the file's size, the leader's heap and RSS growth and its step rate against a window without a save; then 'snapshot inspect'", bench.SnapshotLoadProcedures))
	fs.DurationVar(&o.PhaseTimeout, "phase-timeout", 30*time.Minute, "give up (exit 1) when one phase of a row (start, open, failover, crash, catch-up, commit, snapshot) takes longer")
	profileDir := fs.String("profile", "", "write each master's CPU profile, taken from the start of the open and from the crash's detection, into this directory as <regions>-<phase>-<master>.pprof, <regions>-<shape>-<phase>-<master>.pprof with --shape, and its heap profile after a collection at the end of the open as <regions>-open-heap-<master>.pprof (a TLS row's name ends in -tls, then with --rounds -round<N>; read with 'go tool pprof')")
	profileSeconds := fs.Int("profile-seconds", 30, "length of each --profile profile, in seconds")
	tlsMode := fs.String("tls", "off", "off: plaintext; on: mutual TLS on every channel (a CA and certificates made in the row's directory); both: each region count twice, plaintext then TLS, and their ratios")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: baton bench scale [--regions N,N,... | --shape TxR,... [--rounds N]] [flags]

For each region count N, starts 3 masters ('baton agent') and region servers
('baton regionserver') of this binary on loopback, in a directory of their
own, and measures:
  open          creating tables of --table-regions regions until N regions are
                open: the time, regions per second (--shape: a row per layout,
                and each one's rate against the fastest of its region count;
                --rounds: against the fastest of its round, and each shape's
                medians over the rounds)
  resources     each master's RSS (private, mapped files), live heap, its data
                directory (raft.db, snapshots, the local WAL) and the live
                state beside raft.db
  failover      SIGKILL the leader; time until a one-step procedure submitted to
                the survivors succeeds (the killed master is restarted)
  crash         SIGKILL the region server holding the most regions; time until
                every region is open again (the server's lease must expire
                first: 15 s by default)
  catchup       stop a follower, wipe its data directory, start it again; time
                until it has applied the leader's index
  commit        (--commit) the group-commit sweep
  snapshot      (--snapshot) 'baton snapshot save' against the leader while 64
                no-op procedures stay in flight: the save's time and file size,
                the leader's heap and RSS peak over a window without a save, its
                step rate during the save over the same without; then 'baton
                snapshot inspect' of the file
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
		o.Regions = append(o.Regions, n)
	}
	if len(o.Regions) == 0 {
		bad("--regions is empty: give region counts, e.g. --regions 10000,100000")
	}
	if o.TableRegions < 1 || o.TableRegions > client.MaxRegions {
		bad("--table-regions %d: want 1 to %d", o.TableRegions, client.MaxRegions)
	}
	if *shapes != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if set["regions"] || set["table-regions"] {
			bad("--shape gives each row's regions and table size: leave out --regions and --table-regions")
		}
		if strings.TrimSpace(*shapes) == "standard" {
			o.Shapes = append(o.Shapes, bench.StandardShapes...)
		} else {
			for _, f := range strings.Split(*shapes, ",") {
				sh, err := bench.ParseShape(f)
				if err != nil {
					bad("--shape: %v", err)
					continue
				}
				if sh.TableRegions > client.MaxRegions {
					bad("--shape %s: %d regions per table: want at most %d", f, sh.TableRegions, client.MaxRegions)
					continue
				}
				if slices.Contains(o.Shapes, sh) {
					// Its rows would share a directory and its ratios.
					bad("--shape %s named twice", sh)
					continue
				}
				o.Shapes = append(o.Shapes, sh)
			}
		}
	}
	if o.Rounds < 1 || o.Rounds > maxScaleRounds {
		bad("--rounds %d: want 1 to %d", o.Rounds, maxScaleRounds)
	} else if o.Rounds > 1 && len(o.Shapes) < 2 {
		bad("--rounds %d: rounds compare shapes, give --shape with at least two", o.Rounds)
	}
	if o.Submit != bench.SubmitAll && o.Submit != bench.SubmitWait {
		bad("--submit %q: want all or wait", o.Submit)
	}
	if o.Concurrency < 1 {
		bad("--concurrency %d: want at least 1", o.Concurrency)
	}
	if o.Workers < 0 || o.Workers > maxAgentWorkers {
		bad("--workers %d: want 1 to %d, or 0 for the agent's default", o.Workers, maxAgentWorkers)
	}
	if o.RegionServers < 2 {
		bad("--regionservers %d: want at least 2 (the crash phase kills one, the others reopen its regions)", o.RegionServers)
	}
	if o.PhaseTimeout <= 0 {
		bad("--phase-timeout %v: want a positive duration", o.PhaseTimeout)
	}
	switch *tlsMode {
	case "off":
		o.TLS = []bool{false}
	case "on":
		o.TLS = []bool{true}
	case "both":
		o.TLS = []bool{false, true}
	default:
		bad("--tls %q: want off, on or both", *tlsMode)
	}
	o.Skip = map[string]bool{"commit": !*commit, "snapshot": !*snapshot}
	for _, p := range strings.Split(*skip, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		known := false
		for _, q := range bench.Phases {
			known = known || p == q
		}
		if !known {
			bad("--skip: unknown phase %q (phases: %s)", p, strings.Join(bench.Phases, ", "))
		}
		o.Skip[p] = true
	}
	if *profileDir != "" {
		if *profileSeconds < 1 {
			bad("--profile-seconds %d: want at least 1", *profileSeconds)
		} else if err := os.MkdirAll(*profileDir, 0o755); err != nil {
			bad("--profile: %v", err)
		} else {
			o.ProfileDir, o.ProfileSeconds = *profileDir, *profileSeconds
		}
	}
	if len(problems) > 0 {
		return o, usagef("%s", strings.Join(problems, "; "))
	}
	return o, nil
}

// benchStart readies a bench that starts a cluster of this binary's
// processes in *dir (a temporary directory when empty, removed at the end
// unless *keep; a given one is kept): the binary, a context that ends on
// Ctrl-C or SIGTERM, and done, to run when the bench ends. ok is false
// (said on stderr) when the bench cannot start.
func (c *cli) benchStart(name string, dir *string, keep *bool) (bin string, ctx context.Context, done func(), ok bool) {
	bin, err := os.Executable()
	if err != nil {
		fmt.Fprintf(c.stderr, "baton bench %s: the path of this binary, to start the cluster with: %v\n", name, err)
		return "", nil, nil, false
	}
	// The masters and region servers are this binary run again. A Go test
	// binary run with "agent ..." runs its tests instead, the one that got
	// here among them, which starts more: refuse rather than fork without
	// end.
	if strings.HasSuffix(filepath.Base(bin), ".test") {
		fmt.Fprintf(c.stderr, "baton bench %s: %s is a test binary, not baton: the cluster is started from the running binary, so run bench %s from a built baton\n", name, bin, name)
		return "", nil, nil, false
	}
	*keep = *keep || *dir != ""
	if *dir == "" {
		if *dir, err = os.MkdirTemp("", "baton-bench-"+name+"-"); err != nil {
			fmt.Fprintf(c.stderr, "baton bench %s: %v\n", name, err)
			return "", nil, nil, false
		}
	} else if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintf(c.stderr, "baton bench %s: %v\n", name, err)
		return "", nil, nil, false
	}
	// Ctrl-C is c.ctx's end already; SIGTERM too, so that the deferred
	// kills run either way.
	ctx, stop := signal.NotifyContext(c.ctx, syscall.SIGTERM)
	return bin, ctx, func() {
		stop()
		if *keep {
			fmt.Fprintf(c.stderr, "bench: data and logs kept in %s\n", *dir)
			return
		}
		_ = os.RemoveAll(*dir)
	}, true
}

// benchScale runs `baton bench scale`.
func (c *cli) benchScale(args []string) int {
	o, err := parseScaleFlags(c, args)
	if err != nil {
		return c.flagsFailed("bench scale", err)
	}
	bin, ctx, done, ok := c.benchStart("scale", &o.Dir, &o.Keep)
	if !ok {
		return exitFailed
	}
	defer done()

	doc := bench.Scale(ctx, bin, o.ScaleOptions, func(format string, args ...any) {
		fmt.Fprintf(c.stderr, "bench: "+format+"\n", args...)
	})
	code := exitOK
	if doc.Error != "" {
		fmt.Fprintf(c.stderr, "baton bench scale: %s\n", doc.Error)
		if !o.Keep {
			fmt.Fprintf(c.stderr, "  (rerun with --keep to keep the processes' logs)\n")
		}
		if ctx.Err() != nil {
			fmt.Fprintf(c.stderr, "  interrupted: every process the bench started is killed\n")
		}
		code = exitFailed
	}
	if code != exitOK && len(doc.Rows) == 0 && !o.json {
		return code
	}
	if o.json {
		c.printJSON(doc)
	} else {
		bench.PrintScale(c.stdout, doc)
	}
	return code
}
