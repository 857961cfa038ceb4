package raftfsm

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/store"
)

// TestTwoStoresOneSequencerFoldOnceEach: two RaftStores share a
// Sequencer; every placeholder is folded once, every fold's done called
// once, before its writers hear; the placeholders never reach the state.
func TestTwoStoresOneSequencerFoldOnceEach(t *testing.T) {
	l := newCluster(t, clusterOpts{n: 1}).leader()
	var seq Sequencer
	rec := &foldRecorder{}
	seq.SetFolder(rec.folder())
	a, b := foldingStore(t, l, &seq), foldingStore(t, l, &seq)
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
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.checkDonesOnce(t)
	folded := rec.folded()
	for k, n := range folded {
		if n != 1 {
			t.Errorf("%q folded %d times", k, n)
		}
	}
	if len(folded)+int(failed.Load()) != 640 {
		t.Errorf("%d folded, %d failed of 640", len(folded), failed.Load())
	}
	checkNoPlaceholderWritten(t, l)
}

// TestFoldDoneOnLeadershipLoss: entries proposed with a fold on a leader
// cut off from its followers fail; each fold's done hears the failure,
// once, and so does each writer.
func TestFoldDoneOnLeadershipLoss(t *testing.T) {
	c := newCluster(t, clusterOpts{n: 3})
	l := c.leader()
	var seq Sequencer
	rec := &foldRecorder{}
	seq.SetFolder(rec.folder())
	s := foldingStore(t, l, &seq)
	c.isolate(l)
	defer c.reconnect(l)
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
			if err == nil {
				t.Error("a write committed on a leader cut off from its followers")
			}
		case <-timeout:
			t.Fatal("writes not answered")
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.checkDonesOnce(t)
	for id, err := range rec.outcomes {
		if err == nil {
			t.Errorf("fold %d: its entry failed, but done heard it applied", id)
		}
	}
}
