package admin_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TestMillisecondFieldsOutOfRange: a duration field in milliseconds too
// large for a time.Duration is refused INVALID_ARGUMENT naming the field
// and its bounds, never wrapped into a negative (or small positive)
// duration and reported, or accepted, as that.
func TestMillisecondFieldsOutOfRange(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1})
	fc.WaitLeader()
	c := fc.Master(0).Admin()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	huge := int64(math.MaxInt64 / 1000) // × 1e6 ns wraps
	for _, tc := range []struct {
		field string
		call  func() error
	}{
		{"timeout_ms", func() error {
			_, err := c.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "1"}, TimeoutMs: huge})
			return err
		}},
		{"timeout_ms", func() error {
			// Wraps to about +1.3 s: a timeout nobody asked for.
			_, err := c.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "1"}, TimeoutMs: 18446744073710})
			return err
		}},
		{"lease_ms", func() error {
			_, err := c.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: []string{"ns1"}, Holder: "h", LeaseMs: huge})
			return err
		}},
		{"lease_ms", func() error {
			_, err := c.LockHeartbeat(ctx, &adminpb.LockRef{LockId: 1, LeaseMs: math.MaxInt64})
			return err
		}},
		{"stuck_after_ms", func() error {
			_, err := c.ProcedureStats(ctx, &adminpb.ProcedureStatsRequest{StuckAfterMs: math.MaxInt64})
			return err
		}},
		{"older_than_ms", func() error {
			_, err := c.CancelProcedures(ctx, &adminpb.CancelProceduresRequest{OlderThanMs: huge, DryRun: true})
			return err
		}},
	} {
		err := tc.call()
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.field) || !strings.Contains(st.Message(), "want 0 to 9223372036854 milliseconds") {
			t.Errorf("%s out of range: %v; want INVALID_ARGUMENT naming it and its bounds", tc.field, err)
		}
	}
}
