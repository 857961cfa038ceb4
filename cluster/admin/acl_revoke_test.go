package admin

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// TestRevokeOfInitialGrantSticks: 'acl revoke' of a client bound by
// --acl-initial-grants holds: a standby stops honouring its own
// configuration for it, and no leader binds it again, on its ticks or
// after a failover; 'acl grant' gives it back. acl list says where each
// binding came from and which clients are revoked.
func TestRevokeOfInitialGrantSticks(t *testing.T) {
	sc, ctx, li, standby := startSecureTrio(t, Access{InitialGrants: map[string]security.Permission{"ops": security.PermAdmin, "reader": security.PermRead}}, 60*time.Second)
	ops := sc.as(li, "ops", "")
	reader := sc.as(standby, "reader", "")
	testwait.ForNil(t, 10*time.Second, "the initial grants bound", func() error {
		_, err := reader.ListProcedures(ctx, &adminpb.ListProceduresRequest{})
		return err
	})

	r, err := ops.AclRevoke(ctx, &adminpb.AclRevokeRequest{Client: "reader"})
	if err != nil || !r.GetExisted() {
		t.Fatalf("revoke reader: %v, %v", r, err)
	}
	// The leader's ticks (bootstrapACL) find reader unbound: a revoked
	// client is not theirs to bind.
	for _, n := range sc.nodes {
		n.srv.bootstrapACL(ctx)
	}
	testwait.For(t, 10*time.Second, "reader refused on the standby", func() bool {
		_, err := reader.ListProcedures(ctx, &adminpb.ListProceduresRequest{})
		return err != nil
	})
	_, err = reader.ListProcedures(ctx, &adminpb.ListProceduresRequest{})
	wantCode(t, "the revoked reader", err, codes.PermissionDenied, "client/reader holds no permission")

	l, err := sc.as(standby, "ops", "").AclList(ctx, &adminpb.AclListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.GetRevoked()) != 1 || l.GetRevoked()[0].GetClient() != "reader" || l.GetRevoked()[0].GetRevokedBy() != "client/ops" {
		t.Fatalf("revoked: %v; want reader, by client/ops", l.GetRevoked())
	}
	if len(l.GetBindings()) != 1 || l.GetBindings()[0].GetClient() != "ops" || l.GetBindings()[0].GetSource() != "initial-grants" {
		t.Fatalf("bindings: %v; want ops, from initial-grants", l.GetBindings())
	}

	// A new leader, whose configuration lists reader, leaves it revoked.
	sc.nodes[li].node.Kill()
	newLi := converged(t, []*testNode{sc.nodes[standby], sc.nodes[(li+2)%3]})
	nl := []int{standby, (li + 2) % 3}[newLi]
	sc.nodes[nl].srv.bootstrapACL(ctx)
	_, err = sc.as(nl, "reader", "").ListProcedures(ctx, &adminpb.ListProceduresRequest{})
	wantCode(t, "the revoked reader after a failover", err, codes.PermissionDenied, "client/reader holds no permission")

	// 'acl grant' gives it back, and clears the revocation.
	if _, err := sc.as(nl, "ops", "").AclGrant(ctx, &adminpb.AclGrantRequest{Client: "reader", Permission: "read"}); err != nil {
		t.Fatal(err)
	}
	testwait.ForNil(t, 10*time.Second, "reader granted again", func() error {
		_, err := sc.as(nl, "reader", "").ListProcedures(ctx, &adminpb.ListProceduresRequest{})
		return err
	})
	l, err = sc.as(nl, "ops", "").AclList(ctx, &adminpb.AclListRequest{})
	if err != nil || len(l.GetRevoked()) != 0 {
		t.Fatalf("revoked after the grant: %v, %v; want none", l.GetRevoked(), err)
	}
	for _, b := range l.GetBindings() {
		if want := map[string]string{"ops": "initial-grants", "reader": "grant"}[b.GetClient()]; b.GetSource() != want {
			t.Errorf("binding %s: source %q, want %q", b.GetClient(), b.GetSource(), want)
		}
	}
}

// TestTokenTTLAndLastUse: a token made with a TTL (and the bootstrap token,
// under BootstrapTokenTTL) is refused UNAUTHENTICATED once it expires,
// saying so; acl list shows each token's expiry and last use, which the
// leader records.
func TestTokenTTLAndLastUse(t *testing.T) {
	clk := clock.NewManual(time.Now().Truncate(time.Second))
	sc, ctx, li, standby := startSecureTrio(t, Access{Clock: clk, BootstrapTokenTTL: 24 * time.Hour, InitialGrants: map[string]security.Permission{"ops": security.PermAdmin}}, 60*time.Second)
	ops := sc.as(standby, "ops", "")
	testwait.ForNil(t, 10*time.Second, "ops bound", func() error {
		_, err := ops.AclList(ctx, &adminpb.AclListRequest{})
		return err
	})

	_, err := ops.AclCreateToken(ctx, &adminpb.AclCreateTokenRequest{Name: "ci", Permission: "read", TtlMs: -1})
	wantCode(t, "a negative ttl", err, codes.InvalidArgument, "ttl_ms")
	tr, err := ops.AclCreateToken(ctx, &adminpb.AclCreateTokenRequest{Name: "ci", Permission: "read", TtlMs: time.Hour.Milliseconds()})
	if err != nil {
		t.Fatal(err)
	}
	made := clk.Now()
	if got := tr.GetToken().GetExpiresUnixMs(); got != made.Add(time.Hour).UnixMilli() {
		t.Fatalf("expires %d, want an hour after %v", got, made)
	}
	ci := sc.as(standby, "stranger", tr.GetSecret())
	if _, err := ci.ListProcedures(ctx, &adminpb.ListProceduresRequest{}); err != nil {
		t.Fatalf("the token within its TTL: %v", err)
	}
	if _, err := ci.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep"}); err == nil {
		t.Fatal("a read token submitted")
	}

	acc := tr.GetToken().GetAccessor()
	testwait.ForNil(t, 10*time.Second, "the token's last use recorded", func() error {
		l, err := sc.as(li, "ops", "").AclList(ctx, &adminpb.AclListRequest{})
		if err != nil {
			return err
		}
		for _, tok := range l.GetTokens() {
			switch {
			case tok.GetAccessor() == acc && tok.GetLastUsedUnixMs() != made.UnixMilli():
				return fmt.Errorf("token %s last used %d, want %d", acc, tok.GetLastUsedUnixMs(), made.UnixMilli())
			case tok.GetName() == "bootstrap" && tok.GetExpiresUnixMs() == 0:
				return fmt.Errorf("the bootstrap token never expires, despite BootstrapTokenTTL")
			}
		}
		return nil
	})

	clk.Advance(time.Hour)
	_, err = ci.ListProcedures(ctx, &adminpb.ListProceduresRequest{})
	wantCode(t, "the token past its TTL", err, codes.Unauthenticated, "token "+acc+" (ci) expired at "+made.Add(time.Hour).UTC().Format(time.RFC3339))
	_, err = sc.as(li, "stranger", tr.GetSecret()).ListProcedures(ctx, &adminpb.ListProceduresRequest{})
	wantCode(t, "the token past its TTL, on the leader", err, codes.Unauthenticated, "expired")
	clk.Advance(23 * time.Hour)
	sc.mu.Lock()
	boot := sc.boots[0]
	sc.mu.Unlock()
	_, err = sc.as(li, "stranger", boot).ListProcedures(ctx, &adminpb.ListProceduresRequest{})
	wantCode(t, "the bootstrap token past its TTL", err, codes.Unauthenticated, "(bootstrap) expired")
}
