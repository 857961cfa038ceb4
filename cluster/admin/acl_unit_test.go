package admin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// TestAuditRetention: the trail keeps at most AuditMaxRecords, and drops
// what is older than AuditRetention, oldest first, also on a leader with
// nothing new to record.
func TestAuditRetention(t *testing.T) {
	clk := clock.NewManual(time.Now())
	sc, ctx, ops := startSecureOne(t, Access{AuditMaxRecords: 5, AuditRetention: time.Hour, Clock: clk,
		InitialGrants: map[string]security.Permission{"ops": security.PermAdmin}})
	for i := range 8 {
		if _, err := ops.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}}); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	recs := auditOf(t, ctx, ops)
	if len(recs) != 5 || recs[4].GetMethod() != "SubmitProcedure" || !strings.HasSuffix(recs[0].GetId(), "-4") {
		t.Fatalf("after 8 calls with a bound of 5: %d records\n%s", len(recs), auditText(recs))
	}
	// Past the retention, the next call's write drops all the others.
	clk.Advance(2 * time.Hour)
	if _, err := ops.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}}); err != nil {
		t.Fatal(err)
	}
	recs = auditOf(t, ctx, ops)
	if len(recs) != 1 || !strings.HasSuffix(recs[0].GetId(), "-9") {
		t.Fatalf("after the retention passed: %d records\n%s", len(recs), auditText(recs))
	}
	// Idle, the leader's own round drops them too.
	clk.Advance(2 * time.Hour)
	if err := sc.nodes[0].srv.audit.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if recs = auditOf(t, ctx, ops); len(recs) != 0 {
		t.Fatalf("after an idle prune: %d records\n%s", len(recs), auditText(recs))
	}
}

// TestHTTPHonoursPermissions: the console, metrics and status need read,
// /debug/ admin, /readyz nothing; a token in the Authorization header
// counts as one in gRPC metadata.
func TestHTTPHonoursPermissions(t *testing.T) {
	sc := startSecureCluster(t, 1, Access{InitialGrants: map[string]security.Permission{"ops": security.PermAdmin, "viewer": security.PermRead}})
	converged(t, sc.nodes)
	srv := sc.nodes[0].srv
	testwait.For(t, 10*time.Second, "grants bound", func() bool {
		_, ok := srv.b.DomainGet(access.CertPrefix + "viewer")
		return ok
	})
	var seen security.Permission
	h := srv.Authorizer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = security.PermissionOf(r.Context()) }))
	req := func(path, client, token string) int {
		r := httptest.NewRequest("GET", path, nil)
		if client != "" {
			cert := &x509.Certificate{URIs: []*url.URL{security.Identity{Role: security.RoleClient, ID: client}.URI()}}
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
		}
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		seen = security.PermNone
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, c := range []struct {
		path, client string
		want         int
		perm         security.Permission
	}{
		{"/ui/procedures", "viewer", 200, security.PermRead},
		{"/metrics", "viewer", 200, security.PermRead},
		{"/debug/pprof/", "viewer", 403, 0},
		{"/debug/pprof/", "ops", 200, security.PermAdmin},
		{"/", "stranger", 403, 0},
		{"/", "", 401, 0},
		{"/readyz", "", 200, 0},
	} {
		if got := req(c.path, c.client, ""); got != c.want || (got == 200 && c.perm != 0 && seen != c.perm) {
			t.Errorf("%s as %q: %d (permission in context %v), want %d (%v)", c.path, c.client, got, seen, c.want, c.perm)
		}
	}
	ctx := context.Background()
	tok, err := sc.as(0, "ops", "").AclCreateToken(ctx, &adminpb.AclCreateTokenRequest{Name: "scraper", Permission: "read"})
	if err != nil {
		t.Fatal(err)
	}
	if got := req("/metrics", "", tok.GetSecret()); got != 200 || seen != security.PermRead {
		t.Errorf("/metrics with a read token: %d, %v", got, seen)
	}
	if got := req("/metrics", "", "bt_0123456789abcdef_"+strings.Repeat("x", 43)); got != 401 {
		t.Errorf("/metrics with an unknown token: %d, want 401", got)
	}
}

// TestAccessOffStillAudits: without enforcement every caller may call
// everything, and what changes state is recorded all the same, under
// the caller's name.
func TestAccessOffStillAudits(t *testing.T) {
	nodes := startClusterWith(t, 1, func(i int, id string, cfg *Config) grpc.DialOption {
		cfg.Access = &Access{}
		return nil
	})
	converged(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := nodes[0].cl
	who, err := c.WhoAmI(ctx, &adminpb.WhoAmIRequest{})
	if err != nil || who.GetEnforced() || who.GetPermission() != "admin" || who.GetPrincipal() != "anonymous" {
		t.Fatalf("whoami: %v, %v", who, err)
	}
	if _, err := c.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}}); err != nil {
		t.Fatal(err)
	}
	recs := auditOf(t, ctx, c)
	if len(recs) != 1 || recs[0].GetPrincipal() != "anonymous" || recs[0].GetPeer() == "" {
		t.Fatalf("audit without access control: %s", auditText(recs))
	}
}
