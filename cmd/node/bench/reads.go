package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-dev/baton/internal/benchstat"
	"github.com/baton-dev/baton/proto/adminpb"
)

// ReadKinds are the reads `baton bench reads` compares, each a
// ListProcedures of one procedure, as BenchmarkReads (cluster/admin) makes
// them in one process:
//
//	stale         at STALE, answered by the leader from its state at once
//	linearizable  the default consistency at the leader: a quorum round
//	forwarded     the same sent to a standby, which forwards it
var ReadKinds = []string{"stale", "linearizable", "forwarded"}

// ReadsOptions is what `baton bench reads` runs.
type ReadsOptions struct {
	// Callers call at once, each waiting for its answer before the next
	// call (a closed loop).
	Callers int
	// Calls of each kind, shared by the callers, split over Rounds.
	Calls int
	// Rounds alternate the kinds, so that the machine's other load hits
	// each alike.
	Rounds int
	Kinds  []string
	Dir    string
	// Timeout bounds the cluster's start and each round.
	Timeout time.Duration
}

// ReadsDoc is `baton bench reads --json`.
type ReadsDoc struct {
	Callers int             `json:"callers"`
	Calls   int             `json:"calls"`
	Rounds  int             `json:"rounds"`
	Machine MachineBaseline `json:"machine"`
	Kinds   []ReadKindRow   `json:"kinds"`
	Error   string          `json:"error,omitempty"`
}

// ReadKindRow is one kind's figures, over every round.
type ReadKindRow struct {
	Kind           string  `json:"kind"`
	Calls          int     `json:"calls"`
	Seconds        float64 `json:"seconds"`
	CallsPerSecond float64 `json:"calls_per_second"`
	// RatioToStale is CallsPerSecond over stale's (absent without stale).
	RatioToStale *float64 `json:"ratio_to_stale,omitempty"`
	// The same ratio taken in each round, between the kinds' runs of that
	// round: its median, least and greatest. A moment of the machine (a
	// neighbour's burst) moves one round, not the median.
	RatioToStaleMedian *float64 `json:"ratio_to_stale_median,omitempty"`
	RatioToStaleMin    *float64 `json:"ratio_to_stale_min,omitempty"`
	RatioToStaleMax    *float64 `json:"ratio_to_stale_max,omitempty"`
	// ClusterCPUMicros is the CPU the three masters' processes spent per
	// call; BenchCPUMicros the bench's own (its callers).
	ClusterCPUMicros float64 `json:"cluster_cpu_us_per_call"`
	BenchCPUMicros   float64 `json:"bench_cpu_us_per_call"`
}

// Reads starts a cluster of three masters (real processes, as `bench
// scale` starts them, no region server) and has opts.Callers callers read
// it at each consistency in turn. Unlike BenchmarkReads, each master runs
// in a process of its own, with a Go runtime of its own: a round's
// follower half is scheduled by the kernel, not behind the leader's
// goroutines, as where each master has a machine.
func Reads(ctx context.Context, bin string, o ReadsOptions, progress func(format string, args ...any)) (doc ReadsDoc) {
	doc = ReadsDoc{Callers: o.Callers, Calls: o.Calls, Rounds: o.Rounds}
	fail := func(err error) ReadsDoc {
		doc.Error = err.Error()
		return doc
	}
	var err error
	if doc.Machine, err = measureMachine(ctx, o.Dir); err != nil {
		return fail(err)
	}
	progress("machine: %.2f M ops/s on %d CPUs, fsync %.2f ms", doc.Machine.CPUOpsPerSecond/1e6, doc.Machine.CPUs, doc.Machine.FsyncMs)
	c, err := startBenchCluster(bin, o.Dir, 0, 0, false)
	defer func() {
		if c != nil {
			if err := c.stop(); err != nil && doc.Error == "" {
				doc.Error = err.Error()
			}
		}
	}()
	if err != nil {
		return fail(err)
	}
	startCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	leader, err := c.waitLeader(startCtx)
	if err != nil {
		return fail(err)
	}
	var standby *benchMaster
	for _, m := range c.masters {
		if m != leader {
			standby = m
			break
		}
	}
	conns := map[*benchMaster]adminpb.AdminClient{}
	for _, m := range []*benchMaster{leader, standby} {
		cc, err := grpc.NewClient(m.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fail(fmt.Errorf("dial %s: %w", m.id, err))
		}
		defer cc.Close()
		conns[m] = adminpb.NewAdminClient(cc)
	}
	// The standby forwards once it knows the leader's admin address.
	err = poll(startCtx, 50*time.Millisecond, "waiting for the standby to forward a read", func() (bool, string, error) {
		_, err := conns[standby].ListProcedures(startCtx, &adminpb.ListProceduresRequest{PageSize: 1})
		if err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	if err != nil {
		return fail(err)
	}
	progress("cluster up: %s leads, %s forwards", leader.id, standby.id)
	calls := map[string]func(context.Context) error{
		"stale": func(ctx context.Context) error {
			_, err := conns[leader].ListProcedures(ctx, &adminpb.ListProceduresRequest{PageSize: 1, Consistency: adminpb.Consistency_STALE})
			return err
		},
		"linearizable": func(ctx context.Context) error {
			_, err := conns[leader].ListProcedures(ctx, &adminpb.ListProceduresRequest{PageSize: 1})
			return err
		},
		"forwarded": func(ctx context.Context) error {
			_, err := conns[standby].ListProcedures(ctx, &adminpb.ListProceduresRequest{PageSize: 1})
			return err
		},
	}
	// Warm every path (connections, the standby's forwarding).
	for _, k := range o.Kinds {
		if _, _, _, err := readRound(ctx, c, o.Callers, o.Callers, o.Timeout, calls[k]); err != nil {
			return fail(fmt.Errorf("%s: %w", k, err))
		}
	}
	rows, err := readRounds(o.Kinds, o.Rounds, o.Calls, func(kind string, n int) (time.Duration, time.Duration, time.Duration, error) {
		return readRound(ctx, c, o.Callers, n, o.Timeout, calls[kind])
	}, progress)
	if err != nil {
		return fail(err)
	}
	doc.Kinds = rows
	return doc
}

// readRounds splits calls of each kind over rounds, the kinds taking
// turns, every other round in reverse order (benchstat.Alternate), and
// sums what run measured of each (the wall time of n calls, the masters'
// and the bench's CPU) into a row per kind, with its ratio to stale: of
// the sums, and taken in each round that made calls.
func readRounds(kinds []string, rounds, calls int, run func(kind string, n int) (wall, clusterCPU, ownCPU time.Duration, err error), progress func(format string, args ...any)) ([]ReadKindRow, error) {
	rows := make([]ReadKindRow, len(kinds))
	wall := make([]time.Duration, len(kinds))
	cluster := make([]time.Duration, len(kinds))
	own := make([]time.Duration, len(kinds))
	ran := 0
	took, err := benchstat.Alternate(len(kinds), rounds, func(i, r int) (time.Duration, error) {
		n := benchstat.Split(calls, rounds, r)
		w, cl, ow, err := run(kinds[i], n)
		if err != nil {
			return 0, fmt.Errorf("%s, round %d: %w", kinds[i], r+1, err)
		}
		wall[i] += w
		cluster[i] += cl
		own[i] += ow
		rows[i].Calls += n
		if ran++; ran%len(kinds) == 0 {
			progress("round %d of %d done", r+1, rounds)
		}
		if n == 0 {
			return 0, nil // a round of no calls (more rounds than calls, which the command refuses) says nothing
		}
		return w, nil
	})
	if err != nil {
		return nil, err
	}
	for i, k := range kinds {
		row := &rows[i]
		row.Kind = k
		row.Seconds = wall[i].Seconds()
		row.CallsPerSecond = float64(row.Calls) / row.Seconds
		row.ClusterCPUMicros = float64(cluster[i].Microseconds()) / float64(row.Calls)
		row.BenchCPUMicros = float64(own[i].Microseconds()) / float64(row.Calls)
	}
	s := slices.Index(kinds, "stale")
	if s < 0 {
		return rows, nil
	}
	for i := range rows {
		if i != s {
			r := rows[i].CallsPerSecond / rows[s].CallsPerSecond
			rows[i].RatioToStale = &r
		}
	}
	for i, ratios := range benchstat.RatiosByRound(took, s) {
		if sum := benchstat.Summarize(ratios); sum.N > 0 {
			rows[i].RatioToStaleMedian, rows[i].RatioToStaleMin, rows[i].RatioToStaleMax = &sum.Median, &sum.Min, &sum.Max
		}
	}
	return rows, nil
}

// readRound has callers make n calls of call between them, and returns
// how long that took, and the CPU the masters and this process spent.
func readRound(ctx context.Context, c *benchCluster, callers, n int, timeout time.Duration, call func(context.Context) error) (wall, clusterCPU, ownCPU time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	mastersCPU := func() float64 {
		s := 0.0
		for _, m := range c.masters {
			s += pidCPUSeconds(m.Pid())
		}
		return s
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	m0, o0, start := mastersCPU(), selfCPU(), time.Now()
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := call(ctx); err != nil {
					first.CompareAndSwap(nil, &err)
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	wall = time.Since(start)
	clusterCPU = time.Duration((mastersCPU() - m0) * float64(time.Second))
	ownCPU = selfCPU() - o0
	if p := first.Load(); p != nil {
		return wall, clusterCPU, ownCPU, *p
	}
	return wall, clusterCPU, ownCPU, nil
}

// selfCPU is the CPU time this process has used, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ParseReadKinds checks a comma-separated list of ReadKinds.
func ParseReadKinds(s string) ([]string, error) {
	var out []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(ReadKinds, k) {
			return nil, fmt.Errorf("unknown kind %q: want %s", k, strings.Join(ReadKinds, ", "))
		}
		if slices.Contains(out, k) {
			return nil, fmt.Errorf("kind %q named twice", k)
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, errors.New("no kind named")
	}
	return out, nil
}

// PrintReads prints doc as a table.
func PrintReads(out io.Writer, doc ReadsDoc) {
	fmt.Fprintf(out, "machine: %.2f M ops/s on %d CPUs, fsync %.2f ms\n", doc.Machine.CPUOpsPerSecond/1e6, doc.Machine.CPUs, doc.Machine.FsyncMs)
	fmt.Fprintf(out, "%d callers, %d calls of each kind in %d alternating rounds; three masters, each a process of its own\n\n", doc.Callers, doc.Calls, doc.Rounds)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\tcalls/s\tover stale\tby round: median (range)\tmasters' CPU µs/call\tbench's CPU µs/call\t")
	for _, r := range doc.Kinds {
		ratio, byRound := "-", "-"
		if r.RatioToStale != nil {
			ratio = fmt.Sprintf("%.2f×", *r.RatioToStale)
		}
		if r.RatioToStaleMedian != nil {
			byRound = fmt.Sprintf("%.2f× (%.2f to %.2f)", *r.RatioToStaleMedian, *r.RatioToStaleMin, *r.RatioToStaleMax)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%.0f\t%.0f\t\n", r.Kind, r.CallsPerSecond, ratio, byRound, r.ClusterCPUMicros, r.BenchCPUMicros)
	}
	tw.Flush()
}
