package clustertest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/internal/locked"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/store"
)

// WriteFaults loses the leader at a chosen write of its executor: the
// cluster-scale form of procedure/proceduretest, for procedures whose
// environment is a leader's services (and so cannot run on a bare
// executor). Install it with Config.Node (Hook); Arm it before starting a
// procedure; the leader's executor store then fails that write, as a
// leader cut off at that moment would, and Settle cuts that leader off
// until another leads, which resumes the procedure from the replicated
// log. AbortAfter asks for an abort of the procedure after a write, which
// Settle makes on the leader.
//
// Writes are counted across the cluster: background procedures (a crash
// recovery after a lease lost on a loaded machine) add to them, so a run
// armed at a write may end before it. Cuts says how many took effect.
type WriteFaults struct {
	mu      sync.Mutex
	writes  int
	armAt   int // the write that fails, counted from 1; 0: none
	abortAt int // the write after which the procedure is aborted; 0: none
	cuts    int
	cut     chan string
	abort   chan struct{}
}

// ErrLeaderCut is the error of the write a leader cut off never made.
var ErrLeaderCut = errors.New("clustertest: injected: the leader is cut off at this write")

// NewWriteFaults returns write faults that are not armed.
func NewWriteFaults() *WriteFaults {
	return &WriteFaults{cut: make(chan string, 1), abort: make(chan struct{}, 1)}
}

// Hook wraps each executor's store of a master; give it to Config.Node
// (chained with any other adjustment).
func (f *WriteFaults) Hook(_ int, nc *cluster.Config) {
	node, prev := nc.ID, nc.Executor
	nc.Executor = func(pc *procedure.Config) {
		if prev != nil {
			prev(pc)
		}
		inner, ok := pc.Store.(faultInner)
		if !ok {
			panic(fmt.Sprintf("clustertest: the executor's store %T keeps no domain state", pc.Store))
		}
		pc.Store = &faultStore{inner: inner, f: f, node: node}
	}
}

// Arm makes the write after the next `after` writes fail (after 0: the
// next one).
func (f *WriteFaults) Arm(after int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armAt = f.writes + after + 1
}

// AbortAfter asks for an abort once `more` more writes are made.
func (f *WriteFaults) AbortAfter(more int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.abortAt = f.writes + more
}

// Disarm cancels what Arm and AbortAfter asked that has not happened.
func (f *WriteFaults) Disarm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armAt, f.abortAt = 0, 0
}

// Writes is the number of executor writes made so far (the failed one
// included).
func (f *WriteFaults) Writes() int { return locked.Load(&f.mu, &f.writes) }

// Cuts is the number of leaders cut off so far.
func (f *WriteFaults) Cuts() int { return locked.Load(&f.mu, &f.cuts) }

// Settle, called from the test's goroutine while a procedure runs (in a
// wait loop), cuts off the leader whose write failed, if one did, until
// another leads, then heals it; and aborts procedure id on the leader if
// an abort is due. Test goroutine only.
func (f *WriteFaults) Settle(t testing.TB, c *Cluster, id uint64) {
	t.Helper()
	select {
	case node := <-f.cut:
		i := -1
		for j, m := range c.Masters() {
			if m.ID == node {
				i = j
			}
		}
		if i < 0 {
			t.Fatalf("clustertest: no master %q", node)
		}
		f.mu.Lock()
		f.cuts++
		f.mu.Unlock()
		c.Partition(i)
		testwait.For(t, time.Minute, "another leader", func() bool {
			li, _ := c.WaitLeader()
			return li != i
		})
		c.Heal(i)
	default:
	}
	select {
	case <-f.abort:
		if _, x := c.LeaderNow(); x != nil && id != 0 {
			if err := x.Abort(id); err != nil && !errors.Is(err, procedure.ErrNotAllowed) {
				f.AbortAfter(0) // a leader changing: asked again at the next write
			}
		}
	default:
	}
}

func (f *WriteFaults) take(node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	if f.abortAt != 0 && f.writes >= f.abortAt {
		f.abortAt = 0
		select {
		case f.abort <- struct{}{}:
		default:
		}
	}
	if f.armAt != 0 && f.writes == f.armAt {
		f.armAt = 0
		select {
		case f.cut <- node:
		default:
		}
		return ErrLeaderCut
	}
	return nil
}

// faultInner is what an executor's store of a master is.
type faultInner interface {
	store.DeleteMutator
	store.Reader
}

// faultStore is a leader executor's store with WriteFaults in front of its
// writes; reads pass through.
type faultStore struct {
	inner faultInner
	f     *WriteFaults
	node  string
}

func (s *faultStore) Load(fn func(store.Proc) error) (store.LoadInfo, error) { return s.inner.Load(fn) }
func (s *faultStore) Close() error                                           { return s.inner.Close() }
func (s *faultStore) Proc(id uint64) ([]byte, bool)                          { return s.inner.Proc(id) }
func (s *faultStore) Value(key string) ([]byte, bool)                        { return s.inner.Value(key) }
func (s *faultStore) ScanValues(prefix string, fn func(string, []byte) bool) {
	s.inner.ScanValues(prefix, fn)
}

func (s *faultStore) Insert(p store.Proc, children []store.Proc) error {
	return s.InsertAndMutate(p, children, nil)
}

func (s *faultStore) Update(p store.Proc) error { return s.UpdateAndMutate(p, nil) }

func (s *faultStore) Delete(ids []uint64) error { return s.DeleteAndMutate(ids, nil) }

func (s *faultStore) InsertAndMutate(p store.Proc, children []store.Proc, muts []store.Mutation) error {
	if err := s.f.take(s.node); err != nil {
		return err
	}
	return s.inner.InsertAndMutate(p, children, muts)
}

func (s *faultStore) UpdateAndMutate(p store.Proc, muts []store.Mutation) error {
	if err := s.f.take(s.node); err != nil {
		return err
	}
	return s.inner.UpdateAndMutate(p, muts)
}

func (s *faultStore) DeleteAndMutate(ids []uint64, muts []store.Mutation) error {
	if err := s.f.take(s.node); err != nil {
		return err
	}
	return s.inner.DeleteAndMutate(ids, muts)
}
