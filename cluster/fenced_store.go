package cluster

import (
	"context"

	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// The executor's store keeps the replicated domain state: a step's Put and
// Delete (procedure.Context) travel in the same Raft entry as the step's
// transition.
var _ store.MutationStore = (*fencedStore)(nil)

// InsertAndMutate implements store.MutationStore, fenced like Insert.
func (s *fencedStore) InsertAndMutate(proc store.Proc, children []store.Proc, muts []store.Mutation) error {
	return s.InsertWith(proc, children, toRaftMutations(muts))
}

// UpdateAndMutate implements store.MutationStore, fenced like Update.
func (s *fencedStore) UpdateAndMutate(proc store.Proc, muts []store.Mutation) error {
	return s.UpdateWith(proc, toRaftMutations(muts))
}

var _ store.LateMutator = (*fencedStore)(nil)

// InsertAndMutateLate implements store.LateMutator, fenced like Insert:
// late is asked for as the entry is proposed, under the node's Sequencer.
func (s *fencedStore) InsertAndMutateLate(proc store.Proc, children []store.Proc, late func() []store.Mutation) error {
	ps := make([]store.Proc, 0, 1+len(children))
	return s.Commit(context.Background(), raftfsm.Write{
		Inserts: append(append(ps, proc), children...),
		Late:    func() []raftfsm.Mutation { return toRaftMutations(late()) },
	})
}

var _ store.DeleteMutator = (*fencedStore)(nil)

// DeleteAndMutate implements store.DeleteMutator, fenced like Delete.
func (s *fencedStore) DeleteAndMutate(ids []uint64, muts []store.Mutation) error {
	return s.Commit(context.Background(), raftfsm.Write{Deletes: ids, Mutations: toRaftMutations(muts)})
}

// Value implements store.MutationStore from the local FSM, which on the
// leader has applied every entry this executor committed.
func (s *fencedStore) Value(key string) ([]byte, bool) {
	return s.n.fsm.Get(key)
}

// ScanValues implements store.MutationStore from the local FSM.
func (s *fencedStore) ScanValues(prefix string, fn func(string, []byte) bool) {
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

// Sequencer is the node's Sequencer: a direct domain write carrying
// numbered records (the audit trail's) numbers them and calls raft.Apply
// inside its Do, as the executor's store does for a submission's.
func (n *Node) Sequencer() *raftfsm.Sequencer { return &n.seq }
