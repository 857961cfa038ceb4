package procedure_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/store"
)

// BenchmarkGetDuringScrapes: what scraping an executor that holds 100,000
// procedures costs everything else that takes its lock (here
// Executor.Get, as a step's transition does), with Prometheus scraping
// back to back (several scrapers, or anyone with /metrics in a loop: the
// endpoint is unauthenticated) and without. Reports the p99 and the worst
// wait of one Get.
func BenchmarkGetDuringScrapes(b *testing.B) {
	const n = 100_000
	reg := procedure.NewRegistry()
	reg.MustRegister("parked", 1, func() procedure.Procedure { return &parked{} })
	metrics := prometheus.NewRegistry()
	x, err := procedure.New(procedure.Config{Store: store.NewMemStore(), Registry: reg, Metrics: metrics})
	if err != nil {
		b.Fatal(err)
	}
	if err := x.Start(); err != nil {
		b.Fatal(err)
	}
	defer x.Stop(context.Background())
	var last uint64
	for range n {
		if last, err = x.Submit(&parked{}, procedure.SubmitOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, scraping := range []bool{false, true} {
		name := "scrapes=off"
		if scraping {
			name = "scrapes=loop"
		}
		b.Run(name, func(b *testing.B) {
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for scraping {
					select {
					case <-stop:
						return
					default:
					}
					_, _ = metrics.Gather()
				}
			}()
			var waits []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if _, err := x.Get(last); err != nil {
					b.Fatal(err)
				}
				waits = append(waits, time.Since(t0))
				// The workload's pace, not a wait for anything: a Get a
				// millisecond, as steps come; a loop spinning on the lock
				// would measure the mutex's fairness instead.
				time.Sleep(time.Millisecond)
			}
			close(stop)
			<-done
			slices.Sort(waits)
			b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds()), "p99_µs")
			b.ReportMetric(float64(waits[len(waits)-1].Microseconds()), "max_µs")
		})
	}
}
