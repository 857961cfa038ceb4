package security

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// A development CA and its certificates (`baton tls ca create`, `baton
// tls cert create`), as `consul tls` and `nomad tls` make them: ECDSA
// P-256 keys, written with 0600 permissions. A production cluster may use
// any CA whose certificates carry the baton:// URI SAN.

// CA is a certificate authority able to sign.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is Cert encoded.
	PEM []byte
}

// NewCA makes a self-signed CA valid from now for validity.
func NewCA(name string, now time.Time, validity time.Duration) (*CA, []byte, error) {
	if validity <= 0 {
		return nil, nil, errors.New("security: a CA's validity must be positive")
	}
	key, serial, err := newKeyAndSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Baton"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, keyPEM, nil
}

// LoadCA reads a CA certificate and its key from PEM files.
func LoadCA(certPath, keyPath string) (*CA, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("security: %w", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("security: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("security: %s holds no PEM certificate", certPath)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("security: %s: %w", certPath, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("security: %s is not a CA certificate", certPath)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("security: %s holds no PEM key", keyPath)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("security: %s: %w", keyPath, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("security: %s is not the key of %s", keyPath, certPath)
	}
	return &CA{Cert: cert, Key: key, PEM: certPEM}, nil
}

// CertRequest says what certificate to sign.
type CertRequest struct {
	Identity Identity
	// Hosts are DNS names and IP addresses the holder serves on (for
	// tools that check host names; Baton itself checks the identity).
	Hosts     []string
	NotBefore time.Time
	NotAfter  time.Time
}

// Sign makes a certificate for req and its key, both PEM. Masters and
// region servers both serve and dial, so theirs are good for both; a
// client's only dials.
func (ca *CA) Sign(req CertRequest) (certPEM, keyPEM []byte, err error) {
	if err := req.Identity.Validate(); err != nil {
		return nil, nil, err
	}
	if !req.NotAfter.After(req.NotBefore) {
		return nil, nil, errors.New("security: a certificate must end after it starts")
	}
	if req.NotAfter.After(ca.Cert.NotAfter) {
		return nil, nil, fmt.Errorf("security: the certificate would outlive its CA (which ends %s)", ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, serial, err := newKeyAndSerial()
	if err != nil {
		return nil, nil, err
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if req.Identity.Role != RoleClient {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.Identity.String(), Organization: []string{"Baton"}},
		NotBefore:    req.NotBefore,
		NotAfter:     req.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		URIs:         []*url.URL{req.Identity.URI()},
	}
	for _, h := range req.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// newKeyAndSerial is a fresh P-256 key and a random 127-bit serial for
// the certificate it goes with.
func newKeyAndSerial() (*ecdsa.PrivateKey, *big.Int, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	return key, serial, nil
}

// WriteFiles writes each path's content with 0600 permissions, refusing
// to overwrite an existing file (a CA key replaced by mistake cannot be
// got back) unless force. Nothing is written if any path is refused.
func WriteFiles(force bool, files map[string][]byte) error {
	if !force {
		for p := range files {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("security: %s exists (--force replaces it)", p)
			}
		}
	}
	for p, b := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		// A fresh file of a name nobody could plant (CreateTemp: 0600,
		// O_EXCL), renamed over p: a symlink at a predictable name would
		// otherwise be written through.
		f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*.tmp")
		if err != nil {
			return err
		}
		_, werr := f.Write(b)
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			_ = os.Remove(f.Name())
			return err
		}
		if err := os.Rename(f.Name(), p); err != nil {
			_ = os.Remove(f.Name())
			return err
		}
	}
	return nil
}
