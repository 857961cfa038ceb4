package procedure

import (
	"math/rand/v2"
	"time"
)

// Backoff is an exponential backoff: Base × 2^(attempt-1), capped at Max,
// with up to Jitter (a fraction, e.g. 0.1) added at random.
type Backoff struct {
	Base   time.Duration
	Max    time.Duration
	Jitter float64
}

// DefaultBackoff is HBase's retry backoff for procedures: 1 s doubling to
// 10 min, with 10% jitter.
var DefaultBackoff = Backoff{Base: time.Second, Max: 10 * time.Minute, Jitter: 0.1}

// Delay is the wait before attempt (1-based) runs again.
func (b Backoff) Delay(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := b.Base
	for i := 1; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	if b.Max > 0 && d > b.Max {
		d = b.Max
	}
	return addJitter(d, b.Jitter)
}

// Retry suspends the procedure for the backoff delay of attempt (see
// Context.Attempt) without persisting it: the retry loop of a step that
// failed transiently and changed nothing.
func (b Backoff) Retry(attempt int) Step {
	return Suspend(Timeout(b.Delay(attempt)), SkipPersistence())
}

func addJitter(d time.Duration, frac float64) time.Duration {
	if frac <= 0 || d <= 0 {
		return d
	}
	return d + time.Duration(rand.Int64N(int64(float64(d)*frac)+1))
}
