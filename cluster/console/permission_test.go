package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// auditAdmin is fakeAdmin with an audit trail of one record.
type auditAdmin struct{ fakeAdmin }

func (f *auditAdmin) ListAudit(context.Context, *adminpb.ListAuditRequest) (*adminpb.ListAuditResponse, error) {
	return &adminpb.ListAuditResponse{Records: []*adminpb.AuditRecord{{Id: "3-1", Principal: "client/ops", Method: "DeleteTable",
		Args: hostile, Code: "PermissionDenied", Message: hostile, ProcIds: []uint64{7}, Node: "m1"}}}, nil
}

// TestConsoleHonoursPermissions: a user holding read sees the pages
// without their actions, and is refused the actions' pages and posts and
// the audit trail; one holding admin sees and may do all.
func TestConsoleHonoursPermissions(t *testing.T) {
	f := &auditAdmin{}
	as := func(p security.Permission) func(http.Handler) http.Handler {
		return func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(w, r.WithContext(security.WithPermission(r.Context(), p)))
			})
		}
	}
	reader := consoleOverWith(t, f, as(security.PermRead))
	get := func(srv string, path string) (int, string) {
		req, _ := http.NewRequest("GET", srv+path, nil)
		resp, body := fetch(t, req)
		return resp.StatusCode, body
	}
	code, body := get(reader.URL, "/ui/procedures/7")
	if code != http.StatusOK || strings.Contains(body, "abort-link") || strings.Contains(body, "bypass-form") || !strings.Contains(body, "Actions need permission admin") || strings.Contains(body, "nav-audit") {
		t.Fatalf("a procedure's page to a reader: %d, actions shown or not explained\n%s", code, body)
	}
	for _, path := range []string{"/ui/procedures/7/abort", "/ui/procedures/7/bypass", "/ui/maintenance?on=1", "/ui/audit"} {
		if code, body := get(reader.URL, path); code != http.StatusForbidden || !strings.Contains(body, "needs permission admin; you hold permission read") {
			t.Errorf("GET %s as a reader: %d, want 403 naming the permission\n%s", path, code, body)
		}
	}
	req, _ := http.NewRequest("POST", reader.URL+"/ui/procedures/7/abort", strings.NewReader(url.Values{"confirm": {"yes"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", reader.URL)
	if resp, body := fetch(t, req); resp.StatusCode != http.StatusForbidden || f.aborts.Load() != 0 {
		t.Fatalf("an abort posted by a reader: %d, %d aborts\n%s", resp.StatusCode, f.aborts.Load(), body)
	}

	admin := consoleOverWith(t, f, as(security.PermAdmin))
	if code, body := get(admin.URL, "/ui/procedures/7"); code != http.StatusOK || !strings.Contains(body, "abort-link") || !strings.Contains(body, "nav-audit") {
		t.Fatalf("a procedure's page to an admin: %d, no actions\n%s", code, body)
	}
	code, body = get(admin.URL, "/ui/audit")
	if code != http.StatusOK || !strings.Contains(body, "client/ops") || !strings.Contains(body, "DeleteTable") || strings.Contains(body, "<script>alert(1)") {
		t.Fatalf("the audit page to an admin: %d\n%s", code, body)
	}
}

// ownedAdmin is fakeAdmin whose abort the admin API refuses: the
// procedure is another's (ownership).
type ownedAdmin struct{ fakeAdmin }

func (f *ownedAdmin) AbortProcedure(context.Context, *adminpb.ProcedureRef) (*adminpb.Procedure, error) {
	return nil, status.Error(codes.PermissionDenied, "admin: procedure 7 is owned by alice; pass force to act on another's procedure")
}

// TestConsoleShowsAnOwnershipRefusalAs403: an admin's abort of another's
// procedure, refused by the admin API, is answered 403 with the reason,
// not 502 as if the API had failed.
func TestConsoleShowsAnOwnershipRefusalAs403(t *testing.T) {
	srv := consoleOverWith(t, &ownedAdmin{}, nil)
	req, _ := http.NewRequest("POST", srv.URL+"/ui/procedures/7/abort", strings.NewReader(url.Values{"confirm": {"yes"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", srv.URL)
	resp, body := fetch(t, req)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "owned by alice") {
		t.Fatalf("an abort the API refused for ownership: %d, want 403 with the reason\n%s", resp.StatusCode, body)
	}
}
