package domain_test

import (
	"sync/atomic"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/store"
)

// writeCounts counts what the leaders' executors write, by kind: the
// writes a region costs, and their bytes (a benchmark's accounting).
type writeCounts struct {
	writes, inserts, updates, deletes, muts atomic.Int64
	procBytes, mutBytes                     atomic.Int64
}

// hook wraps each executor's store of a master with the counts; give it
// to cluster.Config's adjustment, chained with any other.
func (c *writeCounts) hook(nc *cluster.Config) {
	prev := nc.Executor
	nc.Executor = func(pc *procedure.Config) {
		if prev != nil {
			prev(pc)
		}
		if inner, ok := pc.Store.(countedInner); ok {
			pc.Store = &countingStore{countedInner: inner, c: c}
		}
	}
}

type countedInner interface {
	store.DeleteMutator
	store.Reader
}

type countingStore struct {
	countedInner
	c *writeCounts
}

func (s *countingStore) add(procs []store.Proc, muts []store.Mutation) {
	s.c.writes.Add(1)
	for _, p := range procs {
		s.c.procBytes.Add(int64(len(p.Data)))
	}
	s.c.muts.Add(int64(len(muts)))
	for _, m := range muts {
		s.c.mutBytes.Add(int64(len(m.Key) + len(m.Value)))
	}
}

func (s *countingStore) Insert(p store.Proc, children []store.Proc) error {
	return s.InsertAndMutate(p, children, nil)
}
func (s *countingStore) Update(p store.Proc) error { return s.UpdateAndMutate(p, nil) }
func (s *countingStore) Delete(ids []uint64) error { return s.DeleteAndMutate(ids, nil) }

func (s *countingStore) InsertAndMutate(p store.Proc, children []store.Proc, muts []store.Mutation) error {
	s.add(append([]store.Proc{p}, children...), muts)
	s.c.inserts.Add(int64(len(children)))

	s.c.updates.Add(1)
	return s.countedInner.InsertAndMutate(p, children, muts)
}

func (s *countingStore) UpdateAndMutate(p store.Proc, muts []store.Mutation) error {
	s.add([]store.Proc{p}, muts)
	s.c.updates.Add(1)
	return s.countedInner.UpdateAndMutate(p, muts)
}

func (s *countingStore) DeleteAndMutate(ids []uint64, muts []store.Mutation) error {
	s.add(nil, muts)
	s.c.deletes.Add(int64(len(ids)))
	return s.countedInner.DeleteAndMutate(ids, muts)
}
