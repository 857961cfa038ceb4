package regionserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/reqlimit"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/security"
)

// secureRS is a region server over mutual TLS against fake masters, and
// callers of it by identity.
type secureRS struct {
	t   *testing.T
	pki *security.TestPKI
	fc  *fakeCluster
	s   *Server
	sc  uint64
}

func startSecureRS(t *testing.T, grants *rspb.AccessGrants, tweak func(*Config)) *secureRS {
	t.Helper()
	pki, err := security.NewTestPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	master := pki.MustCredentials(security.Identity{Role: security.RoleMaster, ID: "m1"})
	fc, addrs := newFakeCluster(t, 1, 60_000, security.MasterPolicy().ServerOptions(master)...)
	fc.setAccess(grants)
	cfg := testConfig(addrs...)
	cfg.TLS = pki.MustCredentials(security.Identity{Role: security.RoleRegionServer, ID: "rs1"})
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.HeartbeatInterval = fastHeartbeats
	if tweak != nil {
		tweak(&cfg)
	}
	s, sc := startServer(t, cfg)
	return &secureRS{t: t, pki: pki, fc: fc, s: s, sc: sc}
}

// call makes a ListRegions and a GET /metrics as id, with token if not
// empty, and returns the gRPC status code and the HTTP status.
func (r *secureRS) call(id security.Identity, token string) (codes.Code, int, string) {
	r.t.Helper()
	cr := r.pki.MustCredentials(id)
	opts := []grpc.DialOption{cr.DialOption(security.RoleRegionServer)}
	if token != "" {
		opts = append(opts, security.TokenDialOption(token))
	}
	cc, err := grpc.NewClient(r.s.Addr(), opts...)
	if err != nil {
		r.t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = rspb.NewRegionServerClient(cc).ListRegions(ctx, &rspb.ListRegionsRequest{})
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cr.ClientConfig(security.RoleRegionServer)}}
	req, _ := http.NewRequest(http.MethodGet, "https://"+r.s.HTTPAddr()+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, herr := hc.Do(req)
	if herr != nil {
		r.t.Fatal(herr)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return status.Code(err), resp.StatusCode, status.Convert(err).Message() + " | " + string(body)
}

var (
	opsClient = security.Identity{Role: security.RoleClient, ID: "ops"}
	aMaster   = security.Identity{Role: security.RoleMaster, ID: "m1"}
)

// want checks what id is answered, waiting for it (grants arrive with
// heartbeats).
func (r *secureRS) want(id security.Identity, token string, code codes.Code, httpStatus int, says string) {
	r.t.Helper()
	testwait.ForNil(r.t, 10*time.Second, fmt.Sprintf("%s answered %v and HTTP %d", id, code, httpStatus), func() error {
		c, h, msg := r.call(id, token)
		if c != code || h != httpStatus || !strings.Contains(msg, says) {
			return fmt.Errorf("answered %v and HTTP %d: %s", c, h, msg)
		}
		return nil
	})
}

// TestRegionServerFailsClosedWithoutGrants: a region server told no
// grants (a master older than them) refuses clients UNAVAILABLE, saying
// why, and serves masters all the same: their batches and reads.
func TestRegionServerFailsClosedWithoutGrants(t *testing.T) {
	r := startSecureRS(t, nil, nil)
	r.want(opsClient, "", codes.Unavailable, http.StatusServiceUnavailable, "older than this region server")
	r.want(aMaster, "", codes.OK, http.StatusOK, "")
	cc, err := grpc.NewClient(r.s.Addr(), r.pki.MustCredentials(aMaster).DialOption(security.RoleRegionServer))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := rspb.NewRegionServerClient(cc).ExecuteBatch(context.Background(), &rspb.BatchRequest{
		Term: r.fc.currentTerm(), ServerId: "rs1", StartCode: r.sc, Ops: ops(opOpen, "r1")})
	if err != nil || !resp.GetResults()[0].GetOk() {
		t.Fatalf("a master's open without grants: %v %v", resp, err)
	}
}

// TestRegionServerAppliesGrants: the grants the masters tell decide, and
// a change reaches the server at a heartbeat (sent only when its version
// differs from the one the server holds); tokens are refused; grants no
// master confirmed for a self-fence period are not used.
func TestRegionServerAppliesGrants(t *testing.T) {
	read := &rspb.AccessGrants{Version: 5, Enforced: true, Clients: []*rspb.ClientGrant{{Client: "ops", Permission: "read"}}}
	r := startSecureRS(t, read, func(c *Config) { c.SelfFenceAfter = 2 * time.Second })
	r.want(opsClient, "", codes.OK, http.StatusOK, "")
	r.want(security.Identity{Role: security.RoleClient, ID: "nobody"}, "", codes.PermissionDenied, http.StatusForbidden, "needs permission read; client/nobody holds no permission")
	r.want(opsClient, "bt_0123456789abcdef_"+strings.Repeat("A", 43), codes.Unauthenticated, http.StatusUnauthorized, "region servers take no bearer tokens")

	r.fc.setAccess(&rspb.AccessGrants{Version: 6, Enforced: true})
	r.want(opsClient, "", codes.PermissionDenied, http.StatusForbidden, "client/ops holds no permission")
	// The heartbeat that brought version 6 quoted 5; the next quotes 6.
	testwait.For(t, 10*time.Second, "a heartbeat quoting access version 6", func() bool {
		_, hbs, _ := r.fc.snapshot()
		return len(hbs) > 0 && hbs[len(hbs)-1].req.GetAccessVersion() == 6
	})

	r.fc.setAccess(&rspb.AccessGrants{Version: 7, Enforced: false})
	r.want(security.Identity{Role: security.RoleClient, ID: "nobody"}, "", codes.OK, http.StatusOK, "")

	// No leader: every call to the masters fails, registrations too.
	r.fc.setLeader("")
	r.want(opsClient, "", codes.Unavailable, http.StatusServiceUnavailable, "no master has confirmed them since")
	r.want(aMaster, "", codes.OK, http.StatusOK, "")
}

// A refused caller chooses its HTTP path, which decoded may hold control
// characters, bytes that are not UTF-8, and any length: the report must
// still pass the leader's limits, or the heartbeat carrying it, and the
// server's lease with it, would be refused.
func TestRefusalReportFitsTheHeartbeatLimits(t *testing.T) {
	s := &Server{clk: clock.Real{}}
	path := "/metrics/\x1b[31m\xff\n" + strings.Repeat("é", 5000)
	rep := s.refusalReport(security.Identity{Role: security.RoleClient, ID: "x\x1by"}, path, "127.0.0.1:1",
		status.Error(codes.PermissionDenied, "refused "+path))
	if err := reqlimit.Check(&rspb.HeartbeatRequest{ServerId: "rs1", Refusals: []*rspb.RefusalReport{rep}}); err != nil {
		t.Fatalf("a heartbeat carrying the report is refused: %v", err)
	}
}

// A server of another build may escape less than this one: its raw
// report must not get its heartbeat refused (the leader escapes what it
// records).
func TestUnescapedRefusalReportStillFitsTheHeartbeat(t *testing.T) {
	raw := &rspb.RefusalReport{Caller: "client/x\x1b", Method: "HTTP /\u202e\n", Code: "PermissionDenied", Message: "\x1b[31m", Peer: "1.2.3.4:5"}
	if err := reqlimit.Check(&rspb.HeartbeatRequest{ServerId: "rs1", Refusals: []*rspb.RefusalReport{raw}}); err != nil {
		t.Fatalf("a heartbeat carrying an unescaped report is refused: %v", err)
	}
}

// TestProbesWithoutClientCertificate: under TLS a caller with no client
// certificate (a kubelet's HTTPS probe: no certificate, no CA check) gets
// /readyz and /livez, and nothing else (401, a refusal counted as the
// access control's); a certificate of another CA is still refused at the
// handshake; a client with read still gets /metrics.
func TestProbesWithoutClientCertificate(t *testing.T) {
	read := &rspb.AccessGrants{Version: 5, Enforced: true, Clients: []*rspb.ClientGrant{{Client: "ops", Permission: "read"}}}
	r := startSecureRS(t, read, nil)
	kubelet := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(hc *http.Client, path string) (int, string, error) {
		resp, err := hc.Get("https://" + r.s.HTTPAddr() + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), nil
	}
	testwait.ForNil(t, 10*time.Second, "/readyz 200 without a certificate", func() error {
		if code, body, err := get(kubelet, "/readyz"); err != nil || code != http.StatusOK || body != "ready\n" { // the verdict only, without a certificate
			return fmt.Errorf("/readyz = %d %q, %v", code, body, err)
		}
		return nil
	})
	if code, body, err := get(kubelet, "/livez"); err != nil || code != http.StatusOK || body != "alive\n" {
		t.Fatalf("/livez without a certificate = %d %q, %v; want 200 alive", code, body, err)
	}
	for _, path := range []string{"/metrics", "/debug/pprof/", "/nothing"} {
		if code, body, err := get(kubelet, path); err != nil || code != http.StatusUnauthorized || !strings.Contains(body, "only /readyz and /livez") {
			t.Errorf("%s without a certificate = %d %q, %v; want 401", path, code, body, err)
		}
	}
	stranger, err := security.NewTestPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other := stranger.MustCredentials(opsClient)
	strangerClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: other.ClientConfig()}}
	strangerClient.Transport.(*http.Transport).TLSClientConfig.VerifyConnection = nil // trust any server: the test is the server's check
	if _, _, err := get(strangerClient, "/readyz"); err == nil {
		t.Error("a certificate of another CA was let in")
	}
	r.want(opsClient, "", codes.OK, http.StatusOK, "")
	ops := r.pki.MustCredentials(opsClient)
	withCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: ops.ClientConfig(security.RoleRegionServer)}}
	if code, _, err := get(withCert, "/livez"); err != nil || code != http.StatusOK {
		t.Fatalf("/livez with a certificate = %d, %v", code, err)
	}
	if err := r.s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
