package dispatch

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/baton-dev/baton/proto/rspb"
)

// BenchmarkDispatch assigns 20,000 regions over 20 region servers per
// iteration (a large cluster's start, without Raft): default batching on
// the real clock, an in-memory transport (LocalTransport to fake region
// servers) with a simulated round trip per call. It reports the calls made
// against one call per region.
func BenchmarkDispatch(b *testing.B) {
	const (
		servers = 20
		ops     = 20000
	)
	for _, rtt := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond} {
		b.Run(fmt.Sprintf("rtt=%v", rtt), func(b *testing.B) {
			local := NewLocalTransport()
			targets := make([]Target, servers)
			for i := range targets {
				targets[i] = Target{ServerID: fmt.Sprint("rs", i), StartCode: 1}
				local.Register(targets[i].ServerID, newFakeRS(1))
			}
			tr := TransportFunc(func(ctx context.Context, t Target, req *rspb.BatchRequest) (*rspb.BatchResponse, error) {
				if rtt > 0 {
					// Stands in for the network and the server's work: it
					// paces the calls and waits for nothing.
					timer := time.NewTimer(rtt)
					select {
					case <-timer.C:
					case <-ctx.Done():
						timer.Stop()
						return nil, ctx.Err()
					}
				}
				return local.ExecuteBatch(ctx, t, req)
			})
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failed int
			cfg := DefaultConfig()
			cfg.Term, cfg.MasterID, cfg.Transport = 1, "m", tr
			cfg.Logger = hclog.NewNullLogger()
			cfg.OnResult = func(r Result) {
				if !r.OK {
					mu.Lock()
					failed++
					mu.Unlock()
				}
				wg.Done()
			}
			cfg.OnServerFailed = func(id string, err error) { b.Errorf("server %s failed: %v", id, err) }
			d, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Stop()

			b.ResetTimer()
			for it := 0; b.Loop(); it++ {
				wg.Add(ops)
				for i := range ops {
					id := uint64(it*ops + i + 1)
					d.Dispatch(targets[i%servers], Op{Kind: rspb.OpKind_OP_KIND_OPEN,
						Region: fmt.Sprint("r", id), Table: "t", ProcID: id})
				}
				wg.Wait()
			}
			b.StopTimer()
			s := d.Stats()
			if failed > 0 || s.Ops != uint64(b.N*ops) {
				b.Fatalf("%d failed ops, stats %+v", failed, s)
			}
			b.ReportMetric(float64(s.Batches)/float64(b.N), "rpcs/20k-ops")
			b.ReportMetric(float64(s.Ops)/float64(s.Batches), "ops/rpc")
		})
	}
}
