package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/baton-dev/baton/cluster/console"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

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
		for _, ok := range want {
			if !ok {
				return false
			}
		}
		return true
	})
}
