package admin

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/benchstat"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
)

// BenchmarkAuditedSubmits measures what the audit trail costs a call that
// changes state: submissions through the admin API of two 3-node clusters
// on loopback (raft's TCP transport, raft-boltdb with fsync), one without
// an audit trail and one recording every submission before answering it,
// 16 and 64 callers at once (BATON_BENCH_CALLERS, a comma-separated
// list, chooses others), in alternating rounds so that load from
// elsewhere hits both alike (4 rounds each, BATON_BENCH_ROUNDS another
// even count; BATON_BENCH_ONLY=bare or audited runs one, for a profile).
// Reported: submits/s of each, and audited over bare, from the sums of
// all rounds and as the median of each round's own ratio (its two
// clusters run back to back, in the same moment of the machine) with
// the least and greatest: a slow fsync moves one round, not the median.
//
//	go test -run xxx -bench BenchmarkAuditedSubmits -benchtime 4000x ./cluster/admin/
func BenchmarkAuditedSubmits(b *testing.B) {
	counts := []int{16, 64}
	if env := os.Getenv("BATON_BENCH_CALLERS"); env != "" {
		counts = nil
		for _, f := range strings.Split(env, ",") {
			if v, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && v > 0 {
				counts = append(counts, v)
			}
		}
	}
	for _, callers := range counts {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) { benchAuditedSubmits(b, callers) })
	}
}

func benchAuditedSubmits(b *testing.B, callers int) {
	leaderOf := func(nodes []*testNode) *testNode {
		var l *testNode
		testwait.For(b, 30*time.Second, "a leader with a running executor", func() bool {
			for _, n := range nodes {
				if _, err := n.node.Executor(); err == nil {
					l = n
					return true
				}
			}
			return false
		})
		return l
	}
	bare := leaderOf(startTCPCluster(b, 3))
	audited := leaderOf(startTCPClusterWith(b, 3, &Access{}))
	ctx := context.Background()
	round := func(n *testNode, calls int) time.Duration {
		var wg sync.WaitGroup
		next := make(chan int, calls)
		for i := range calls {
			next <- i
		}
		close(next)
		start := time.Now()
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range next {
					if _, err := n.cl.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	// Warm both (connections, first leadership writes).
	round(bare, callers)
	round(audited, callers)
	b.ResetTimer()
	// More rounds average out more of the machine's moments (a disk's
	// slow fsyncs hit one round, not the other cluster's).
	rounds := 4
	if v, err := strconv.Atoi(os.Getenv("BATON_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v + v%2 // even: each cluster goes first as often
	}
	per := max(b.N/rounds, callers)
	// Each cluster goes first in every other round (benchstat.Alternate):
	// what one round leaves behind (garbage, raft's log compaction, the
	// disk's write-back) is paid by the round after it, which must not
	// always be the audited one.
	only := os.Getenv("BATON_BENCH_ONLY") // bare or audited: to profile one
	nodes := []*testNode{bare, audited}
	var wall, cpu [2]time.Duration
	took, _ := benchstat.Alternate(2, rounds, func(k, _ int) (time.Duration, error) { // never fails: round reports a failed call itself (b.Error)
		if (only == "bare" && k != 0) || (only == "audited" && k != 1) {
			return 0, nil
		}
		c0 := processCPU()
		d := round(nodes[k], per)
		wall[k] += d
		cpu[k] += processCPU() - c0
		return d, nil
	})
	tb, ta, cb, ca := wall[0], wall[1], cpu[0], cpu[1]
	b.StopTimer()
	if only != "" {
		// One cluster ran: its figures alone, no ratio.
		wall, cpu := tb, cb
		if only == "audited" {
			wall, cpu = ta, ca
		}
		b.ReportMetric(float64(cpu.Microseconds())/float64(per*rounds), only+"-cpu-us/submit")
		b.ReportMetric(float64(per*rounds)/wall.Seconds(), only+"-submits/s")
		return
	}
	// The process's CPU per submit (both clusters, the callers): it moves
	// less with the machine's other load than the rates do.
	b.ReportMetric(float64(cb.Microseconds())/float64(per*rounds), "bare-cpu-us/submit")
	b.ReportMetric(float64(ca.Microseconds())/float64(per*rounds), "audited-cpu-us/submit")
	rb, ra := float64(per*rounds)/tb.Seconds(), float64(per*rounds)/ta.Seconds()
	b.ReportMetric(rb, "bare-submits/s")
	b.ReportMetric(ra, "audited-submits/s")
	b.ReportMetric(ra/rb, "audited/bare")
	sum := benchstat.Summarize(benchstat.RatiosByRound(took, 0)[1]) // audited over bare, each round
	sum.Report(b, "audited/bare")
	if b.N == 1 {
		return // the framework's probe: a round of one call per caller, which says nothing
	}
	fmt.Fprintf(os.Stderr, "submits/s at %d callers: bare %.0f, audited %.0f (%.2f×; by round: median %.2f×, %.2f to %.2f over %d); CPU per submit: bare %.0f µs, audited %.0f µs\n",
		callers, rb, ra, ra/rb, sum.Median, sum.Min, sum.Max, sum.N, float64(cb.Microseconds())/float64(per*rounds), float64(ca.Microseconds())/float64(per*rounds))
}
