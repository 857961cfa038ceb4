package access

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/btree"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// seqState is a leader's trail state that numbers under a Sequencer
// (Sequenced), over keys kept in order as the FSM keeps them (a scan walks
// from its prefix), and counts the records a scan visits while the
// Sequencer is held.
type seqState struct {
	mu       sync.Mutex
	kv       *btree.BTreeG[seqKV]
	seq      raftfsm.Sequencer
	held     atomic.Bool   // under seq
	holder   atomic.Uint64 // the goroutine under seq
	heldRead atomic.Int64  // records the holder scanned under seq
	scans    atomic.Int64  // scans the holder began under seq
}

type seqKV struct {
	k string
	v []byte
}

func newSeqState() *seqState {
	return &seqState{kv: btree.NewG(32, func(a, b seqKV) bool { return a.k < b.k })}
}

func (s *seqState) IsLeader() bool { return true }
func (s *seqState) Term() uint64   { return 1 }
func (s *seqState) Mutate(context.Context, []raftfsm.Mutation) error {
	panic("a Sequenced state's writes go through MutateNumbered")
}

func (s *seqState) apply(muts []raftfsm.Mutation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range muts {
		if m.Op == raftfsm.OpDelete {
			s.kv.Delete(seqKV{k: m.Key})
		} else {
			s.kv.ReplaceOrInsert(seqKV{m.Key, m.Value})
		}
	}
}

// under runs fn as a store's Late runs: holding the Sequencer.
func (s *seqState) under(fn func()) {
	s.seq.Do(func() {
		s.holder.Store(goroutineID())
		s.held.Store(true)
		defer s.held.Store(false)
		fn()
	})
}

func (s *seqState) MutateNumbered(_ context.Context, build func() ([]raftfsm.Mutation, error)) error {
	var err error
	s.under(func() {
		var muts []raftfsm.Mutation
		if muts, err = build(); err == nil {
			s.apply(muts)
		}
	})
	return err
}

// Scan calls fn holding s.mu: the trail's scans only read.
func (s *seqState) Scan(prefix string, fn func(string, []byte) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Only the holder's scans count: Run's, on a goroutine of its own,
	// may overlap a carrying without being under the Sequencer.
	byHolder := s.held.Load() && s.holder.Load() == goroutineID()
	if byHolder {
		s.scans.Add(1)
	}
	s.kv.AscendGreaterOrEqual(seqKV{k: prefix}, func(it seqKV) bool {
		if !strings.HasPrefix(it.k, prefix) {
			return false
		}
		if byHolder {
			s.heldRead.Add(1)
		}
		return fn(it.k, it.v)
	})
}

// goroutineID is the calling goroutine's number, from its stack's first
// line ("goroutine 12 [running]:").
func goroutineID() uint64 {
	var buf [64]byte
	f := strings.Fields(string(buf[:runtime.Stack(buf[:], false)]))
	if len(f) < 2 {
		return 0
	}
	id, _ := strconv.ParseUint(f[1], 10, 64)
	return id
}

// runningTrail is a trail over st, an hour's retention and max records
// (each principal's quota too), whose Run goes on until the test ends.
func runningTrail(tb testing.TB, st State, clk clock.Clock, max int) *Trail {
	tb.Helper()
	return runningTrailWith(tb, st, clk, max, nil)
}

// runningTrailWith is runningTrail with its config changed by tweak.
func runningTrailWith(tb testing.TB, st State, clk clock.Clock, max int, tweak func(*TrailConfig)) *Trail {
	tb.Helper()
	stop := make(chan struct{})
	var loops sync.WaitGroup
	cfg := TrailConfig{Clock: clk, Retention: time.Hour, MaxRecords: max, MaxPerPrincipal: max, MaxRefusedPerCaller: 1000,
		Established: func() bool { return true }, Stop: stop, Stopping: context.Canceled, Loops: &loops, Log: hclog.NewNullLogger()}
	if tweak != nil {
		tweak(&cfg)
	}
	l, err := NewTrail(st, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	loops.Add(1)
	go l.Run()
	tb.Cleanup(func() { close(stop); loops.Wait() })
	return l
}

// TestCarryBuildsNoIndexUnderTheSequencer: a record carried in a
// submission's entry is numbered under the node's Sequencer, which every
// write of the executor's then waits for; a space's index unknown (a new
// term, a write that failed) is built by Run, not by a scan of the whole
// space there (a quarter second at the default ceiling). The record is
// carried all the same, and counted in the index once built.
func TestCarryBuildsNoIndexUnderTheSequencer(t *testing.T) {
	const stored = 2000
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	st := newSeqState()
	for i := range stored {
		b, err := proto.Marshal(&adminpb.AuditRecord{Id: "0-1", Principal: "p", Method: "M", Code: "OK", CommittedUnixMs: clk.Now().UnixMilli()})
		if err != nil {
			t.Fatal(err)
		}
		st.apply([]raftfsm.Mutation{raftfsm.Put(AuditKey(0, uint64(i+1)), b)})
	}
	l := runningTrail(t, st, clk, 100_000)

	carry := func() (ok bool) {
		st.under(func() {
			var muts []raftfsm.Mutation
			var done func(error)
			if muts, done, ok = l.Carry(&adminpb.AuditRecord{Principal: "p", Method: "SubmitProcedure", Code: "OK"}); ok {
				st.apply(muts)
				done(nil)
			}
		})
		return ok
	}
	if !carry() { // the term's first: its indexes are unknown
		t.Fatal("the term's first record not carried")
	}
	if n := st.heldRead.Load(); n >= stored {
		t.Fatalf("%d records scanned under the Sequencer (the space holds %d)", n, stored)
	}
	live := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		if x := l.spaces[0].idx; x != nil && l.spaces[1].idx != nil {
			return len(x.groupsOf)
		}
		return -1
	}
	testwait.For(t, 10*time.Second, "Run built the indexes", func() bool { return live() >= 0 })
	if n := live(); n != stored+1 {
		t.Fatalf("the index counts %d records, want %d (the carried one with those stored)", n, stored+1)
	}
	// The trail's own write builds none under it either.
	l.mu.Lock()
	for _, sp := range l.spaces {
		sp.idx = nil
	}
	l.mu.Unlock()
	st.heldRead.Store(0)
	if err := l.Append(context.Background(), &adminpb.AuditRecord{Principal: "p", Method: "Other", Code: "OK"}); err != nil {
		t.Fatal(err)
	}
	if n := st.heldRead.Load(); n >= stored {
		t.Fatalf("the trail's own write scanned %d records under the Sequencer", n)
	}
	if !carry() {
		t.Fatal("not carried with the indexes known")
	}
}
