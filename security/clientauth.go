package security

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// ClientAuth is how a master authenticates the clients of its admin API
// and console: masters and region servers are known by their certificates
// whatever it says.
type ClientAuth string

// The ways a master may authenticate clients.
const (
	// ClientAuthCert: every connection presents a certificate of the CA
	// (the TLS handshake refuses one without); a client's certificate
	// holds the permission bound to its name, or a bearer token decides.
	// The default: what every deployment before --client-auth ran.
	ClientAuthCert ClientAuth = "cert"
	// ClientAuthToken: a client is known by its bearer token alone. A
	// connection without a certificate is let through the handshake; a
	// client's certificate, if it presents one, grants nothing.
	ClientAuthToken ClientAuth = "token"
	// ClientAuthEither: a client presents a certificate, or a bearer token
	// over server-authenticated TLS, or both (the token decides).
	ClientAuthEither ClientAuth = "either"
)

// ParseClientAuth reads "cert", "token" or "either" ("" is cert).
func ParseClientAuth(s string) (ClientAuth, error) {
	switch ClientAuth(s) {
	case "", ClientAuthCert:
		return ClientAuthCert, nil
	case ClientAuthToken, ClientAuthEither:
		return ClientAuth(s), nil
	}
	return ClientAuthCert, fmt.Errorf("security: client auth %q: want cert, token or either", s)
}

// CertOptional says a client may connect without a certificate.
func (a ClientAuth) CertOptional() bool { return a == ClientAuthToken || a == ClientAuthEither }

// CertsGrant says a client's certificate holds a permission (the one
// bound to its name).
func (a ClientAuth) CertsGrant() bool { return a != ClientAuthToken }

// NoCredentialsAdvice is what a call that presented neither a client
// certificate nor a token is told, under a.
func (a ClientAuth) NoCredentialsAdvice() string {
	if a == ClientAuthToken {
		return "no token: give --token or BATON_TOKEN (this cluster authenticates clients by token only: --client-auth token)"
	}
	return "no client certificate and no token: give --token or BATON_TOKEN, or a client certificate with --tls-cert/--tls-key"
}

// OverTLS says ctx's gRPC call came over a TLS connection, with a client
// certificate or without. A call without an identity (CallerOf) over TLS
// is not a plaintext one: nothing it says of itself is to be believed.
func OverTLS(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return false
	}
	_, ok = p.AuthInfo.(credentials.TLSInfo)
	return ok
}

// MasterPolicyFor is MasterPolicy under auth: with a certificate optional,
// a caller without one may call the admin API if its call carries a
// bearer token (which access control checks), except the methods
// certOnly names (short names: the masters' own, RegisterNode,
// AppendAudit), and ask for gRPC health, as anyone may ask /readyz. The
// Master service (region servers) and reflection still need a
// certificate.
func MasterPolicyFor(auth ClientAuth, certOnly ...string) *Policy {
	p := MasterPolicy()
	if !auth.CertOptional() {
		return p
	}
	p.noCredentials = auth.NoCredentialsAdvice()
	p.certless = append(p.certless, certlessRule{prefix: AdminService, mode: certlessWithToken}, certlessRule{prefix: HealthService, mode: certlessAnyone})
	for _, m := range certOnly {
		p.certless = append(p.certless, certlessRule{prefix: AdminService + m, mode: certlessRefused})
	}
	return p
}

// IsCertificateRequired says err is a server's refusal of a connection
// that presented no client certificate (the TLS alert
// certificate_required): a client with --tls-ca alone meeting a master
// that runs --client-auth cert, or a region server. gRPC passes the
// alert on in a status's message only.
func IsCertificateRequired(err error) bool {
	return err != nil && strings.Contains(err.Error(), "tls: certificate required")
}

// CertificateRequired says the server at addr refuses c's connections for
// presenting no client certificate. It completes a handshake and waits
// (at most wait) for the server's verdict, sending nothing after it: a
// gRPC client writes its preface at once, and the server, closing on
// unread bytes, resets the connection, which may lose the alert that said
// why (the client then sees "broken pipe"). A server that admits the
// connection says nothing, and the wait runs out: false.
func (c *Credentials) CertificateRequired(ctx context.Context, addr string, wait time.Duration, accept ...Role) bool {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	d := tls.Dialer{Config: c.ClientConfig(accept...)}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return IsCertificateRequired(err)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetReadDeadline(deadline)
	var b [1]byte
	_, err = conn.Read(b[:])
	return IsCertificateRequired(err)
}
