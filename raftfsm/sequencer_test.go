package raftfsm

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/baton-dev/baton/store"
)

// TestLateMutationsNumberInLogOrder: writes numbering what they carry
// (Write.Late) through two RaftStores and direct Applies, concurrently,
// all under one Sequencer, commit in the order numbered: every node
// applies the numbers in increasing order, each with its write's insert
// in the same entry.
func TestLateMutationsNumberInLogOrder(t *testing.T) {
	c := newCluster(t, clusterOpts{n: 1}) // one voter: the order is the leader's, and load cannot depose it
	l := c.leader()
	var seq Sequencer
	stores := []*RaftStore{
		NewRaftStore(l.r, l.fsm, RaftStoreConfig{Sequencer: &seq}),
		NewRaftStore(l.r, l.fsm, RaftStoreConfig{Sequencer: &seq}),
	}
	for _, s := range stores {
		defer s.Close()
	}
	var mu sync.Mutex
	n := 0
	next := func() string { // the numbering's one writer: whoever holds seq
		mu.Lock()
		defer mu.Unlock()
		n++
		return fmt.Sprintf("rec/%06d", n)
	}
	var applied []string
	var amu sync.Mutex
	stop := l.fsm.Observe(&PutObserver{Prefixes: []string{"rec/"}, Put: func(k string, _ []byte) {
		amu.Lock()
		applied = append(applied, k)
		amu.Unlock()
	}})
	defer stop()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				id := uint64(g*100 + i + 1)
				if g%4 == 3 { // a direct write, as the audit trail's own
					var err error
					seq.Do(func() {
						var data []byte
						data, err = EncodeProcBatch(Write{Mutations: []Mutation{Put(next(), nil)}})
						if err == nil {
							err = l.r.Apply(data, 0).Error()
						}
					})
					if err != nil {
						t.Error(err)
						return
					}
					continue
				}
				var key string
				err := stores[g%2].Commit(t.Context(), Write{
					Inserts: []store.Proc{{ID: id, Data: []byte("p")}},
					Late:    func() []Mutation { key = next(); return []Mutation{Put(key, []byte(fmt.Sprint(id)))} },
				})
				if err != nil {
					t.Error(err)
					return
				}
				// Committed together: the record's entry held the insert.
				if v, ok := l.fsm.Get(key); !ok || string(v) != fmt.Sprint(id) {
					t.Errorf("record %s of proc %d: %q %v", key, id, v, ok)
				}
				if _, ok := l.fsm.Proc(id); !ok {
					t.Errorf("proc %d not stored with its record %s", id, key)
				}
			}
		})
	}
	wg.Wait()
	c.converge(l)
	amu.Lock()
	defer amu.Unlock()
	if len(applied) != 8*20 || !slices.IsSorted(applied) {
		t.Fatalf("records applied out of their numbers' order (%d):\n%v", len(applied), applied)
	}
}

// TestLateMutationRefusedFailsItsWriteAlone: a Late giving a bad key
// fails its write; the writes batched with it commit.
func TestLateMutationRefusedFailsItsWriteAlone(t *testing.T) {
	c := newCluster(t, clusterOpts{n: 1}) // one voter: the order is the leader's, and load cannot depose it
	l := c.leader()
	s := NewRaftStore(l.r, l.fsm, RaftStoreConfig{})
	defer s.Close()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range 8 {
		wg.Go(func() {
			late := func() []Mutation { return []Mutation{Put(fmt.Sprintf("k/%d", i), nil)} }
			if i == 3 {
				late = func() []Mutation { return []Mutation{Put("", nil)} }
			}
			errs[i] = s.Commit(t.Context(), Write{Inserts: []store.Proc{{ID: uint64(i + 1)}}, Late: late})
		})
	}
	wg.Wait()
	for i, err := range errs {
		_, stored := l.fsm.Proc(uint64(i + 1))
		if (i == 3) != (err != nil) || stored != (err == nil) {
			t.Errorf("write %d: %v, stored %v", i, err, stored)
		}
	}
}

// TestLatePanicFailsItsWriteAlone: a Late that panics fails its write
// with an error, not the node: the writes batched with it commit, the
// Sequencer is free again, and the store takes the next write.
func TestLatePanicFailsItsWriteAlone(t *testing.T) {
	c := newCluster(t, clusterOpts{n: 1})
	l := c.leader()
	var seq Sequencer
	s := NewRaftStore(l.r, l.fsm, RaftStoreConfig{Sequencer: &seq})
	defer s.Close()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range 8 {
		wg.Go(func() {
			late := func() []Mutation { return []Mutation{Put(fmt.Sprintf("k/%d", i), nil)} }
			if i == 3 {
				late = func() []Mutation { panic("a bug in the record's numbering") }
			}
			errs[i] = s.Commit(t.Context(), Write{Inserts: []store.Proc{{ID: uint64(i + 1)}}, Late: late})
		})
	}
	wg.Wait()
	for i, err := range errs {
		_, stored := l.fsm.Proc(uint64(i + 1))
		if (i == 3) != (err != nil) || stored != (err == nil) {
			t.Errorf("write %d: %v, stored %v", i, err, stored)
		}
	}
	seq.Do(func() {}) // not left held
	if err := s.Commit(t.Context(), Write{Inserts: []store.Proc{{ID: 99}}, Late: func() []Mutation { return nil }}); err != nil {
		t.Fatalf("the store after a Late panicked: %v", err)
	}
}
