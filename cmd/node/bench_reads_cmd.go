package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/baton-dev/baton/cmd/node/bench"
)

// readsOptions is the validated command line of `baton bench reads`.
type readsOptions struct {
	bench.ReadsOptions
	keep, json bool
}

func parseReadsFlags(c *cli, args []string) (readsOptions, error) {
	fs := flag.NewFlagSet("baton bench reads", flag.ContinueOnError)
	newUsageOut(fs, c.stdout, c.stderr)
	var o readsOptions
	fs.IntVar(&o.Callers, "callers", 16, "callers reading at once, each waiting for its answer before its next call")
	fs.IntVar(&o.Calls, "calls", 40000, "calls of each kind, shared by the callers")
	fs.IntVar(&o.Rounds, "rounds", 4, "rounds the calls are split over, the kinds taking turns (an even count: each kind goes first as often)")
	kinds := fs.String("kinds", strings.Join(bench.ReadKinds, ","), "the reads to compare, comma-separated: "+strings.Join(bench.ReadKinds, ", ")+" (the ratios are to stale)")
	fs.StringVar(&o.Dir, "dir", "", "put the cluster's data and logs here, and keep them (default: a temporary directory, removed at the end)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (its path is printed)")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "give up (exit 1) when the cluster's start or one round takes longer")
	fs.BoolVar(&o.json, "json", false, "print exactly one JSON document on stdout")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: baton bench reads [flags]

Start a cluster of three masters, each a process of its own, on this
machine, and compare the rate of reads at each consistency: stale at the
leader, linearizable at the leader, and linearizable at a standby that
forwards them. Each master has a Go runtime of its own, as where each has
a machine (BenchmarkReads in cluster/admin runs the three in one).

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
	if o.Callers < 1 || o.Callers > 4096 {
		bad("--callers %d: want 1 to 4096", o.Callers)
	}
	if o.Rounds < 2 || o.Rounds%2 != 0 {
		bad("--rounds %d: want an even count, at least 2", o.Rounds)
	}
	if o.Calls < o.Rounds {
		bad("--calls %d: want at least one a round (%d)", o.Calls, o.Rounds)
	}
	if o.Timeout <= 0 {
		bad("--timeout %v: want more than 0", o.Timeout)
	}
	if o.Kinds, err = bench.ParseReadKinds(*kinds); err != nil {
		bad("--kinds: %v", err)
	}
	if len(problems) > 0 {
		return o, usagef("%s", strings.Join(problems, "; "))
	}
	return o, nil
}

// benchReads runs `baton bench reads`.
func (c *cli) benchReads(args []string) int {
	o, err := parseReadsFlags(c, args)
	if err != nil {
		return c.flagsFailed("bench reads", err)
	}
	bin, ctx, done, ok := c.benchStart("reads", &o.Dir, &o.keep)
	if !ok {
		return exitFailed
	}
	defer done()
	doc := bench.Reads(ctx, bin, o.ReadsOptions, func(format string, args ...any) {
		fmt.Fprintf(c.stderr, "bench: "+format+"\n", args...)
	})
	code := exitOK
	if doc.Error != "" {
		fmt.Fprintf(c.stderr, "baton bench reads: %s\n", doc.Error)
		if !o.keep {
			fmt.Fprintf(c.stderr, "  (rerun with --keep to keep the masters' logs)\n")
		}
		if ctx.Err() != nil {
			fmt.Fprintf(c.stderr, "  interrupted: every process the bench started is killed\n")
		}
		code = exitFailed
	}
	if o.json {
		c.printJSON(doc)
	} else if len(doc.Kinds) > 0 {
		bench.PrintReads(c.stdout, doc)
	}
	return code
}
