package access

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/btree"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// treeState is seqState over an ordered tree, as the FSM keeps its keys:
// a scan walks from the prefix without sorting the whole space, so what a
// benchmark of the trail measures is the trail's own work.
type treeState struct {
	mu  sync.Mutex
	kv  *btree.BTreeG[treeKV]
	seq raftfsm.Sequencer
}

type treeKV struct {
	k string
	v []byte
}

func newTreeState() *treeState {
	return &treeState{kv: btree.NewG(32, func(a, b treeKV) bool { return a.k < b.k })}
}

func (s *treeState) IsLeader() bool { return true }
func (s *treeState) Term() uint64   { return 1 }
func (s *treeState) Mutate(context.Context, []raftfsm.Mutation) error {
	panic("a Sequenced state's writes go through MutateNumbered")
}

func (s *treeState) apply(muts []raftfsm.Mutation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range muts {
		if m.Op == raftfsm.OpDelete {
			s.kv.Delete(treeKV{k: m.Key})
		} else {
			s.kv.ReplaceOrInsert(treeKV{m.Key, m.Value})
		}
	}
}

func (s *treeState) MutateNumbered(_ context.Context, build func() ([]raftfsm.Mutation, error)) error {
	var err error
	s.seq.Do(func() {
		var muts []raftfsm.Mutation
		if muts, err = build(); err == nil {
			s.apply(muts)
		}
	})
	return err
}

func (s *treeState) Scan(prefix string, fn func(string, []byte) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kv.AscendGreaterOrEqual(treeKV{k: prefix}, func(it treeKV) bool {
		return strings.HasPrefix(it.k, prefix) && fn(it.k, it.v)
	})
}

// BenchmarkCarry is what numbering a submission's record costs under the
// node's Sequencer (Trail.Carry, as a store's Late runs it): every write
// of the executor waits for it, and a group commit's cycle pays it once
// per submission it carries. The record is a submission's as the admin
// API builds it, the trail holds 10,000 records of 100 principals, and
// its indexes are known (a leader's usual state).
//
//	go test -run xxx -bench BenchmarkCarry -benchmem ./cluster/access/
func BenchmarkCarry(b *testing.B) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	st := newTreeState()
	stop := make(chan struct{})
	var loops sync.WaitGroup
	l, err := NewTrail(st, TrailConfig{Clock: clk, Retention: time.Hour, MaxRecords: 1_000_000, MaxPerPrincipal: 1_000_000, MaxRefusedPerCaller: 1000,
		Established: func() bool { return true }, Stop: stop, Stopping: context.Canceled, Loops: &loops, Log: hclog.NewNullLogger()})
	if err != nil {
		b.Fatal(err)
	}
	loops.Add(1)
	go l.Run()
	defer func() { close(stop); loops.Wait() }()
	req := &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "3", "note": "a submission as a client sends it"}, Nonce: "bench-nonce-0001"}
	begin := NewRecord(clk.Now(), "m1", Principal{Name: "bench"}, "SubmitProcedure", req, nil, nil)
	begin.Peer = "127.0.0.1:51234"
	var recs []*adminpb.AuditRecord
	for i := range 10_000 {
		rec := proto.Clone(begin).(*adminpb.AuditRecord)
		rec.Principal = "client-" + string(rune('a'+i%26)) + string(rune('a'+i/26%4))
		if recs = append(recs, rec); len(recs) == 500 {
			if err := l.Append(context.Background(), recs...); err != nil {
				b.Fatal(err)
			}
			recs = nil
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		rec := proto.Clone(begin).(*adminpb.AuditRecord)
		rec.ProcIds = append(rec.ProcIds, uint64(i+1))
		st.seq.Do(func() {
			muts, done, ok := l.Carry(rec)
			if !ok {
				b.Fatal("not carried")
			}
			st.apply(muts)
			done(nil)
		})
	}
}
