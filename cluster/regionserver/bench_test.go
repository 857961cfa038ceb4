package regionserver

import (
	"context"
	"fmt"
	"testing"

	"github.com/baton-dev/baton/proto/rspb"
)

// BenchmarkExecuteBatch measures a region server's own handling of one
// batch (no network, no open latency) of 32 and of 1,000 opens, then the
// same regions' closes, per region operation: a batch of 1,000, what the
// dispatcher sends a server during a crash's reassignments, must cost no
// more per operation than a small one.
func BenchmarkExecuteBatch(b *testing.B) {
	_, addrs := newFakeCluster(b, 1, 60_000)
	s, sc := startServer(b, testConfig(addrs...))
	for _, n := range []int{32, 1000} {
		b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) {
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("t,%05d,1", i)
			}
			open := &rspb.BatchRequest{Term: 2, StartCode: sc, Ops: ops(opOpen, names...)}
			closeAll := &rspb.BatchRequest{Term: 2, StartCode: sc, Ops: ops(opClose, names...)}
			ctx := context.Background()
			for b.Loop() {
				for _, req := range []*rspb.BatchRequest{open, closeAll} {
					resp, err := s.ExecuteBatch(ctx, req)
					if err != nil {
						b.Fatal(err)
					}
					for _, r := range resp.GetResults() {
						if !r.GetOk() || r.GetAlready() {
							b.Fatalf("result %v", r)
						}
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2*n), "ns/region-op")
		})
	}
}
