package admin

import (
	"encoding/json"
	"time"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/raftfsm"
)

// tokenUses is when each token was last used on this master, kept in
// memory: every master notes the calls it authenticates; the leader
// writes them, at most once per access.TokenUseGrain per token
// (tokenUseWrites), so that a busy token costs a write a minute. What a
// standby alone saw (a read it served itself) is written only if it
// leads later: acl list's last use is the leader's view, to the minute.
type tokenUses struct {
	at map[string]int64 // accessor → unix ms
}

// noteTokenUse records a call authenticated by the token with accessor.
func (s *Server) noteTokenUse(accessor string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.uses.at == nil {
		s.uses.at = map[string]int64{}
	}
	s.uses.at[accessor] = max(s.uses.at[accessor], at.UnixMilli())
}

// persistedTokenUse is the last use of the token with accessor in the
// replicated state, 0 if none.
func (s *Server) persistedTokenUse(accessor string) int64 {
	v, ok := s.b.DomainGet(access.TokenUsePrefix + accessor)
	if !ok {
		return 0
	}
	var u access.TokenUse
	if json.Unmarshal(v, &u) != nil {
		return 0
	}
	return u.AtMs
}

// tokenLastUse is when the token with accessor was last used, as far as
// this master knows: the replicated record or its own later note.
func (s *Server) tokenLastUse(accessor string) int64 {
	at := s.persistedTokenUse(accessor)
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(at, s.uses.at[accessor])
}

// tokenUseWrites are the writes that bring the replicated last uses up to
// this master's notes, for the tokens whose record is a grain or more
// behind. Notes of tokens deleted meanwhile are dropped, never written.
func (s *Server) tokenUseWrites() []raftfsm.Mutation {
	s.mu.Lock()
	notes := make(map[string]int64, len(s.uses.at))
	for acc, at := range s.uses.at {
		notes[acc] = at
	}
	s.mu.Unlock()
	var muts []raftfsm.Mutation
	for acc, at := range notes {
		if _, ok := s.b.DomainGet(access.TokenPrefix + acc); !ok {
			s.mu.Lock()
			delete(s.uses.at, acc)
			s.mu.Unlock()
			continue
		}
		if at-s.persistedTokenUse(acc) < access.TokenUseGrain.Milliseconds() {
			continue
		}
		muts = append(muts, raftfsm.Put(access.TokenUsePrefix+acc, access.MustJSON(access.TokenUse{AtMs: at})))
	}
	return muts
}
