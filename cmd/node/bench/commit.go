package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/cluster/client"
)

// commitSweep runs no-op diagnostic procedures at each concurrency of
// CommitLevels and reads, from the leader's metrics, how many steps
// each write of its Raft log carried (raft's dispatch of new entries: one
// log store write, one fsync) and the step latency's 99th percentile.
func commitSweep(ctx context.Context, c *benchCluster) ([]ScaleCommit, error) {
	var out []ScaleCommit
	for _, procs := range CommitLevels {
		// A level across a leader change counts two masters' metrics (and
		// an election): it runs again, up to benchCommitAttempts times,
		// and is reported without figures if the leader never held.
		var r ScaleCommit
		for attempt := range benchCommitAttempts {
			var err error
			r, err = commitLevel(ctx, c, procs, attempt)
			if errors.Is(err, errLeaderChanged) {
				r = ScaleCommit{Procedures: procs, LeaderChanges: attempt + 1}
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
func commitLevel(ctx context.Context, c *benchCluster, procs, attempt int) (ScaleCommit, error) {
	const (
		stepsMetric  = "baton_procedure_step_duration_seconds_count"
		fsyncsMetric = "baton_raft_leader_dispatch_duration_seconds_count"
		bucketMetric = "baton_procedure_step_duration_seconds_bucket"
	)
	var out ScaleCommit
	l, err := c.waitLeader(ctx)
	if err != nil {
		return out, err
	}
	st0, err := c.status(ctx, l)
	if err != nil {
		return out, err
	}
	// The run's steps, fsyncs and step times are the leader's counters
	// and histogram after it less before it.
	scrape := func() (map[string]float64, map[float64]float64, error) {
		counts, err := c.scrapeMetric(ctx, l, stepsMetric, fsyncsMetric)
		if err != nil {
			return nil, nil, err
		}
		buckets, err := c.scrapeBuckets(ctx, l, bucketMetric)
		return counts, buckets, err
	}
	before, bBefore, err := scrape()
	if err != nil {
		return out, err
	}
	total := max(8*procs, 64)
	start := time.Now()
	if err := runSleeps(ctx, c.cl, procs, total, fmt.Sprintf("bench-commit-%d-%d-", procs, attempt)); err != nil {
		return out, err
	}
	d := time.Since(start)
	after, bAfter, err := scrape()
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
	r := ScaleCommit{Procedures: procs, Steps: after[stepsMetric] - before[stepsMetric], Fsyncs: after[fsyncsMetric] - before[fsyncsMetric]}
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
