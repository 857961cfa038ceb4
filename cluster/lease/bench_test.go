package lease

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/clock"
)

const benchLeases = 100_000

// shiftedClock is the real clock moved forward by a settable offset, so a
// benchmark can expire leases at once while still paying for real clock
// readings (the pass bound reads the clock after every removal).
type shiftedClock struct{ shift atomic.Int64 }

func (c *shiftedClock) Now() time.Time { return time.Now().Add(time.Duration(c.shift.Load())) }
func (c *shiftedClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return time.AfterFunc(d, f)
}

func benchManager(b *testing.B, c clock.Clock, maxPass time.Duration) (*Manager, []string) {
	b.Helper()
	cfg := DefaultConfig()
	cfg.Clock = c
	cfg.MaxPassTime = maxPass
	m, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	hs := make([]string, benchLeases)
	for i := range hs {
		hs[i] = fmt.Sprintf("rs-%06d", i)
		// Two entities each, as a region server with a couple of regions.
		m.Grant(hs[i], hs[i]+"/r0", hs[i]+"/r1")
	}
	return m, hs
}

// Renew among 100,000 leases, one goroutine: the list move is O(1).
func BenchmarkRenew(b *testing.B) {
	m, hs := benchManager(b, clock.Real{}, DefaultConfig().MaxPassTime)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := m.Renew(hs[i%len(hs)]); err != nil {
			b.Fatal(err)
		}
	}
}

// Renew among 100,000 leases from GOMAXPROCS goroutines (one lock).
func BenchmarkRenewParallel(b *testing.B) {
	m, hs := benchManager(b, clock.Real{}, DefaultConfig().MaxPassTime)
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		for pb.Next() {
			i++
			if err := m.Renew(hs[i%len(hs)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// One monitor pass over 100,000 expired leases. "unbounded" removes all of
// them in one pass (its time per op is the full cost); "default" uses the
// 50 ms bound and reports how many passes the wave takes.
func BenchmarkMonitorPass100k(b *testing.B) {
	for _, bc := range []struct {
		name    string
		maxPass time.Duration
	}{
		{"unbounded", time.Hour},
		{"default", DefaultConfig().MaxPassTime},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var passes, removed int
			var longest time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				c := &shiftedClock{}
				m, _ := benchManager(b, c, bc.maxPass)
				c.shift.Store(int64(DefaultConfig().HardLimit + time.Second))
				b.StartTimer()
				for {
					start := time.Now()
					n := len(m.CheckNow())
					if n == 0 {
						break
					}
					longest = max(longest, time.Since(start))
					passes++
					removed += n
				}
			}
			if removed != b.N*benchLeases {
				b.Fatalf("removed %d, want %d", removed, b.N*benchLeases)
			}
			b.ReportMetric(float64(passes)/float64(b.N), "passes/op")
			b.ReportMetric(float64(longest.Microseconds())/1000, "max-pass-ms")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(removed), "ns/lease")
		})
	}
}

// Renewals keep flowing while a 100,000-lease wave is swept: the bound on
// each pass is what lets them in. Reports the worst renewal latency, which
// should be about one MaxPassTime (50 ms), not the whole wave.
func BenchmarkRenewDuringExpiryWave(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := &shiftedClock{}
		m, _ := benchManager(b, c, DefaultConfig().MaxPassTime)
		c.shift.Store(int64(DefaultConfig().HardLimit + time.Second))
		m.Grant("live") // granted after the shift: stays live
		b.StartTimer()
		var wg sync.WaitGroup
		done := make(chan struct{})
		var worst time.Duration
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				start := time.Now()
				if err := m.Renew("live"); err != nil {
					b.Error(err)
					return
				}
				worst = max(worst, time.Since(start))
			}
		}()
		// The monitor spaces passes by MonitorInterval; a 1 ms gap after
		// each pass stands in for it and paces the passes, waiting for
		// nothing. (A gap, not a ticker: a pass outlasts a tick, and a
		// pending tick would run the next pass back to back.) Back to
		// back, a renewal can wait two passes: Go's mutex lets the running
		// sweeper barge in once before it hands off.
	sweep:
		for len(m.CheckNow()) > 0 {
			gap := time.NewTimer(time.Millisecond)
			select {
			case <-gap.C:
			case <-b.Context().Done():
				gap.Stop()
				break sweep
			}
		}
		close(done)
		wg.Wait()
		b.ReportMetric(float64(worst.Microseconds())/1000, "worst-renew-ms")
	}
}
