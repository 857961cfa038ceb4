package domain_test

import (
	"context"
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/internal/memstat"
)

// BenchmarkManyCreates is issue 33's bad input at scale: 10,000 creates
// of small tables (10 regions each, BATON_CREATES and
// BATON_CREATE_REGIONS change them) submitted back to back to one master
// with three region servers in one process, then waited for. It reports
// the peak of the process's heap (live objects, runtime/metrics sampled
// every 10 ms) over the run, above the heap before the cluster started,
// the regions opened per second and the process's CPU per region
// (region servers included), with the region budget
// (domain.DefaultRegionBudget) and without one (a budget no run reaches:
// every create's waves in flight at once, as before the budget).
//
//	go test -run '^$' -bench ManyCreates -benchtime 1x ./cluster/domain/
func BenchmarkManyCreates(b *testing.B) {
	creates, regions := envInt(b, "BATON_CREATES", 10_000), envInt(b, "BATON_CREATE_REGIONS", 10)
	for _, tc := range []struct {
		name   string
		budget int
	}{{"budget=default", 0}, {"budget=none", 1 << 30}} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				heap0 := memstat.HeapAfterGC()
				c := clustertest.New(b, clustertest.Config{Masters: 1, RegionServers: 3, TCP: true,
					Domain: func(_ int, c *domain.Config) {
						c.RegionBudget = tc.budget
						// The servers' default leases (15 s): the test
						// cluster's 1.5 s run out on a loaded machine,
						// and a crash recovery would join the figures.
						c.ServerLease = lease.Config{}
					}})
				var peak atomic.Uint64
				stop := make(chan struct{})
				done := make(chan struct{})
				go func() {
					defer close(done)
					sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
					t := time.NewTicker(10 * time.Millisecond)
					defer t.Stop()
					for {
						metrics.Read(sample)
						if v := sample[0].Value.Uint64(); v > peak.Load() {
							peak.Store(v)
						}
						select {
						case <-stop:
							return
						case <-t.C:
						}
					}
				}()
				start, cpu0 := time.Now(), cpuTime()
				ids := make([]uint64, creates)
				for i := range creates {
					p, err := domain.NewCreateTable("", fmt.Sprintf("t%d", i), regions)
					if err != nil {
						b.Fatal(err)
					}
					ids[i] = c.Submit(p, "")
				}
				_, x := c.WaitLeader()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
				for _, id := range ids {
					info, err := x.Wait(ctx, id)
					if err != nil || info.Error != "" {
						cancel()
						b.Fatalf("create %d: %v %s", id, err, info.Error)
					}
				}
				cancel()
				took, cpu := time.Since(start), cpuTime()-cpu0
				close(stop)
				<-done
				b.ReportMetric(float64(peak.Load())/(1<<20)-float64(heap0)/(1<<20), "peakHeapMB")
				b.ReportMetric(float64(creates*regions)/took.Seconds(), "regions/s")
				// The CPU per region, which the machine's other load
				// moves less than the rate.
				b.ReportMetric(float64(cpu.Microseconds())/float64(creates*regions), "cpu-µs/region")
				c.Close()
			}
		})
	}
}

func envInt(b *testing.B, name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		return n
	}
	return def
}
