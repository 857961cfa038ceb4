//go:build !unix

package store

import (
	"testing"
	"time"
)

// cpuTime is unknown where there is no getrusage: the benchmarks' CPU
// figures read 0 there.
func cpuTime(*testing.B) time.Duration { return 0 }
