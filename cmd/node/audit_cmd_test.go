package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/security"
)

// aclCluster starts an in-process cluster of masters with access control
// on and grants, waits for its leader, and returns it with as: the CLI's
// environment (addresses, CA, a client certificate) of the identity name.
func aclCluster(t *testing.T, masters int, grants map[string]security.Permission) (*clustertest.Cluster, func(name string) map[string]string) {
	t.Helper()
	pki, err := security.NewTestPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := clustertest.New(t, clustertest.Config{Masters: masters, PKI: pki, Grants: grants})
	c.WaitLeader()
	as := func(name string) map[string]string {
		f, err := pki.Issue(security.Identity{Role: security.RoleClient, ID: name}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{"BATON_ADDR": strings.Join(c.AdminAddrs(), ","), "BATON_TLS_CA": f.CA, "BATON_TLS_CERT": f.Cert, "BATON_TLS_KEY": f.Key}
	}
	return c, as
}

// TestAuditListJSONSaysRefused: 'audit list --json' says of each record
// whether the call was refused, as the trail does.
func TestAuditListJSONSaysRefused(t *testing.T) {
	c, as := aclCluster(t, 1, map[string]security.Permission{
		"alice": security.PermAdmin, "bob": security.PermRead,
	})
	alice, bob := as("alice"), as("bob")
	if code, out, errOut := runCLI(t, bob, "ns", "create", "refused1"); code == exitOK {
		t.Fatalf("bob (read): ns create: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, alice, "ns", "create", "served1", "--wait"); code != exitOK {
		t.Fatalf("alice: ns create: exit %d\n%s%s", code, out, errOut)
	}
	refused := map[string]bool{}
	c.WaitFor("bob's refusal and alice's call listed", func() bool {
		code, out, _ := runCLI(t, alice, "audit", "list", "--json", "--method", "CreateNamespace")
		if code != exitOK {
			return false
		}
		var doc struct {
			Records []map[string]any `json:"records"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("audit list --json: %v\n%s", err, out)
		}
		for _, r := range doc.Records {
			v, ok := r["refused"].(bool)
			if !ok {
				t.Fatalf("a record without refused: %v", r)
			}
			refused[r["principal"].(string)] = v
		}
		return len(refused) == 2
	})
	if !refused["client/bob"] || refused["client/alice"] {
		t.Fatalf("refused: %v, want bob's refused and alice's not", refused)
	}
}
