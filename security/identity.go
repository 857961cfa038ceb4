// Package security gives Baton's three channels (Raft between masters,
// gRPC among masters, region servers and clients, HTTP for the console
// and metrics) mutual TLS 1.3, and names who is at the other end.
//
// Every party holds a certificate signed by the cluster's CA whose one
// URI SAN says what it is: baton://master/<id>, baton://regionserver/<id>
// or baton://client/<name> (Identity). A connection is accepted only from
// a certificate the CA signed, and each channel then admits only the roles
// it serves: Raft only masters; a region server's RPCs (the rspb.Master
// service) only region servers, each for its own id; the RegionServer
// service only masters; the admin API and the console clients and masters
// (a standby forwards calls to the leader under its own identity). Under
// ClientAuth either or token, a master's admin API and console also let a
// client without a certificate in, carrying a bearer token
// (MasterPolicyFor). Who may do what among clients (read, operate, admin)
// is decided above this package; this one only says who is calling.
//
// Certificates and the CA are reread on Credentials.Reload (the agent
// calls it on SIGHUP and when the files change), so a rotation needs no
// restart; connections already open keep the certificate they were opened
// with, as in every TLS server.
//
// docs/security.md says, for operators, who may call what and how to
// rotate certificates.
package security

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"regexp"
)

// Role is what a certificate's holder is.
type Role string

// The roles a certificate can name.
const (
	RoleMaster       Role = "master"
	RoleRegionServer Role = "regionserver"
	RoleClient       Role = "client"
)

// Roles lists every role, in a fixed order.
var Roles = []Role{RoleMaster, RoleRegionServer, RoleClient}

// Valid says r is one of Roles.
func (r Role) Valid() bool {
	return r == RoleMaster || r == RoleRegionServer || r == RoleClient
}

// Identity is who holds a certificate: its role and the id (a master's or
// region server's node id, a client's name) within that role.
type Identity struct {
	Role Role
	ID   string
}

// uriScheme is the scheme of an identity's URI SAN.
const uriScheme = "baton"

// idPattern is what an id may be: a node id (cluster.Config's ID rules
// are no wider) or a client's name.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Validate reports what is wrong with i.
func (i Identity) Validate() error {
	if !i.Role.Valid() {
		return fmt.Errorf("security: role %q: want one of master, regionserver, client", i.Role)
	}
	if !idPattern.MatchString(i.ID) {
		return fmt.Errorf("security: id %q: want 1–128 letters, digits, '.', '_' or '-', starting with a letter or digit", i.ID)
	}
	return nil
}

// URI is the identity's URI SAN, baton://<role>/<id>.
func (i Identity) URI() *url.URL {
	return &url.URL{Scheme: uriScheme, Host: string(i.Role), Path: "/" + i.ID}
}

func (i Identity) String() string { return i.URI().String() }

// ErrNoIdentity says a certificate names no Baton identity.
var ErrNoIdentity = errors.New("security: the certificate names no baton:// identity")

// IdentityOf reads the identity a certificate names: its one baton:// URI
// SAN. A certificate with none, or more than one, names nobody.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	var found []Identity
	for _, u := range cert.URIs {
		if u.Scheme != uriScheme {
			continue
		}
		id, err := parseIdentityURI(u)
		if err != nil {
			return Identity{}, err
		}
		found = append(found, id)
	}
	switch len(found) {
	case 0:
		return Identity{}, ErrNoIdentity
	case 1:
		return found[0], nil
	}
	return Identity{}, fmt.Errorf("security: the certificate names %d baton:// identities, want one", len(found))
}

func parseIdentityURI(u *url.URL) (Identity, error) {
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || len(u.Path) < 2 || u.Path[0] != '/' {
		return Identity{}, fmt.Errorf("security: identity %q: want baton://<role>/<id>", u.String())
	}
	id := Identity{Role: Role(u.Host), ID: u.Path[1:]}
	if err := id.Validate(); err != nil {
		return Identity{}, fmt.Errorf("security: identity %q: %w", u.String(), err)
	}
	return id, nil
}
