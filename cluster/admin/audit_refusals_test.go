package admin

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/cluster/console"
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

// allSeen says whether every refusal in want has been found in the trail.
func allSeen(want map[string]bool) bool {
	return !slices.Contains(slices.Collect(maps.Values(want)), false)
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
		return allSeen(want)
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
		return allSeen(want)
	})
}

// TestConsoleRefusalsAreRecorded: the console's own 403s (an action or
// the audit page asked for by a user holding operate, not admin) are
// recorded in the audit trail as the HTTP authorizer's refusals are, on
// the leader and on a standby.
func TestConsoleRefusalsAreRecorded(t *testing.T) {
	sc, li, ctx, root := startRootCluster(t, Access{})
	tok, err := root.AclCreateToken(ctx, &adminpb.AclCreateTokenRequest{Name: "bob", Permission: "operate"})
	if err != nil {
		t.Fatal(err)
	}
	si := (li + 1) % 3
	want := map[string]bool{}
	for _, node := range []int{li, si} {
		creds := sc.pki.MustCredentials(security.Identity{Role: security.RoleMaster, ID: sc.nodes[node].node.ID()})
		con, err := console.New(console.Config{AdminAddr: sc.nodes[node].addr, Refresh: -1, DialOptions: []grpc.DialOption{creds.DialOption(security.RoleMaster)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { con.Close() })
		h := sc.nodes[node].srv.Authorizer(con)
		for i, rq := range []struct{ method, path string }{{"POST", "/ui/maintenance"}, {"POST", "/ui/procedures/7/abort"}, {"GET", "/ui/audit"}} {
			req := httptest.NewRequest(rq.method, rq.path, strings.NewReader("confirm=yes"))
			req.Host = "127.0.0.1"
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Authorization", "Bearer "+tok.GetSecret())
			req.RemoteAddr = "203.0.113." + string(rune('1'+node)) + ":" + string(rune('1'+i)) + "000"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "needs permission admin") {
				t.Fatalf("%s %s as bob on %d: %d\n%s", rq.method, rq.path, node, w.Code, w.Body.String())
			}
			want[req.RemoteAddr] = false
		}
	}
	testwait.For(t, 20*time.Second, "every console refusal recorded", func() bool {
		for _, r := range auditOf(t, ctx, root) {
			if _, ok := want[r.GetPeer()]; ok && r.GetRefused() && strings.HasPrefix(r.GetMethod(), "HTTP ") &&
				r.GetName() == "bob" && strings.Contains(r.GetMessage(), "needs permission admin") {
				want[r.GetPeer()] = true
			}
		}
		return allSeen(want)
	})
}

// TestRequestOverLimitsIsAudited: a call refused for a field over its
// limit is still in the audit trail, as the caller's INVALID_ARGUMENT,
// with the request's arguments cut as every record's are (the limits run
// after the audit, on a leader and on a standby that refuses before it
// forwards).
func TestRequestOverLimitsIsAudited(t *testing.T) {
	sc, ctx, li, _ := startSecureTrio(t, Access{InitialGrants: map[string]security.Permission{"ops": security.PermAdmin}}, 60*time.Second)
	ops := sc.as(li, "ops", "")
	waitBound(t, ctx, ops, "admin")
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

// TestWrongTokenSecretIsNotChargedToItsAccessor: a token whose secret
// does not verify names no one by its accessor, which anyone may know
// (it is listed, and logged). A flood of refusals under a victim's
// accessor with a wrong secret is recorded as the certificate that made
// it, or as an anonymous caller from its address, and leaves the
// victim's own refusals in place.
func TestWrongTokenSecretIsNotChargedToItsAccessor(t *testing.T) {
	// Every caller here is on loopback, one address: its quota, shared,
	// makes the biggest holder there pay, and the victim is never that.
	const quota = 10
	sc := startSecureCluster(t, 1, Access{ClientAuth: security.ClientAuthEither, AuditMaxRefusedPerCaller: quota,
		InitialGrants: map[string]security.Permission{"ops": security.PermAdmin}})
	converged(t, sc.nodes)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ops := sc.as(0, "ops", "")
	secret, acc := opsToken(t, ctx, ops, "read")
	victim := sc.certless(0, secret)
	for range 3 {
		_, err := victim.CreateNamespace(ctx, &adminpb.NamespaceRequest{Name: "ns"})
		wantCode(t, "the victim creates a namespace", err, codes.PermissionDenied)
	}
	forged := "bt_" + acc + "_" + strings.Repeat("A", 43)
	for _, c := range []adminpb.AdminClient{sc.as(0, "alice", forged), sc.certless(0, forged)} {
		for range 5 {
			_, err := c.CreateNamespace(ctx, &adminpb.NamespaceRequest{Name: "ns"})
			wantCode(t, "a wrong secret under the victim's accessor", err, codes.Unauthenticated, acc)
		}
	}
	testwait.For(t, 20*time.Second, "the flood recorded as its callers, the victim's refusals kept", func() bool {
		var victims, charged, alice, anonymous int
		for _, r := range auditOf(t, ctx, ops) {
			switch r.GetPrincipal() {
			case "token/" + acc:
				if r.GetCode() == codes.PermissionDenied.String() {
					victims++
				} else {
					charged++
				}
			case "client/alice":
				alice++
			case access.KindAnonymous:
				anonymous++
				if !strings.Contains(r.GetMessage(), acc) {
					t.Fatalf("an anonymous refusal does not say the accessor it claimed: %v", r)
				}
			}
		}
		if charged > 0 {
			t.Fatalf("%d refusals of a wrong secret charged to token/%s", charged, acc)
		}
		return victims == 3 && alice > 0 && anonymous > 0 && victims+alice+anonymous == quota
	})
}
