package raftfsm

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/baton-dev/baton/store"
)

// foldRecorder is a Folder that writes one key per entry, named after the
// placeholders it folded, and notes each fold's keys, how many times its
// done was called and the outcome it was last given.
type foldRecorder struct {
	mu       sync.Mutex
	entries  [][]string // by fold
	dones    []int
	outcomes []error
	panicOn  string
	failOn   string
}

func (f *foldRecorder) folder() *Folder {
	return &Folder{Fold: func(keys []string) ([]Mutation, func(error), error) {
		for _, k := range keys {
			if k == f.panicOn {
				panic("a bug in the folder")
			}
			if k == f.failOn {
				return nil, nil, fmt.Errorf("no record for %q", k)
			}
		}
		f.mu.Lock()
		id := len(f.entries)
		f.entries, f.dones, f.outcomes = append(f.entries, keys), append(f.dones, 0), append(f.outcomes, nil)
		f.mu.Unlock()
		var names []string
		for _, k := range keys {
			names = append(names, strings.TrimPrefix(k, PlaceholderPrefix))
		}
		return []Mutation{Put("folded/"+strings.Join(names, ","), nil)}, func(err error) {
			f.mu.Lock()
			f.dones[id]++
			f.outcomes[id] = err
			f.mu.Unlock()
		}, nil
	}}
}

// folded is how many times each placeholder was folded. f.mu is held.
func (f *foldRecorder) folded() map[string]int {
	n := map[string]int{}
	for _, keys := range f.entries {
		for _, k := range keys {
			n[k]++
		}
	}
	return n
}

// checkDonesOnce fails t unless every fold's done was called once. f.mu
// is held.
func (f *foldRecorder) checkDonesOnce(t *testing.T) {
	t.Helper()
	for id, n := range f.dones {
		if n != 1 {
			t.Errorf("fold %d: done called %d times", id, n)
		}
	}
}

// foldingStore is a RaftStore on l under seq, closed as the test ends.
func foldingStore(t *testing.T, l *testNode, seq *Sequencer) *RaftStore {
	s := NewRaftStore(l.r, l.fsm, RaftStoreConfig{Sequencer: seq})
	t.Cleanup(func() { s.Close() })
	return s
}

// checkNoPlaceholderWritten fails t if l's state holds a placeholder.
func checkNoPlaceholderWritten(t *testing.T, l *testNode) {
	t.Helper()
	l.fsm.Scan(PlaceholderPrefix, func(k string, _ []byte) bool {
		t.Errorf("placeholder %q written", k)
		return true
	})
}

// commitWithPlaceholders commits eight writes at once, write i's Late
// giving late(i) (a placeholder named p<i> and a key k/<i> by default).
func commitWithPlaceholders(t *testing.T, s *RaftStore, late func(i int) []Mutation) []error {
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range 8 {
		wg.Go(func() {
			errs[i] = s.Commit(t.Context(), Write{Inserts: []store.Proc{{ID: uint64(i + 1)}}, Late: func() []Mutation { return late(i) }})
		})
	}
	wg.Wait()
	return errs
}

func placeholderLate(i int) []Mutation {
	return []Mutation{Put(fmt.Sprintf("k/%d", i), nil), Put(fmt.Sprintf("%sp%d", PlaceholderPrefix, i), []byte("never written"))}
}

// TestFolderTurnsAnEntrysPlaceholders: the folder gets every placeholder
// of the writes an entry carries, once, and its mutations commit in that
// entry; the placeholders themselves are never written; it learns each
// entry's outcome.
func TestFolderTurnsAnEntrysPlaceholders(t *testing.T) {
	l := newCluster(t, clusterOpts{n: 1}).leader()
	var seq Sequencer
	rec := &foldRecorder{}
	seq.SetFolder(rec.folder())
	s := foldingStore(t, l, &seq)
	for i, err := range commitWithPlaceholders(t, s, placeholderLate) {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	seen := rec.folded()
	for _, keys := range rec.entries {
		var names []string
		for _, k := range keys {
			names = append(names, strings.TrimPrefix(k, PlaceholderPrefix))
		}
		if _, ok := l.fsm.Get("folded/" + strings.Join(names, ",")); !ok {
			t.Errorf("the folded key of %q was not written", keys)
		}
	}
	for i := range 8 {
		if seen[fmt.Sprintf("%sp%d", PlaceholderPrefix, i)] != 1 {
			t.Errorf("placeholder p%d folded %d times", i, seen[fmt.Sprintf("%sp%d", PlaceholderPrefix, i)])
		}
	}
	rec.checkDonesOnce(t)
	for _, err := range rec.outcomes {
		if err != nil {
			t.Errorf("an entry's outcome: %v", err)
		}
	}
	checkNoPlaceholderWritten(t, l)
}

// TestFolderSkipsRefusedWrites: a write whose Late fails is not carried,
// and its placeholder is not folded; the others' are.
func TestFolderSkipsRefusedWrites(t *testing.T) {
	l := newCluster(t, clusterOpts{n: 1}).leader()
	var seq Sequencer
	rec := &foldRecorder{}
	seq.SetFolder(rec.folder())
	s := foldingStore(t, l, &seq)
	errs := commitWithPlaceholders(t, s, func(i int) []Mutation {
		if i == 3 {
			return append(placeholderLate(i), Put("", nil)) // a bad key after the placeholder
		}
		return placeholderLate(i)
	})
	for i, err := range errs {
		if (i == 3) != (err != nil) {
			t.Errorf("write %d: %v", i, err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if n := rec.folded()[PlaceholderPrefix+"p3"]; n != 0 {
		t.Errorf("the refused write's placeholder was folded %d times", n)
	}
}

// TestPlaceholderWithoutFolderFailsItsWrite: with no folder, a
// placeholder fails its write alone (it would otherwise be written as a
// key); the folder's panic fails its entry, not the node; and so does the
// folder's error.
func TestPlaceholderWithoutFolderFailsItsWrite(t *testing.T) {
	l := newCluster(t, clusterOpts{n: 1}).leader()
	var seq Sequencer
	s := foldingStore(t, l, &seq)
	errs := commitWithPlaceholders(t, s, func(i int) []Mutation {
		if i == 5 {
			return placeholderLate(i)
		}
		return []Mutation{Put(fmt.Sprintf("k/%d", i), nil)}
	})
	for i, err := range errs {
		_, stored := l.fsm.Proc(uint64(i + 1))
		if (i == 5) != (err != nil) || stored != (err == nil) {
			t.Errorf("write %d: %v, stored %v", i, err, stored)
		}
	}
	rec := &foldRecorder{panicOn: PlaceholderPrefix + "p0"}
	seq.SetFolder(rec.folder())
	err := s.Commit(t.Context(), Write{Inserts: []store.Proc{{ID: 20}}, Late: func() []Mutation { return placeholderLate(0) }})
	if _, stored := l.fsm.Proc(20); err == nil || stored {
		t.Fatalf("a write whose folder panicked: %v, stored %v", err, stored)
	}
	if err := s.Commit(t.Context(), Write{Inserts: []store.Proc{{ID: 21}}, Late: func() []Mutation { return placeholderLate(1) }}); err != nil {
		t.Fatalf("the store after its folder panicked: %v", err)
	}
	rec = &foldRecorder{failOn: PlaceholderPrefix + "p2"}
	seq.SetFolder(rec.folder())
	err = s.Commit(t.Context(), Write{Inserts: []store.Proc{{ID: 22}}, Late: func() []Mutation { return placeholderLate(2) }})
	if _, stored := l.fsm.Proc(22); err == nil || stored {
		t.Fatalf("a write whose folder failed: %v, stored %v", err, stored)
	}
}
