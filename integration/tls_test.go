package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/security"
)

// rawTLS is a client configuration that presents the given files'
// certificate as is, without checking it first (security.Load refuses an
// expired one, which is what a test of the servers needs to present), and
// accepts any server: these tests are about what the servers let in.
func rawTLS(t *testing.T, f security.Files) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, Certificates: []tls.Certificate{pair}}
}

// callHealth makes one gRPC health check to addr with opt and returns its
// error.
func callHealth(t *testing.T, ctx context.Context, addr string, opt grpc.DialOption) error {
	t.Helper()
	cc := dial(t, addr, opt)
	defer cc.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{})
	return err
}

// dial is a gRPC client of addr with opts, for the caller to close.
func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

// newPKI is a fresh test CA: one none of a cluster's parties trusts, or
// one for parties a test starts itself.
func newPKI(t *testing.T) *security.TestPKI {
	t.Helper()
	pki, err := security.NewTestPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return pki
}

// issueFrom is pki's certificate for id, valid for validity from now
// (negative: one that expired that long ago).
func issueFrom(t *testing.T, pki *security.TestPKI, id security.Identity, validity time.Duration) security.Files {
	t.Helper()
	f, err := pki.Issue(id, validity)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// loadCreds is the credentials in f.
func loadCreds(t *testing.T, f security.Files) *security.Credentials {
	t.Helper()
	cr, err := security.Load(f, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

// tlsCluster starts three masters with mutual TLS on every channel and env
// added to their environment, and waits for a leader. Its context ends
// after timeout, or with t. Skipped in -short.
func tlsCluster(t *testing.T, timeout time.Duration, env ...string) (context.Context, *harness.Cluster, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a cluster of processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	c := harness.New(t, harness.Options{Binary: nodeBin, Nodes: 3, TLS: true, Env: env})
	return ctx, c, c.WaitLeader(ctx)
}

// TestTLSClusterRefusesWhoDoesNotBelong runs three masters and two region
// servers with mutual TLS on every channel, checks that the cluster works
// (a table opens, the CLI with a client certificate lists it, a failover
// elects a new leader over TLS Raft), and that each channel refuses a
// plaintext peer, a certificate of another CA, an expired certificate and
// a valid certificate of the wrong role. The masters' HTTP port admits a
// client without a certificate for the probes alone (/readyz, /livez: the
// verdict, no reason) and answers it 401 on every other path.
func TestTLSClusterRefusesWhoDoesNotBelong(t *testing.T) {
	ctx, c, leader := tlsCluster(t, 3*time.Minute)
	startRegionServers(t, ctx, c, 2, harness.RSOptions{})
	createTables(t, ctx, c.Client(), []string{"secure"}, 4)

	pki := c.PKI()
	issue := func(id security.Identity, validity time.Duration) security.Files {
		return issueFrom(t, pki, id, validity)
	}
	cliFiles := issue(security.Identity{Role: security.RoleClient, ID: "ops"}, time.Hour)
	rsFiles := issue(security.Identity{Role: security.RoleRegionServer, ID: "rs1"}, time.Hour)
	expired := issue(security.Identity{Role: security.RoleClient, ID: "old"}, -time.Hour)
	stranger := issueFrom(t, newPKI(t), security.Identity{Role: security.RoleMaster, ID: "n1"}, time.Hour)
	load := func(f security.Files) *security.Credentials { return loadCreds(t, f) }

	t.Run("access control", func(t *testing.T) {
		addrs := strings.Join(c.AdminAddrs(), ",")
		// baton runs the CLI as ops, with token (if not empty) in the
		// environment.
		baton := func(token string, args ...string) (string, int) {
			cmd := exec.CommandContext(ctx, nodeBin, append(args, "--addr", addrs, "--tls-ca", cliFiles.CA, "--tls-cert", cliFiles.Cert, "--tls-key", cliFiles.Key)...)
			cmd.Env = append(os.Environ(), "BATON_TOKEN="+token)
			out, _ := cmd.CombinedOutput()
			return string(out), cmd.ProcessState.ExitCode()
		}
		if out, code := baton("", "acl", "whoami", "--json"); code != 0 || !strings.Contains(out, `"principal": "client/ops"`) || !strings.Contains(out, `"permission": ""`) || !strings.Contains(out, `"enforced": true`) {
			t.Fatalf("whoami of an unbound client: exit %d\n%s", code, out)
		}
		if out, code := baton("", "table", "list"); code != 1 || !strings.Contains(out, "needs permission read; client/ops holds no permission") {
			t.Fatalf("table list by an unbound client: exit %d, want 1 naming the permission\n%s", code, out)
		}
		// The cluster's first leader printed the bootstrap token, once.
		var boot []string
		for _, n := range c.Nodes {
			log := c.CurrentLog(n.ID)
			if i := strings.Index(log, "bootstrap token (permission admin; shown this once"); i >= 0 {
				rest := strings.SplitN(log[i:], "\n", 3)
				boot = append(boot, strings.TrimSpace(rest[1]))
			}
		}
		if len(boot) != 1 {
			t.Fatalf("%d masters printed a bootstrap token, want 1", len(boot))
		}
		if out, code := baton(boot[0], "acl", "grant", "ops", "--permission", "read"); code != 0 || !strings.Contains(out, "client ops: permission read") {
			t.Fatalf("grant with the bootstrap token: exit %d\n%s", code, out)
		}
		if out, code := baton("", "table", "list"); code != 0 || !strings.Contains(out, "secure") {
			t.Fatalf("table list with read: exit %d\n%s", code, out)
		}
		if out, code := baton("", "table", "delete", "secure"); code != 1 || !strings.Contains(out, "needs permission admin; client/ops holds permission read") {
			t.Fatalf("table delete with read: exit %d, want 1\n%s", code, out)
		}
		out, code := baton(boot[0], "acl", "token", "create", "ci", "--permission", "operate", "--json")
		var tok struct{ Secret, Accessor string }
		if err := json.Unmarshal([]byte(out), &tok); code != 0 || err != nil || tok.Secret == "" {
			t.Fatalf("token create: exit %d, %v\n%s", code, err, out)
		}
		if out, code := baton(tok.Secret, "acl", "whoami"); code != 0 || !strings.Contains(out, "token/"+tok.Accessor+" (ci): permission operate") {
			t.Fatalf("whoami with the new token: exit %d\n%s", code, out)
		}
		if out, code := baton(tok.Secret, "acl", "list"); code != 1 || !strings.Contains(out, "needs permission admin") {
			t.Fatalf("acl list with operate: exit %d\n%s", code, out)
		}
		out, code = baton(boot[0], "audit", "list", "--principal", "client/ops", "--json")
		if code != 0 || !strings.Contains(out, `"method": "DeleteTable"`) || !strings.Contains(out, `"code": "PermissionDenied"`) {
			t.Fatalf("audit list: exit %d, want ops's refused delete\n%s", code, out)
		}
		// The console: read-only for read; nothing for a certificate
		// bound to nothing.
		nobody := issue(security.Identity{Role: security.RoleClient, ID: "nobody"}, time.Hour)
		for _, w := range []struct {
			f    security.Files
			want int
		}{{cliFiles, http.StatusOK}, {nobody, http.StatusForbidden}} {
			hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: load(w.f).ClientConfig(security.RoleMaster)}}
			resp, err := hc.Get("https://" + c.Node(leader).HTTPAddr + "/ui/procedures")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != w.want {
				t.Errorf("console as %s: %d, want %d\n%s", w.f.Cert, resp.StatusCode, w.want, body)
			}
		}
	})

	t.Run("cli", func(t *testing.T) {
		addrs := strings.Join(c.AdminAddrs(), ",")
		out, err := exec.CommandContext(ctx, nodeBin, "table", "list", "--addr", addrs, "--json",
			"--tls-ca", cliFiles.CA, "--tls-cert", cliFiles.Cert, "--tls-key", cliFiles.Key).CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"secure"`) {
			t.Errorf("table list with a client certificate: %v\n%s", err, out)
		}
		// In plaintext, every port refuses the handshake: said at once
		// (not after --timeout, 10 s by default), naming each address and
		// the flags it needs.
		cmd := exec.CommandContext(ctx, nodeBin, "table", "list", "--addr", addrs)
		start := time.Now()
		out, err = cmd.CombinedOutput()
		if took := time.Since(start); err == nil || cmd.ProcessState.ExitCode() != 3 || took > time.Second {
			t.Errorf("table list in plaintext: %v (exit %d) after %v, want exit 3 within 1 s\n%s", err, cmd.ProcessState.ExitCode(), took, out)
		}
		for _, a := range c.AdminAddrs() {
			if want := a + ": this port speaks TLS: give --tls-ca, --tls-cert, --tls-key"; !strings.Contains(string(out), want) {
				t.Errorf("table list in plaintext: output lacks %q:\n%s", want, out)
			}
		}
		// A token with the CA alone, against masters that take clients by
		// certificate (--client-auth cert, the default): refused at once,
		// saying which flags would do.
		cmd = exec.CommandContext(ctx, nodeBin, "acl", "whoami", "--addr", addrs, "--tls-ca", cliFiles.CA, "--token", "bt_0123456789abcdef_"+strings.Repeat("A", 43))
		cmd.Env = append(os.Environ(), "BATON_TLS_CERT=", "BATON_TLS_KEY=")
		if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "requires a client certificate") ||
			!strings.Contains(string(out), "give --tls-cert and --tls-key") || !strings.Contains(string(out), "--client-auth either") {
			t.Errorf("whoami with a token and --tls-ca alone against --client-auth cert: exit %d, want 1 naming the flags\n%s", cmd.ProcessState.ExitCode(), out)
		}
		cmd = exec.CommandContext(ctx, nodeBin, "table", "list", "--addr", addrs, "--tls-ca", expired.CA, "--tls-cert", expired.Cert, "--tls-key", expired.Key)
		if out, err := cmd.CombinedOutput(); err == nil || cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "expired") {
			t.Errorf("table list with an expired certificate: %v (exit %d), want exit 2 naming the expiry\n%s", err, cmd.ProcessState.ExitCode(), out)
		}
	})

	admin := c.Node(leader).GRPCAddr
	t.Run("admin gRPC", func(t *testing.T) {
		if err := callHealth(t, ctx, admin, load(cliFiles).DialOption(security.RoleMaster)); err != nil {
			t.Fatalf("a client certificate: %v", err)
		}
		for name, opt := range map[string]grpc.DialOption{
			"plaintext":              grpc.WithTransportCredentials(insecure.NewCredentials()),
			"another CA":             grpc.WithTransportCredentials(credentials.NewTLS(rawTLS(t, stranger))),
			"an expired certificate": grpc.WithTransportCredentials(credentials.NewTLS(rawTLS(t, expired))),
		} {
			if err := callHealth(t, ctx, admin, opt); err == nil {
				t.Errorf("%s: served", name)
			}
		}
		cc := dial(t, admin, load(rsFiles).DialOption(security.RoleMaster))
		defer cc.Close()
		_, err := adminpb.NewAdminClient(cc).DeleteTable(ctx, &adminpb.TableRequest{Name: "secure"})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("a region server's certificate deleting a table: %v, want PermissionDenied", err)
		}
	})

	t.Run("master service", func(t *testing.T) {
		call := func(f security.Files, serverID string) error {
			cc := dial(t, admin, load(f).DialOption(security.RoleMaster))
			defer cc.Close()
			_, err := rspb.NewMasterClient(cc).Heartbeat(ctx, &rspb.HeartbeatRequest{ServerId: serverID, StartCode: 1})
			return err
		}
		if err := call(cliFiles, "ops"); status.Code(err) != codes.PermissionDenied {
			t.Errorf("a client heartbeating as a region server: %v, want PermissionDenied", err)
		}
		if err := call(rsFiles, "rs2"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "only as itself") {
			t.Errorf("rs1 heartbeating as rs2: %v, want PermissionDenied", err)
		}
	})

	t.Run("region server", func(t *testing.T) {
		rs := c.RegionServer("rs1").GRPCAddr
		cc := dial(t, rs, load(cliFiles).DialOption(security.RoleRegionServer))
		defer cc.Close()
		_, err := rspb.NewRegionServerClient(cc).ExecuteBatch(ctx, &rspb.BatchRequest{ServerId: "rs1", Ops: []*rspb.RegionOp{{Kind: rspb.OpKind_OP_KIND_CLOSE, Region: "x"}}})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("a client sending a close to a region server: %v, want PermissionDenied", err)
		}
		// A client bound to no permission: a region server refuses it as
		// the masters do (TestRegionServerAccessControl serves a reader).
		// Not ops: "access control" granted it read, which reaches the
		// region server with its next heartbeat, so whether ops was
		// refused here depended on that heartbeat's timing.
		unbound := dial(t, rs, load(issue(security.Identity{Role: security.RoleClient, ID: "unbound"}, time.Hour)).DialOption(security.RoleRegionServer))
		defer unbound.Close()
		if _, err := rspb.NewRegionServerClient(unbound).ListRegions(ctx, &rspb.ListRegionsRequest{}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("an unbound client listing a region server's regions: %v, want PermissionDenied", err)
		}
		if err := callHealth(t, ctx, rs, grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
			t.Error("plaintext to a region server: served")
		}
	})

	t.Run("denials counted", func(t *testing.T) {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: load(cliFiles).ClientConfig(security.RoleMaster)}}
		resp, err := hc.Get("https://" + c.Node(leader).HTTPAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			`baton_rpc_denied_total{code="PermissionDenied",method="/baton.admin.v1.Admin/DeleteTable",role="regionserver"} 1`,
			`baton_rpc_denied_total{code="PermissionDenied",method="/baton.rs.v1.Master/Heartbeat",role="client"} 1`,
		} {
			if !strings.Contains(string(body), want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})

	t.Run("raft", func(t *testing.T) {
		for name, cfg := range map[string]*tls.Config{
			"a region server's certificate": rawTLS(t, rsFiles),
			"a client's certificate":        rawTLS(t, cliFiles),
			"another CA's master":           rawTLS(t, stranger),
		} {
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", c.Node(leader).RaftAddr, cfg)
			if err == nil {
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				// A raft RPC's type byte; the server's verdict on the
				// certificate arrives on the first read.
				_, _ = conn.Write([]byte{0})
				_, err = conn.Read(make([]byte, 1))
				conn.Close()
			}
			// Admitted, the raft handler would close the connection on the
			// bad RPC (EOF); refused, the handshake's alert is what arrives.
			if err == nil || !strings.Contains(err.Error(), "remote error: tls") {
				t.Errorf("%s: %v, want the Raft port's TLS alert", name, err)
			}
		}
	})

	t.Run("http", func(t *testing.T) {
		base := "https://" + c.Node(leader).HTTPAddr
		url := base + "/status"
		get := func(cfg *tls.Config, u string) (int, string, error) {
			hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
			resp, err := hc.Get(u)
			if err != nil {
				return 0, "", err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body), err
		}
		if code, _, err := get(load(cliFiles).ClientConfig(security.RoleMaster), url); err != nil || code != http.StatusOK {
			t.Errorf("a client certificate: %d, %v", code, err)
		}
		if code, _, err := get(nil, "http://"+c.Node(leader).HTTPAddr+"/status"); err == nil && code == http.StatusOK {
			t.Error("plaintext HTTP: 200")
		}
		// No certificate: the handshake admits it (a kubelet's HTTPS probe
		// presents none), the probes answer it the verdict alone, and every
		// other path 401 (docs/operations.md, "Readiness and liveness").
		noCert := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
		for _, path := range []string{"/status", "/metrics", "/"} {
			if code, body, err := get(noCert, base+path); err != nil || code != http.StatusUnauthorized || !strings.Contains(body, "needs a client certificate") {
				t.Errorf("no certificate, %s: %d %q %v, want 401 asking for one", path, code, body, err)
			}
		}
		testwait.ForNil(t, 30*time.Second, "the leader's /readyz without a certificate: 200 ready, no reason", func() error {
			code, body, err := get(noCert, base+"/readyz")
			if err != nil {
				return err
			}
			if code != http.StatusOK || body != "ready\n" {
				return fmt.Errorf("%d %q", code, body)
			}
			return nil
		})
		if code, body, err := get(noCert, base+"/livez"); err != nil || code != http.StatusOK || body != "live\n" {
			t.Errorf("no certificate, /livez: %d %q %v, want 200 live (no role)", code, body, err)
		}
		// A certificate presented is judged at the handshake as before.
		for name, cfg := range map[string]*tls.Config{
			"another CA":             rawTLS(t, stranger),
			"an expired certificate": rawTLS(t, expired),
			"a region server's":      rawTLS(t, rsFiles),
		} {
			for _, path := range []string{"/status", "/readyz"} {
				if code, _, err := get(cfg, base+path); err == nil {
					t.Errorf("%s, %s: answered %d", name, path, code)
				}
			}
		}
	})

	t.Run("failover", func(t *testing.T) {
		c.Kill(leader)
		next := c.WaitLeader(ctx)
		if next == leader {
			t.Fatalf("leader %s again after it was killed", leader)
		}
		id, _, err := startRetrying(ctx, "submit after failover", func(ctx context.Context) (uint64, error) {
			return c.Client().Submit(ctx, "sleep", map[string]string{"steps": "1", "delay": "0s"}, "tls-failover", "it", 0)
		})
		if err != nil {
			t.Fatal(err)
		}
		waitState(t, ctx, c.Client(), id, "submit after failover", client.StateSuccess)
	})
}

// servedNotAfter dials addr with cfg and returns the expiry of the
// certificate the server presents.
func servedNotAfter(addr string, cfg *tls.Config) (time.Time, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].NotAfter, nil
}

// TestTLSReloadOnSIGHUP: a master's certificate renewed in place is
// served to new connections after SIGHUP, with no restart; files of
// another master put in its place are refused, and the master goes on
// serving its own identity.
func TestTLSReloadOnSIGHUP(t *testing.T) {
	ctx, c, _ := tlsCluster(t, 2*time.Minute)
	n1 := c.Node("n1")
	cfg := c.ClientCredentials().ClientConfig(security.RoleMaster)
	first, err := servedNotAfter(n1.GRPCAddr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Renewed in place: the same paths, a later expiry.
	f, err := c.PKI().Issue(security.Identity{Role: security.RoleMaster, ID: "n1"}, 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Signal("n1", syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var renewed time.Time
	testwait.For(t, 30*time.Second, "n1 serving its renewed certificate", func() bool {
		renewed, err = servedNotAfter(n1.GRPCAddr, cfg)
		return err == nil && renewed.After(first.Add(time.Hour))
	})
	// Another master's files at n1's paths: refused, n1 stays n1.
	other, err := c.PKI().Issue(security.Identity{Role: security.RoleMaster, ID: "n2"}, 72*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{other.Cert: f.Cert, other.Key: f.Key} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Signal("n1", syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "n1 to log the refused reload", func() bool {
		return strings.Contains(c.CurrentLog("n1"), "not reloaded")
	})
	got, err := servedNotAfter(n1.GRPCAddr, cfg)
	if err != nil || !got.Equal(renewed) {
		t.Errorf("after a reload with another master's files: serving a certificate until %v (%v), want the renewed one until %v", got, err, renewed)
	}
	if err := callHealth(t, ctx, n1.GRPCAddr, c.ClientCredentials().DialOptionFor(security.Identity{Role: security.RoleMaster, ID: "n1"})); err != nil {
		t.Errorf("n1 as itself after the refused reload: %v", err)
	}
}
