package admin

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/security"
)

// TestRegionServerGrants: what a master tells region servers is the
// certificate bindings (initial grants included from the start), whose
// version follows their content, and never a token; a revoked initial
// grant is not among them, though this master's configuration lists it.
func TestRegionServerGrants(t *testing.T) {
	sc := startSecureCluster(t, 1, Access{InitialGrants: map[string]security.Permission{"ops": security.PermAdmin, "scraper": security.PermRead}})
	converged(t, sc.nodes)
	srv := sc.nodes[0].srv
	holds := func(g *rspb.AccessGrants) map[string]string {
		out := map[string]string{}
		for _, c := range g.GetClients() {
			out[c.GetClient()] = c.GetPermission()
		}
		return out
	}
	first := srv.RegionServerGrants()
	if !first.GetEnforced() || first.GetTokensOnly() || first.GetVersion() == 0 || holds(first)["ops"] != "admin" || holds(first)["scraper"] != "read" || len(first.GetClients()) != 2 {
		t.Fatalf("grants at start: %v, want ops=admin and scraper=read, enforced", first)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ops := sc.as(0, "ops", "")
	if _, err := ops.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "reader", Permission: "read"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.AclCreateToken(ctx, &adminpb.AclCreateTokenRequest{Name: "ci", Permission: "admin"}); err != nil {
		t.Fatal(err)
	}
	granted := srv.RegionServerGrants()
	if holds(granted)["reader"] != "read" || len(granted.GetClients()) != 3 || granted.GetVersion() == first.GetVersion() {
		t.Fatalf("grants after granting reader: %v (first version %d)", granted, first.GetVersion())
	}
	if _, err := ops.AclRevoke(ctx, &adminpb.AclRevokeRequest{Client: "reader"}); err != nil {
		t.Fatal(err)
	}
	if revoked := srv.RegionServerGrants(); revoked.GetVersion() != first.GetVersion() || len(revoked.GetClients()) != 2 {
		t.Fatalf("grants after revoking reader: %v, want the first ones (version %d) again", revoked, first.GetVersion())
	}
	if _, err := ops.AclRevoke(ctx, &adminpb.AclRevokeRequest{Client: "scraper"}); err != nil {
		t.Fatal(err)
	}
	if after := srv.RegionServerGrants(); holds(after)["scraper"] != "" || len(after.GetClients()) != 1 {
		t.Fatalf("grants after revoking the initial grant scraper: %v, want ops alone", after)
	}
}
