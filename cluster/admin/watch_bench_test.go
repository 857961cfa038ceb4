package admin

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// watchedParents is a leader's admin server over n committed fanouts of
// kids children each, every child asleep for an hour: parents waiting
// for their children, as creates wait for their regions.
func watchedParents(tb testing.TB, n, kids int) (*Server, Procedures, []uint64) {
	tb.Helper()
	reg := procedure.NewRegistry()
	if err := diag.Register(reg); err != nil {
		tb.Fatal(err)
	}
	mem := store.NewMemStore()
	x, err := procedure.New(procedure.Config{RecordFormat: version.Newest, Store: mem, Registry: reg, Workers: 4})
	if err != nil {
		tb.Fatal(err)
	}
	if err := x.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = x.Stop(context.Background()) })
	var ids []uint64
	for range n {
		id, err := x.Submit(&diag.Fanout{Children: kids, Steps: 2, Delay: time.Hour}, procedure.SubmitOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		ids = append(ids, id)
	}
	testwait.For(tb, time.Minute, "every child asleep", func() bool {
		return len(x.List(procedure.Filter{States: []procedure.State{procedure.WaitingTimeout}})) == n*kids
	})
	f, err := raftfsm.NewFSM(raftfsm.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	var batch []store.Proc
	if _, err := mem.Load(func(p store.Proc) error { batch = append(batch, p); return nil }); err != nil {
		tb.Fatal(err)
	}
	data, err := raftfsm.EncodeProcBatch(raftfsm.Write{Inserts: batch})
	if err != nil {
		tb.Fatal(err)
	}
	if r := f.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: data}); r != nil {
		if err, ok := r.(error); ok && err != nil {
			tb.Fatal(err)
		}
	}
	b := fsmBackend{fakeBackend: &fakeBackend{id: "m0", leaderID: "m0", procs: x, kv: map[string][]byte{}}, fsm: f}
	s, err := New(b, Config{})
	if err != nil {
		tb.Fatal(err)
	}
	return s, x, ids
}

// BenchmarkWatchProcedures: one op is one second of 100 watches, each of
// a parent of 100 children that are all waiting (20 polls of each, at the
// default WatchInterval of 50 ms, on a clock the benchmark moves). The
// baseline recomputes the procedure at every poll, as every watch did
// before procWatch; "changed-only" recomputes it when its record changed
// and otherwise every watchRecompute.
//
//	go test -run xxx -bench BenchmarkWatchProcedures ./cluster/admin/
func BenchmarkWatchProcedures(b *testing.B) {
	const watchers, kids, polls = 100, 100, 20
	s, x, ids := watchedParents(b, watchers, kids)
	// everyPoll is the watch before procWatch: the procedure built at each
	// poll and sent when it differs from the last one sent.
	type everyPoll struct {
		id   uint64
		last *adminpb.Procedure
	}
	pollEvery := func(w *everyPoll) (*adminpb.Procedure, error) {
		p, err := s.storedProc(x, w.id)
		if err != nil || (w.last != nil && sameProcedure(w.last, p)) {
			return nil, err
		}
		w.last = p
		return p, nil
	}
	for _, tc := range []struct {
		name   string
		always bool
	}{{"baseline-every-poll", true}, {"changed-only", false}} {
		b.Run(tc.name, func(b *testing.B) {
			ws := make([]*procWatch, len(ids))
			olds := make([]*everyPoll, len(ids))
			for i, id := range ids {
				ws[i] = &procWatch{s: s, id: id}
				olds[i] = &everyPoll{id: id}
			}
			now := time.Unix(0, 0)
			sent := 0
			for b.Loop() {
				for range polls {
					now = now.Add(DefaultWatchInterval)
					for i, w := range ws {
						var p *adminpb.Procedure
						var err error
						if tc.always {
							p, err = pollEvery(olds[i])
						} else {
							p, err = w.poll(x, now)
						}
						if err != nil {
							b.Fatal(err)
						}
						if p != nil {
							sent++
						}
					}
				}
			}
			if sent != len(ws) {
				b.Fatalf("%d procedures sent, want %d (one each: nothing changed)", sent, len(ws))
			}
		})
	}
}

// TestProcWatchRecomputes: a watch sends the procedure first, then
// nothing while it is unchanged; it recomputes it at once when its record
// changes, and otherwise once every watchRecompute (its children move
// its Why and progress without a write of its own).
func TestProcWatchRecomputes(t *testing.T) {
	s, x, ids := watchedParents(t, 1, 3)
	w := &procWatch{s: s, id: ids[0]}
	start := time.Unix(0, 0)
	if p, err := w.poll(x, start); err != nil || p == nil {
		t.Fatalf("first poll: %v, %v; want the procedure", p, err)
	}
	now := start
	for range 40 {
		now = now.Add(DefaultWatchInterval)
		if p, err := w.poll(x, now); err != nil || p != nil {
			t.Fatalf("poll of an unchanged procedure: %v, %v; want nothing", p, err)
		}
		if since := now.Sub(w.computed); since >= watchRecompute {
			t.Fatalf("at %v: last computed %v before", now.Sub(start), since)
		}
	}
	if w.computed.Equal(start) {
		t.Fatal("not recomputed in 2 s")
	}
	// Another version of its record (as a step's commit makes): computed
	// at the next poll.
	w.rec = append(w.rec[:0], "an older record"...)
	now = now.Add(DefaultWatchInterval)
	if _, err := w.poll(x, now); err != nil || !w.computed.Equal(now) {
		t.Fatalf("poll after its record changed: %v, computed at %v; want at %v", err, w.computed.Sub(start), now.Sub(start))
	}
}
