package lease

import (
	"errors"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/clock"
)

// Config configures a Manager. Start from DefaultConfig.
type Config struct {
	// SoftLimit is how long after its last renewal a holder stays live. Past
	// it the holder is suspect: nothing new should be assigned to it, but
	// nothing is taken away either. Default 6 s (HDFS: 60 s). Shorter stops
	// assigning to a dying server sooner, at the price of skipping a server
	// that merely missed a heartbeat or two.
	SoftLimit time.Duration

	// HardLimit is how long after its last renewal the lease expires and the
	// monitor removes it and reports it to OnExpire. It must exceed SoftLimit.
	// Default 15 s (HDFS: 60 min). It bounds how long a dead server's regions
	// stay unavailable; too short and a long GC pause or a slow network
	// expires a healthy server.
	HardLimit time.Duration

	// MonitorInterval is the time between the end of one monitor pass and the
	// start of the next. Default 500 ms (HDFS: 2 s). An expiry is reported at
	// most HardLimit + MonitorInterval (+ the pass itself) after the last
	// renewal. It must not exceed HardLimit.
	MonitorInterval time.Duration

	// MaxPassTime bounds how long one monitor pass holds the manager's lock,
	// measured by Clock. When it runs out the pass stops and the remaining
	// expired leases wait for the next pass, so renewals are not starved by
	// a wave of expiries. A pass always removes at least one expired lease.
	// Default 50 ms (HDFS: 25 ms).
	MaxPassTime time.Duration

	// Clock tells the time and schedules the monitor. Default clock.Real{};
	// tests use a *clock.Manual.
	Clock clock.Clock

	// OnExpire, if not nil, is called for each lease the monitor expires,
	// oldest first, outside the manager's lock, never concurrently with
	// itself. It may call any Manager method except CheckNow and Stop (which
	// wait for the pass that is calling it). In the cluster it replicates the
	// expiry and starts a ServerCrashProcedure or releases a lock.
	OnExpire func(Info)
}

// DefaultConfig returns Baton's defaults, documented on each Config field.
func DefaultConfig() Config {
	return Config{
		SoftLimit:       6 * time.Second,
		HardLimit:       15 * time.Second,
		MonitorInterval: 500 * time.Millisecond,
		MaxPassTime:     50 * time.Millisecond,
		Clock:           clock.Real{},
	}
}

// Validate reports every problem in c, or nil.
func (c Config) Validate() error {
	var errs []error
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("lease: %s must be > 0, got %v", name, d))
		}
	}
	positive("SoftLimit", c.SoftLimit)
	positive("HardLimit", c.HardLimit)
	positive("MonitorInterval", c.MonitorInterval)
	positive("MaxPassTime", c.MaxPassTime)
	if c.SoftLimit > 0 && c.HardLimit > 0 && c.SoftLimit >= c.HardLimit {
		errs = append(errs, fmt.Errorf("lease: SoftLimit (%v) must be < HardLimit (%v)", c.SoftLimit, c.HardLimit))
	}
	if c.MonitorInterval > 0 && c.HardLimit > 0 && c.MonitorInterval > c.HardLimit {
		errs = append(errs, fmt.Errorf("lease: MonitorInterval (%v) must not exceed HardLimit (%v)", c.MonitorInterval, c.HardLimit))
	}
	if c.Clock == nil {
		errs = append(errs, errors.New("lease: Clock must be set (clock.Real{} in production)"))
	}
	return errors.Join(errs...)
}
