package admin

import (
	"fmt"
	"strings"
	"testing"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// TestConsoleUserWithAMastersCertificateIsNamed: a console call made for
// a browser that presented another master's certificate is recorded as
// that master, on the leader's console and through a standby's (which
// the record names as the one that forwarded it), not as the master
// whose console made the call.
func TestConsoleUserWithAMastersCertificateIsNamed(t *testing.T) {
	sc, li, ctx, root := startRootCluster(t, Access{})
	si := (li + 1) % 3
	user := sc.nodes[(li+2)%3].srv.b.ID()
	for _, i := range []int{li, si} {
		console := sc.dial(i, sc.pki.MustCredentials(security.Identity{Role: security.RoleMaster, ID: sc.nodes[i].srv.b.ID()}), "")
		actx := security.FromPeer(security.OnBehalfOf(ctx, security.Identity{Role: security.RoleMaster, ID: user}), "192.0.2.7:4242")
		if _, err := console.AclGrant(actx, &adminpb.AclGrantRequest{Client: fmt.Sprintf("via-%d", i), Permission: "read"}); err != nil {
			t.Fatal(err)
		}
	}
	recs := auditOf(t, ctx, root)
	found := 0
	for _, r := range recs {
		if r.GetMethod() != "AclGrant" {
			continue
		}
		found++
		wantVia := ""
		if strings.Contains(r.GetArgs(), fmt.Sprintf(`"via-%d"`, si)) { // protojson's spacing varies
			wantVia = sc.nodes[si].srv.b.ID()
		}
		if r.GetPrincipal() != "master/"+user || r.GetVia() != wantVia || r.GetPeer() != "192.0.2.7:4242" {
			t.Errorf("record %s: principal %q via %q from %q; want master/%s via %q from 192.0.2.7:4242", r.GetArgs(), r.GetPrincipal(), r.GetVia(), r.GetPeer(), user, wantVia)
		}
	}
	if found != 2 {
		t.Fatalf("%d grant records, want 2:\n%s", found, auditText(recs))
	}
}
