package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/security"
)

// TestTokenWithoutClientCertificate runs three masters with TLS and
// --client-auth either (from BATON_CLIENT_AUTH) and uses them as a
// Consul or etcd user would: the CLI with the CA alone and a token. The
// token decides what it may do; no token and no certificate is told which
// flags to give; the masters' own calls, the region servers' service and
// what only a master's word is taken for stay out of a token's reach; the
// console takes the token as a bearer header; /readyz and gRPC health
// stay open.
func TestTokenWithoutClientCertificate(t *testing.T) {
	ctx, c, leader := tlsCluster(t, 3*time.Minute, "BATON_CLIENT_AUTH=either")
	ca := c.PKI().CAFile
	addrs := strings.Join(c.AdminAddrs(), ",")
	// baton runs the CLI with the CA alone, and token (if not empty) in
	// the environment.
	baton := func(token string, args ...string) (string, int) {
		cmd := exec.CommandContext(ctx, nodeBin, append(args, "--addr", addrs, "--tls-ca", ca)...)
		cmd.Env = append(os.Environ(), "BATON_TOKEN="+token, "BATON_TLS_CERT=", "BATON_TLS_KEY=")
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}
	for _, n := range c.Nodes {
		testwait.For(t, 30*time.Second, n.ID+" says how it takes clients", func() bool {
			return strings.Contains(c.CurrentLog(n.ID), "clients:          a client certificate or a token (--client-auth either)")
		})
	}
	var boot string
	testwait.For(t, 30*time.Second, "the first leader prints the bootstrap token", func() bool {
		for _, n := range c.Nodes {
			log := c.CurrentLog(n.ID)
			if i := strings.Index(log, "bootstrap token (permission admin; shown this once"); i >= 0 {
				if rest := strings.SplitN(log[i:], "\n", 3); len(rest) == 3 {
					boot = strings.TrimSpace(rest[1])
				}
			}
		}
		return boot != ""
	})

	// The main path: a token and the CA, no certificate.
	out, code := baton(boot, "acl", "token", "create", "ci", "--permission", "operate", "--json")
	var tok struct{ Secret, Accessor string }
	if err := json.Unmarshal([]byte(out), &tok); code != 0 || err != nil || tok.Secret == "" {
		t.Fatalf("token create with the bootstrap token and --tls-ca alone: exit %d, %v\n%s", code, err, out)
	}
	if out, code := baton(tok.Secret, "acl", "whoami"); code != 0 || !strings.Contains(out, "token/"+tok.Accessor+" (ci): permission operate") {
		t.Fatalf("whoami with the token and --tls-ca alone: exit %d\n%s", code, out)
	}
	if out, code := baton(tok.Secret, "ns", "create", "tokens", "--wait"); code != 0 {
		t.Fatalf("ns create with an operate token: exit %d\n%s", code, out)
	}
	if out, code := baton(tok.Secret, "ns", "delete", "tokens"); code != 1 || !strings.Contains(out, "needs permission admin; token/"+tok.Accessor+" holds permission operate") {
		t.Fatalf("ns delete with an operate token: exit %d, want 1 naming the permission\n%s", code, out)
	}
	// Neither token nor certificate: which flags would do.
	out, code = baton("", "acl", "whoami")
	if code != 1 || !strings.Contains(out, "no client certificate and no token: give --token or BATON_TOKEN, or a client certificate with --tls-cert/--tls-key") {
		t.Fatalf("whoami with nothing: exit %d, want 1 with the advice\n%s", code, out)
	}
	out, code = baton("", "table", "list", "--json")
	var doc struct {
		Error struct {
			Code     string `json:"code"`
			ExitCode int    `json:"exit_code"`
		} `json:"error"`
	}
	if i := strings.Index(out, "{"); code != 1 || i < 0 || json.Unmarshal([]byte(out[i:]), &doc) != nil || doc.Error.Code != "UNAUTHENTICATED" || doc.Error.ExitCode != 1 {
		t.Fatalf("table list --json with nothing: exit %d, %+v\n%s", code, doc, out)
	}

	// Over gRPC, what a token may not reach.
	creds, err := security.LoadClient(security.Files{CA: ca}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cc := dial(t, c.Node(leader).GRPCAddr, creds.DialOption(security.RoleMaster), security.TokenDialOption(tok.Secret))
	defer cc.Close()
	ac := adminpb.NewAdminClient(cc)
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	if _, err := ac.RegisterNode(cctx, &adminpb.RegisterNodeRequest{Id: "n9", AdminAddress: "127.0.0.1:1"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("RegisterNode with a token: %v, want UNAUTHENTICATED", err)
	}
	if _, err := ac.AppendAudit(cctx, &adminpb.AppendAuditRequest{Records: []*adminpb.AuditRecord{{Method: "DeleteTable", Principal: "client/harness"}}}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("AppendAudit with a token: %v, want UNAUTHENTICATED", err)
	}
	if _, err := rspb.NewMasterClient(cc).Heartbeat(cctx, &rspb.HeartbeatRequest{ServerId: "rs1"}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a region server's heartbeat with a token: %v, want UNAUTHENTICATED", err)
	}
	// The harness's certificate holds admin: naming it is no master's word.
	forged := metadata.AppendToOutgoingContext(cctx, "x-baton-principal", "client/harness", security.OnBehalfKey, "baton://client/harness")
	if _, err := ac.AclList(forged, &adminpb.AclListRequest{}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "token/"+tok.Accessor) {
		t.Errorf("AclList with an operate token naming an admin client: %v, want PERMISSION_DENIED naming the token", err)
	}
	if err := callHealth(t, ctx, c.Node(leader).GRPCAddr, creds.DialOption(security.RoleMaster)); err != nil {
		t.Errorf("gRPC health without a certificate: %v", err)
	}

	// The console and /status: the token as a bearer header.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: creds.ClientConfig(security.RoleMaster)}}
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+c.Node(leader).HTTPAddr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/status", tok.Secret); code != http.StatusOK {
		t.Errorf("/status with a token: %d\n%s", code, body)
	}
	if code, body := get("/status", ""); code != http.StatusUnauthorized || !strings.Contains(body, "no client certificate and no token") {
		t.Errorf("/status with nothing: %d, want 401 with the advice\n%s", code, body)
	}
	if code, body := get("/readyz", ""); code != http.StatusOK {
		t.Errorf("/readyz with nothing: %d, want it open\n%s", code, body)
	}

	// A certificate is taken as before.
	cl := c.Client()
	if who, err := cl.WhoAmI(cctx); err != nil || who.GetPrincipal() != "client/harness" {
		t.Errorf("the harness's certificate under either: %v, %v", who, err)
	}
}
