package access

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// The audit trail: a record of every client call to a method that
// changes state (Audited), refusals included, in the replicated domain
// keys audit/<term>-<n> (refusals under audit-refused/). A call is
// recorded where it was served or refused: the leader, or a standby that
// refused it or could not forward it (its record goes to the leader,
// TrailConfig.Send); a standby that forwarded a call leaves its record to
// the leader. The call is answered only once its record is committed.
//
// Only the leader numbers and writes records, one batch at a time: the
// key's term is the leader's, and no other master writes in its term, so
// two leaders never write the same key; within the term a counter that
// only grows numbers them, so a batch that timed out and committed later
// collides with none either.

const (
	// Batch bounds the records in one Raft entry.
	Batch = 256
	// inFlight bounds the audit entries being committed at once: one,
	// so that they commit in the order they are numbered, and a reader
	// paging through the trail never passes a record yet to commit.
	inFlight = 1
	// pruneBatch bounds the deletions one entry carries.
	pruneBatch = 1000
	// pruneEvery is how often an idle leader drops expired records.
	pruneEvery = time.Minute
	// WriteTimeout bounds a batch's commit, however soon its callers'
	// deadlines end: a record of a call that was served is worth the wait.
	WriteTimeout = 10 * time.Second
)

// State is what the trail uses of the replicated state on this master.
type State interface {
	IsLeader() bool
	// Term is the current Raft term, which numbers the leader's records.
	Term() uint64
	// Mutate commits writes through Raft (leader only) and returns once
	// the local state applied them.
	Mutate(ctx context.Context, muts []raftfsm.Mutation) error
}

// Scanner is a State that can walk its keys under a prefix in order; a
// trail over a State that cannot prunes nothing.
type Scanner interface {
	Scan(prefix string, fn func(key string, value []byte) bool)
}

// TrailConfig is the trail's bounds and what it needs of its master.
type TrailConfig struct {
	Clock clock.Clock
	// Retention drops records committed longer ago.
	Retention time.Duration
	// MaxRecords is the ceiling of the served calls' records (a tenth of
	// it, of the refusals'); MaxPerPrincipal each principal's quota of
	// them; MaxRefusedPerCaller each principal's, and each address's,
	// quota of refusals.
	MaxRecords, MaxPerPrincipal, MaxRefusedPerCaller int
	// Established says this master leads and its state is caught up:
	// only then are expired records pruned.
	Established func() bool
	// Send has the leader commit a standby's records, and waits; it
	// answers an error wrapping ErrLeading if it finds this master
	// leading by now.
	Send func(recs []*adminpb.AuditRecord) error
	// Stop ends Run and every wait; Stopping is the error the waits then
	// wrap.
	Stop     <-chan struct{}
	Stopping error
	// Loops counts the trail's goroutines (Run's caller adds Run).
	Loops *sync.WaitGroup
	Log   hclog.Logger
	// Metrics, if set, receives the trail's counters.
	Metrics prometheus.Registerer
	// Format is the cluster version: once it allows version.Format2, the
	// records carried in one entry are written as groups (a key for each
	// holder's, AuditRecordGroup), where the state can fold them
	// (Folding), and records keep their request (KeepsRequests). nil:
	// never.
	Format version.Gate
}

// Trail batches records into Raft entries (Trail.Run), at the leader,
// or sends them to it (TrailConfig.Send).
type Trail struct {
	state State
	cfg   TrailConfig
	kick  chan struct{}

	mu      sync.Mutex
	pending []pendingWrite

	// The leader's numbering, written by one at a time (number): Run's
	// goroutine, or whoever holds the state's Sequencer; term and the
	// spaces under mu, which the writes in flight also take (but a
	// space's Space, its bounds, fixed once the trail is made).
	term   uint64
	n      uint64
	spaces [2]*space // served calls, refusals
	// pruning are the keys the writes in flight delete; started, the
	// records of calls still being served, whose outcome is yet to be
	// written over them (neither is pruned).
	pruning, started map[string]bool

	written, failed prometheus.Counter
	// rebuild asks Run to build the spaces' indexes (warm): Carry found
	// one unknown, which it does not build under the Sequencer.
	rebuild atomic.Bool

	// folds says the state folds this trail's placeholders (Folding);
	// format2, that the cluster version has allowed version.Format2
	// (it is never lowered): groups, and records that keep their
	// request. carrying are the records CarryPrepared handed out
	// placeholders for, by placeholder key, until the entry is folded
	// (under mu); carried numbers the placeholders.
	folds    bool
	format2  atomic.Bool
	carrying map[string]*Prepared
	carried  uint64
}

// space is one key space of the trail, within its own bounds
// (Space), with the leader's index of it.
type space struct {
	Space
	idx *Index // nil when unknown
	// unindexed are the records added with idx unknown (prunes), for
	// the index warm builds.
	unindexed []keyedRecord
	// quietUntil (unix ms, 0 unknown) is when a record of the space can
	// next be past the retention, but for those the scan skips (pruning,
	// started): until then numbering a record scans nothing for expired
	// ones. A scan sets it (from the oldest record it stopped at or a
	// write in flight puts there, at most quietFor ahead); each record
	// written lowers it to its own expiry.
	quietUntil int64
	// writing is, for each write numbered and not yet settled, when the
	// oldest record it puts in the space expires (unix ms): a scan cannot
	// see those records until their entry applies, so it goes quiet no
	// later than that.
	writing map[*numbered]int64
}

// quietFor bounds how long a space goes unscanned on what its last scan
// found: whatever changed it outside the trail's own writes is scanned
// again within it.
const quietFor = pruneEvery

type pendingWrite struct {
	rec  *adminpb.AuditRecord
	done chan error // nil: nobody waits (an outcome written over its record)
}

// ErrLeading is what TrailConfig.Send answers, wrapped, when it finds this
// master leading by now: it forwards nothing to itself. The trail then
// writes the records as the leader's, once, in the write that sent them
// (Run): otherwise a standby elected while it sent them would lose them.
var ErrLeading = errors.New("audit: this master leads now")

// NewTrail is the audit trail of this master over state.
func NewTrail(state State, cfg TrailConfig) (*Trail, error) {
	l := &Trail{state: state, cfg: cfg, kick: make(chan struct{}, 1), pruning: map[string]bool{}, started: map[string]bool{},
		spaces: [2]*space{{Space: Space{Prefix: AuditPrefix, Max: cfg.MaxRecords, PerHolder: cfg.MaxPerPrincipal}, writing: map[*numbered]int64{}},
			{Space: Space{Prefix: RefusedPrefix, Max: max(1, cfg.MaxRecords/10), PerHolder: cfg.MaxRefusedPerCaller, PerAddr: cfg.MaxRefusedPerCaller}, writing: map[*numbered]int64{}}},
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_audit_records_total", Help: "Audit records this master committed as the leader."}),
		failed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_audit_failures_total", Help: "Audit records this master could not get committed (the call was answered UNAVAILABLE, or its refusal went unrecorded)."}),
	}
	if f, ok := state.(Folding); ok && cfg.Format != nil {
		l.folds, l.carrying = true, map[string]*Prepared{}
		f.SetFolder(&raftfsm.Folder{Fold: l.fold})
	}
	if cfg.Metrics != nil {
		for _, c := range []prometheus.Collector{l.written, l.failed} {
			if err := cfg.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("admin: audit metrics: %w", err)
			}
		}
	}
	return l, nil
}

// Append has recs committed, by this node as the leader or by the leader,
// and waits for it (up to WriteTimeout, whatever ctx's deadline).
func (l *Trail) Append(ctx context.Context, recs ...*adminpb.AuditRecord) error {
	if l == nil {
		return nil
	}
	dones := make([]chan error, len(recs))
	l.mu.Lock()
	for i, r := range recs {
		l.sanitize(r)
		dones[i] = make(chan error, 1)
		l.pending = append(l.pending, pendingWrite{rec: r, done: dones[i]})
	}
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	for _, d := range dones {
		if err := l.Wait(d); err != nil {
			return err
		}
	}
	return nil
}

// Start has rec committed as Append does, without waiting: the channel
// says when it is (rec.Id is set by then).
func (l *Trail) Start(rec *adminpb.AuditRecord) <-chan error {
	done := make(chan error, 1)
	l.enqueue(pendingWrite{rec: rec, done: done})
	return done
}

// Update writes rec, already numbered (rec.Id), over its record, without
// waiting: an outcome, best effort.
func (l *Trail) Update(rec *adminpb.AuditRecord) { l.enqueue(pendingWrite{rec: rec}) }

func (l *Trail) enqueue(p pendingWrite) {
	l.sanitize(p.rec)
	l.mu.Lock()
	l.pending = append(l.pending, p)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Wait waits for a record Start committed, up to WriteTimeout.
func (l *Trail) Wait(done <-chan error) error {
	t := time.NewTimer(WriteTimeout + time.Second)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("audit: no commit within %v", WriteTimeout)
	case <-l.cfg.Stop:
		return fmt.Errorf("audit: %w", l.cfg.Stopping)
	}
}

// Run writes the pending records until the server stops; on the leader it
// also drops expired records every pruneEvery.
func (l *Trail) Run() {
	defer l.cfg.Loops.Done()
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	sem := make(chan struct{}, inFlight)
	for {
		select {
		case <-l.cfg.Stop:
			l.failPending(fmt.Errorf("audit: %w", l.cfg.Stopping))
			return
		case <-l.kick:
		case <-t.C:
			if l.state.IsLeader() {
				if l.cfg.Established() {
					if err := l.Commit(nil); err != nil {
						l.cfg.Log.Debug("audit prune", "error", err)
					}
				}
			}
		}
		for {
			// A batch is taken, and numbered, only once the write before
			// it is done: a write whose Send finds this master elected
			// meanwhile numbers its records again as the leader's
			// (ErrLeading) while Run waits here, so the numbering stays
			// one at a time and in the order the records came.
			select {
			case sem <- struct{}{}:
			case <-l.cfg.Stop:
				l.failPending(fmt.Errorf("audit: %w", l.cfg.Stopping))
				return
			}
			l.mu.Lock()
			n := min(len(l.pending), Batch)
			batch := l.pending[:n:n]
			l.pending = l.pending[n:]
			l.mu.Unlock()
			if n == 0 {
				<-sem
				if l.rebuild.Swap(false) {
					l.warm()
				}
				break
			}
			recs := make([]*adminpb.AuditRecord, n)
			for i, p := range batch {
				recs[i] = p.rec
			}
			// Numbered in order (here, or as proposed where the
			// state sequences its writes), and written while Run
			// gathers what comes meanwhile into the next batch.
			write, err := l.prepare(recs)
			if err != nil {
				<-sem
				for _, p := range batch {
					if p.done != nil {
						p.done <- err
					}
				}
				continue
			}
			l.cfg.Loops.Add(1)
			go func() {
				defer l.cfg.Loops.Done()
				err := write()
				if errors.Is(err, ErrLeading) {
					// Elected while sending them: written as the
					// leader's, once (a second ErrLeading, leadership
					// gone again as fast, fails them).
					var again func() error
					if again, err = l.prepare(recs); err == nil {
						err = again()
					}
				}
				<-sem
				for _, p := range batch {
					if p.done != nil {
						if err != nil {
							l.failed.Inc()
						}
						p.done <- err
					} else if err != nil {
						// An outcome written over a record begun earlier:
						// no caller waits for it, so say here that the
						// record keeps saying PENDING.
						l.failed.Inc()
						l.cfg.Log.Warn("audit record's outcome not committed; the record stays PENDING", "id", p.rec.GetId(), "method", p.rec.GetMethod(), "code", p.rec.GetCode(), "error", err)
					}
				}
			}()
		}
	}
}

func (l *Trail) failPending(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.pending {
		if p.done != nil {
			p.done <- err
		}
	}
	l.pending = nil
}

// Commit writes recs (and the prunes due) as the leader, or sends recs to
// the leader, and waits.
func (l *Trail) Commit(recs []*adminpb.AuditRecord) error {
	write, err := l.prepare(recs)
	if err != nil {
		return err
	}
	return write()
}

// prepare returns the write of recs (and the prunes due) to make: on the
// leader it numbers them, on Run's goroutine, or where the state
// sequences its writes (Sequenced) as the write is proposed.
func (l *Trail) prepare(recs []*adminpb.AuditRecord) (func() error, error) {
	if !l.state.IsLeader() {
		return func() error {
			if len(recs) == 0 {
				return nil
			}
			return l.cfg.Send(recs)
		}, nil
	}
	if sq, ok := l.state.(Sequenced); ok {
		return func() error {
			l.warm() // not under the Sequencer, which every submission's entry waits for
			var w *numbered
			return l.write(func(ctx context.Context) (*numbered, error) {
				err := sq.MutateNumbered(ctx, func() ([]raftfsm.Mutation, error) {
					var err error
					w, err = l.number(recs, true)
					if err != nil {
						return nil, err
					}
					return w.all(), nil
				})
				return w, err
			})
		}, nil
	}
	w, err := l.number(recs, true)
	if err != nil {
		return nil, err
	}
	return func() error {
		return l.write(func(ctx context.Context) (*numbered, error) {
			if len(w.muts)+len(w.prune) == 0 {
				return w, nil
			}
			return w, l.state.Mutate(ctx, w.all())
		})
	}, nil
}

// Sequenced is a State that numbers what it writes as it proposes it:
// build runs under the node's raftfsm.Sequencer, just before the entry
// goes to Raft, so that records numbered there commit in that order
// whichever path proposes them (Carry's, in a submission's entry,
// included). build returning no mutations writes nothing.
type Sequenced interface {
	MutateNumbered(ctx context.Context, build func() ([]raftfsm.Mutation, error)) error
}

// numbered is a write the trail worked out: its records' puts (and
// moves), the prunes due, and how many records it adds.
type numbered struct {
	muts, prune []raftfsm.Mutation
	fresh       int
}

func (w *numbered) all() []raftfsm.Mutation {
	return append(w.muts[:len(w.muts):len(w.muts)], w.prune...)
}

// write makes a write through do, bounded by WriteTimeout and the trail's
// stop, and settles the bookkeeping of what it pruned.
func (l *Trail) write(do func(ctx context.Context) (*numbered, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), WriteTimeout)
	defer cancel()
	go func() { // Stop does not wait out a stuck write
		select {
		case <-l.cfg.Stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	w, err := do(ctx)
	l.settle(w, err)
	return err
}

// settle ends the bookkeeping of w, numbered and written with outcome err
// (w nil: never numbered), and counts its records written if it was.
func (l *Trail) settle(w *numbered, err error) {
	if w != nil && err == nil {
		l.written.Add(float64(w.fresh))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w != nil {
		for _, m := range w.prune {
			delete(l.pruning, m.Key)
		}
		for _, sp := range l.spaces {
			delete(sp.writing, w) // applied, or never will be
		}
	}
	if err != nil {
		for _, sp := range l.spaces {
			sp.idx, sp.unindexed = nil, nil // what committed is unknown: count afresh
			sp.quietUntil = 0
		}
	}
}

// Carry numbers rec, the final record of a call the leader served, to be
// written in the entry that commits what the call did (a submission's,
// procedure.SubmitOptions.Mutations): one entry then commits both. It
// returns the mutations writing it, with the prunes due, and done, to be
// called with the entry's outcome. ok is false where the trail cannot
// carry a record (not the leader; a state that numbers nothing as it
// proposes): the caller appends it. Carry is called under the state's
// raftfsm.Sequencer, as the entry is proposed (raftfsm.Write.Late): the
// record's number then follows the log's order as the trail's own do.
// A caller that can make the record ready before (Prepare) carries it
// with CarryPrepared, and leaves the Sequencer less to do.
func (l *Trail) Carry(rec *adminpb.AuditRecord) (muts []raftfsm.Mutation, done func(error), ok bool) {
	if !l.CanCarry() || !l.state.IsLeader() {
		return nil, nil, false
	}
	return l.CarryPrepared(l.Prepare(rec), 0)
}

// CanCarry says the trail's state numbers records as it proposes them,
// which Carry needs.
func (l *Trail) CanCarry() bool {
	if l == nil {
		return false
	}
	_, ok := l.state.(Sequenced)
	return ok
}

// number numbers recs and works out the prunes due. The numbering's one
// writer at a time: Run's goroutine, or the state's Sequencer (Sequenced)
// where the trail's writes and carried records number under it. build
// false builds no unknown index (prunes).
func (l *Trail) number(recs []*adminpb.AuditRecord, build bool) (*numbered, error) {
	term := l.numberingTerm()
	now := l.cfg.Clock.Now().UnixMilli()
	w := &numbered{muts: make([]raftfsm.Mutation, 0, len(recs))}
	// What the writes change in each space's index.
	var added [2][]keyedRecord
	var moved []string
	// earliest is, per space, the oldest commit time of the records
	// written: what the space's quiet time comes down to.
	earliest := [2]int64{math.MaxInt64, math.MaxInt64}
	for _, r := range recs {
		key, numbered := AuditKeyOf(r.GetId())
		switch {
		case !numbered:
			l.n++
			r.Id = numberedID(term, l.n)
			sp := 0
			if r.GetRefused() {
				sp = 1
			}
			key = l.spaces[sp].Prefix + AuditSuffix(term, l.n)
			added[sp] = append(added[sp], keyedRecord{key, r, 1})
			w.fresh++
			if r.GetCode() == AuditPending {
				l.mu.Lock()
				l.started[key] = true // not pruned before its outcome is written
				l.mu.Unlock()
			}
		case r.GetRefused():
			// An outcome that is a refusal (the rate limit, after the
			// record was started): the record moves to the refusals.
			l.mu.Lock()
			delete(l.started, key)
			l.mu.Unlock()
			w.muts = append(w.muts, raftfsm.Del(key))
			moved = append(moved, key)
			key = RefusedPrefix + strings.TrimPrefix(key, AuditPrefix)
			added[1] = append(added[1], keyedRecord{key, r, 1})
		default:
			l.mu.Lock()
			delete(l.started, key)
			l.mu.Unlock()
		}
		if r.GetCommittedUnixMs() == 0 {
			r.CommittedUnixMs = now
		}
		sp := 0
		if strings.HasPrefix(key, RefusedPrefix) {
			sp = 1
		}
		earliest[sp] = min(earliest[sp], r.GetCommittedUnixMs())
		b, err := proto.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		w.muts = append(w.muts, raftfsm.Put(key, b))
	}
	for i, sp := range l.spaces {
		var gone []string
		if i == 0 {
			gone = moved
		}
		w.prune = append(w.prune, l.prunes(sp, w, added[i], gone, build, earliest[i])...)
	}
	return w, nil
}

// numberingTerm is the state's term, whose numbering it starts if it is
// a new one.
func (l *Trail) numberingTerm() uint64 {
	term := l.state.Term()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.termLocked(term)
	return term
}

// termLocked starts the numbering of term if it is a new one. l.mu is
// held.
func (l *Trail) termLocked(term uint64) {
	if term != l.term {
		l.term, l.n = term, 0
		for _, sp := range l.spaces {
			sp.idx, sp.unindexed = nil, nil
			sp.quietUntil = 0
		}
		clear(l.started)
	}
}

// warm builds the spaces' unknown indexes, on the leader, scanning
// without l.mu or the Sequencer held. The index is then as a build under
// them finds it (the records yet to commit left out), but for the
// deletions proposed during the scan, taken out after it, and the
// records added meanwhile unindexed, counted.
func (l *Trail) warm() {
	sc, ok := l.state.(Scanner)
	if !ok || !l.state.IsLeader() {
		return
	}
	term := l.state.Term()
	for _, sp := range l.spaces {
		l.mu.Lock()
		l.termLocked(term)
		if sp.idx != nil {
			// Known: the usual case, as every leader's write calls warm.
			l.mu.Unlock()
			continue
		}
		skip := maps.Clone(l.pruning)
		l.mu.Unlock()
		x := sp.BuildIndex(sc.Scan, func(k string) bool { return skip[k] })
		l.mu.Lock()
		if sp.idx == nil && l.term == term {
			for k := range l.pruning {
				x.Remove(k)
			}
			for _, a := range sp.unindexed {
				if !l.pruning[a.key] {
					x.Add(a.key, sp.GroupsFor(a.rec), a.records)
				}
			}
			sp.idx, sp.unindexed = x, nil
		}
		l.mu.Unlock()
	}
}

// keyedRecord is a record with the key it is written under; records is
// how many the key holds (a group's; 0 or 1: the record alone), all of
// rec's holder.
type keyedRecord struct {
	key     string
	rec     *adminpb.AuditRecord
	records int
}

// prunes are the deletions due in space sp when adding records to it and
// deleting gone from it: those past a quota or the ceiling
// (audit_quota.go), and those committed longer than AuditRetention ago,
// at most pruneBatch. With sp's index unknown and build false (a carried
// record's, under the Sequencer, which a scan of the whole space would
// hold for as long: every write of the executor's waits for it), the
// quotas' wait for Run to build it (warm), which counts adding then.
// earliest is the oldest commit time of the records write w puts in sp
// (math.MaxInt64: none).
func (l *Trail) prunes(sp *space, w *numbered, adding []keyedRecord, gone []string, build bool, earliest int64) []raftfsm.Mutation {
	sc, ok := l.state.(Scanner)
	if !ok {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	x := sp.idx
	if x == nil && build {
		x = l.indexLocked(sp, sc)
	}
	var out []raftfsm.Mutation
	if x != nil {
		for _, k := range gone {
			x.Remove(k)
		}
		for _, a := range adding {
			x.Add(a.key, sp.GroupsFor(a.rec), a.records)
		}
		out = l.quotaPrunes(sp, x, pruneBatch)
	} else {
		sp.unindexed = append(sp.unindexed, adding...)
		if !l.rebuild.Swap(true) {
			select {
			case l.kick <- struct{}{}:
			default:
			}
		}
	}
	now := l.cfg.Clock.Now()
	// The records written here expire no sooner than the oldest of them;
	// until w settles, no scan can see them.
	if earliest != math.MaxInt64 {
		due := earliest + l.cfg.Retention.Milliseconds()
		sp.writing[w] = due
		if sp.quietUntil != 0 {
			sp.quietUntil = min(sp.quietUntil, due)
		}
	}
	if now.UnixMilli() < sp.quietUntil {
		return out
	}
	cutoff := now.Add(-l.cfg.Retention).UnixMilli()
	// The scan stops at the first record still kept: nothing after it is
	// due before it is.
	nextDue, full := int64(math.MaxInt64), false
	// From the oldest, past those a write in flight deletes already.
	sc.Scan(sp.Prefix, func(k string, v []byte) bool {
		if len(out) >= pruneBatch {
			full = true
			return false
		}
		if l.pruning[k] || l.started[k] {
			return true
		}
		if ms, ok := committedUnixMs(v); ok && ms >= cutoff {
			nextDue = ms + l.cfg.Retention.Milliseconds()
			return false
		}
		out = append(out, raftfsm.Del(k))
		if x != nil {
			x.Remove(k)
		}
		l.pruning[k] = true
		return true
	})
	for _, due := range sp.writing {
		nextDue = min(nextDue, due) // records the scan could not see yet
	}
	sp.quietUntil = 0
	// Only a leader caught up knows the space whole: one whose state is
	// yet to apply its predecessor's records would go quiet past them.
	if !full && (l.cfg.Established == nil || l.cfg.Established()) {
		sp.quietUntil = max(1, min(nextDue, now.Add(quietFor).UnixMilli()))
	}
	return out
}

// committedField is AuditRecord's committed_unix_ms: the retention scan
// reads that one field of the oldest record, not the whole record, for
// every record numbered (under the Sequencer, for a carried one).
var committedField = (&adminpb.AuditRecord{}).ProtoReflect().Descriptor().Fields().ByName("committed_unix_ms").Number()

// committedUnixMs is committed_unix_ms of the encoded record v (the last
// one, as proto.Unmarshal keeps); ok is false if v cannot be walked as
// protobuf's wire format, which the scan prunes as it pruned a record it
// could not decode. A record that can be walked but not decoded (a string
// that is not UTF-8, a field number past protobuf's, a broken packed
// list), which the trail never writes, is judged by its time instead:
// every other reader already skips such a record, and it goes once old.
func committedUnixMs(v []byte) (ms int64, ok bool) {
	ok = eachField(v, func(num protowire.Number, typ protowire.Type, value []byte) bool {
		if num == committedField && typ == protowire.VarintType {
			x, _ := protowire.ConsumeVarint(value) // whole: eachField delimited it
			ms = int64(x)
		}
		return true
	})
	if !ok {
		return 0, false
	}
	return ms, true
}

// indexLocked is sp's index, built by a scan if unknown. l.mu is held.
func (l *Trail) indexLocked(sp *space, sc Scanner) *Index {
	if sp.idx == nil {
		sp.idx = sp.BuildIndex(sc.Scan, func(k string) bool { return l.pruning[k] })
	}
	return sp.idx
}

// quotaPrunes are the deletions due in sp by its quotas and ceiling, at
// most limit, noted in its index. l.mu is held.
func (l *Trail) quotaPrunes(sp *space, x *Index, limit int) []raftfsm.Mutation {
	var out []raftfsm.Mutation
	for _, k := range x.QuotaPrunes(&sp.Space, limit, func(k string) bool { return l.pruning[k] || l.started[k] }) {
		out = append(out, raftfsm.Del(k))
		l.pruning[k] = true
	}
	return out
}
