package raftfsm

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/defaults"
	"github.com/baton-dev/baton/store"
)

// Defaults of RaftStoreConfig.
const (
	DefaultApplyTimeout   = 10 * time.Second
	DefaultMaxBatchWrites = 1024
	DefaultMaxBatchBytes  = 4 << 20
	DefaultMaxInFlight    = 1
	DefaultMaxLinger      = 2 * time.Millisecond
)

// RaftStoreConfig configures a RaftStore. Zero fields take their defaults.
type RaftStoreConfig struct {
	// ApplyTimeout bounds how long raft.Apply may wait to enqueue an entry
	// and Load may wait for its Barrier. Default 10 s.
	ApplyTimeout time.Duration

	// MaxBatchWrites caps the store calls coalesced into one Raft entry.
	// Default 1024.
	MaxBatchWrites int

	// MaxBatchBytes caps the (estimated) payload of one Raft entry; a single
	// write larger than this still goes alone. Default 4 MiB. Keep it well
	// below what the transport and log store handle comfortably in one entry.
	MaxBatchBytes int

	// MaxInFlight is how many entries the committer keeps in Raft at once.
	// 1 gives the biggest batches: everything arriving while one entry
	// commits goes into the next. More overlaps the commit of one entry
	// with the replication of the next, but splits the writers into
	// cohorts, one per entry in flight, that keep alternating: with 2, an
	// entry carried about 0.4-0.47 of the procedures in flight
	// (BenchmarkStepCommit at 16, 64 and 256), with 1 and MaxLinger
	// 0.85-0.9 at 16 and 64, at no cost in steps/s on a 3-node loopback
	// cluster with fsync. raft itself groups concurrent Applies into one
	// log write. Default 1.
	MaxInFlight int

	// MaxLinger bounds how long the committer holds a batch open for the
	// writers the previous entry answered, most of which come straight back
	// with their next step: without it the first of them to return is
	// proposed alone and the rest wait a whole commit behind it, so that at
	// any concurrency an entry carried only about half the writers. The
	// wait ends as soon as the batch holds, besides the writes that were
	// already queued when the previous entry was answered, as many as that
	// entry carried, and lasts at most a quarter of the previous entry's
	// commit time, so it costs a write little next to the commit it joins;
	// a lone writer (the previous entry carried one write and none were
	// queued) never waits. Default 2 ms; negative: no linger.
	MaxLinger time.Duration

	// FenceTerm, when non-zero, is written into every entry: the FSM then
	// refuses the entry unless raft appended it in that term (the term of
	// the leader whose executor uses this store). Default 0: no fence.
	FenceTerm uint64

	// Sequencer orders the entries whose writes number what they carry
	// (Write.Late) with the node's other such proposals. Default: one of
	// the store's own.
	Sequencer *Sequencer

	// Logger receives log lines. Default: a null logger.
	Logger hclog.Logger
}

func (c RaftStoreConfig) withDefaults() RaftStoreConfig {
	defaults.Positive(&c.ApplyTimeout, DefaultApplyTimeout)
	defaults.Positive(&c.MaxBatchWrites, DefaultMaxBatchWrites)
	defaults.Positive(&c.MaxBatchBytes, DefaultMaxBatchBytes)
	defaults.Positive(&c.MaxInFlight, DefaultMaxInFlight)
	if c.MaxLinger == 0 {
		c.MaxLinger = DefaultMaxLinger
	}
	defaults.Set(&c.Logger, hclog.NewNullLogger())
	if c.Sequencer == nil {
		c.Sequencer = &Sequencer{}
	}
	return c
}

// RaftStore is the replicated store.Store: every write becomes part of a
// PROC_BATCH Raft entry, applied by the FSM of every node. Reads (Load) are
// served from the local FSM.
//
// Group commit: callers hand their Write to a single committer goroutine,
// which takes whatever is queued (up to MaxBatchWrites / MaxBatchBytes) and
// proposes it as one entry; all callers of that entry get its outcome. The
// entry's writes are applied in order, so the result equals running the
// calls one after another in the order the committer took them. While
// entries are in flight (MaxInFlight) new writes queue up, so batches grow
// with load; and a batch is held open (MaxLinger) until as many writes are
// queued as the previous entry answered plus those that were queued behind
// it, since those writers mostly come back at once with their next step. A
// lone writer never waits.
type RaftStore struct {
	r   *raft.Raft
	fsm *FSM
	cfg RaftStoreConfig
	log hclog.Logger

	reqCh  chan *request
	stopCh chan struct{}
	doneCh chan struct{}
	once   sync.Once
	mu     sync.RWMutex // guards closed against enqueueing
	closed bool

	nEntries atomic.Uint64
	nWrites  atomic.Uint64

	// Of the entry answered last: how many writes it carried, how many
	// were queued behind it when it was answered, and how long (ns) it
	// took from proposal to outcome. They size the next linger.
	lastAnswered atomic.Int64
	lastQueued   atomic.Int64
	lastCommitNs atomic.Int64
}

var _ store.Store = (*RaftStore)(nil)

type request struct {
	w    Write
	size int
	done chan error
}

// NewRaftStore returns a store writing through r, whose FSM must be fsm.
// The store does not own r or fsm: Close stops the store only.
func NewRaftStore(r *raft.Raft, fsm *FSM, cfg RaftStoreConfig) *RaftStore {
	cfg = cfg.withDefaults()
	s := &RaftStore{
		r:      r,
		fsm:    fsm,
		cfg:    cfg,
		log:    cfg.Logger.Named("raftstore"),
		reqCh:  make(chan *request, 4*cfg.MaxBatchWrites),
		stopCh: make(chan struct{}),
		doneCh: make(chan struct{}),
	}
	go s.run()
	return s
}

// RaftStoreStats are counters of a RaftStore.
type RaftStoreStats struct {
	Entries uint64 // Raft entries proposed
	Writes  uint64 // store calls carried by them
}

// Stats returns the store's counters.
func (s *RaftStore) Stats() RaftStoreStats {
	return RaftStoreStats{Entries: s.nEntries.Load(), Writes: s.nWrites.Load()}
}

// Load implements store.Store. It first waits (raft.Barrier) until the local
// FSM has applied every entry committed before this call, so a new leader
// loads everything its predecessors acknowledged; then it serves the FSM's
// in-memory state. It fails, wrapping raft.ErrNotLeader, on a non-leader.
func (s *RaftStore) Load(fn func(store.Proc) error) (store.LoadInfo, error) {
	if err := s.r.Barrier(s.cfg.ApplyTimeout).Error(); err != nil {
		return store.LoadInfo{}, s.wrapErr("load barrier", err)
	}
	v := s.fsm.View()
	info := store.LoadInfo{MaxID: v.MaxProcID(), Index: v.Index()}
	err := v.Procs(func(p store.Proc) error {
		info.Live++
		return fn(p)
	})
	return info, err
}

// Insert implements store.Store.
func (s *RaftStore) Insert(proc store.Proc, children []store.Proc) error {
	ps := make([]store.Proc, 0, 1+len(children))
	return s.Commit(context.Background(), Write{Inserts: append(append(ps, proc), children...)})
}

// Update implements store.Store.
func (s *RaftStore) Update(proc store.Proc) error {
	return s.Commit(context.Background(), Write{Updates: []store.Proc{proc}})
}

// Delete implements store.Store.
func (s *RaftStore) Delete(ids []uint64) error {
	return s.Commit(context.Background(), Write{Deletes: ids})
}

// UpdateWith persists a new image of proc together with domain mutations:
// both commit in the same Raft entry or neither does, so a step's effect and
// its procedure transition never commit separately.
func (s *RaftStore) UpdateWith(proc store.Proc, muts []Mutation) error {
	return s.Commit(context.Background(), Write{Updates: []store.Proc{proc}, Mutations: muts})
}

// InsertWith is Insert with domain mutations committed atomically with it.
func (s *RaftStore) InsertWith(proc store.Proc, children []store.Proc, muts []Mutation) error {
	ps := make([]store.Proc, 0, 1+len(children))
	return s.Commit(context.Background(), Write{Inserts: append(append(ps, proc), children...), Mutations: muts})
}

// Commit persists w atomically (coalesced with concurrent writes into one
// Raft entry) and returns once the entry is applied by the local FSM. An
// invalid w fails alone with store.ErrInvalid. On a node that is not the
// leader it fails with an error wrapping raft.ErrNotLeader. If ctx ends
// first, Commit returns ctx.Err() and w may or may not commit.
func (s *RaftStore) Commit(ctx context.Context, w Write) error {
	if err := w.validate(); err != nil {
		return err
	}
	if s.r.State() != raft.Leader {
		// Fail fast: not worth a trip through the committer.
		return s.wrapErr("write", raft.ErrNotLeader)
	}
	size := 64
	for _, ps := range [2][]store.Proc{w.Inserts, w.Updates} {
		for _, p := range ps {
			size += 16 + len(p.Data)
		}
	}
	size += 10 * len(w.Deletes)
	for _, m := range w.Mutations {
		size += 16 + len(m.Key) + len(m.Value)
	}
	if w.Late != nil {
		size += lateSize
	}
	req := &request{w: w, size: size, done: make(chan error, 1)}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	select {
	case s.reqCh <- req:
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err()
	}
	s.mu.RUnlock()
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close implements store.Store: it stops the committer. Writes already
// proposed to Raft get their outcome; writes still queued fail with
// ErrClosed, as do writes after Close. It does not shut down Raft or the FSM.
func (s *RaftStore) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.stopCh)
		s.mu.Unlock()
		<-s.doneCh
	})
	return nil
}

func (s *RaftStore) wrapErr(what string, err error) error {
	if errors.Is(err, raft.ErrNotLeader) {
		addr, id := s.r.LeaderWithID()
		return fmt.Errorf("raftfsm: %s: not the leader (leader %q at %q): %w", what, id, addr, err)
	}
	return fmt.Errorf("raftfsm: %s: %w", what, err)
}

// run is the committer goroutine.
func (s *RaftStore) run() {
	defer close(s.doneCh)
	slots := make(chan struct{}, s.cfg.MaxInFlight)
	var inflight sync.WaitGroup
	defer inflight.Wait()
	batch := make([]*request, 0, s.cfg.MaxBatchWrites)
	var carry *request // a request that did not fit the previous batch
	for {
		// Take a slot first: writes arriving while we wait for one join
		// the batch, which is what makes the batches grow with load.
		select {
		case slots <- struct{}{}:
		case <-s.stopCh:
			s.drainClosed(carry)
			return
		}
		batch = batch[:0]
		bytes := 0
		if carry != nil {
			batch, bytes, carry = append(batch, carry), carry.size, nil
		} else {
			select {
			case r := <-s.reqCh:
				batch, bytes = append(batch, r), r.size
			case <-s.stopCh:
				s.drainClosed(nil)
				return
			}
		}
	gather:
		for len(batch) < s.cfg.MaxBatchWrites && bytes < s.cfg.MaxBatchBytes {
			select {
			case r := <-s.reqCh:
				if bytes+r.size > s.cfg.MaxBatchBytes {
					carry = r
					break gather
				}
				batch, bytes = append(batch, r), bytes+r.size
			default:
				break gather
			}
		}
		batch, bytes, carry = s.linger(batch, bytes, carry)
		proposed := time.Now()
		fut, reqs, folded, err := s.propose(append([]*request(nil), batch...))
		if err != nil || len(reqs) == 0 {
			<-slots
			for _, r := range reqs {
				r.done <- err
			}
			continue
		}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			err := s.await(fut)
			if err == nil {
				if rerr, ok := fut.Response().(error); ok {
					err = fmt.Errorf("raftfsm: entry %d refused: %w", fut.Index(), rerr)
				}
			} else {
				err = s.wrapErr("apply", err)
			}
			// Before the slot is given back: the committer that takes it
			// sizes its linger by this entry. The queue is read before
			// any writer is answered, so that none of this entry's
			// writers coming back is counted twice.
			s.lastQueued.Store(int64(len(s.reqCh)))
			s.lastAnswered.Store(int64(len(reqs)))
			s.lastCommitNs.Store(int64(time.Since(proposed)))
			if folded != nil {
				folded(err) // before any writer learns the outcome
			}
			<-slots
			for _, r := range reqs {
				r.done <- err
			}
		}()
	}
}

// linger holds the batch open until it carries the writers the last entry
// answered besides those queued behind that entry, for at most a quarter of
// its commit time (and MaxLinger), and returns it with what arrived. The
// timer runs on the wall clock, as raft's commit times do.
//
// The target counts the queued writers too because they are the ones the
// entry before missed: waiting only for as many writes as the last entry
// carried makes any entry size a fixed point (the stragglers of one entry,
// queued, fill part of the next, whose own stragglers then miss it), so
// the split of the writers that a slow start or a late writer causes was
// never undone, and at 16 and 64 procedures in flight an entry settled at
// about 0.5-0.75 of them (BenchmarkStepCommit); counting them, 0.85-0.9.
func (s *RaftStore) linger(batch []*request, bytes int, carry *request) ([]*request, int, *request) {
	want := int(s.lastAnswered.Load() + s.lastQueued.Load())
	if s.cfg.MaxLinger < 0 || carry != nil || want <= 1 || len(batch) >= want {
		return batch, bytes, carry
	}
	d := min(time.Duration(s.lastCommitNs.Load())/4, s.cfg.MaxLinger)
	if d <= 0 {
		return batch, bytes, carry
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for len(batch) < want && len(batch) < s.cfg.MaxBatchWrites && bytes < s.cfg.MaxBatchBytes {
		select {
		case r := <-s.reqCh:
			if bytes+r.size > s.cfg.MaxBatchBytes {
				return batch, bytes, r
			}
			batch, bytes = append(batch, r), bytes+r.size
		case <-timer.C:
			return batch, bytes, nil
		case <-s.stopCh:
			// Proposed as it is; the next turn of run sees the stop.
			return batch, bytes, nil
		}
	}
	return batch, bytes, nil
}

// await waits for fut. raft may never answer an Apply still in its batch
// queue when it shuts down (BatchApplyCh), so a shut-down raft ends the
// wait with raft.ErrRaftShutdown instead of leaving the writer, and Close,
// blocked for ever.
func (s *RaftStore) await(fut raft.ApplyFuture) error {
	return AwaitFuture(fut, nil, 100*time.Millisecond, IfShutDown(s.r))
}

// propose hands batch to raft as one entry and returns its future with
// the requests it carries: batch but for a write whose Late mutations are
// refused (answered here). A batch with a Late write is numbered and
// proposed under the Sequencer, its placeholders folded there (Folder);
// folded, if not nil, is then the folder's done, for the entry's outcome.
func (s *RaftStore) propose(batch []*request) (fut raft.ApplyFuture, reqs []*request, folded func(error), err error) {
	late := false
	for _, r := range batch {
		late = late || r.w.Late != nil
	}
	if !late {
		fut, err = s.apply(batch)
		return fut, batch, nil, err
	}
	reqs = make([]*request, 0, len(batch))
	q := s.cfg.Sequencer
	q.Do(func() {
		var keys []string
		for _, r := range batch {
			if r.w.Late != nil {
				more, err := s.late(r.w.Late)
				if err == nil {
					err = validMutations(more)
				}
				var held []string
				if err == nil {
					if more, held = placeholders(more); held != nil && q.folder == nil {
						err = fmt.Errorf("%w: a placeholder with no folder to turn it into mutations", store.ErrInvalid)
					}
				}
				if err != nil {
					r.done <- fmt.Errorf("raftfsm: a write's late mutations: %w", err)
					continue
				}
				keys = append(keys, held...)
				r.w.Mutations = append(r.w.Mutations[:len(r.w.Mutations):len(r.w.Mutations)], more...)
			}
			reqs = append(reqs, r)
		}
		if len(keys) > 0 {
			var muts []Mutation
			muts, folded, err = s.fold(q.folder, keys)
			if err == nil {
				err = validMutations(muts)
			}
			if err != nil {
				err = fmt.Errorf("raftfsm: folding the entry's placeholders: %w", err)
				return
			}
			last := &reqs[len(reqs)-1].w
			last.Mutations = append(last.Mutations[:len(last.Mutations):len(last.Mutations)], muts...)
		}
		if len(reqs) > 0 {
			fut, err = s.apply(reqs)
		}
	})
	if err != nil && folded != nil {
		folded(err)
		folded = nil
	}
	return fut, reqs, folded, err
}

// fold runs f's Fold. A panic in it fails the entry: the records it
// stood for are then in none, and their writes are answered so.
func (s *RaftStore) fold(f *Folder, keys []string) (muts []Mutation, done func(error), err error) {
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Logger.Error("a folder panicked", "panic", p, "stack", string(debug.Stack()))
			muts, done, err = nil, nil, fmt.Errorf("panicked: %v", p)
		}
	}()
	return f.Fold(keys)
}

// late runs a write's Late. A panic in it fails that write alone: it
// runs on the committer's goroutine, whose death would take the node (the
// leader) down with every write in flight.
func (s *RaftStore) late(fn func() []Mutation) (muts []Mutation, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.cfg.Logger.Error("a write's late mutations panicked", "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("panicked: %v", p)
		}
	}()
	return fn(), nil
}

// lateSize is what a write's Late mutations count for in a batch's bytes:
// an audit record cut to its limits, with room to spare.
const lateSize = 4 << 10

func (s *RaftStore) apply(reqs []*request) (raft.ApplyFuture, error) {
	writes := make([]Write, len(reqs))
	for i, r := range reqs {
		writes[i] = r.w
	}
	data, err := EncodeFencedProcBatch(s.cfg.FenceTerm, writes...)
	if err != nil {
		return nil, err
	}
	s.nEntries.Add(1)
	s.nWrites.Add(uint64(len(reqs)))
	return s.r.Apply(data, s.cfg.ApplyTimeout), nil
}

// drainClosed answers every queued request with ErrClosed. Commit checks
// closed under mu before queueing, so nothing is queued after Close.
func (s *RaftStore) drainClosed(carry *request) {
	if carry != nil {
		carry.done <- ErrClosed
	}
	for {
		select {
		case r := <-s.reqCh:
			r.done <- ErrClosed
		default:
			return
		}
	}
}
