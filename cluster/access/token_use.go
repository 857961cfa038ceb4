package access

import (
	"encoding/json"
	"time"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/raftfsm"
)

// tokenUses is when each token was last used on this master, kept in
// memory: every master notes the calls it authenticates; the leader
// writes them, at most once per TokenUseGrain per token
// (TokenUseWrites), so that a busy token costs a write a minute. What a
// standby alone saw (a read it served itself) is written only if it
// leads later: acl list's last use is the leader's view, to the minute.
type tokenUses struct {
	at map[string]int64 // accessor → unix ms
}

// noteTokenUse records a call authenticated by the token with accessor.
func (a *ACL) noteTokenUse(accessor string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.uses.at == nil {
		a.uses.at = map[string]int64{}
	}
	a.uses.at[accessor] = max(a.uses.at[accessor], at.UnixMilli())
}

// persistedTokenUse is the last use of the token with accessor in the
// replicated state, 0 if none.
func (a *ACL) persistedTokenUse(accessor string) int64 {
	v, ok := a.state.Get(TokenUsePrefix + accessor)
	if !ok {
		return 0
	}
	var u TokenUse
	if json.Unmarshal(v, &u) != nil {
		return 0
	}
	return u.AtMs
}

// TokenLastUse is when the token with accessor was last used, as far as
// this master knows: the replicated record or its own later note.
func (a *ACL) TokenLastUse(accessor string) int64 {
	at := a.persistedTokenUse(accessor)
	a.mu.Lock()
	defer a.mu.Unlock()
	return max(at, a.uses.at[accessor])
}

// TokenUseWrites are the writes that bring the replicated last uses up to
// this master's notes, for the tokens whose record is a grain or more
// behind. Notes of tokens deleted meanwhile are dropped, never written.
// Below cluster version 2 nothing is written (0.1.0 would leave the record
// behind when it deletes the token): the notes wait in memory, and a last
// use is then this master's own view, lost when it stops.
func (a *ACL) TokenUseWrites() []raftfsm.Mutation {
	write := a.format.Allows(version.Format2)
	a.mu.Lock()
	notes := make(map[string]int64, len(a.uses.at))
	for acc, at := range a.uses.at {
		notes[acc] = at
	}
	a.mu.Unlock()
	var muts []raftfsm.Mutation
	for acc, at := range notes {
		if _, ok := a.state.Get(TokenPrefix + acc); !ok {
			a.mu.Lock()
			delete(a.uses.at, acc)
			a.mu.Unlock()
			continue
		}
		if !write || at-a.persistedTokenUse(acc) < TokenUseGrain.Milliseconds() {
			continue
		}
		muts = append(muts, raftfsm.Put(TokenUsePrefix+acc, MustJSON(TokenUse{AtMs: at})))
	}
	return muts
}
