package domain

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
)

// Lock leases expire on their own monitors, at exact moments: the set runs
// on clock.Real inside a synctest bubble, where that clock is fake and a
// monitor pass takes no time. A lease of length d is checked every
// min(MonitorInterval, d/2) from its manager's start and expires only once
// strictly more than d has passed, so a lease granted at a pass boundary is
// reported at d plus one interval. A holder that restates its length is
// reported once, under the new length, never by the manager it left. The
// cluster-level lock tests need raft and sockets, which a bubble cannot
// wait on; this covers the expiry timing they can only poll for.
func TestLockLeasesExpireOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type report struct {
			holder string
			at     time.Duration
		}
		var mu sync.Mutex
		var reports []report
		start := time.Now()
		s := newLockLeases(lease.Config{
			MonitorInterval: 500 * time.Millisecond,
			MaxPassTime:     50 * time.Millisecond,
			Clock:           clock.Real{},
			OnExpire: func(in lease.Info) {
				mu.Lock()
				defer mu.Unlock()
				reports = append(reports, report{in.Holder, time.Since(start)})
			},
		})
		s.Start()
		defer s.Stop()
		sleepTo := func(d time.Duration) { testwait.FakeTimeTo(start, d) }

		// 1 s: checked every 500 ms; age 1 s at the 1 s pass is not
		// past the limit, so the 1.5 s pass reports it.
		if err := s.Grant("lock/1", time.Second); err != nil {
			t.Fatal(err)
		}
		// 3 s: the interval stays 500 ms.
		if err := s.Grant("lock/3", 3*time.Second); err != nil {
			t.Fatal(err)
		}
		// Renewed every 900 ms on a 1 s lease: never expires.
		if err := s.Grant("lock/renewed", time.Second); err != nil {
			t.Fatal(err)
		}
		// 5 s, restated to 1 s at 4 s: reported at 5.5 s by the 1 s
		// manager, whose passes fall on the half seconds, and never by
		// the 5 s one.
		if err := s.Grant("lock/restated", 5*time.Second); err != nil {
			t.Fatal(err)
		}
		const every = 900 * time.Millisecond
		lastRenewal := time.Duration(0)
		for at := every; at < 8*time.Second; at += every {
			if at > 4*time.Second && lastRenewal < 4*time.Second {
				sleepTo(4 * time.Second)
				if err := s.Grant("lock/restated", time.Second); err != nil {
					t.Fatal(err)
				}
			}
			sleepTo(at)
			if err := s.Renew("lock/renewed"); err != nil {
				t.Fatalf("renewal at +%v: %v", at, err)
			}
			lastRenewal = at
		}
		sleepTo(time.Minute)
		mu.Lock()
		got := slices.Clone(reports)
		mu.Unlock()
		want := []report{
			{"lock/1", 1500 * time.Millisecond},
			{"lock/3", 3500 * time.Millisecond},
			{"lock/restated", 5500 * time.Millisecond},
			// Last renewed at 7.2 s: 0.8 s old at the 8 s pass, 1.3 s at
			// the 8.5 s one.
			{"lock/renewed", 8500 * time.Millisecond},
		}
		if lastRenewal != 7200*time.Millisecond {
			t.Fatalf("last renewal at %v", lastRenewal)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("expiries %v, want %v", got, want)
		}
		if _, ok := s.Length("lock/restated"); ok {
			t.Fatal("an expired holder keeps its length")
		}
	})
}
