package domain_test

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
)

// BenchmarkServerCrashRecovery kills the region server holding the most
// regions of a cluster of crashServers servers (a third of crashRegions
// with the default three) and reports the time from the crash's
// detection (its ServerCrash procedure submitted) to every one of its
// regions open again elsewhere (the procedure done: it ends only once no
// region is left on the dead incarnation), with the dispatcher's default
// batching. BATON_CRASH_REGIONS (default 30,000) and BATON_CRASH_SERVERS
// (default 3) size it: 100,000 and more are for a quiet machine.
// BATON_CRASH_CPUPROFILE names a file for the recovery's CPU profile, and
// BATON_CRASH_MEMPROFILE one for the process's heap profile after it (and,
// with ".before", from just before it): the recovery's allocations are
// their difference (go tool pprof -sample_index=alloc_space -diff_base
// FILE.before FILE).
func BenchmarkServerCrashRecovery(b *testing.B) {
	regions := benchEnv(b, "BATON_CRASH_REGIONS", 30000, 1)
	servers := benchEnv(b, "BATON_CRASH_SERVERS", 3, 1)
	wave := benchEnv(b, "BATON_CRASH_WAVE", domain.DefaultCrashWave, 1)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		node := func(c *cluster.Config) {
			benchRaftTimings(c)
			c.Workers = benchEnv(b, "BATON_CRASH_WORKERS", cluster.DefaultWorkers, 1) // the production pool, not the tests' 8
		}
		h := newHarness(b, harnessOpts{servers: servers, node: node, domain: func(c *domain.Config) {
			c.Dispatch = dispatch.Config{}
			c.CrashWave = wave
			benchLeases(c)
		}})
		var ids []uint64
		for j, left := 0, regions; left > 0; j++ {
			n := min(left, domain.MaxRegions)
			left -= n
			ids = append(ids, h.createTable("", fmt.Sprintf("crash%d_%d", i, j), n))
		}
		for _, id := range ids {
			h.mustSucceed(id, 10*time.Minute)
		}
		perServer := map[string]int{}
		domain.ScanRegions(h.reader(), func(_ string, rg domain.Region) bool {
			perServer[rg.Server]++
			return true
		})
		victim := ""
		for id, n := range perServer {
			if victim == "" || n > perServer[victim] || n == perServer[victim] && id < victim {
				victim = id
			}
		}
		lm, x := h.leader()
		svc := lm.dom.Services()
		before := svc.DispatchStats()
		stopProfile := profileCPU(b, os.Getenv("BATON_CRASH_CPUPROFILE"))
		b.StartTimer()
		// The crash of the incarnation stopped here: one of a server
		// that crashed while the tables were created (a loaded machine)
		// may still be listed, and would end before this one.
		srv, _, err := domain.GetServer(h.reader(), victim)
		if err != nil {
			b.Fatal(err)
		}
		h.stopRS(victim)
		var crash procedure.Info
		testwait.For(b, time.Minute, "the crash of "+victim+" detected", func() bool {
			for _, info := range x.List(procedure.Filter{Type: domain.TypeServerCrash}) {
				data, ok := lm.node.FSM().Proc(info.ID)
				if !ok {
					continue
				}
				stored, err := procedure.DecodeInfo(data)
				var sc domain.ServerCrash
				if err == nil && json.Unmarshal(stored.Data, &sc) == nil && sc.Server.ID == victim && sc.Server.StartCode == srv.StartCode {
					crash = info
					return true
				}
			}
			return false
		})
		// The whole process's CPU (three masters, the region servers),
		// from the crash seen to its end: next to the wall time, what a
		// machine shared with other work does not blur.
		// The allocation readings are taken outside the CPU's, so that
		// writing a profile is not counted as the recovery's.
		memProfile := os.Getenv("BATON_CRASH_MEMPROFILE")
		var mem0, mem1 runtime.MemStats
		if memProfile != "" {
			writeHeapProfile(b, memProfile+".before")
		}
		runtime.ReadMemStats(&mem0)
		cpu0 := cpuTime()
		crash = h.mustSucceed(crash.ID, 30*time.Minute)
		cpu := cpuTime() - cpu0
		runtime.ReadMemStats(&mem1)
		if memProfile != "" {
			writeHeapProfile(b, memProfile)
		}
		b.StopTimer()
		stopProfile()
		hosting := map[string]int{}
		domain.ScanRegions(h.reader(), func(_ string, rg domain.Region) bool {
			hosting[rg.Server]++
			return true
		})
		if hosting[victim] != 0 {
			b.Fatalf("%d regions still recorded on %s after its crash procedure ended", hosting[victim], victim)
		}
		delete(hosting, victim)
		lo, hi := spread(hosting)
		b.ReportMetric(float64(hi-lo), "spread")
		el := crash.Finished.Sub(crash.Submitted)
		b.ReportMetric(float64(el.Milliseconds()), "ms/recovery")
		b.ReportMetric(float64(perServer[victim]), "regions_moved")
		b.ReportMetric(float64(cpu.Microseconds())/float64(max(perServer[victim], 1)), "cpu_us/region")
		// What the recovery allocated, the whole process's, per region:
		// steadier than its CPU on a shared machine, and what the
		// collector's share of that CPU follows.
		b.ReportMetric(float64(mem1.Mallocs-mem0.Mallocs)/float64(max(perServer[victim], 1)), "allocs/region")
		b.ReportMetric(float64(mem1.TotalAlloc-mem0.TotalAlloc)/float64(max(perServer[victim], 1)), "alloc_B/region")
		calls := "leadership changed during the recovery: calls not counted"
		if now, _ := h.leader(); now.dom.Services() == svc {
			// One term's dispatcher throughout: its counts are the
			// recovery's.
			after := svc.DispatchStats()
			b.ReportMetric(float64(after.Ops-before.Ops)/float64(max(after.Batches-before.Batches, 1)), "ops/rpc")
			calls = fmt.Sprintf("%d ops in %d calls", after.Ops-before.Ops, after.Batches-before.Batches)
		}
		b.Logf("%d regions on %d servers: %d on %s reopened %v after the crash was detected (%s, %v of CPU); the survivors hold %d to %d",
			regions, servers, perServer[victim], victim, el, calls, cpu.Round(time.Millisecond), lo, hi)
		h.close()
		b.StartTimer()
	}
}

// benchRaftTimings are the production Raft timings, not the tests' 50 ms:
// a benchmark this size, or a test of many failovers, on a loaded machine
// would otherwise spend its time electing leaders.
func benchRaftTimings(c *cluster.Config) {
	c.HeartbeatTimeout = cluster.DefaultHeartbeatTimeout
	c.ElectionTimeout = cluster.DefaultElectionTimeout
	c.LeaderLeaseTimeout = cluster.DefaultLeaderLeaseTimeout
	c.CommitTimeout = cluster.DefaultCommitTimeout
}

// benchLeases are leases four times the tests' (detection is not what is
// measured), so a loaded machine does not expire the live servers.
func benchLeases(c *domain.Config) {
	c.ServerLease.SoftLimit *= 4
	c.ServerLease.HardLimit *= 4
	c.HeartbeatInterval *= 4
}

// profileCPU profiles the process's CPU into path until the returned
// function is called; nothing if path is empty.
func profileCPU(tb testing.TB, path string) (stop func()) {
	tb.Helper()
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		tb.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			tb.Error(err)
		}
	}
}
