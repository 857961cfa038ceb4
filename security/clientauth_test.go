package security

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// caOnly loads p's CA alone, as a client known by a token does.
func caOnly(t *testing.T, p *TestPKI) *Credentials {
	t.Helper()
	c, err := LoadClient(Files{CA: p.CAFile}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.HasCertificate() {
		t.Fatal("CA-only credentials claim a certificate")
	}
	return c
}

func TestLoadClientNeedsTheCAAndBothOrNeitherOfCertAndKey(t *testing.T) {
	for _, c := range []struct {
		f    Files
		want string
	}{
		{Files{Cert: "c.pem", Key: "k.pem"}, "--tls-ca is needed"},
		{Files{CA: "ca.pem", Cert: "c.pem"}, "--tls-cert without --tls-key"},
		{Files{CA: "ca.pem", Key: "k.pem"}, "--tls-key without --tls-cert"},
	} {
		if _, err := LoadClient(c.f, nil, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.f, err, c.want)
		}
	}
}

func TestCertOptionalServerChecksWhatIsPresented(t *testing.T) {
	p := newPKI(t)
	m1 := p.MustCredentials(master1)
	// No certificate: through the handshake, where the server allows it.
	if ce, se := handshake(t, m1.ServerConfigCertOptional(RoleClient, RoleMaster), caOnly(t, p).ClientConfig(RoleMaster)); ce != nil || se != nil {
		t.Fatalf("CA-only client, certificate optional: client %v, server %v", ce, se)
	}
	if _, se := handshake(t, m1.ServerConfig(RoleClient, RoleMaster), caOnly(t, p).ClientConfig(RoleMaster)); se == nil {
		t.Error("a CA-only client got through a server that requires a certificate")
	}
	// A certificate presented is still checked: another CA's, a role not
	// admitted.
	if _, se := handshake(t, m1.ServerConfigCertOptional(RoleClient, RoleMaster), newPKI(t).MustCredentials(alice).ClientConfig()); se == nil {
		t.Error("a certificate of another CA admitted where certificates are optional")
	}
	if _, se := handshake(t, m1.ServerConfigCertOptional(RoleClient, RoleMaster), p.MustCredentials(rs1).ClientConfig()); se == nil {
		t.Error("a region server's certificate admitted by a server of clients and masters")
	}
	// The CA-only client checks the server as any client does.
	if ce, _ := handshake(t, newPKI(t).MustCredentials(master1).ServerConfigCertOptional(), caOnly(t, p).ClientConfig(RoleMaster)); ce == nil {
		t.Error("a CA-only client accepted a master of another CA")
	}
}

func TestMasterPolicyForTokens(t *testing.T) {
	if MasterPolicy().CertOptional() || MasterPolicyFor(ClientAuthCert).CertOptional() {
		t.Fatal("certificate-only policy admits callers without one")
	}
	pol := MasterPolicyFor(ClientAuthEither, "RegisterNode")
	if !pol.CertOptional() {
		t.Fatal("either: no call admitted without a certificate")
	}
	none := context.Background()
	withTok := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer bt_x"))
	for _, c := range []struct {
		ctx    context.Context
		method string
		code   codes.Code
		msg    string
	}{
		{withTok, AdminService + "WhoAmI", codes.OK, ""},
		{none, AdminService + "WhoAmI", codes.Unauthenticated, "no client certificate and no token: give --token or BATON_TOKEN, or a client certificate with --tls-cert/--tls-key"},
		{withTok, AdminService + "RegisterNode", codes.Unauthenticated, "needs one whatever token"},
		{withTok, MasterService + "Heartbeat", codes.Unauthenticated, "needs one whatever token"},
		{none, HealthService + "Check", codes.OK, ""},
		{withTok, ReflectionService + "v1.ServerReflection/ServerReflectionInfo", codes.Unauthenticated, "no baton certificate"},
	} {
		err := pol.check(c.ctx, c.method, nil)
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.msg) {
			t.Errorf("%s: %v, want %v %q", c.method, err, c.code, c.msg)
		}
	}
	if err := MasterPolicyFor(ClientAuthToken).check(none, AdminService+"WhoAmI", nil); !strings.Contains(status.Convert(err).Message(), "no token: give --token or BATON_TOKEN (this cluster authenticates clients by token only") {
		t.Errorf("token: %v", err)
	}
	// Callers with certificates are judged as before.
	if err := pol.check(withTestCaller(alice), AdminService+"RegisterNode", nil); err != nil {
		t.Errorf("client certificate calling RegisterNode stopped by the identity policy (access control refuses it): %v", err)
	}
	if err := pol.check(withTestCaller(rs1), AdminService+"WhoAmI", nil); status.Code(err) != codes.PermissionDenied {
		t.Errorf("region server calling the admin API: %v", err)
	}
}

// TestCAOnlyClientOverGRPC is what `--tls-ca` alone meets: served where
// certificates are optional, and against a server that requires one a
// handshake error the CLI turns into advice.
func TestCAOnlyClientOverGRPC(t *testing.T) {
	p := newPKI(t)
	srv := p.MustCredentials(master1)
	serve := func(pol *Policy) string { return serveHealth(t, "127.0.0.1", pol.ServerOptions(srv)...) }
	call := func(addr string) error { return healthCheck(t, addr, caOnly(t, p).DialOption(RoleMaster)) }
	either, cert := serve(MasterPolicyFor(ClientAuthEither)), serve(MasterPolicy())
	if err := call(either); err != nil {
		t.Errorf("either: %v", err)
	}
	ctx := context.Background()
	// The alert may reach gRPC, or be lost to the reset that follows the
	// preface it wrote; asked without writing, the server says it.
	if err := call(cert); err == nil || !IsCertificateRequired(err) && !caOnly(t, p).CertificateRequired(ctx, cert, 10*time.Second, RoleMaster) {
		t.Errorf("cert: %v, want the server's certificate-required refusal", err)
	}
	if caOnly(t, p).CertificateRequired(ctx, either, 300*time.Millisecond, RoleMaster) {
		t.Error("a server with certificates optional said to require one")
	}
	if p.MustCredentials(alice).CertificateRequired(ctx, cert, 300*time.Millisecond, RoleMaster) {
		t.Error("a client with a certificate told it needs one")
	}
}
