package admin

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// fsmBackend serves stored procedures from an in-memory FSM, as a master
// does (an immutable B-tree walked in id order), over a fakeBackend.
type fsmBackend struct {
	*fakeBackend
	fsm *raftfsm.FSM
}

func (b fsmBackend) StoredProcedure(id uint64) ([]byte, bool) { return b.fsm.Proc(id) }
func (b fsmBackend) StoredProceduresAfter(after uint64, fn func(store.Proc) error) error {
	return b.fsm.View().ProcsAfter(after, fn)
}
func (b fsmBackend) StoredProceduresBefore(before uint64, fn func(store.Proc) error) error {
	return b.fsm.View().ProcsBefore(before, fn)
}

// manyProcs is a leader's admin server over n committed procedures: sleep
// procedures of 100 owners (owner-<i%100>), but every 1000th a fanout
// left waiting for its child, which sleeps for an hour.
type manyProcs struct {
	s *Server
	x *procedure.Executor
	n int
}

var (
	manyOnce sync.Once
	many     *manyProcs
	manyErr  error
)

const manyCount = 100_000

// loadManyProcs builds the 100k procedures once per test binary: an
// executor runs them on a MemStore, whose records are then committed to an
// FSM the server reads, as a leader's reads do.
func loadManyProcs(tb testing.TB) *manyProcs {
	tb.Helper()
	manyOnce.Do(func() { many, manyErr = buildManyProcs(tb, manyCount) })
	if manyErr != nil {
		tb.Fatal(manyErr)
	}
	return many
}

func buildManyProcs(tb testing.TB, n int) (*manyProcs, error) {
	reg := procedure.NewRegistry()
	if err := diag.Register(reg); err != nil {
		return nil, err
	}
	mem := store.NewMemStore()
	x, err := procedure.New(procedure.Config{RecordFormat: version.Newest, Store: mem, Registry: reg, Workers: 4})
	if err != nil {
		return nil, err
	}
	if err := x.Start(); err != nil {
		return nil, err
	}
	var sleeps []uint64
	for i := range n {
		var p procedure.Procedure = &diag.Sleep{}
		if i%1000 == 0 {
			p = &diag.Fanout{Children: 1, Steps: 2, Delay: time.Hour}
		}
		id, err := x.Submit(p, procedure.SubmitOptions{Owner: fmt.Sprintf("owner-%d", i%100)})
		if err != nil {
			return nil, err
		}
		if i%1000 != 0 {
			sleeps = append(sleeps, id)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range sleeps {
		if _, err := x.Wait(ctx, id); err != nil {
			return nil, err
		}
	}
	fanouts := (n + 999) / 1000
	testwait.For(tb, time.Minute, "every fanout's child asleep", func() bool {
		return len(x.List(procedure.Filter{States: []procedure.State{procedure.WaitingTimeout}})) == fanouts
	})
	f, err := raftfsm.NewFSM(raftfsm.Config{})
	if err != nil {
		return nil, err
	}
	var batch []store.Proc
	index := uint64(0)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		data, err := raftfsm.EncodeProcBatch(raftfsm.Write{Inserts: batch})
		if err != nil {
			return err
		}
		index++
		if r := f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}); r != nil {
			if err, ok := r.(error); ok && err != nil {
				return err
			}
		}
		batch = batch[:0]
		return nil
	}
	if _, err := mem.Load(func(p store.Proc) error {
		batch = append(batch, p)
		if len(batch) == 1000 {
			return flush()
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if got, want := f.View().NumProcs(), n+fanouts; got != want {
		return nil, fmt.Errorf("%d procedures committed, want %d", got, want)
	}
	b := fsmBackend{fakeBackend: &fakeBackend{id: "m0", leaderID: "m0", procs: x, kv: map[string][]byte{}}, fsm: f}
	s, err := New(b, Config{})
	if err != nil {
		return nil, err
	}
	return &manyProcs{s: s, x: x, n: n}, nil
}

// fullDecodeList is the listing before Summary: every record scanned is
// decoded whole, then matched. The baseline of BenchmarkListProcedures.
func (m *manyProcs) fullDecodeList(f procedure.Filter) int {
	n := 0
	_ = m.s.b.StoredProceduresAfter(f.AfterID, func(p store.Proc) error {
		info, err := procedure.DecodeInfo(p.Data)
		if err != nil {
			return err
		}
		if f.Match(info) {
			n++
			if n == f.Limit {
				return errPageFull
			}
		}
		return nil
	})
	return n
}

// BenchmarkListProcedures lists pages of 100 out of 100,000 committed
// procedures through a leader's ListProcedures (stale: the quorum round is
// not what is measured), and counts them with ProcedureStats:
//
//	first-page       the first 100, no filter
//	newest-first     the latest 100, no filter
//	owner-1pct       owner matching 1 in 100: a page scans 10,000 records
//	state-none       a state nothing is in: the whole table is scanned
//	stats            ProcedureStats: one pass counting every record
//	baseline-*       the same scans decoding each record whole, as the
//	                 listing did before records were matched on a Summary
//
//	go test -run xxx -bench BenchmarkListProcedures ./cluster/admin/
func BenchmarkListProcedures(b *testing.B) {
	m := loadManyProcs(b)
	ctx := context.Background()
	list := func(b *testing.B, req *adminpb.ListProceduresRequest, want int) {
		req.Consistency = adminpb.Consistency_STALE
		req.PageSize = 100
		for b.Loop() {
			r, err := m.s.ListProcedures(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			if len(r.GetProcedures()) != want {
				b.Fatalf("%d procedures listed, want %d", len(r.GetProcedures()), want)
			}
		}
	}
	b.Run("first-page", func(b *testing.B) { list(b, &adminpb.ListProceduresRequest{}, 100) })
	b.Run("newest-first", func(b *testing.B) { list(b, &adminpb.ListProceduresRequest{NewestFirst: true}, 100) })
	b.Run("owner-1pct", func(b *testing.B) { list(b, &adminpb.ListProceduresRequest{Owner: "owner-7"}, 100) })
	b.Run("state-none", func(b *testing.B) { list(b, &adminpb.ListProceduresRequest{State: "FAILED"}, 0) })
	b.Run("stats", func(b *testing.B) {
		for b.Loop() {
			r, err := m.s.ProcedureStats(ctx, &adminpb.ProcedureStatsRequest{Consistency: adminpb.Consistency_STALE})
			if err != nil {
				b.Fatal(err)
			}
			if r.GetRoots() != int64(m.n) {
				b.Fatalf("%d roots, want %d", r.GetRoots(), m.n)
			}
		}
	})
	b.Run("baseline-owner-1pct", func(b *testing.B) {
		for b.Loop() {
			if n := m.fullDecodeList(procedure.Filter{Owner: "owner-7", Limit: 100}); n != 100 {
				b.Fatalf("%d listed", n)
			}
		}
	})
	b.Run("baseline-state-none", func(b *testing.B) {
		for b.Loop() {
			if n := m.fullDecodeList(procedure.Filter{States: []procedure.State{procedure.Failed}, Limit: 100}); n != 0 {
				b.Fatalf("%d listed", n)
			}
		}
	})
}

// ListProcedures filters by owner and submission time on the server, and
// pages newest first; ProcedureStats counts what the listing holds.
func TestListFiltersAndStats(t *testing.T) {
	m, err := buildManyProcs(t, 3000)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.x.Stop(context.Background()) })
	ctx := context.Background()
	all := func(req *adminpb.ListProceduresRequest) []*adminpb.Procedure {
		t.Helper()
		var out []*adminpb.Procedure
		req.PageSize = 7
		for {
			r, err := m.s.ListProcedures(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r.GetProcedures()...)
			if r.GetNextPageToken() == "" {
				return out
			}
			req.PageToken = r.GetNextPageToken()
		}
	}
	owned := all(&adminpb.ListProceduresRequest{Owner: "owner-7"})
	if len(owned) != 30 {
		t.Fatalf("%d procedures of owner-7, want 30", len(owned))
	}
	for _, p := range owned {
		if p.GetOwner() != "owner-7" {
			t.Fatalf("owner filter let %d of %q through", p.GetId(), p.GetOwner())
		}
	}
	newest := all(&adminpb.ListProceduresRequest{Owner: "owner-7", NewestFirst: true})
	if len(newest) != 30 || newest[0].GetId() != owned[29].GetId() || newest[29].GetId() != owned[0].GetId() {
		t.Fatalf("newest first: %d procedures from %d to %d, want owner-7's 30 from %d down", len(newest), newest[0].GetId(), newest[len(newest)-1].GetId(), owned[29].GetId())
	}
	for i := 1; i < len(newest); i++ {
		if newest[i].GetId() >= newest[i-1].GetId() {
			t.Fatalf("newest first out of order at %d: %d after %d", i, newest[i].GetId(), newest[i-1].GetId())
		}
	}
	// A window of submission times holds exactly the procedures submitted
	// in it, whatever the clock's resolution.
	from, to := owned[10].GetSubmittedUnixMs(), owned[20].GetSubmittedUnixMs()+1
	window := all(&adminpb.ListProceduresRequest{SubmittedAfterUnixMs: from, SubmittedBeforeUnixMs: to})
	want := 0
	for _, p := range all(&adminpb.ListProceduresRequest{}) {
		if p.GetSubmittedUnixMs() >= from && p.GetSubmittedUnixMs() < to {
			want++
		}
	}
	if len(window) != want || want < 11 {
		t.Fatalf("%d procedures in the window, want %d (at least 11)", len(window), want)
	}
	if _, err := m.s.ListProcedures(ctx, &adminpb.ListProceduresRequest{SubmittedAfterUnixMs: 5, SubmittedBeforeUnixMs: 5}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty window: %v, want INVALID_ARGUMENT", err)
	}

	// The fanouts wait for their children without a timer: silent for a
	// millisecond, they are stuck; their children, asleep until a timer
	// fires, are not.
	testwait.For(t, 10*time.Second, "the 3 fanouts to count as stuck after 1 ms", func() bool {
		r, err := m.s.ProcedureStats(ctx, &adminpb.ProcedureStatsRequest{StuckAfterMs: 1, MaxStuck: 2})
		return err == nil && r.GetStuckCount() == 3
	})
	r, err := m.s.ProcedureStats(ctx, &adminpb.ProcedureStatsRequest{StuckAfterMs: 1, MaxStuck: 2})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, c := range r.GetCounts() {
		counts[c.GetState()+"/"+c.GetType()] = c.GetCount()
	}
	if r.GetTotal() != 3003 || r.GetRoots() != 3000 || counts["SUCCESS/sleep"] != 2997 || counts["WAITING/fanout"] != 3 || counts["WAITING_TIMEOUT/sleep"] != 3 {
		t.Fatalf("stats: total %d roots %d counts %v", r.GetTotal(), r.GetRoots(), counts)
	}
	// Which fanouts were silent longest depends on when each spawned its
	// children: the two oldest are two fanouts, oldest first.
	st := r.GetStuck()
	if len(st) != 2 || st[0].GetType() != "fanout" || st[1].GetType() != "fanout" || st[0].GetWaitingFor() == "" ||
		st[0].GetUpdatedUnixMs() > st[1].GetUpdatedUnixMs() {
		t.Fatalf("stuck %v: want the 2 oldest fanouts, oldest first, saying why they wait", st)
	}
}
