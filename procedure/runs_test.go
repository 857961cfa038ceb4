package procedure

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// A procedure written by one executor, then resumed by another on the same
// store (a new leader after a failover), records both: which node made
// which of its writes.
func TestRunsNameTheNodeOfEachWrite(t *testing.T) {
	st := store.NewMemStore()
	gate := make(chan struct{})
	var calls atomic.Int32
	funcs.Store("runs", func(ctx *Context) (Step, error) {
		if calls.Add(1) == 1 {
			<-gate // m1 stops with this step in flight
		}
		return Done(), nil
	})
	m1Store := &fencedStore{Store: st}
	first := startExecutor(t, m1Store, newDomain(), func(c *Config) { c.Node = "m1" })
	id := first.submit(&funcProc{ID: "runs"}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "m1 running it", func() bool { return calls.Load() == 1 })
	// m1 loses leadership: its store refuses its writes from now on, as
	// the FSM refuses a deposed leader's, and it stops.
	m1Store.fenced.Store(true)
	close(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = first.x.Stop(ctx)
	cancel()

	second := startExecutor(t, st, newDomain(), func(c *Config) { c.Node = "m2" })
	info := second.wait(id)
	if info.State != Success {
		t.Fatalf("state %s, want SUCCESS", info.State)
	}
	if len(info.Runs) != 2 || info.Runs[0].Node != "m1" || info.Runs[1].Node != "m2" {
		t.Fatalf("runs %+v, want m1 then m2", info.Runs)
	}
	if r := info.Runs[0]; r.First != 1 || r.Last < r.First || r.At.IsZero() {
		t.Fatalf("m1's run %+v: want it to start at the submission (write 1)", r)
	}
	if a, b := info.Runs[0], info.Runs[1]; b.First != a.Last+1 || b.Last < b.First || b.At.Before(a.Until) {
		t.Fatalf("m2's run %+v does not follow m1's %+v", b, a)
	}
	// A reader of the stored records (the FSM's procedure reads) sees the
	// same runs.
	var stored Info
	if _, err := st.Load(func(p store.Proc) error {
		if p.ID == id {
			var err error
			stored, err = DecodeInfo(p.Data)
			return err
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(stored.Runs) != 2 || stored.Runs[1] != info.Runs[1] {
		t.Fatalf("stored runs %+v, executor's %+v", stored.Runs, info.Runs)
	}
}

// fencedStore refuses writes once fenced, as the FSM refuses those of a
// leader deposed since it took its term.
type fencedStore struct {
	store.Store
	fenced atomic.Bool
}

var errFenced = errors.New("fenced: no longer leader")

func (f *fencedStore) Insert(p store.Proc, children []store.Proc) error {
	if f.fenced.Load() {
		return errFenced
	}
	return f.Store.Insert(p, children)
}

func (f *fencedStore) Update(p store.Proc) error {
	if f.fenced.Load() {
		return errFenced
	}
	return f.Store.Update(p)
}

func (f *fencedStore) Delete(ids []uint64) error {
	if f.fenced.Load() {
		return errFenced
	}
	return f.Store.Delete(ids)
}

func (f *fencedStore) Close() error { return nil } // the next executor uses the store

func TestRunsStayBounded(t *testing.T) {
	var runs []Run
	at := time.Unix(1, 0)
	for i := range 3 * maxRuns {
		runs = noteWrite(runs, []string{"m1", "m2"}[i%2], at)
		runs = noteWrite(runs, []string{"m1", "m2"}[i%2], at) // a second write, same node: same run
	}
	if len(runs) != maxRuns || runs[0].First != 1 || runs[0].Last != 2 || runs[len(runs)-1].Last != 6*maxRuns {
		t.Fatalf("%d runs, first %+v, last %+v: want %d, the first and the latest kept", len(runs), runs[0], runs[len(runs)-1], maxRuns)
	}
	for _, r := range runs {
		back, err := unmarshalRun(marshalRun(r))
		if err != nil || back.resolve(time.Unix(0, 0)) != r {
			t.Fatalf("run %+v came back as %+v (%v)", r, back.run, err)
		}
		// A finished root's, relative to its submission.
		rel, err := unmarshalRun(marshalRunRelative(r, time.Unix(0, 0)))
		if err != nil || rel.resolve(time.Unix(0, 0)) != r {
			t.Fatalf("run %+v came back relative as %+v (%v)", r, rel.resolve(time.Unix(0, 0)), err)
		}
	}
}

// TestNoteWriteLeavesRunsAlone checks that noteWrite never changes the
// slice it is given: records being written and Infos handed out share it.
func TestNoteWriteLeavesRunsAlone(t *testing.T) {
	var runs []Run
	at := time.Unix(1, 0)
	for i := range 3 * maxRuns {
		for _, node := range []string{[]string{"m1", "m2"}[i%2], []string{"m1", "m2"}[i%2]} {
			before := slices.Clone(runs)
			next := noteWrite(runs, node, at.Add(time.Duration(i)*time.Second))
			if !slices.Equal(runs, before) {
				t.Fatalf("write %d changed the runs it was given: %+v, was %+v", i, runs, before)
			}
			runs = next
		}
	}
}

// TestInfoRunsAreTheCallers checks that an Info's Runs, like its Result
// and Children, are the caller's: changing them changes nothing the
// executor records.
func TestInfoRunsAreTheCallers(t *testing.T) {
	gate := make(chan struct{})
	var calls atomic.Int32
	funcs.Store("runsowned", func(ctx *Context) (Step, error) {
		calls.Add(1)
		<-gate
		return Done(), nil
	})
	t.Cleanup(func() { funcs.Delete("runsowned") })
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) { c.Node = "m1" })
	id := h.submit(&funcProc{ID: "runsowned"}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "its step running", func() bool { return calls.Load() == 1 })
	info, err := h.x.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Runs) != 1 || info.Runs[0].Node != "m1" {
		t.Fatalf("runs %+v after the submission, want one of m1", info.Runs)
	}
	info.Runs[0].Node = "changed by the caller"
	close(gate)
	if done := h.wait(id); len(done.Runs) != 1 || done.Runs[0].Node != "m1" {
		t.Fatalf("runs %+v, want one of m1: the caller's change of an Info reached the executor", done.Runs)
	}
}
