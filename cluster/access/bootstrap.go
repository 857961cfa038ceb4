package access

import (
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/security"
)

// The way in: the first leader of a cluster enforcing access control
// makes the bootstrap token and tells it once (BootRecord says it did);
// every leader binds the clients of its InitialGrants that are unbound
// and not revoked.

// InitialGrantWrites bind, as master masterID, the clients of this
// master's InitialGrants that are neither bound nor revoked; granted
// names them ("name=permission", sorted).
func (a *ACL) InitialGrantWrites(masterID string, now int64) (muts []raftfsm.Mutation, granted []string) {
	for name, perm := range a.initialGrants {
		if _, ok := a.state.Get(CertPrefix + name); ok {
			continue
		}
		if _, revoked := a.state.Get(RevokedPrefix + name); revoked {
			continue // 'acl revoke' stands until 'acl grant'
		}
		granted = append(granted, name+"="+perm.String())
		muts = append(muts, raftfsm.Put(CertPrefix+name, MustJSON(Entry{Permission: perm.String(), CreatedMs: now, CreatedBy: "master/" + masterID + InitialGrantMark})))
	}
	slices.Sort(granted)
	return muts, granted
}

// BootToldWrites record that master masterID told the bootstrap token
// with accessor, so that no later leader replaces it.
func BootToldWrites(masterID, accessor string, now int64) []raftfsm.Mutation {
	rec := BootRecord{AtMs: now, By: masterID, Accessor: accessor, Announced: true}
	return []raftfsm.Mutation{raftfsm.Put(BootKey, MustJSON(rec))}
}

// MarkBootTold notes that the pending bootstrap token is being told, and
// says whether it was already: it is told once, however often recording
// that fails.
func (a *ACL) MarkBootTold() (already bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	already = a.bootTold
	a.bootTold = true
	return already
}

// BootRecorded notes that the bootstrap token is recorded as told: no
// token is pending any more.
func (a *ACL) BootRecorded() {
	a.mu.Lock()
	a.bootPending = nil
	a.mu.Unlock()
}

// PendingBoot is a bootstrap token this master made and has yet to see
// recorded as told. Given says the operator gave it
// (UseBootstrapToken): it is told to no one, the operator has it.
type PendingBoot struct {
	Accessor, Secret string
	Given            bool
}

// UseBootstrapToken makes token, which an operator made (agent
// --acl-bootstrap-token-file), the bootstrap token this master stores if
// it is the first leader, instead of making one: every master given the
// same token stores the same one, whichever leads first. It must have the
// form and strength of a made one (security.CheckGivenToken).
func (a *ACL) UseBootstrapToken(token string) error {
	if _, _, err := security.CheckGivenToken(token); err != nil {
		return err
	}
	a.bootGiven = token
	return nil
}

// givenStored says the token recorded as the bootstrap token is the given
// one (accessor acc, hash), already in the state.
func (a *ACL) givenStored(recorded, acc, hash string) bool {
	if recorded != acc {
		return false
	}
	v, ok := a.state.Get(TokenPrefix + acc)
	var e Entry
	return ok && json.Unmarshal(v, &e) == nil && e.Hash == hash
}

// ErrBootstrapWaits is BootstrapWrites' answer while a bootstrap token
// with a TTL waits for cluster version 2, below which a master of 0.1.0
// would accept it for ever. A cluster whose members all run this release
// raises it as soon as each has registered, so the token comes a tick or
// so later; one that still runs 0.1.0 members (access control turned on
// mid-upgrade) gets it once the upgrade is done.
var ErrBootstrapWaits = errors.New("access: the bootstrap token's TTL waits for cluster version 2")

// GivenBootstrapIgnored says the bootstrap token given to this master
// (--acl-bootstrap-token-file) is not the cluster's: the cluster was
// bootstrapped with another (a different file on another master, a file
// changed since, a token made and printed before), which stays. The
// accessors are not secrets: they are what the operator compares.
func (a *ACL) GivenBootstrapIgnored() (given, recorded string, ignored bool) {
	if a.bootGiven == "" {
		return "", "", false
	}
	v, ok := a.state.Get(BootKey)
	if !ok {
		return "", "", false
	}
	var rec BootRecord
	if json.Unmarshal(v, &rec) != nil || !rec.Announced || rec.Accessor == "" {
		return "", "", false
	}
	acc, _, err := security.CheckGivenToken(a.bootGiven)
	if err != nil || acc == rec.Accessor {
		return "", "", false
	}
	return acc, rec.Accessor, true
}

// BootstrapWrites works out, on the leader, what the bootstrap needs: nil
// when the bootstrap token was made and told; the pending token, with the
// writes that make it (none if its writes committed already), when this
// master made it and has yet to tell it; ErrBootstrapWaits.
func (a *ACL) BootstrapWrites(masterID string, now int64, ttl time.Duration) (*PendingBoot, []raftfsm.Mutation, error) {
	var rec BootRecord
	if v, ok := a.state.Get(BootKey); ok {
		if json.Unmarshal(v, &rec) == nil && rec.Announced {
			return nil, nil, nil
		}
	}
	if ttl > 0 && !a.format.Allows(version.Format2) {
		return nil, nil, ErrBootstrapWaits
	}
	a.mu.Lock()
	pending := a.bootPending
	a.mu.Unlock()
	if pending != nil && rec.Accessor == pending.Accessor {
		if _, ok := a.state.Get(TokenPrefix + pending.Accessor); ok {
			return pending, nil, nil // committed: tell it
		}
	}
	var muts []raftfsm.Mutation
	if pending != nil && pending.Accessor != rec.Accessor {
		// An earlier try of this master's, which may yet commit: it goes
		// with the next.
		muts = append(muts, raftfsm.Del(TokenPrefix+pending.Accessor))
	}
	var tm []raftfsm.Mutation
	var acc, secret string
	if a.bootGiven != "" {
		var hash string
		acc, hash, _ = security.CheckGivenToken(a.bootGiven) // checked by UseBootstrapToken
		if a.givenStored(rec.Accessor, acc, hash) {
			// Stored by a master that stopped before recording it as
			// told: it is the given one all the same, and keeps the
			// time it was made (its TTL runs from then).
			pending = &PendingBoot{Accessor: acc, Secret: a.bootGiven, Given: true}
			a.mu.Lock()
			a.bootPending, a.bootTold = pending, false
			a.mu.Unlock()
			return pending, muts, nil
		}
		tm, _ = a.tokenWrites(acc, hash, "bootstrap", security.PermAdmin, "master/"+masterID+" (bootstrap)", ttl)
		secret = a.bootGiven
	} else {
		// None yet, or one whose secret only another master knew: make
		// one (the other's token goes).
		var err error
		tm, acc, secret, _, err = a.NewToken("bootstrap", security.PermAdmin, "master/"+masterID+" (bootstrap)", ttl)
		if err != nil {
			return nil, nil, err
		}
	}
	if rec.Accessor != "" && rec.Accessor != acc {
		muts = append(muts, raftfsm.Del(TokenPrefix+rec.Accessor))
	}
	pending = &PendingBoot{Accessor: acc, Secret: secret, Given: a.bootGiven != ""}
	muts = append(muts, tm...)
	muts = append(muts, raftfsm.Put(BootKey, MustJSON(BootRecord{AtMs: now, By: masterID, Accessor: pending.Accessor})))
	a.mu.Lock()
	a.bootPending, a.bootTold = pending, false
	a.mu.Unlock()
	return pending, muts, nil
}
