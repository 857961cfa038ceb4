package cluster

import (
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// The executor's store keeps the replicated domain state: a step's Put and
// Delete (procedure.Context) travel in the same Raft entry as the step's
// transition.
var _ store.DomainStore = (*fencedStore)(nil)

// InsertDomain implements store.DomainStore, fenced like Insert.
func (s *fencedStore) InsertDomain(proc store.Proc, children []store.Proc, muts []store.Mutation) error {
	return s.InsertWith(proc, children, toRaftMutations(muts))
}

// UpdateDomain implements store.DomainStore, fenced like Update.
func (s *fencedStore) UpdateDomain(proc store.Proc, muts []store.Mutation) error {
	return s.UpdateWith(proc, toRaftMutations(muts))
}

// GetDomain implements store.DomainStore from the local FSM, which on the
// leader has applied every entry this executor committed.
func (s *fencedStore) GetDomain(key string) ([]byte, bool) {
	return s.n.fsm.Get(key)
}

// ScanDomain implements store.DomainStore from the local FSM.
func (s *fencedStore) ScanDomain(prefix string, fn func(string, []byte) bool) {
	s.n.fsm.Scan(prefix, fn)
}

func toRaftMutations(muts []store.Mutation) []raftfsm.Mutation {
	out := make([]raftfsm.Mutation, len(muts))
	for i, m := range muts {
		if m.Delete {
			out[i] = raftfsm.Del(m.Key)
		} else {
			out[i] = raftfsm.Put(m.Key, m.Value)
		}
	}
	return out
}
