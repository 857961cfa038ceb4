package procedure

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/store"
)

// errWriteFault is a write the store refused (a full disk, a lost quorum):
// an error returned, the process alive.
var errWriteFault = errors.New("scenario: store write refused")

// TestScenarioHBASE29251WriteFailureStopsExecution replays HBASE-29251
// (HBase ProcV2): a procedure store write fails, and the executor goes on
// from the procedure's in-memory state as if it had been persisted: the
// next step runs, children run, and the outcome reaches the client, while
// the store still holds the state before. A restart then resumes from that
// older state, and the world holds effects the store knows nothing of.
//
// Baton's documented answer (store.Store: a failed write "may or may not
// have been persisted", and the executor treats the store as failed from
// then on) is Executor.setFatal: the first failed write stops the executor
// (Err wraps ErrStoreFailed and the store's error), nothing runs after it,
// and the next executor started on the store resumes from what the store
// holds. The test fails each write of a tree of procedures in turn (nested
// spawns, a state machine among them) with an error, once as a write that
// never reached the store and once as one that did, and checks: the
// executor stops with that error; nothing is written after it; no step
// starts after it (in particular not the next step of the procedure
// written, nor a child of the spawn written, nor the parent of a child
// whose end was written); a waiter on the root is never told it ended
// unless the store holds its end; and an executor restarted on the store
// (the store now healthy) ends the tree once, with the right result, every
// procedure stored as ended once.
//
// It found a defect: when the write of the root's end failed, Wait
// returned the end the executor held in memory, SUCCESS and its result,
// with a nil error (its check looked at the root's in-memory state, already
// terminal, to decide whether the executor's failure concerned it).
// Executor.Wait now reports ErrStoreFailed for a root whose end was not
// written.
//
// Reintroducing the defect — in Executor.persist, on an Update error,
// logging it and going on (x.written, return true) instead of calling
// setFatal — makes this test fail with: "write 2 ( 1:RUNNABLE) failed: 11
// step(s) started after the failed write: [proc 1 (root) step 1 proc 2 (a)
// step 0 ...]". Taking back the Wait fix makes it fail with: "write 13
// failed (applied false): a waiter was told the root ended SUCCESS with
// "root(a(),b(b0(b0x()),b1()))", but the store holds WAITING".
func TestScenarioHBASE29251WriteFailureStopsExecution(t *testing.T) {
	spec := treeSpec{Name: "root", Steps: 3, SpawnAt: 1, Kids: []treeSpec{
		{Name: "a", Steps: 2, SpawnAt: -1},
		{Name: "b", Steps: 3, SpawnAt: 1, SM: true, Kids: []treeSpec{
			{Name: "b0", Steps: 2, SpawnAt: 0, Kids: []treeSpec{{Name: "b0x", Steps: 1, SpawnAt: -1}}},
			{Name: "b1", Steps: 1, SpawnAt: -1},
		}},
	}}
	// A clean run counts the writes.
	env := newTreeEnv()
	fs := newFaultStore(store.NewMemStore(), nil)
	h := startExecutor(t, fs, nil, treeConfig(env))
	if info := h.wait(h.submit(spec.proc(), SubmitOptions{Nonce: "root"})); info.State != Success {
		t.Fatalf("clean run ended %s (%q)", info.State, info.Error)
	}
	_ = h.x.Stop(context.Background())
	total := fs.written()
	for k := 1; k <= total; k++ {
		for _, applied := range []bool{false, true} {
			t.Run(fmt.Sprintf("write-%d-applied-%v", k, applied), func(t *testing.T) {
				writeFault29251(t, spec, k, applied)
			})
		}
	}
}

func writeFault29251(t *testing.T, spec treeSpec, k int, applied bool) {
	mem := store.NewMemStore()
	env := newTreeEnv()
	var (
		mu     sync.Mutex
		failed bool
		what   string
		late   []string
	)
	fs := newFaultStore(mem, func(n int, procs []store.Proc) (error, bool) {
		if n != k {
			return nil, true
		}
		mu.Lock()
		defer mu.Unlock()
		failed = true
		for _, p := range procs {
			var r record
			if r.unmarshal(p.Data) == nil {
				what += fmt.Sprintf(" %d:%s", r.id, r.state)
			}
		}
		return errWriteFault, applied
	})
	// One worker: no other step is in flight when the write fails, so no
	// step at all may start after it (the next step of the procedure
	// written, a child of the spawn written, the parent of a child whose
	// end was written, or anything else).
	env.onStep = func(id uint64, name string, step int) {
		mu.Lock()
		defer mu.Unlock()
		if failed {
			late = append(late, fmt.Sprintf("proc %d (%s) step %d", id, name, step))
		}
	}
	h := startExecutor(t, fs, nil, treeConfig(env))
	id, err := h.x.Submit(spec.proc(), SubmitOptions{Nonce: "root"})
	type waited struct {
		info Info
		err  error
	}
	waitCh := make(chan waited, 1)
	if err == nil {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			info, err := h.x.Wait(ctx, id)
			waitCh <- waited{info, err}
		}()
	} else {
		id = 0
		if !errors.Is(err, ErrStoreFailed) || !errors.Is(err, errWriteFault) {
			t.Fatalf("write %d failed: submit returned %v, want ErrStoreFailed wrapping the store's error", k, err)
		}
	}
	// Every failed write stops the executor; only that is waited for. The
	// tree's in-memory end is no sign: the root can read as ended while
	// the write of that end is the one failing, a moment before the
	// executor records why it stopped.
	testwait.For(t, 10*time.Second, "the executor to stop", func() bool { return h.x.Err() != nil })
	mu.Lock()
	if len(late) > 0 {
		t.Fatalf("write %d (%s) failed: %d step(s) started after the failed write: %v", k, what, len(late), late)
	}
	mu.Unlock()
	if err := h.x.Err(); !errors.Is(err, ErrStoreFailed) || !errors.Is(err, errWriteFault) {
		t.Fatalf("write %d failed: executor error %v, want ErrStoreFailed wrapping the store's error", k, err)
	}
	if id != 0 {
		w := <-waitCh
		if w.err == nil {
			if !w.info.State.Terminal() {
				t.Fatalf("write %d failed: Wait returned %s without an error", k, w.info.State)
			}
			if stored := fs.storedState(id); stored != w.info.State {
				t.Fatalf("write %d failed (applied %v): a waiter was told the root ended %s with %q, but the store holds %s",
					k, applied, w.info.State, w.info.Result, stored)
			}
		} else if !errors.Is(w.err, ErrStoreFailed) {
			t.Fatalf("write %d failed: Wait returned %v, want ErrStoreFailed", k, w.err)
		}
	}
	_ = h.x.Stop(context.Background())
	mu.Lock()
	if len(late) > 0 {
		t.Fatalf("write %d (%s) failed: %d step(s) started after the failed write: %v", k, what, len(late), late)
	}
	mu.Unlock()
	if n := fs.written(); n != k {
		t.Fatalf("write %d (%s) failed, yet the executor wrote %d times in all", k, what, n)
	}

	// The store is healthy again; the client resubmits, as it would after
	// an error.
	finishAfterCrash(t, mem, fs, env, spec, id, fmt.Sprintf("write %d failed", k))
}

// storedState is the state last committed for id.
func (f *faultStore) storedState(id uint64) State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last[id]
}
