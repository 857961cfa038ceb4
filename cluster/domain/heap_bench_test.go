package domain_test

import (
	"fmt"
	"os"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/internal/memstat"
)

// BenchmarkMasterHeap is issue 13's master-side figure: the Go heap per
// region of one master (bolt log and file snapshots over TCP, as the baton
// binary runs) and four region servers in one process, after tables of
// domain.MaxRegions regions are created and assigned, garbage collected.
// The region servers' share is their region maps (about a third at a
// million regions: cluster/regionserver's execOp in a heap profile); the
// master's is the FSM's state, its local WAL's bookkeeping, the procedures
// it keeps, bolt's freelist and raft's log cache (the last 512 entries). BATON_BENCH_1M=1 adds a million
// regions; BATON_HEAP_PROFILE=<file> writes a heap profile of the largest
// run.
//
//	go test -run '^$' -bench MasterHeap -benchtime 1x ./cluster/domain/
func BenchmarkMasterHeap(b *testing.B) {
	ns := []int{10_000, 100_000}
	if os.Getenv("BATON_BENCH_1M") != "" {
		ns = append(ns, 1_000_000)
	}
	for _, n := range ns {
		b.Run(fmt.Sprintf("regions=%d", n), func(b *testing.B) {
			for range b.N {
				heap0 := memstat.HeapAfterGC()
				// The servers' default leases (15 s): the test cluster's
				// 1.5 s run out on a loaded machine, and a crash
				// recovery's procedures would join the figure.
				c := clustertest.New(b, clustertest.Config{Masters: 1, RegionServers: 4, TCP: true,
					Domain: func(_ int, c *domain.Config) { c.ServerLease = lease.Config{} }})
				for t := 0; t*domain.MaxRegions < n; t++ {
					p, err := domain.NewCreateTable("", fmt.Sprintf("t%d", t), min(domain.MaxRegions, n-t*domain.MaxRegions))
					if err != nil {
						b.Fatal(err)
					}
					c.MustSucceed(c.Submit(p, ""), 30*time.Minute)
				}
				b.StopTimer()
				heap := float64(memstat.HeapAfterGC()) - float64(heap0)
				b.ReportMetric(heap/float64(n), "heapB/region")
				rss, _ := memstat.RSSMB(os.Getpid())
				b.ReportMetric(rss, "rssMB")
				if path := os.Getenv("BATON_HEAP_PROFILE"); path != "" && n == ns[len(ns)-1] {
					writeHeapProfile(b, path)
				}
				c.Close()
				b.StartTimer()
			}
		})
	}
}

func writeHeapProfile(b *testing.B, path string) {
	fh, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer fh.Close()
	if err := pprof.Lookup("heap").WriteTo(fh, 0); err != nil {
		b.Fatal(err)
	}
}
