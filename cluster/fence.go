package cluster

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// fencedStore is the executor's store: a RaftStore that accepts writes only
// while this node is leader in the term the executor was established in.
//
// Why: raft's NotifyCh keeps only the latest value, so a leadership lost
// and regained within one read looks like no change at all, and even when
// both transitions are seen the old executor runs until it is stopped. In
// between, another leader may have run (and finished) the same procedures.
// An executor from term T writing in term T' > T would write from stale
// memory, overwriting newer images. With the fence its first write fails,
// the executor stops itself (store failure) and the leader loop rebuilds it
// from the FSM.
//
// The check precedes raft.Apply, so a node that loses and regains
// leadership between the check and the Apply would slip through it; the
// FSM's own check of the batch's FenceTerm against the entry's term
// refuses such an entry on every node.
type fencedStore struct {
	*raftfsm.RaftStore
	n    *Node
	term uint64
}

var _ store.Store = (*fencedStore)(nil)

func (s *fencedStore) check() error {
	// State first, then term: leader now and still term T afterwards means
	// leader of T at the first read, with no later term in between.
	if s.n.raft.State() != raft.Leader || s.n.raft.CurrentTerm() != s.term {
		return fmt.Errorf("cluster: store of term %d: %w", s.term, s.n.notLeader())
	}
	return nil
}

func (s *fencedStore) Load(fn func(store.Proc) error) (store.LoadInfo, error) {
	if err := s.check(); err != nil {
		return store.LoadInfo{}, err
	}
	info, err := s.RaftStore.Load(fn)
	if err == nil {
		err = s.check() // the FSM state must be that of term T's leader
	}
	return info, err
}

func (s *fencedStore) Insert(proc store.Proc, children []store.Proc) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.RaftStore.Insert(proc, children)
}

func (s *fencedStore) Update(proc store.Proc) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.RaftStore.Update(proc)
}

func (s *fencedStore) Delete(ids []uint64) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.RaftStore.Delete(ids)
}

// InsertWith is fenced like Insert.
func (s *fencedStore) InsertWith(proc store.Proc, children []store.Proc, muts []raftfsm.Mutation) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.RaftStore.InsertWith(proc, children, muts)
}

// UpdateWith is fenced like Update.
func (s *fencedStore) UpdateWith(proc store.Proc, muts []raftfsm.Mutation) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.RaftStore.UpdateWith(proc, muts)
}

// Commit is fenced like Update.
func (s *fencedStore) Commit(ctx context.Context, w raftfsm.Write) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.RaftStore.Commit(ctx, w)
}

var _ store.Reader = (*fencedStore)(nil)

// Proc implements store.Reader from the local FSM, which has applied every
// write of this leader's executor by the time the write returned. Reads
// are not fenced: a leader that lost its term reads what the FSM holds.
func (s *fencedStore) Proc(id uint64) ([]byte, bool) { return s.n.fsm.Proc(id) }
