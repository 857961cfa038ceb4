package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// TestPKI is a CA in a directory, signing certificates into it: what
// tests (and the integration harness) need to run parties with TLS.
type TestPKI struct {
	Dir string
	CA  *CA
	// CAFile is the CA certificate's path.
	CAFile string
}

// NewTestPKI makes a CA valid for a week in dir.
func NewTestPKI(dir string) (*TestPKI, error) {
	ca, key, err := NewCA("baton test CA", time.Now(), 7*24*time.Hour)
	if err != nil {
		return nil, err
	}
	p := &TestPKI{Dir: dir, CA: ca, CAFile: filepath.Join(dir, "ca.pem")}
	if err := WriteFiles(true, map[string][]byte{p.CAFile: ca.PEM, filepath.Join(dir, "ca-key.pem"): key}); err != nil {
		return nil, err
	}
	return p, nil
}

// Issue signs a certificate for id valid from now for validity (negative:
// one that expired that long ago) and returns its files.
func (p *TestPKI) Issue(id Identity, validity time.Duration) (Files, error) {
	now := time.Now()
	from, to := now.Add(-time.Minute), now.Add(validity)
	if validity < 0 {
		from, to = now.Add(2*validity), now.Add(validity)
	}
	cert, key, err := p.CA.Sign(CertRequest{Identity: id, Hosts: []string{"localhost", "127.0.0.1"}, NotBefore: from, NotAfter: to})
	if err != nil {
		return Files{}, err
	}
	base := filepath.Join(p.Dir, fmt.Sprintf("%s-%s", id.Role, id.ID))
	f := Files{CA: p.CAFile, Cert: base + ".pem", Key: base + "-key.pem"}
	if err := WriteFiles(true, map[string][]byte{f.Cert: cert, f.Key: key}); err != nil {
		return Files{}, err
	}
	return f, nil
}

// MustCredentials issues and loads a certificate for id valid for a day,
// or panics: for tests' set-up.
func (p *TestPKI) MustCredentials(id Identity) *Credentials {
	f, err := p.Issue(id, 24*time.Hour)
	if err != nil {
		panic(err)
	}
	c, err := Load(f, nil, nil)
	if err != nil {
		panic(err)
	}
	return c
}

// WithTestPeer is ctx as a gRPC handler sees a call from a TLS peer at
// addr (may be nil) whose certificate names id: for tests of what a
// server does with its caller's identity. The chain is the TLS layer's
// business and is not made here.
func WithTestPeer(ctx context.Context, addr net.Addr, id Identity) context.Context {
	cert := &x509.Certificate{URIs: []*url.URL{id.URI()}}
	info := credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}}
	return peer.NewContext(ctx, &peer.Peer{Addr: addr, AuthInfo: info})
}
