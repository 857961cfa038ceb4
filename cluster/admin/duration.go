package admin

import (
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxDurationMs is the most milliseconds a time.Duration holds: beyond it
// the product wraps, and a huge request field would come out negative, or
// worse, as a small positive duration.
const maxDurationMs = math.MaxInt64 / int64(time.Millisecond)

// msDuration is a request's field of milliseconds as a duration, or an
// INVALID_ARGUMENT naming the field when it is negative or beyond what a
// duration holds.
func msDuration(call, field string, ms int64) (time.Duration, error) {
	if ms < 0 {
		return 0, status.Errorf(codes.InvalidArgument, "admin: %s: %s %d: negative; want 0 to %d milliseconds (about 292 years)", call, field, ms, maxDurationMs)
	}
	if ms > maxDurationMs {
		return 0, status.Errorf(codes.InvalidArgument, "admin: %s: %s %d: want 0 to %d milliseconds (about 292 years)", call, field, ms, maxDurationMs)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
