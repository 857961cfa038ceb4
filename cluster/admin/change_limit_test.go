package admin

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
)

// wantRetryInfo: err is RESOURCE_EXHAUSTED carrying when to try again.
func wantRetryInfo(t *testing.T, what string, err error, says string) {
	t.Helper()
	wantCode(t, what, err, codes.ResourceExhausted, says, "the next is allowed in")
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().AsDuration() > 0 {
			return
		}
	}
	t.Fatalf("%s: %v carries no RetryInfo", what, err)
}

// TestChangeRateLimit: every state-changing call counts against its
// caller's bucket (an operator pausing procedures, not only submitting),
// and so does every refusal: a caller with no permission flooding
// refusals, over gRPC or HTTP, is answered RESOURCE_EXHAUSTED past its
// burst, and those answers stay within its refusal quota in the trail.
func TestChangeRateLimit(t *testing.T) {
	const burst = 4
	sc, li, ctx, root := startRootCluster(t, Access{ChangeLimit: RateLimit{Rate: MinSubmitRate, Burst: burst}, AuditMaxRefusedPerCaller: 3})

	for range burst {
		_, err := root.PauseProcedure(ctx, &adminpb.ProcedureRef{Id: 999_999})
		wantCode(t, "a pause within the burst", err, codes.NotFound)
	}
	_, err := root.PauseProcedure(ctx, &adminpb.ProcedureRef{Id: 999_999})
	wantRetryInfo(t, "a pause past the burst", err, "client/root")
	if _, err := root.ListProcedures(ctx, &adminpb.ListProceduresRequest{}); err != nil {
		t.Fatalf("a read past the burst: %v (reads are not limited)", err)
	}

	mallory := sc.as(li, "mallory", "")
	for i := range burst {
		if i%2 == 0 {
			_, err = mallory.ListProcedures(ctx, &adminpb.ListProceduresRequest{})
		} else {
			_, err = mallory.DeleteTable(ctx, &adminpb.TableRequest{Name: "t"})
		}
		wantCode(t, "a refusal within the burst", err, codes.PermissionDenied)
	}
	for range 10 {
		_, err = mallory.ListProcedures(ctx, &adminpb.ListProceduresRequest{})
		wantRetryInfo(t, "a refused read past the burst", err, "client/mallory")
		_, err = mallory.DeleteTable(ctx, &adminpb.TableRequest{Name: "t"})
		wantRetryInfo(t, "a refused change past the burst", err, "client/mallory")
	}

	authz := sc.nodes[li].srv.Authorizer(http.NotFoundHandler())
	for i := range burst + 1 {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/status", nil)
		req.RemoteAddr = "198.51.100.3:999"
		authz.ServeHTTP(w, req)
		if i < burst && w.Code != http.StatusUnauthorized {
			t.Fatalf("an anonymous HTTP request within the burst: %d", w.Code)
		}
		if i == burst && (w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "") {
			t.Fatalf("an anonymous HTTP request past the burst: %d, Retry-After %q; want 429 saying when", w.Code, w.Header().Get("Retry-After"))
		}
	}

	testwait.For(t, 20*time.Second, "mallory's refusals within her quota, the limit's answer among them", func() bool {
		var codesOf []string
		for _, r := range auditOf(t, ctx, root) {
			if r.GetPrincipal() == "client/mallory" {
				codesOf = append(codesOf, r.GetCode())
			}
		}
		return len(codesOf) <= 3 && slices.Contains(codesOf, codes.ResourceExhausted.String())
	})
}
