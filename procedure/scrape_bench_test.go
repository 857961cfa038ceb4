package procedure_test

import (
	"slices"
	"testing"
	"time"
)

// BenchmarkGetDuringScrapes: what scraping an executor that holds 100,000
// procedures costs everything else that takes its lock (here
// Executor.Get, as a step's transition does), with Prometheus scraping
// back to back (several scrapers, or anyone with /metrics in a loop: the
// endpoint is unauthenticated) and without. Reports the p99 and the worst
// wait of one Get.
func BenchmarkGetDuringScrapes(b *testing.B) {
	x, metrics, last := parkedExecutor(b, 100_000)
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
