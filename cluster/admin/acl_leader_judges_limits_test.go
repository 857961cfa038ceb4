package admin

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// TestStandbyRefusalsAreLimitedWhereTheyCameIn: the change limit bounds a
// caller's refusals at every master (change_limit.go: "no caller, known
// or not, makes records faster than its bucket refills"). A flood of
// refusals sent to a standby must be answered RESOURCE_EXHAUSTED past
// the burst, as it is at the leader (TestChangeRateLimit).
func TestStandbyRefusalsAreLimitedWhereTheyCameIn(t *testing.T) {
	const burst = 4
	sc, li, ctx, _ := startRootCluster(t, Access{ChangeLimit: RateLimit{Rate: MinSubmitRate, Burst: burst}})
	si := (li + 1) % 3
	mallory := sc.as(si, "mallory", "")
	var limited int
	for i := range 3 * burst {
		_, err := mallory.DeleteTable(ctx, &adminpb.TableRequest{Name: "t"})
		switch status.Code(err) {
		case codes.ResourceExhausted:
			limited++
		case codes.PermissionDenied:
		default:
			t.Fatalf("mallory's refused call %d at the standby: %v", i, err)
		}
	}
	if limited == 0 {
		t.Errorf("client/mallory: %d refusals at the standby, none RESOURCE_EXHAUSTED (burst %d): the change limit does not bound refusals at a standby", 3*burst, burst)
	}
}

// TestStandbyUnknownTokensAreLimitedWhereTheyCameIn: the same for anyone with a
// made-up, well-formed token (no grant needed, only a certificate here;
// none with --client-auth token/either or in plaintext).
func TestStandbyUnknownTokensAreLimitedWhereTheyCameIn(t *testing.T) {
	const burst = 4
	sc, li, ctx, _ := startRootCluster(t, Access{ChangeLimit: RateLimit{Rate: MinSubmitRate, Burst: burst}})
	si := (li + 1) % 3
	var limited int
	for i := range 3 * burst {
		tok, _, _, err := security.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		c := sc.dial(si, sc.pki.MustCredentials(security.Identity{Role: security.RoleClient, ID: "nobody"}), tok)
		_, err = c.ListProcedures(ctx, &adminpb.ListProceduresRequest{})
		switch status.Code(err) {
		case codes.ResourceExhausted:
			limited++
		case codes.Unauthenticated:
		default:
			t.Fatalf("made-up token %d at the standby: %v", i, err)
		}
	}
	if limited == 0 {
		t.Errorf("%d made-up tokens at the standby, none RESOURCE_EXHAUSTED (burst %d)", 3*burst, burst)
	}
}

// TestResponseOfEveryUnaryAdminMethod: every unary admin method (the
// gateway's included) has a response found by name, of the output type.
func TestResponseOfEveryUnaryAdminMethod(t *testing.T) {
	ms := adminService.Methods()
	n := 0
	for i := range ms.Len() {
		md := ms.Get(i)
		full := "/" + string(adminService.FullName()) + "/" + string(md.Name())
		out, ok := responseOf(string(md.Name()))
		if md.IsStreamingClient() || md.IsStreamingServer() {
			if ok {
				t.Errorf("%s streams, but responseOf gave %T", full, out)
			}
			continue
		}
		if !ok || out.ProtoReflect().Descriptor().FullName() != md.Output().FullName() {
			t.Errorf("%s: responseOf %v, %v; want a %s", full, out, ok, md.Output().FullName())
		}
		if !strings.HasPrefix(full, security.AdminService) {
			t.Errorf("%s is not under %s", full, security.AdminService)
		}
		n++
	}
	if n < 40 {
		t.Errorf("only %d unary methods checked", n)
	}
	// The interceptor passes the short name of an admin method.
	for _, bad := range []string{"", "/", "Nope", security.AdminService + "ListProcedures"} {
		if out, ok := responseOf(bad); ok {
			t.Errorf("responseOf(%q) = %T", bad, out)
		}
	}
}

// TestStandbyRefusesItselfWhenTheLeaderIsUnreachable: the leader's admin
// server down (Raft still leading), a refusal at a standby is answered
// at once, as before, not UNAVAILABLE.
func TestStandbyRefusesItselfWhenTheLeaderIsUnreachable(t *testing.T) {
	sc, li, ctx, _ := startRootCluster(t, Access{})
	si := (li + 1) % 3
	mallory := sc.as(si, "mallory", "")
	_, err := mallory.ListProcedures(ctx, &adminpb.ListProceduresRequest{})
	wantCode(t, "mallory's list at the standby, leader up", err, codes.PermissionDenied)
	sc.nodes[li].srv.Stop(ctx)
	_, err = mallory.ListProcedures(ctx, &adminpb.ListProceduresRequest{})
	wantCode(t, "mallory's list at the standby, leader's admin server down", err, codes.PermissionDenied, "client/mallory holds no permission")
}

// TestUnknownTokenRefusalNamesTheCertificateAtEveryMaster: a token no master knows,
// with a client certificate, is recorded naming the certificate (resolve:
// "A token malformed or not verified: the record names the certificate"),
// at a standby as at the leader.
func TestUnknownTokenRefusalNamesTheCertificateAtEveryMaster(t *testing.T) {
	sc, li, ctx, root := startRootCluster(t, Access{})
	for _, i := range []int{li, (li + 1) % 3} {
		tok, _, _, err := security.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		c := sc.dial(i, sc.pki.MustCredentials(security.Identity{Role: security.RoleClient, ID: "eve" + string(rune('0'+i))}), tok)
		_, err = c.ListProcedures(ctx, &adminpb.ListProceduresRequest{})
		wantCode(t, "made-up token", err, codes.Unauthenticated)
	}
	got := map[string]bool{}
	for _, r := range auditOf(t, ctx, root) {
		if r.GetMethod() == "ListProcedures" && r.GetRefused() {
			got[r.GetPrincipal()] = true
		}
	}
	for _, i := range []int{li, (li + 1) % 3} {
		if p := "client/eve" + string(rune('0'+i)); !got[p] {
			t.Errorf("no refusal recorded naming %s (node %d); refusals of ListProcedures name %v", p, i, got)
		}
	}
}
