package console

import (
	"crypto/tls"
	"crypto/x509"
	"net/http/httptest"
	"net/url"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/baton-dev/baton/security"
)

// TestForUserNamesTheBrowsersCertificate: a console action's call carries
// the identity of the certificate the browser presented, and nothing
// without TLS or without an identity.
func TestForUserNamesTheBrowsersCertificate(t *testing.T) {
	alice := security.Identity{Role: security.RoleClient, ID: "alice"}
	r := httptest.NewRequest("POST", "/ui/procedures/1/abort", nil)
	if md, ok := metadata.FromOutgoingContext(forUser(r)); ok && len(md.Get(security.OnBehalfKey)) > 0 {
		t.Errorf("plaintext request: %v", md)
	}
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{URIs: []*url.URL{alice.URI()}}}}
	md, _ := metadata.FromOutgoingContext(forUser(r))
	if got := md.Get(security.OnBehalfKey); len(got) != 1 || got[0] != "baton://client/alice" {
		t.Errorf("on behalf of %v, want alice", got)
	}
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{}}}
	if md, ok := metadata.FromOutgoingContext(forUser(r)); ok && len(md.Get(security.OnBehalfKey)) > 0 {
		t.Errorf("a certificate naming nobody: %v", md)
	}
}
