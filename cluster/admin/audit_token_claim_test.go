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
