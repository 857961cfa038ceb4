package admin

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// certless is an admin client of node i that presents no certificate
// (the CA alone, as `--tls-ca` without `--tls-cert`), with token if not
// empty.
func (sc *secureCluster) certless(i int, token string) adminpb.AdminClient {
	sc.t.Helper()
	creds, err := security.LoadClient(security.Files{CA: sc.pki.CAFile}, nil, nil)
	if err != nil {
		sc.t.Fatal(err)
	}
	return sc.dial(i, creds, token)
}

// opsToken waits for ops's initial grant and makes a token of perm.
func opsToken(t *testing.T, ctx context.Context, ops adminpb.AdminClient, perm string) (secret, accessor string) {
	t.Helper()
	testwait.For(t, 10*time.Second, "ops bound to admin", func() bool {
		r, err := ops.WhoAmI(ctx, &adminpb.WhoAmIRequest{})
		return err == nil && r.GetPermission() == "admin"
	})
	tr, err := ops.AclCreateToken(ctx, &adminpb.AclCreateTokenRequest{Name: "ci", Permission: perm})
	if err != nil {
		t.Fatalf("create token: %v", err)
	}
	return tr.GetSecret(), tr.GetToken().GetAccessor()
}

// TestClientAuthEitherTakesATokenWithoutACertificate: under
// --client-auth either a client with the CA alone and a token is judged
// by the token, through a standby as at the leader; without a token it is
// told what to give; the masters' own methods and what only a master's
// word is taken for stay out of its reach; certificates work as before.
func TestClientAuthEitherTakesATokenWithoutACertificate(t *testing.T) {
	sc := startSecureCluster(t, 3, Access{ClientAuth: security.ClientAuthEither, InitialGrants: map[string]security.Permission{"ops": security.PermAdmin}})
	li := converged(t, sc.nodes)
	standby := (li + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ops := sc.as(standby, "ops", "")
	secret, acc := opsToken(t, ctx, ops, "operate")

	for _, i := range []int{li, standby} {
		ci := sc.certless(i, secret)
		who, err := ci.WhoAmI(ctx, &adminpb.WhoAmIRequest{})
		if err != nil || who.GetPrincipal() != "token/"+acc || who.GetPermission() != "operate" {
			t.Fatalf("node %d: whoami with a token and no certificate: %v, %v", i, who, err)
		}
		if _, err := ci.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}}); err != nil {
			t.Fatalf("node %d: operate token submits: %v", i, err)
		}
		_, err = ci.AbortProcedure(ctx, &adminpb.ProcedureRef{Id: 1})
		wantCode(t, "operate token aborts", err, codes.PermissionDenied, "needs permission admin", "token/"+acc+" holds permission operate")

		// Neither certificate nor token: told which flags to give.
		_, err = sc.certless(i, "").WhoAmI(ctx, &adminpb.WhoAmIRequest{})
		wantCode(t, "no certificate, no token", err, codes.Unauthenticated,
			"no client certificate and no token: give --token or BATON_TOKEN, or a client certificate with --tls-cert/--tls-key")
		// A token not recognized is refused as with a certificate.
		_, err = sc.certless(i, "bt_"+acc+"_"+strings.Repeat("A", 43)).WhoAmI(ctx, &adminpb.WhoAmIRequest{})
		wantCode(t, "wrong secret", err, codes.Unauthenticated, "not recognized")
		// The masters' own methods need a master's certificate.
		_, err = ci.RegisterNode(ctx, &adminpb.RegisterNodeRequest{Id: "m0", AdminAddress: "10.9.9.9:1"})
		wantCode(t, "a token registers a master's address", err, codes.Unauthenticated, "needs one whatever token")
		_, err = ci.AppendAudit(ctx, &adminpb.AppendAuditRequest{Records: []*adminpb.AuditRecord{{Method: "DeleteTable", Principal: "client/someone-else"}}})
		wantCode(t, "a token forges an audit record", err, codes.Unauthenticated, "needs one whatever token")
	}

	// What a master's word is taken for, said by a certless caller: a
	// client to act as, the standby it came through, the address.
	forged := metadata.AppendToOutgoingContext(ctx, principalKey, "client/ops", security.OnBehalfKey, "baton://client/ops",
		forwardedKey, "m9", peerKey, "203.0.113.9:1")
	ci := sc.certless(li, secret)
	if who, err := ci.WhoAmI(forged, &adminpb.WhoAmIRequest{}); err != nil || who.GetPrincipal() != "token/"+acc {
		t.Fatalf("whoami with a forged principal: %v, %v; want the token's", who, err)
	}
	_, err := ci.AclList(forged, &adminpb.AclListRequest{})
	wantCode(t, "a forged principal reads the ACL", err, codes.PermissionDenied, "token/"+acc+" holds permission operate")
	if _, err := ci.SubmitProcedure(forged, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}, Owner: "forger"}); err != nil {
		t.Fatalf("submit with forged marks: %v", err)
	}
	var rec *adminpb.AuditRecord
	for _, r := range auditOf(t, ctx, ops) {
		if r.GetMethod() == "SubmitProcedure" && strings.Contains(r.GetArgs(), "forger") {
			rec = r
		}
	}
	if rec == nil || rec.GetPrincipal() != "token/"+acc || rec.GetVia() != "" || strings.Contains(rec.GetPeer(), "203.0.113.9") {
		t.Fatalf("the forged call's audit record: %v; want the token's, with no via and its real address", rec)
	}

	// A certificate is taken as before.
	if who, err := ops.WhoAmI(ctx, &adminpb.WhoAmIRequest{}); err != nil || who.GetPrincipal() != "client/ops" || who.GetPermission() != "admin" {
		t.Fatalf("ops's certificate under either: %v, %v", who, err)
	}
}

// TestClientAuthTokenIgnoresClientCertificates: under --client-auth
// token a client's certificate names it but grants nothing; its token
// decides.
func TestClientAuthTokenIgnoresClientCertificates(t *testing.T) {
	sc := startSecureCluster(t, 1, Access{ClientAuth: security.ClientAuthToken, InitialGrants: map[string]security.Permission{"ops": security.PermAdmin}})
	converged(t, sc.nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var boot string
	testwait.For(t, 10*time.Second, "the bootstrap token told", func() bool {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		if len(sc.boots) > 0 {
			boot = sc.boots[0]
		}
		return boot != ""
	})
	_, err := sc.as(0, "ops", "").WhoAmI(ctx, &adminpb.WhoAmIRequest{})
	wantCode(t, "ops's certificate alone", err, codes.Unauthenticated, "client/ops presented a client certificate without a token", "--client-auth token")
	if who, err := sc.as(0, "ops", boot).WhoAmI(ctx, &adminpb.WhoAmIRequest{}); err != nil || who.GetPermission() != "admin" || !strings.HasPrefix(who.GetPrincipal(), "token/") {
		t.Fatalf("certificate and token: %v, %v", who, err)
	}
	if who, err := sc.certless(0, boot).WhoAmI(ctx, &adminpb.WhoAmIRequest{}); err != nil || who.GetPermission() != "admin" {
		t.Fatalf("token alone: %v, %v", who, err)
	}
	_, err = sc.certless(0, "").WhoAmI(ctx, &adminpb.WhoAmIRequest{})
	wantCode(t, "nothing", err, codes.Unauthenticated, "no token: give --token or BATON_TOKEN")
}

// TestCertlessCallersMarksAreNotBelieved: a call over TLS without a
// certificate is no master's: its forwarded mark neither spares it the
// rate limit nor names the standby or address of its audit record.
func TestCertlessCallersMarksAreNotBelieved(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5}
	md := metadata.Pairs(forwardedKey, "m9", peerKey, "203.0.113.9:1")
	certless := peer.NewContext(metadata.NewIncomingContext(context.Background(), md),
		&peer.Peer{Addr: addr, AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{}}})
	tok := context.WithValue(certless, principalCtxKey{}, access.Principal{Kind: access.KindToken, ID: "0123456789abcdef"})
	if who, limited := callerKey(tok); !limited || who != "token/0123456789abcdef" {
		t.Errorf("rate limit key of a certless token caller with a forwarded mark: %q, %v", who, limited)
	}
	if p, via := callOrigin(certless); p != addr.String() || via != "" {
		t.Errorf("origin of a certless call: %q via %q; want %s, no via", p, via, addr)
	}
	// A master's word is taken: by its certificate, or in plaintext by
	// the cluster secret; a plaintext call without it is its own.
	master := security.WithTestPeer(metadata.NewIncomingContext(context.Background(), md), addr, security.Identity{Role: security.RoleMaster, ID: "m9"})
	if p, via := callOrigin(master); p != "203.0.113.9:1" || via != "m9" {
		t.Errorf("origin of a master's call: %q via %q", p, via)
	}
	plain := func(s *Server, secret string) context.Context {
		md := metadata.Join(md, metadata.Pairs(security.ClusterSecretKey, secret))
		return s.proveRelay(peer.NewContext(metadata.NewIncomingContext(context.Background(), md), &peer.Peer{Addr: addr}))
	}
	withSecret := &Server{cfg: Config{ClusterSecret: "the-cluster-secret"}}
	if p, via := callOrigin(plain(withSecret, "the-cluster-secret")); p != "203.0.113.9:1" || via != "m9" {
		t.Errorf("origin of a plaintext call with the cluster secret: %q via %q", p, via)
	}
	for _, wrong := range []string{"", "the-cluster-secreT", "the-cluster-secret-and-more"} {
		if p, via := callOrigin(plain(withSecret, wrong)); p != addr.String() || via != "" {
			t.Errorf("origin of a plaintext call with secret %q: %q via %q; want %s, no via", wrong, p, via, addr)
		}
	}
	if p, via := callOrigin(plain(&Server{}, "the-cluster-secret")); p != addr.String() || via != "" {
		t.Errorf("origin of a plaintext call to a master without a secret: %q via %q; want its own", p, via)
	}
}
