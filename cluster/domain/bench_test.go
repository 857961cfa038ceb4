package domain_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/dispatch"
)

// BenchmarkAssignRegions creates tables of 20,000 regions in all over 20
// region servers on a 3-master in-process cluster (the issue's benchmark,
// with the dispatcher's default batching), and reports the wall time
// and the operations each ExecuteBatch call carried, against one call per
// region.
func BenchmarkAssignRegions(b *testing.B) {
	const tables, perTable, servers = 2, domain.MaxRegions, 20
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// dispatch's defaults (32 ops, 150 ms), not the tests' 10 ms delay.
		h := newHarness(b, harnessOpts{servers: servers, domain: func(c *domain.Config) { c.Dispatch = dispatch.Config{} }})
		b.StartTimer()
		start := time.Now()
		var ids []uint64
		for j := range tables {
			ids = append(ids, h.createTable("", fmt.Sprintf("bench%d_%d", i, j), perTable))
		}
		for _, id := range ids {
			h.mustSucceed(id, 5*time.Minute)
		}
		el := time.Since(start)
		b.StopTimer()
		lm, _ := h.leader()
		st := lm.dom.Services().DispatchStats()
		b.ReportMetric(float64(el.Milliseconds()), "ms/op")
		b.ReportMetric(float64(st.Ops)/float64(max(st.Batches, 1)), "ops/rpc")
		b.ReportMetric(float64(tables*perTable)/float64(max(st.Batches, 1)), "regions/rpc")
		h.close()
		b.StartTimer()
	}
}
