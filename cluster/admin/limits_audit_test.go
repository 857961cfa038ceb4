package admin

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// TestRequestOverLimitsIsAudited: a call refused for a field over its
// limit is still in the audit trail, as the caller's INVALID_ARGUMENT,
// with the request's arguments cut as every record's are (the limits run
// after the audit, on a leader and on a standby that refuses before it
// forwards).
func TestRequestOverLimitsIsAudited(t *testing.T) {
	sc := startSecureCluster(t, 3, Access{InitialGrants: map[string]security.Permission{"ops": security.PermAdmin}})
	li := converged(t, sc.nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ops := sc.as(li, "ops", "")
	testwait.For(t, 10*time.Second, "ops bound to admin", func() bool {
		r, err := ops.WhoAmI(ctx, &adminpb.WhoAmIRequest{})
		return err == nil && r.GetPermission() == "admin"
	})
	for _, i := range []int{li, (li + 1) % 3} {
		_, err := sc.as(i, "ops", "").SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Owner: strings.Repeat("o", 1<<20)})
		wantCode(t, "1 MiB owner", err, codes.InvalidArgument, "owner")
	}
	testwait.For(t, 20*time.Second, "both refusals audited", func() bool {
		n := 0
		for _, r := range auditOf(t, ctx, ops) {
			if r.GetMethod() != "SubmitProcedure" {
				continue
			}
			if r.GetCode() != codes.InvalidArgument.String() || len(r.GetArgs()) > access.FieldMax || !strings.Contains(r.GetArgs(), "ooo") {
				t.Fatalf("record %s: code %s, args of %d bytes", r.GetId(), r.GetCode(), len(r.GetArgs()))
			}
			n++
		}
		return n == 2
	})
}
