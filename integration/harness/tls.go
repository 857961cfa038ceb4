package harness

import (
	"net/http"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	"github.com/baton-dev/baton/security"
)

// clientIdentity is the harness's own client certificate's identity.
var clientIdentity = security.Identity{Role: security.RoleClient, ID: "harness"}

func (c *Cluster) setUpTLS() error {
	pki, err := security.NewTestPKI(filepath.Join(c.dir, "tls"))
	if err != nil {
		return err
	}
	f, err := pki.Issue(clientIdentity, 24*time.Hour)
	if err != nil {
		return err
	}
	creds, err := security.Load(f, nil, nil)
	if err != nil {
		return err
	}
	c.pki, c.clientCreds, c.issued = pki, creds, map[security.Identity]security.Files{}
	c.http.Transport = &http.Transport{TLSClientConfig: creds.ClientConfig(security.RoleMaster, security.RoleRegionServer)}
	return nil
}

// PKI is the cluster's CA (Options.TLS), nil without TLS: a test issues
// more certificates with it (another role, an expired one).
func (c *Cluster) PKI() *security.TestPKI { return c.pki }

// ClientCredentials is the harness client's TLS material, nil without TLS.
func (c *Cluster) ClientCredentials() *security.Credentials { return c.clientCreds }

// DialOptions are what the harness's own connections to a server of role
// add: its client certificate under Options.TLS, nothing otherwise.
func (c *Cluster) DialOptions(role security.Role) []grpc.DialOption {
	if c.clientCreds == nil {
		return nil
	}
	return []grpc.DialOption{c.clientCreds.DialOption(role)}
}

// HTTPScheme is the scheme of the agents' and region servers' HTTP
// endpoints.
func (c *Cluster) HTTPScheme() string {
	if c.pki != nil {
		return "https"
	}
	return "http"
}

// tlsArgs are the --tls-* flags of a process of identity id (its
// certificate issued on first use), none without TLS.
func (c *Cluster) tlsArgs(id security.Identity) []string {
	if c.pki == nil {
		return nil
	}
	// Issued once: a restart presents the same certificate.
	c.mu.Lock()
	f, ok := c.issued[id]
	c.mu.Unlock()
	if !ok {
		var err error
		if f, err = c.pki.Issue(id, 24*time.Hour); err != nil {
			c.t.Fatalf("harness: certificate for %s: %v", id, err)
		}
		c.mu.Lock()
		c.issued[id] = f
		c.mu.Unlock()
	}
	return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}
}
