package access

import "github.com/baton-dev/baton/security"

// Kinds of principal.
const (
	KindClient    = "client"
	KindToken     = "token"
	KindMaster    = "master"
	KindAnonymous = "anonymous"
)

// Principal is who makes a call, as far as access control and the audit
// trail are concerned.
type Principal struct {
	Kind string
	ID   string // client name, token accessor or master id
	Name string // a token's name
	Perm security.Permission
	// Token is the bearer token the call carried, passed on when it is
	// forwarded (the leader checks it against its own state).
	Token string
}

func (p Principal) String() string {
	if p.Kind == KindAnonymous {
		return KindAnonymous
	}
	return p.Kind + "/" + p.ID
}
