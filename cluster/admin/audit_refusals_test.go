package admin

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// startRootCluster is a secure cluster of three masters with access,
// whose client root holds admin besides access's initial grants (the
// grant applied), root's client of the leader li, and a deadline for the
// test.
func startRootCluster(t *testing.T, access Access) (sc *secureCluster, li int, ctx context.Context, root adminpb.AdminClient) {
	t.Helper()
	grants := map[string]security.Permission{"root": security.PermAdmin}
	maps.Copy(grants, access.InitialGrants)
	access.InitialGrants = grants
	sc, ctx, li, _ = startSecureTrio(t, access, time.Minute)
	root = sc.as(li, "root", "")
	waitBound(t, ctx, root, "admin")
	return sc, li, ctx, root
}

// TestEveryRefusalIsRecorded: refusals the audit trail used to miss are
// recorded with the caller and its address: a region server's
// certificate calling the admin API (refused by the identity policy,
// before access control), a client calling the masters' own methods,
// a refused read, and a refused HTTP request.
func TestEveryRefusalIsRecorded(t *testing.T) {
	sc, li, ctx, root := startRootCluster(t, Access{})
	si := (li + 1) % 3
	rs := sc.dial(si, sc.pki.MustCredentials(security.Identity{Role: security.RoleRegionServer, ID: "rs9"}), "")
	_, err := rs.DeleteTable(ctx, &adminpb.TableRequest{Name: "t"})
	wantCode(t, "a region server deletes a table", err, codes.PermissionDenied)
	mallory := sc.as(si, "mallory", "")
	_, err = mallory.AppendAudit(ctx, &adminpb.AppendAuditRequest{Records: []*adminpb.AuditRecord{{Method: "Forged"}}})
	wantCode(t, "a client appends to the trail", err, codes.PermissionDenied)
	_, err = mallory.RegisterNode(ctx, &adminpb.RegisterNodeRequest{})
	wantCode(t, "a client registers a node", err, codes.PermissionDenied)
	_, err = mallory.ListAudit(ctx, &adminpb.ListAuditRequest{})
	wantCode(t, "a client without permission reads the trail", err, codes.PermissionDenied)
	w := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/debug/domain", nil)
	req.RemoteAddr = "198.51.100.3:999"
	sc.nodes[li].srv.Authorizer(http.NotFoundHandler()).ServeHTTP(w, req)
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("an anonymous HTTP request: %d", w.Code)
	}

	want := map[string]bool{"regionserver/rs9 DeleteTable": false, "client/mallory AppendAudit": false,
		"client/mallory RegisterNode": false, "client/mallory ListAudit": false, "anonymous HTTP GET": false}
	var recs []*adminpb.AuditRecord
	testwait.For(t, 20*time.Second, "every refusal recorded with the caller's address", func() bool {
		recs = auditOf(t, ctx, root)
		for _, r := range recs {
			k := r.GetPrincipal() + " " + r.GetMethod()
			if _, ok := want[k]; ok && r.GetRefused() && r.GetPeer() != "" && (r.GetMethod() != "HTTP GET" || r.GetArgs() == "GET /debug/domain") {
				want[k] = true
			}
		}
		for _, ok := range want {
			if !ok {
				return false
			}
		}
		return true
	})
}

// TestHTTPRefusalsOfAnyPathAreRecorded: an HTTP request refused on the
// leader or on a standby is recorded whatever its path and method: a
// long path, one with a newline or ESC, one not UTF-8, a method of 200
// letters. The record used to carry them in its method, which the
// leader's AppendAudit refused (too long, control characters) or could
// not marshal (not UTF-8): the refusal went unrecorded.
func TestHTTPRefusalsOfAnyPathAreRecorded(t *testing.T) {
	sc, li, ctx, root := startRootCluster(t, Access{})
	si := (li + 1) % 3
	long := strings.Repeat("x", 120)
	type request struct{ method, path, args string }
	requests := []request{
		{"GET", "/" + long, "GET /" + long[:120]},
		{"GET", "/a\nforged: line", `GET /a\nforged: line`},
		{"GET", "/esc\x1b[31m", `GET /esc\x1b[31m`},
		{"GET", "/bad\xffpath", `GET /bad\xffpath`},
		{"GET", "/rlo\u202eevil", `GET /rlo\u202eevil`},
		{strings.Repeat("A", 200), "/m", strings.Repeat("A", 200) + " /m"},
	}
	want := map[string]bool{}
	for _, node := range []int{li, si} {
		for i, rq := range requests {
			w := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.Method, req.URL.Path = rq.method, rq.path
			req.RemoteAddr = "198.51.100." + string(rune('1'+node)) + ":" + string(rune('0'+i)) + "00"
			sc.nodes[node].srv.Authorizer(http.NotFoundHandler()).ServeHTTP(w, req)
			if w.Code != http.StatusUnauthorized {
				t.Fatalf("%s %q on %d: %d", rq.method, rq.path, node, w.Code)
			}
			want[req.RemoteAddr] = false
		}
	}
	args := map[string]bool{}
	for _, rq := range requests {
		args[access.Cut(rq.args, access.FieldMax)] = true
	}
	testwait.For(t, 20*time.Second, "every HTTP refusal recorded", func() bool {
		for _, r := range auditOf(t, ctx, root) {
			if _, ok := want[r.GetPeer()]; !ok {
				continue
			}
			if !args[r.GetArgs()] {
				t.Fatalf("record of %s: args %q, not one of the requests'", r.GetPeer(), r.GetArgs())
			}
			if m := r.GetMethod(); m != "HTTP GET" && m != "HTTP" {
				t.Fatalf("record of %s: method %q", r.GetPeer(), m)
			}
			want[r.GetPeer()] = true
		}
		for _, ok := range want {
			if !ok {
				return false
			}
		}
		return true
	})
}
