package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/security"
)

// TestGivenBootstrapToken: three TLS masters given the same
// --acl-bootstrap-token-file (by its variable, as the chart mounts it):
// the first leader stores that token, which works as admin, and no
// master's output (stdout, stderr, log: all in its log file) holds its
// secret, only its accessor.
func TestGivenBootstrapToken(t *testing.T) {
	const accessor = "5eed0123456789ab"
	const secret = "Zq3xV9mK2pL7wR4tY8uN1bC6dF0gH5jS-_aEiOoUyTq"
	tok := "bt_" + accessor + "_" + secret
	file := filepath.Join(t.TempDir(), "bootstrap-token")
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, c, _ := tlsCluster(t, 2*time.Minute, "BATON_ACL_BOOTSTRAP_TOKEN_FILE="+file)

	// Stored once it is recorded as told: its log line says so.
	for deadline := time.Now().Add(time.Minute); ; {
		stored := 0
		for _, n := range c.Nodes {
			if strings.Contains(c.CurrentLog(n.ID), "bootstrap token stored as given") {
				stored++
			}
		}
		if stored == 1 {
			break
		}
		if stored > 1 || time.Now().After(deadline) {
			t.Fatalf("%d masters logged storing the given token, want 1", stored)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	cli := issueFrom(t, c.PKI(), security.Identity{Role: security.RoleClient, ID: "nobody"}, time.Hour)
	cmd := exec.CommandContext(ctx, nodeBin, "acl", "whoami", "--addr", strings.Join(c.AdminAddrs(), ","), "--tls-ca", cli.CA, "--tls-cert", cli.Cert, "--tls-key", cli.Key)
	cmd.Env = append(os.Environ(), "BATON_TOKEN="+tok)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "token/"+accessor+" (bootstrap): permission admin") {
		t.Fatalf("whoami with the given token: %v\n%s", err, out)
	}
	for _, n := range c.Nodes {
		log := c.CurrentLog(n.ID)
		if strings.Contains(log, secret[:12]) || strings.Contains(log, secret[len(secret)-12:]) {
			t.Fatalf("%s's output holds the bootstrap token's secret:\n%s", n.ID, log)
		}
		if strings.Contains(log, "shown this once") {
			t.Fatalf("%s printed a made bootstrap token:\n%s", n.ID, log)
		}
	}
}
