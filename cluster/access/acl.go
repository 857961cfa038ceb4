package access

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/security"
)

// Reader reads a key of the replicated domain state (the local FSM).
type Reader interface {
	Get(key string) ([]byte, bool)
}

// ACL is access control's view of the replicated state: who holds what
// (bindings, tokens, revocations, and this master's InitialGrants for
// clients not bound yet), and the writes that change it. The leader
// commits the writes; every master reads its own state.
type ACL struct {
	state         Reader
	clock         clock.Clock
	initialGrants map[string]security.Permission
	// format is the committed cluster version: what format 2 added
	// (revocations, token expiry, token uses) is written only once it
	// allows it, since a master of 0.1.0 misreads it.
	format version.Gate
	// bootGiven is the bootstrap token the operator gave
	// (UseBootstrapToken), if any: stored instead of a made one.
	bootGiven string

	mu   sync.Mutex
	uses tokenUses // tokens' last uses noted here
	// bootPending is the bootstrap token this master made and has not
	// yet recorded as told; bootTold, that it told it.
	bootPending *PendingBoot
	bootTold    bool
}

// NewACL is access control over state, with this master's InitialGrants,
// writing what the committed cluster version (format; nil: format 1)
// allows.
func NewACL(state Reader, clk clock.Clock, initialGrants map[string]security.Permission, format version.Gate) *ACL {
	return &ACL{state: state, clock: clk, initialGrants: initialGrants, format: format}
}

// needFormat2 refuses, FAILED_PRECONDITION, call's write of what format 2
// added while the cluster version is below it; misread says what a master
// of an older release would make of it, then, and instead what the caller
// may do besides finishing the upgrade.
func (a *ACL) needFormat2(call, what, misread, instead string) error {
	if a.format.Allows(version.Format2) {
		return nil
	}
	f := version.Format1
	if a.format != nil {
		f = a.format()
	}
	return status.Errorf(codes.FailedPrecondition, "admin: %s: %s needs the cluster version at %s, and it is %s: %s; "+
		"finish the upgrade (every master on %s or later; 'baton cluster status' shows the cluster version)%s",
		call, what, version.Format2, f, misread, version.Release, instead)
}

// GrantWrites bind client to perm, made by by, and lift a revocation of
// it; the entry is what they write.
func (a *ACL) GrantWrites(client string, perm security.Permission, by string) ([]raftfsm.Mutation, Entry) {
	e := Entry{Permission: perm.String(), CreatedMs: a.clock.Now().UnixMilli(), CreatedBy: by}
	return []raftfsm.Mutation{raftfsm.Put(CertPrefix+client, MustJSON(e)), raftfsm.Del(RevokedPrefix + client)}, e
}

// RevokeWrites unbind client and record by whom it was revoked. The
// revocation is recorded whether or not this master's InitialGrants list
// the client: another master's may, and would bind it again when it
// leads. Below cluster version 2 it is refused: 0.1.0 ignores the record,
// so unbinding alone is what 0.1.0 did, which a 0.1.0 leader undoes from
// its InitialGrants (no master knows another's), and a 0.1.0 master goes
// on granting them to the client meanwhile: a revocation that does not
// hold is worse than none the operator knows of.
func (a *ACL) RevokeWrites(client, by string) ([]raftfsm.Mutation, error) {
	if err := a.needFormat2("acl revoke", "a revocation",
		fmt.Sprintf("a master of 0.1.0 would go on granting client %q its --acl-initial-grants, and bind it again when it leads", client),
		", then revoke"); err != nil {
		return nil, err
	}
	rev := Revocation{AtMs: a.clock.Now().UnixMilli(), By: by}
	return []raftfsm.Mutation{raftfsm.Del(CertPrefix + client), raftfsm.Put(RevokedPrefix+client, MustJSON(rev))}, nil
}

// DeleteTokenWrites delete the token with accessor and its last use.
func DeleteTokenWrites(accessor string) []raftfsm.Mutation {
	return []raftfsm.Mutation{raftfsm.Del(TokenPrefix + accessor), raftfsm.Del(TokenUsePrefix + accessor)}
}

// ClientPrincipal is client name with the permission bound to it.
func (a *ACL) ClientPrincipal(name string) Principal {
	p := Principal{Kind: KindClient, ID: name}
	if v, ok := a.state.Get(CertPrefix + name); ok {
		var e Entry
		if json.Unmarshal(v, &e) == nil {
			p.Perm, _ = security.ParsePermission(e.Permission)
		}
		return p
	}
	// Not bound yet (the leader binds it at its next tick): this master's
	// own configuration already says what it holds, so a client calling
	// the moment a leader is elected is not refused. Unless revoked: then
	// it holds nothing, whatever the configuration says.
	if _, revoked := a.state.Get(RevokedPrefix + name); !revoked {
		p.Perm = a.initialGrants[name]
	}
	return p
}

// TokenPrincipal checks a bearer token against the local state.
func (a *ACL) TokenPrincipal(tok string) (Principal, error) {
	acc, secret, err := security.ParseToken(tok)
	if err != nil {
		return Principal{Kind: KindAnonymous}, status.Error(codes.Unauthenticated, "admin: the call's bearer token is malformed: want 'authorization: Bearer bt_<accessor>_<secret>' as 'baton acl token create' printed it")
	}
	v, ok := a.state.Get(TokenPrefix + acc)
	var e Entry
	if !ok || json.Unmarshal(v, &e) != nil || !security.TokenMatches(secret, e.Hash) {
		// Not named by its accessor, which anyone may know: its refusals
		// would be charged to the token's holder and push out its own
		// records, and made-up accessors would be endless principals.
		// The caller is its certificate or its address (the admin API's resolve); the
		// accessor (hex, checked by ParseToken) is in the message only.
		return Principal{Kind: KindAnonymous}, status.Errorf(codes.Unauthenticated, "admin: token %s is not recognized (deleted, mistyped, or of another cluster)", acc)
	}
	now := a.clock.Now()
	if e.ExpiresMs != 0 && now.UnixMilli() >= e.ExpiresMs {
		return Principal{Kind: KindToken, ID: acc, Name: e.Name}, status.Errorf(codes.Unauthenticated, "admin: token %s (%s) expired at %s: an admin makes a new one ('baton acl token create', --ttl for how long it lasts)",
			acc, e.Name, time.UnixMilli(e.ExpiresMs).UTC().Format(time.RFC3339))
	}
	a.noteTokenUse(acc, now)
	perm, _ := security.ParsePermission(e.Permission)
	return Principal{Kind: KindToken, ID: acc, Name: e.Name, Perm: perm, Token: tok}, nil
}

// NewToken makes a token that lasts ttl (0: until deleted): the writes
// that store it, its accessor and secret, and its entry. A ttl is refused
// below cluster version 2: a master of 0.1.0 ignores the expiry and would
// accept the token for ever.
func (a *ACL) NewToken(name string, perm security.Permission, by string, ttl time.Duration) (muts []raftfsm.Mutation, accessor, secret string, e Entry, err error) {
	if ttl > 0 {
		if err := a.needFormat2("acl token create", "a token's ttl",
			"a master of 0.1.0 would accept the token after it expires", ", or make it without a ttl"); err != nil {
			return nil, "", "", Entry{}, err
		}
	}
	tok, acc, hash, err := security.NewToken()
	if err != nil {
		return nil, "", "", Entry{}, err
	}
	muts, e = a.tokenWrites(acc, hash, name, perm, by, ttl)
	return muts, acc, tok, e, nil
}

// tokenWrites store the token with accessor acc and its secret's hash.
func (a *ACL) tokenWrites(acc, hash, name string, perm security.Permission, by string, ttl time.Duration) ([]raftfsm.Mutation, Entry) {
	now := a.clock.Now()
	e := Entry{Permission: perm.String(), Name: name, Hash: hash, CreatedMs: now.UnixMilli(), CreatedBy: by}
	if ttl > 0 {
		e.ExpiresMs = now.Add(ttl).UnixMilli()
	}
	return []raftfsm.Mutation{raftfsm.Put(TokenPrefix+acc, MustJSON(e))}, e
}

// CertGrants are the replicated bindings (read by sc; none if nil), and
// the initial grants this master honours before they are bound
// (ClientPrincipal: not a revoked one), sorted by client: what region
// servers are told to judge clients' certificates by.
func (a *ACL) CertGrants(sc Scanner) []*rspb.ClientGrant {
	held := map[string]string{}
	for name, perm := range a.initialGrants {
		if _, revoked := a.state.Get(RevokedPrefix + name); !revoked {
			held[name] = perm.String()
		}
	}
	if sc != nil {
		sc.Scan(CertPrefix, func(k string, v []byte) bool {
			var e Entry
			name := strings.TrimPrefix(k, CertPrefix)
			if json.Unmarshal(v, &e) != nil {
				// Unreadable, so it grants nothing here either.
				e.Permission = ""
			}
			held[name] = e.Permission
			return true
		})
	}
	out := make([]*rspb.ClientGrant, 0, len(held))
	for name, perm := range held {
		if p, err := security.ParsePermission(perm); err == nil && p != security.PermNone {
			out = append(out, &rspb.ClientGrant{Client: name, Permission: perm})
		}
	}
	slices.SortFunc(out, func(a, b *rspb.ClientGrant) int { return strings.Compare(a.GetClient(), b.GetClient()) })
	return out
}
