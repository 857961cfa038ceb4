package security

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/locked"
)

// Files names the PEM files of a party's TLS material: the cluster's CA
// certificate, its own certificate (the chain up to the CA) and its
// private key. All three or none: none is plaintext.
type Files struct {
	CA   string
	Cert string
	Key  string
}

// Enabled says TLS is configured (Validate says whether fully).
func (f Files) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Validate reports a partial configuration.
func (f Files) Validate() error {
	if !f.Enabled() {
		return nil
	}
	var missing []string
	for _, m := range []struct{ flag, v string }{{"--tls-ca", f.CA}, {"--tls-cert", f.Cert}, {"--tls-key", f.Key}} {
		if m.v == "" {
			missing = append(missing, m.flag)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("security: TLS needs --tls-ca, --tls-cert and --tls-key together; missing %v", missing)
	}
	return nil
}

// ValidateClient reports a client's partial configuration: a client
// needs the CA (to know the servers), and may go without a certificate of
// its own (a token then authenticates it, where the masters allow it:
// --client-auth token or either), but a certificate needs its key.
func (f Files) ValidateClient() error {
	if !f.Enabled() {
		return nil
	}
	switch {
	case f.CA == "":
		return errors.New("security: --tls-ca is needed with --tls-cert and --tls-key: the CA certificate that signed the masters', to know them by")
	case f.Cert == "" && f.Key != "":
		return errors.New("security: --tls-key without --tls-cert: give both (a client certificate), or neither (--tls-ca alone, with a token)")
	case f.Cert != "" && f.Key == "":
		return errors.New("security: --tls-cert without --tls-key: give both (a client certificate), or neither (--tls-ca alone, with a token)")
	}
	return nil
}

// CAOnly says f names a CA and no certificate of its own: a client that
// knows the servers by the CA and is known itself by a token.
func (f Files) CAOnly() bool { return f.CA != "" && f.Cert == "" && f.Key == "" }

// Credentials is a party's TLS material, reloadable: the tls.Configs it
// makes read the certificate and the CA at every handshake, so Reload
// takes effect for every new connection. Safe for concurrent use.
type Credentials struct {
	files  Files
	clock  clock.Clock
	logger hclog.Logger

	mu       sync.RWMutex
	cert     *tls.Certificate
	self     Identity
	notAfter time.Time
	roots    *x509.CertPool
	// raw is what the files held when last loaded: Reload with nothing
	// changed is a no-op, and the watcher compares against it.
	raw [3][]byte
}

// LoadClient is Load for a client, which may give the CA alone
// (Files.ValidateClient): its credentials then verify the servers and
// present no certificate.
func LoadClient(f Files, clk clock.Clock, logger hclog.Logger) (*Credentials, error) {
	if err := f.ValidateClient(); err != nil {
		return nil, err
	}
	if !f.CAOnly() {
		return Load(f, clk, logger)
	}
	return load(f, clk, logger)
}

// HasCertificate says c presents a certificate of its own (not so for a
// client's LoadClient of the CA alone).
func (c *Credentials) HasCertificate() bool { return !c.files.CAOnly() }

// Load reads f and checks that the certificate is signed by the CA,
// names an identity and is valid now. clk may be nil (the wall clock),
// logger too.
func Load(f Files, clk clock.Clock, logger hclog.Logger) (*Credentials, error) {
	if !f.Enabled() {
		return nil, errors.New("security: no TLS files given")
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return load(f, clk, logger)
}

// load reads f, checked by the caller. clk and logger may be nil.
func load(f Files, clk clock.Clock, logger hclog.Logger) (*Credentials, error) {
	if clk == nil {
		clk = clock.Real{}
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	c := &Credentials{files: f, clock: clk, logger: logger.Named("tls")}
	if _, err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Identity is who this party's certificate names.
func (c *Credentials) Identity() Identity { return locked.Load(c.mu.RLocker(), &c.self) }

// NotAfter is when the current certificate expires.
func (c *Credentials) NotAfter() time.Time { return locked.Load(c.mu.RLocker(), &c.notAfter) }

// Reload rereads the files. If they are unchanged it does nothing and
// reports false; if they are unusable (unreadable, a key that does not
// match, a certificate the CA did not sign, no identity, another identity
// than before) it keeps the material it had and returns why.
func (c *Credentials) Reload() (bool, error) {
	raw, err := c.readFiles()
	if err != nil {
		return false, err
	}
	return c.reloadFrom(raw)
}

// readFiles reads the CA, certificate and key files.
func (c *Credentials) readFiles() ([3][]byte, error) {
	var raw [3][]byte
	for i, p := range []string{c.files.CA, c.files.Cert, c.files.Key} {
		if p == "" && i > 0 && c.files.CAOnly() {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return raw, fmt.Errorf("security: %w", err)
		}
		raw[i] = b
	}
	return raw, nil
}

// isLoaded says raw is what was last loaded.
func (c *Credentials) isLoaded(raw [3][]byte) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return (c.cert != nil || c.files.CAOnly() && c.roots != nil) && bytes.Equal(raw[0], c.raw[0]) && bytes.Equal(raw[1], c.raw[1]) && bytes.Equal(raw[2], c.raw[2])
}

// reloadFrom is Reload of files already read.
func (c *Credentials) reloadFrom(raw [3][]byte) (bool, error) {
	c.mu.RLock()
	prev := c.self
	c.mu.RUnlock()
	if c.isLoaded(raw) {
		return false, nil
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(raw[0]) {
		return false, fmt.Errorf("security: %s holds no PEM certificate", c.files.CA)
	}
	if c.files.CAOnly() {
		c.mu.Lock()
		c.roots, c.raw = roots, raw
		c.mu.Unlock()
		c.logger.Info("TLS CA loaded (no certificate of this party's own)", "ca", c.files.CA)
		return true, nil
	}
	pair, err := tls.X509KeyPair(raw[1], raw[2])
	if err != nil {
		return false, fmt.Errorf("security: %s and %s: %w", c.files.Cert, c.files.Key, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return false, fmt.Errorf("security: %s: %w", c.files.Cert, err)
		}
	}
	self, err := IdentityOf(leaf)
	if err != nil {
		return false, fmt.Errorf("security: %s: %w", c.files.Cert, err)
	}
	if prev.Role != "" && self != prev {
		return false, fmt.Errorf("security: %s names %s, but this process runs as %s: an identity is not changed by a reload", c.files.Cert, self, prev)
	}
	var inter []*x509.Certificate
	for _, der := range pair.Certificate[1:] {
		ic, err := x509.ParseCertificate(der)
		if err != nil {
			return false, fmt.Errorf("security: %s: %w", c.files.Cert, err)
		}
		inter = append(inter, ic)
	}
	// Checked for what peers will check it for: a renewal issued with
	// the wrong profile would otherwise be installed and refused by all.
	usages := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if self.Role != RoleClient {
		usages = append(usages, x509.ExtKeyUsageServerAuth)
	}
	for _, u := range usages {
		if _, err := verifyChain(leaf, inter, roots, c.clock.Now(), u); err != nil {
			return false, fmt.Errorf("security: %s: %w", c.files.Cert, err)
		}
	}
	c.mu.Lock()
	c.cert, c.self, c.notAfter, c.roots, c.raw = &pair, self, leaf.NotAfter, roots, raw
	c.mu.Unlock()
	c.logger.Info("TLS material loaded", "identity", self.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	return true, nil
}

// Changed says whether the files differ from what was last loaded (a
// read error counts as a change, so that Reload reports it).
func (c *Credentials) Changed() bool {
	raw, err := c.readFiles()
	return err != nil || !c.isLoaded(raw)
}

func (c *Credentials) current() (*tls.Certificate, *x509.CertPool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cert, c.roots
}

// ServerConfig is the tls.Config of a server that admits only peers of
// the given roles (none: every role), each with a certificate the CA
// signed and valid now.
func (c *Credentials) ServerConfig(admit ...Role) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain is checked in VerifyConnection, against the roots of
		// the moment: a tls.Config's ClientCAs cannot be reloaded.
		ClientAuth: tls.RequireAnyClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			cert, _ := c.current()
			return cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := c.verifyPeer(cs, x509.ExtKeyUsageClientAuth, admit)
			return err
		},
	}
}

// ServerConfigCertOptional is ServerConfig for a server some of whose
// callers present no certificate (a client known by a bearer token): a
// certificate presented is checked as ServerConfig checks it; a
// connection without one is let through, and the layers above admit it
// only where a certificate is not needed (Policy.CertOptional).
func (c *Credentials) ServerConfigCertOptional(admit ...Role) *tls.Config {
	cfg := c.ServerConfig(admit...)
	// RequestClientCert, not VerifyClientCertIfGiven: as in ServerConfig,
	// the chain is checked in VerifyConnection against the roots of the
	// moment.
	cfg.ClientAuth = tls.RequestClientCert
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return nil
		}
		_, err := c.verifyPeer(cs, x509.ExtKeyUsageClientAuth, admit)
		return err
	}
	return cfg
}

// ClientConfig is the tls.Config of a client that accepts only a server
// of the given roles (none: every role) with a certificate the CA signed:
// the server is known by the identity its certificate names, not by the
// address dialled (members move between addresses; their identity does
// not).
func (c *Credentials) ClientConfig(accept ...Role) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The server's chain and identity are checked in VerifyConnection,
		// against the roots of the moment, in place of the host name check.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := c.current()
			if cert == nil {
				// No certificate of its own (LoadClient of the CA alone):
				// an empty one sends none.
				return &tls.Certificate{}, nil
			}
			return cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := c.verifyPeer(cs, x509.ExtKeyUsageServerAuth, accept)
			return err
		},
	}
}

// ClientConfigFor is ClientConfig for a server that must be exactly want
// (a master dialling region server rs1 accepts rs1's certificate, not
// another region server's at rs1's address).
func (c *Credentials) ClientConfigFor(want Identity) *tls.Config {
	cfg := c.ClientConfig(want.Role)
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		id, err := c.verifyPeer(cs, x509.ExtKeyUsageServerAuth, []Role{want.Role})
		if err != nil {
			return err
		}
		if id != want {
			return fmt.Errorf("security: dialled %s, but %s answered", want, id)
		}
		return nil
	}
	return cfg
}

// verifyPeer checks the peer's chain against the current roots, for
// usage, and its identity against roles (empty: any role).
func (c *Credentials) verifyPeer(cs tls.ConnectionState, usage x509.ExtKeyUsage, roles []Role) (Identity, error) {
	if len(cs.PeerCertificates) == 0 {
		return Identity{}, errors.New("security: the peer sent no certificate")
	}
	_, roots := c.current()
	leaf := cs.PeerCertificates[0]
	if leaf.IsCA {
		return Identity{}, fmt.Errorf("security: %s presented a CA certificate as its own", describe(leaf))
	}
	if _, err := verifyChain(leaf, cs.PeerCertificates[1:], roots, c.clock.Now(), usage); err != nil {
		return Identity{}, err
	}
	id, err := IdentityOf(leaf)
	if err != nil {
		return Identity{}, err
	}
	if len(roles) > 0 && !slices.Contains(roles, id.Role) {
		return id, fmt.Errorf("security: %s may not connect here (admits %v)", id, roles)
	}
	return id, nil
}

func verifyChain(leaf *x509.Certificate, inter []*x509.Certificate, roots *x509.CertPool, now time.Time, usage x509.ExtKeyUsage) ([][]*x509.Certificate, error) {
	pool := x509.NewCertPool()
	for _, c := range inter {
		pool.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}})
	if err != nil {
		return nil, fmt.Errorf("security: certificate of %s: %w", describe(leaf), err)
	}
	return chains, nil
}

func describe(cert *x509.Certificate) string {
	if id, err := IdentityOf(cert); err == nil {
		return id.String()
	}
	return fmt.Sprintf("%q", cert.Subject.CommonName)
}

// PeerIdentity reads the identity of a verified TLS peer. The connection
// must have been made with a Config of this package, whose
// VerifyConnection already checked the chain.
func PeerIdentity(cs tls.ConnectionState) (Identity, error) {
	if len(cs.PeerCertificates) == 0 {
		return Identity{}, errors.New("security: the peer sent no certificate")
	}
	return IdentityOf(cs.PeerCertificates[0])
}
