package security

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/clock"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

var (
	master1 = Identity{RoleMaster, "m1"}
	master2 = Identity{RoleMaster, "m2"}
	rs1     = Identity{RoleRegionServer, "rs1"}
	alice   = Identity{RoleClient, "alice"}
)

func newPKI(t *testing.T) *TestPKI {
	t.Helper()
	p, err := NewTestPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestIdentityURIs(t *testing.T) {
	for _, id := range []Identity{master1, rs1, alice, {RoleClient, "ops.team_1-a"}} {
		u := id.URI()
		got, err := parseIdentityURI(u)
		if err != nil || got != id {
			t.Errorf("%s: parsed back as %+v, %v", u, got, err)
		}
	}
	for _, bad := range []string{"baton://admin/x", "baton://master/", "baton://master/a/b", "baton://master/-x", "baton://u@master/x", "baton://master/x?y=1"} {
		u, err := url.Parse(bad)
		if err != nil {
			t.Fatal(err)
		}
		if id, err := parseIdentityURI(u); err == nil {
			t.Errorf("%s accepted as %+v", bad, id)
		}
	}
	if err := (Identity{RoleMaster, strings.Repeat("a", 129)}).Validate(); err == nil {
		t.Error("a 129-character id is valid")
	}
}

func TestSignedCertificatesNameTheirIdentity(t *testing.T) {
	p := newPKI(t)
	for _, id := range []Identity{master1, rs1, alice} {
		c := p.MustCredentials(id)
		if c.Identity() != id {
			t.Errorf("loaded %s, want %s", c.Identity(), id)
		}
		info, err := os.Stat(c.files.Key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s: key mode %v, want 0600", id, info.Mode().Perm())
		}
	}
	if _, _, err := p.CA.Sign(CertRequest{Identity: master1, NotBefore: time.Now(), NotAfter: time.Now().Add(8 * 24 * time.Hour)}); err == nil {
		t.Error("a certificate outliving its CA was signed")
	}
	if _, _, err := p.CA.Sign(CertRequest{Identity: Identity{"admin", "x"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}); err == nil {
		t.Error("a certificate for an unknown role was signed")
	}
}

func TestLoadRefusesBadMaterial(t *testing.T) {
	p := newPKI(t)
	other := newPKI(t)
	good, err := p.Issue(master1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	expired, err := p.Issue(master2, -time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Issue(master1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]Files{
		"partial":        {CA: good.CA, Cert: good.Cert},
		"expired":        expired,
		"another CA":     {CA: good.CA, Cert: foreign.Cert, Key: foreign.Key},
		"mismatched key": {CA: good.CA, Cert: good.Cert, Key: expired.Key},
		"missing file":   {CA: good.CA, Cert: good.Cert + ".nope", Key: good.Key},
		"not a CA file":  {CA: good.Key, Cert: good.Cert, Key: good.Key},
	} {
		if _, err := Load(f, nil, nil); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

// handshake connects a client with cc to a server with sc and returns
// the client's and the server's handshake errors.
func handshake(t *testing.T, sc, cc *tls.Config) (clientErr, serverErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	_ = a.SetDeadline(deadline)
	_ = b.SetDeadline(deadline)
	done := make(chan error, 1)
	go func() {
		s := tls.Server(b, sc)
		err := s.Handshake()
		if err == nil {
			// TLS 1.3 checks the client's certificate after the client
			// thinks it is done: read so the client learns the verdict.
			_, err = s.Write([]byte{1})
		}
		s.Close()
		done <- err
	}()
	c := tls.Client(a, cc)
	clientErr = c.Handshake()
	if clientErr == nil {
		var buf [1]byte
		_, clientErr = io.ReadFull(c, buf[:])
	}
	c.Close()
	return clientErr, <-done
}

func TestHandshakeAdmitsOnlyItsRoles(t *testing.T) {
	p := newPKI(t)
	other := newPKI(t)
	m1, m2, rs, cl := p.MustCredentials(master1), p.MustCredentials(master2), p.MustCredentials(rs1), p.MustCredentials(alice)
	stranger := other.MustCredentials(master2)

	if ce, se := handshake(t, m1.ServerConfig(RoleMaster), m2.ClientConfig(RoleMaster)); ce != nil || se != nil {
		t.Fatalf("master to master: client %v, server %v", ce, se)
	}
	for name, cc := range map[string]*tls.Config{
		"region server":  rs.ClientConfig(RoleMaster),
		"client":         cl.ClientConfig(RoleMaster),
		"another CA":     stranger.ClientConfig(),
		"no certificate": {MinVersion: tls.VersionTLS13, InsecureSkipVerify: true},
	} {
		if _, se := handshake(t, m1.ServerConfig(RoleMaster), cc); se == nil {
			t.Errorf("%s admitted by a masters-only server", name)
		}
	}
	// The client side checks the server too: a region server posing as a
	// master, or a server of another CA.
	if ce, _ := handshake(t, rs.ServerConfig(), cl.ClientConfig(RoleMaster)); ce == nil {
		t.Error("a client accepted a region server as a master")
	}
	if ce, _ := handshake(t, stranger.ServerConfig(), cl.ClientConfig(RoleMaster)); ce == nil {
		t.Error("a client accepted a master of another CA")
	}
	tls12 := cl.ClientConfig(RoleMaster)
	tls12.MinVersion, tls12.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	if ce, _ := handshake(t, m1.ServerConfig(), tls12); ce == nil {
		t.Error("TLS 1.2 accepted")
	}
}

func TestReloadTakesNewMaterialAndKeepsGoodOnBad(t *testing.T) {
	p := newPKI(t)
	f, err := p.Issue(master1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(f, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := c.Reload(); changed || err != nil {
		t.Fatalf("unchanged files: changed %v, %v", changed, err)
	}
	first := c.NotAfter()
	if _, err := p.Issue(master1, 2*time.Hour); err != nil { // same paths
		t.Fatal(err)
	}
	if !c.Changed() {
		t.Fatal("rewritten files not seen as changed")
	}
	if changed, err := c.Reload(); !changed || err != nil {
		t.Fatalf("renewed certificate: changed %v, %v", changed, err)
	}
	if !c.NotAfter().After(first) {
		t.Errorf("not after %v, want later than %v", c.NotAfter(), first)
	}
	renewed := c.NotAfter()
	// A broken key file is refused and the renewed pair stays in use.
	if err := os.WriteFile(f.Key, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reload(); err == nil {
		t.Error("a garbage key reloaded")
	}
	if c.NotAfter() != renewed {
		t.Error("a failed reload replaced the material")
	}
	if ce, se := handshake(t, c.ServerConfig(), p.MustCredentials(alice).ClientConfig(RoleMaster)); ce != nil || se != nil {
		t.Errorf("after a failed reload: client %v, server %v", ce, se)
	}
	// Another identity at the same paths is refused.
	other, err := p.Issue(master2, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]string{{other.Cert, f.Cert}, {other.Key, f.Key}} {
		b, err := os.ReadFile(pair[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pair[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Reload(); err == nil || c.Identity() != master1 {
		t.Errorf("identity change: %v, now %s", err, c.Identity())
	}
}

func TestReloadTrustsARotatedCA(t *testing.T) {
	p := newPKI(t)
	srv := p.MustCredentials(master1)
	// A new CA replaces the old one on the server's side, and a client
	// of the new CA connects: the server takes the new roots for new
	// connections.
	next, err := NewTestPKI(p.Dir + "/next")
	if err != nil {
		t.Fatal(err)
	}
	cl := next.MustCredentials(alice)
	if _, se := handshake(t, srv.ServerConfig(), cl.ClientConfig()); se == nil {
		t.Fatal("a client of a CA not yet trusted was admitted")
	}
	b, err := os.ReadFile(next.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(p.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	// Both sides take a bundle of both CAs: the server's own certificate
	// is still signed by the old one, the client's by the new one.
	for _, c := range []*Credentials{srv, cl} {
		if err := os.WriteFile(c.files.CA, append(append([]byte{}, old...), b...), 0o600); err != nil {
			t.Fatal(err)
		}
		if changed, err := c.Reload(); !changed || err != nil {
			t.Fatalf("reload: %v %v", changed, err)
		}
	}
	if ce, se := handshake(t, srv.ServerConfig(), cl.ClientConfig()); se != nil {
		t.Errorf("after the rotation: client %v, server %v", ce, se)
	}
}

func TestRaftStreamLayerAdmitsOnlyMasters(t *testing.T) {
	p := newPKI(t)
	m1 := p.MustCredentials(master1)
	l, err := NewStreamLayer("127.0.0.1:0", nil, m1)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	addr := raft.ServerAddress(l.Addr().String())
	m2l, err := NewStreamLayer("127.0.0.1:0", nil, p.MustCredentials(master2))
	if err != nil {
		t.Fatal(err)
	}
	defer m2l.Close()
	conn, err := m2l.Dial(addr, 5*time.Second)
	if err != nil {
		t.Fatalf("master dialling a master: %v", err)
	}
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo %q, %v", buf, err)
	}
	conn.Close()

	for name, cfg := range map[string]*tls.Config{
		"region server": p.MustCredentials(rs1).ClientConfig(RoleMaster),
		"client":        p.MustCredentials(alice).ClientConfig(RoleMaster),
	} {
		c, err := tls.Dial("tcp", string(addr), cfg)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = c.Write([]byte("ping"))
			_, err = io.ReadFull(c, buf)
			c.Close()
		}
		if err == nil {
			t.Errorf("%s spoke Raft's transport", name)
		}
	}
	// Plaintext Raft traffic gets nothing back.
	c, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Write([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	if n, err := io.ReadFull(c, buf); err == nil {
		t.Errorf("plaintext: read %d bytes back", n)
	}
	c.Close()
}

func TestPolicy(t *testing.T) {
	p := newPKI(t)
	srvCreds := p.MustCredentials(master1)
	pol := (&Policy{}).Admit("/grpc.health.v1.Health/", RoleClient, RoleMaster)
	addr := serveHealth(t, "127.0.0.1", pol.ServerOptions(srvCreds)...)

	call := func(opt grpc.DialOption) error { return healthCheck(t, addr, opt) }
	if err := call(p.MustCredentials(alice).DialOption(RoleMaster)); err != nil {
		t.Errorf("client: %v", err)
	}
	if err := call(p.MustCredentials(rs1).DialOption(RoleMaster)); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "regionserver") {
		t.Errorf("region server: %v, want PermissionDenied naming its role", err)
	}
	if err := call(grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
		t.Error("plaintext client served")
	}
	if err := call(newPKI(t).MustCredentials(alice).DialOption()); err == nil {
		t.Error("client of another CA served")
	}
}

type fakeServerReq struct{ id string }

func (r fakeServerReq) GetServerId() string { return r.id }

func TestPolicySelf(t *testing.T) {
	pol := (&Policy{}).AdmitSelf("/baton.rs.Master/", RoleRegionServer).Admit("/baton.rs.Master/Peek", RoleMaster)
	for _, c := range []struct {
		caller Identity
		method string
		req    any
		code   codes.Code
	}{
		{rs1, "/baton.rs.Master/Heartbeat", fakeServerReq{"rs1"}, codes.OK},
		{rs1, "/baton.rs.Master/Heartbeat", fakeServerReq{"rs2"}, codes.PermissionDenied},
		{rs1, "/baton.rs.Master/Heartbeat", struct{}{}, codes.PermissionDenied},
		{alice, "/baton.rs.Master/Heartbeat", fakeServerReq{"alice"}, codes.PermissionDenied},
		{master1, "/baton.rs.Master/Peek", nil, codes.OK},
		{rs1, "/baton.rs.Master/Peek", fakeServerReq{"rs1"}, codes.PermissionDenied},
		{master1, "/other.Service/X", nil, codes.PermissionDenied},
	} {
		ctx := withTestCaller(c.caller)
		if got := status.Code(pol.check(ctx, c.method, c.req)); got != c.code {
			t.Errorf("%s calling %s with %+v: %v, want %v", c.caller, c.method, c.req, got, c.code)
		}
	}
	if err := pol.check(context.Background(), "/baton.rs.Master/Heartbeat", fakeServerReq{"rs1"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no peer: %v", err)
	}
}

// withTestCaller is a context whose gRPC peer presented a certificate
// naming id.
func withTestCaller(id Identity) context.Context {
	return WithTestPeer(context.Background(), nil, id)
}

func TestWatchReloadsChangedFiles(t *testing.T) {
	p := newPKI(t)
	f, err := p.Issue(master1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewManual(time.Now())
	c, err := Load(f, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	type outcome struct {
		changed bool
		err     error
	}
	var seen []outcome
	c.Watch(ctx, time.Second, func(changed bool, err error) { seen = append(seen, outcome{changed, err}) })
	clk.Advance(time.Second)
	if len(seen) != 0 {
		t.Fatalf("unchanged files reloaded: %v", seen)
	}
	first := c.NotAfter()
	if _, err := p.Issue(master1, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if len(seen) != 1 || !seen[0].changed || seen[0].err != nil || !c.NotAfter().After(first) {
		t.Fatalf("after a renewal: %v, not after %v (was %v)", seen, c.NotAfter(), first)
	}
	if err := os.WriteFile(f.Cert, []byte("broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if len(seen) != 2 || seen[1].err == nil {
		t.Fatalf("a broken file: %v", seen)
	}
	clk.Advance(time.Second)
	if len(seen) != 2 {
		t.Fatalf("the same broken file tried again: %v", seen)
	}
	cancel()
	clk.Advance(time.Second)
	if clk.Pending() != 0 {
		t.Errorf("%d timers left after the watch ended", clk.Pending())
	}
}

// TestRaftHandshakeHasADeadline: a connection to the Raft port that never
// completes its handshake (no certificate needed to open one) is closed
// once the handshake times out, and the raft reader sees an error.
func TestRaftHandshakeHasADeadline(t *testing.T) {
	p := newPKI(t)
	l, err := NewStreamLayer("127.0.0.1:0", nil, p.MustCredentials(master1))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.handshakeTimeout = 200 * time.Millisecond
	readErr := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			readErr <- err
			return
		}
		defer c.Close()
		_, err = c.Read(make([]byte, 1))
		readErr <- err
	}()
	silent, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("a silent connection's read succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a silent connection is still held after 10 s")
	}
}

// TestOwnCertificateNeedsPeersUsages: a certificate without the key usage
// peers will check it for (client auth; server auth too for masters and
// region servers) is refused at load, and a CA certificate offered as a
// peer's own is refused.
func TestOwnCertificateNeedsPeersUsages(t *testing.T) {
	p := newPKI(t)
	now := time.Now()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		URIs: []*url.URL{master1.URI()}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.CA.Cert, &key.PublicKey, p.CA.Key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := encodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f := Files{CA: p.CAFile, Cert: p.Dir + "/serveronly.pem", Key: p.Dir + "/serveronly-key.pem"}
	if err := WriteFiles(true, map[string][]byte{f.Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), f.Key: kb}); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(f, nil, nil); err == nil {
		t.Error("a master certificate without client auth loaded")
	}
}

// TestActingFor: a master's call may name the identity it is made for;
// nobody else's word is taken, and a malformed name is ignored.
func TestActingFor(t *testing.T) {
	with := func(caller Identity, vals ...string) context.Context {
		ctx := withTestCaller(caller)
		var kv []string
		for _, v := range vals {
			kv = append(kv, OnBehalfKey, v)
		}
		return metadata.NewIncomingContext(ctx, metadata.Pairs(kv...))
	}
	if id, ok := ActingFor(with(master1, "baton://client/alice")); !ok || id != alice {
		t.Errorf("a master for alice: %v %v", id, ok)
	}
	for name, ctx := range map[string]context.Context{
		"a client's word":    with(alice, "baton://client/bob"),
		"a region server's":  with(rs1, "baton://client/bob"),
		"malformed":          with(master1, "client/bob"),
		"an unknown role":    with(master1, "baton://admin/bob"),
		"two names":          with(master1, "baton://client/a", "baton://client/b"),
		"no name":            with(master1),
		"no caller identity": metadata.NewIncomingContext(context.Background(), metadata.Pairs(OnBehalfKey, "baton://client/bob")),
	} {
		if id, ok := ActingFor(ctx); ok {
			t.Errorf("%s: acting for %v", name, id)
		}
	}
	out := OnBehalfOf(context.Background(), alice)
	if md, _ := metadata.FromOutgoingContext(out); len(md.Get(OnBehalfKey)) != 1 {
		t.Errorf("OnBehalfOf: %v", md)
	}
}

// serveHealth serves gRPC health with opts on a free port of host until
// the test ends, and returns its address.
func serveHealth(t *testing.T, host string, opts ...grpc.ServerOption) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// healthCheck makes one gRPC health check of addr, dialled with opts, and
// returns its error.
func healthCheck(t *testing.T, addr string, opts ...grpc.DialOption) error {
	t.Helper()
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}
