package domain_test

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/dispatch"
)

// BenchmarkAssignRegions creates tables of 20,000 regions in all
// (BATON_BENCH_TABLES tables of BATON_BENCH_REGIONS regions, default 2 of
// 10,000) over 20 region servers on a 3-master in-process cluster (the
// issue's benchmark, with the dispatcher's default batching), and
// reports the wall time, the regions opened per second, the process's CPU
// time and the Raft entries per thousand regions, and the operations
// each ExecuteBatch call carried, against one call per region.
//
// The masters run with raft's and the leases' production timings, not
// the tests' fast ones: on a loaded 2-core machine the tests' 50 ms
// election timeout makes leadership flap, and the benchmark would measure
// elections instead of assignment.
func BenchmarkAssignRegions(b *testing.B) {
	const servers = 20
	tables, perTable := benchEnv(b, "BATON_BENCH_TABLES", 2, 0), benchEnv(b, "BATON_BENCH_REGIONS", 10000, 0)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		var wc writeCounts
		h := newHarness(b, harnessOpts{servers: servers,
			node: func(c *cluster.Config) {
				c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
				c.Workers = benchWorkers(b)
				wc.hook(c)
			},
			domain: func(c *domain.Config) {
				// dispatch's defaults (32 ops, 150 ms), not the tests' 10 ms delay.
				c.Dispatch = dispatch.Config{}
				c.ServerLease = lease.Config{SoftLimit: 4 * time.Second, HardLimit: 10 * time.Second, MonitorInterval: 100 * time.Millisecond}
				c.HeartbeatInterval = 500 * time.Millisecond
			}})
		lm0, _ := h.leader()
		index0 := lm0.node.Status().LastIndex
		writes0, bytes0 := wc.writes.Load(), wc.procBytes.Load()+wc.mutBytes.Load()
		b.StartTimer()
		start, cpu0 := time.Now(), cpuTime()
		var ids []uint64
		for j := range tables {
			ids = append(ids, h.createTable("", fmt.Sprintf("bench%d_%d", i, j), perTable))
		}
		for _, id := range ids {
			h.mustSucceed(id, 5*time.Minute)
		}
		el, cpu := time.Since(start), cpuTime()-cpu0
		b.StopTimer()
		lm, _ := h.leader()
		st := lm.dom.Services().DispatchStats()
		b.ReportMetric(float64(el.Milliseconds()), "ms/op")
		b.ReportMetric(float64(tables*perTable)/el.Seconds(), "regions/s")
		// The process's CPU time (masters, region servers and all) per
		// thousand regions: on a machine shared with other work the wall
		// time varies with the neighbours, this much less.
		b.ReportMetric(cpu.Seconds()*1000/float64(tables*perTable)*1000, "cpu-ms/kregion")
		// Raft entries per thousand regions: how well the writes of the
		// regions' procedures were grouped into commits.
		if lm == lm0 {
			b.ReportMetric(float64(lm.node.Status().LastIndex-index0)*1000/float64(tables*perTable), "entries/kregion")
		}
		// The executor's store writes (each a procedure's step, commits
		// grouped into the entries above) and the bytes they carried,
		// procedure records and domain values, per region.
		b.ReportMetric(float64(wc.writes.Load()-writes0)/float64(tables*perTable), "writes/region")
		b.ReportMetric(float64(wc.procBytes.Load()+wc.mutBytes.Load()-bytes0)/float64(tables*perTable), "B/region")
		b.ReportMetric(float64(st.Ops)/float64(max(st.Batches, 1)), "ops/rpc")
		b.ReportMetric(float64(tables*perTable)/float64(max(st.Batches, 1)), "regions/rpc")
		h.close()
		b.StartTimer()
	}
}

// benchWorkers is the executor's worker pool: BATON_BENCH_WORKERS, or the
// production default (procedure.Config.Workers), not the tests' 8. Every
// step waits for its commit on its worker, so the pool bounds the writes
// one Raft entry can group.
func benchWorkers(b *testing.B) int { return benchEnv(b, "BATON_BENCH_WORKERS", 0, 0) }

// benchEnv is the integer in environment variable name, def if unset; a
// value below least fails the benchmark (a count may be 0, a size not).
func benchEnv(tb testing.TB, name string, def, least int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		tb.Fatalf("%s=%q: want an integer of at least %d", name, v, least)
	}
	return n
}

// cpuTime is the CPU time this process used so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
