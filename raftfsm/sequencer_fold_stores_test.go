package raftfsm

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/store"
)

// countingFolder folds into one key per entry and counts each fold's
// done calls.
type countingFolder struct {
	mu     sync.Mutex
	folds  int
	dones  map[int]int
	errs   map[int]error
	folded map[string]int
}

func (f *countingFolder) folder() *Folder {
	f.dones, f.errs, f.folded = map[int]int{}, map[int]error{}, map[string]int{}
	return &Folder{Fold: func(keys []string) ([]Mutation, func(error), error) {
		f.mu.Lock()
		f.folds++
		id := f.folds
		for _, k := range keys {
			f.folded[k]++
		}
		f.mu.Unlock()
		return []Mutation{Put(fmt.Sprintf("folded/%d", id), []byte(strings.Join(keys, ",")))}, func(err error) {
			f.mu.Lock()
			f.dones[id]++
			f.errs[id] = err
			f.mu.Unlock()
		}, nil
	}}
}

// TestTwoStoresOneSequencerFoldOnceEach: two RaftStores share a
// Sequencer; every placeholder is folded once, every fold's done called
// once, before its writers hear; the placeholders never reach the state.
func TestTwoStoresOneSequencerFoldOnceEach(t *testing.T) {
	c := newCluster(t, clusterOpts{n: 1})
	l := c.leader()
	var seq Sequencer
	cf := &countingFolder{}
	seq.SetFolder(cf.folder())
	a := NewRaftStore(l.r, l.fsm, RaftStoreConfig{Sequencer: &seq})
	b := NewRaftStore(l.r, l.fsm, RaftStoreConfig{Sequencer: &seq})
	defer a.Close()
	defer b.Close()
	var wg sync.WaitGroup
	var next atomic.Uint64
	var failed atomic.Int64
	for w := 0; w < 16; w++ {
		wg.Go(func() {
			for i := 0; i < 40; i++ {
				id := next.Add(1)
				s := a
				if id%2 == 0 {
					s = b
				}
				bad := id%13 == 0
				err := s.Commit(t.Context(), Write{Inserts: []store.Proc{{ID: id}}, Late: func() []Mutation {
					m := []Mutation{Put(fmt.Sprintf("%sp%d", PlaceholderPrefix, id), nil)}
					if bad {
						m = append(m, Put("", nil))
					}
					return m
				}})
				if (err != nil) != bad {
					t.Errorf("write %d: %v", id, err)
				}
				if err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	cf.mu.Lock()
	defer cf.mu.Unlock()
	for id := 1; id <= cf.folds; id++ {
		if cf.dones[id] != 1 {
			t.Errorf("fold %d: done called %d times", id, cf.dones[id])
		}
	}
	for k, n := range cf.folded {
		if n != 1 {
			t.Errorf("%q folded %d times", k, n)
		}
	}
	if len(cf.folded)+int(failed.Load()) != 640 {
		t.Errorf("%d folded, %d failed of 640", len(cf.folded), failed.Load())
	}
	l.fsm.Scan("\x00", func(k string, _ []byte) bool { t.Errorf("placeholder %q written", k); return true })
	t.Logf("%d folds", cf.folds)
}

// TestFoldDoneOnLeadershipLoss: an entry proposed with a fold on a
// leader that loses leadership before commit: done hears the failure, once.
func TestFoldDoneOnLeadershipLoss(t *testing.T) {
	c := newCluster(t, clusterOpts{n: 3})
	l := c.leader()
	var seq Sequencer
	cf := &countingFolder{}
	seq.SetFolder(cf.folder())
	s := NewRaftStore(l.r, l.fsm, RaftStoreConfig{Sequencer: &seq})
	defer s.Close()
	c.isolate(l)
	errs := make(chan error, 4)
	for i := range 4 {
		go func() {
			errs <- s.Commit(t.Context(), Write{Inserts: []store.Proc{{ID: uint64(100 + i)}}, Late: func() []Mutation {
				return []Mutation{Put(fmt.Sprintf("%sq%d", PlaceholderPrefix, i), nil)}
			}})
		}()
	}
	timeout := time.After(30 * time.Second)
	for range 4 {
		select {
		case err := <-errs:
			t.Logf("write: %v", err)
		case <-timeout:
			t.Fatal("writes not answered")
		}
	}
	cf.mu.Lock()
	defer cf.mu.Unlock()
	for id := 1; id <= cf.folds; id++ {
		if cf.dones[id] != 1 {
			t.Errorf("fold %d: done called %d times", id, cf.dones[id])
		}
		t.Logf("fold %d outcome %v", id, cf.errs[id])
	}
	c.reconnect(l)
}
