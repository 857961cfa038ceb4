package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// The audit trail: a record of every client call to a method that
// changes state (Audited), refusals included, in the replicated domain
// keys audit/<term>-<n>. A call is recorded where it was served or
// refused: the leader, or a standby that refused it or could not forward
// it (its record goes to the leader by AppendAudit); a standby that
// forwarded a call leaves its record to the leader. The call is answered
// only once its record is committed.
//
// Only the leader numbers and writes records, one batch at a time: the
// key's term is the leader's, and no other master writes in its term, so
// two leaders never write the same key; within the term a counter that
// only grows numbers them, so a batch that timed out and committed later
// collides with none either.

const (
	// auditBatch bounds the records in one Raft entry.
	auditBatch = 256
	// auditInFlight bounds the audit entries being committed at once: one,
	// so that they commit in the order they are numbered, and a reader
	// paging through the trail never passes a record yet to commit.
	auditInFlight = 1
	// auditPruneBatch bounds the deletions one entry carries.
	auditPruneBatch = 1000
	// auditPruneEvery is how often an idle leader drops expired records.
	auditPruneEvery = time.Minute
	// auditWriteTimeout bounds a batch's commit, however soon its callers'
	// deadlines end: a record of a call that was served is worth the wait.
	auditWriteTimeout = 10 * time.Second
	// maxAuditPageBytes ends a page of ListAudit early.
	maxAuditPageBytes = 1 << 20
	// auditScanMax bounds the records one page of a filtered list reads.
	auditScanMax = 100_000
	// auditPageToken and auditDescPageToken are the kinds of ListAudit's
	// page tokens, oldest and newest first.
	auditPageToken     = "audit"
	auditDescPageToken = "audit-desc"
)

// auditNoteKey carries a call's auditNote through its handler.
type auditNoteKey struct{}

// auditNote tells the access interceptor that a call was answered by the
// leader it was forwarded to, which recorded it; and tells the handler of
// the record begun as the call started, if any (start).
type auditNote struct {
	remote atomic.Bool
	start  *auditStart
}

// auditStart is the commit of a call's first record (PENDING), which both
// the interceptor and a handler may wait for.
type auditStart struct {
	ch   <-chan error
	once sync.Once
	err  error
}

func (a *auditStart) wait(stop <-chan struct{}) error {
	a.once.Do(func() { a.err = waitAudit(a.ch, stop) })
	return a.err
}

// auditStarted waits until ctx's call's first record committed, if this
// leader began one: for a handler about to give leadership away, after
// which this node can commit nothing (the record's outcome is then sent
// to the new leader).
func auditStarted(ctx context.Context, stop <-chan struct{}) {
	if n, ok := ctx.Value(auditNoteKey{}).(*auditNote); ok && n.start != nil {
		_ = n.start.wait(stop)
	}
}

func (n *auditNote) isRemote() bool { return n != nil && n.remote.Load() }

// markForwarded notes that ctx's call reached the leader it was forwarded
// to (an answer came back, or it was sent and may have been served).
func markForwarded(ctx context.Context) {
	if n, ok := ctx.Value(auditNoteKey{}).(*auditNote); ok {
		n.remote.Store(true)
	}
}

// procIDer and friends are the shapes of requests and answers that name
// procedures.
type (
	procIDer  interface{ GetProcId() uint64 }
	procIDser interface{ GetProcIds() []uint64 }
)

// auditRecord is the record of a call of method by p.
func (s *Server) auditRecord(ctx context.Context, p access.Principal, method string, req, resp any, err error) *adminpb.AuditRecord {
	rec := &adminpb.AuditRecord{
		AtUnixMs: s.acc.Clock.Now().UnixMilli(), Principal: p.String(), Name: p.Name, Method: method,
		Code: status.Code(err).String(), Node: s.b.ID(),
	}
	rec.Peer, rec.Via = callOrigin(ctx)
	if err != nil {
		rec.Message = access.Cut(status.Convert(err).Message(), access.FieldMax)
	}
	if m, ok := req.(proto.Message); ok {
		if b, err := (proto.MarshalOptions{Deterministic: true}).Marshal(m); err == nil {
			h := sha256.Sum256(b)
			rec.ArgsDigest = hex.EncodeToString(h[:])
		}
		if b, err := (protojson.MarshalOptions{UseProtoNames: true}).Marshal(m); err == nil {
			rec.Args = access.Cut(string(b), access.FieldMax)
		}
	}
	rec.Refused = access.IsRefusal(status.Code(err))
	add := func(id uint64) {
		if id != 0 && !slices.Contains(rec.ProcIds, id) {
			rec.ProcIds = append(rec.ProcIds, id)
		}
	}
	for _, v := range []any{req, resp} {
		switch x := v.(type) {
		case *adminpb.ProcedureRef:
			add(x.GetId())
		case *adminpb.Procedure:
			add(x.GetId())
		case *adminpb.SubmitProcedureResponse:
			add(x.GetId())
		case *adminpb.LockRef: // an external lock is held by a procedure of that id
			add(x.GetLockId())
		case *adminpb.LockResponse:
			add(x.GetLockId())
		case *adminpb.BypassProcedureRequest:
			add(x.GetId())
		case *adminpb.CancelProceduresResponse:
			for _, p := range x.GetCancelled() {
				if len(rec.ProcIds) < 100 {
					add(p.GetId())
				}
			}
		case procIDer:
			add(x.GetProcId())
		}
		if x, ok := v.(procIDser); ok {
			for _, id := range x.GetProcIds() {
				if len(rec.ProcIds) >= 100 {
					break
				}
				add(id)
			}
		}
	}
	return rec
}

// auditLog batches records into Raft entries (auditLog.run), at the
// leader, or sends them to it.
type auditLog struct {
	s    *Server
	kick chan struct{}

	mu      sync.Mutex
	pending []pendingAudit

	// The leader's numbering, written on run's goroutine only; term and
	// the spaces under mu, which the writes in flight also take.
	term   uint64
	n      uint64
	spaces [2]*auditSpace // served calls, refusals
	// pruning are the keys the writes in flight delete; started, the
	// records of calls still being served, whose outcome is yet to be
	// written over them (neither is pruned).
	pruning, started map[string]bool

	written, failed prometheus.Counter
}

// auditSpace is one key space of the trail, within its own bounds
// (access.Space), with the leader's index of it.
type auditSpace struct {
	access.Space
	idx *access.Index // nil when unknown
}

type pendingAudit struct {
	rec  *adminpb.AuditRecord
	done chan error // nil: nobody waits (an outcome written over its record)
}

func newAuditLog(s *Server, reg prometheus.Registerer) (*auditLog, error) {
	l := &auditLog{s: s, kick: make(chan struct{}, 1), pruning: map[string]bool{}, started: map[string]bool{},
		spaces: [2]*auditSpace{{Space: access.Space{Prefix: access.AuditPrefix, Max: s.acc.AuditMaxRecords, PerHolder: s.acc.AuditMaxPerPrincipal}},
			{Space: access.Space{Prefix: access.RefusedPrefix, Max: max(1, s.acc.AuditMaxRecords/10), PerHolder: s.acc.AuditMaxRefusedPerCaller, PerAddr: s.acc.AuditMaxRefusedPerCaller}}},
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_audit_records_total", Help: "Audit records this master committed as the leader."}),
		failed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "baton_audit_failures_total", Help: "Audit records this master could not get committed (the call was answered UNAVAILABLE, or its refusal went unrecorded)."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{l.written, l.failed} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("admin: audit metrics: %w", err)
			}
		}
	}
	return l, nil
}

// append has rec committed, by this node as the leader or by the leader,
// and waits for it (up to auditWriteTimeout, whatever ctx's deadline).
func (l *auditLog) append(ctx context.Context, recs ...*adminpb.AuditRecord) error {
	if l == nil {
		return nil
	}
	dones := make([]chan error, len(recs))
	l.mu.Lock()
	for i, r := range recs {
		access.SanitizeRecord(r)
		dones[i] = make(chan error, 1)
		l.pending = append(l.pending, pendingAudit{rec: r, done: dones[i]})
	}
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	for _, d := range dones {
		if err := waitAudit(d, l.s.stopCh); err != nil {
			return err
		}
	}
	return nil
}

// start has rec committed as append does, without waiting: the channel
// says when it is (rec.Id is set by then).
func (l *auditLog) start(rec *adminpb.AuditRecord) <-chan error {
	done := make(chan error, 1)
	l.enqueue(pendingAudit{rec: rec, done: done})
	return done
}

// update writes rec, already numbered (rec.Id), over its record, without
// waiting: an outcome, best effort.
func (l *auditLog) update(rec *adminpb.AuditRecord) { l.enqueue(pendingAudit{rec: rec}) }

func (l *auditLog) enqueue(p pendingAudit) {
	access.SanitizeRecord(p.rec)
	l.mu.Lock()
	l.pending = append(l.pending, p)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// waitAudit waits for a record start committed, up to auditWriteTimeout.
func waitAudit(done <-chan error, stop <-chan struct{}) error {
	t := time.NewTimer(auditWriteTimeout + time.Second)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("audit: no commit within %v", auditWriteTimeout)
	case <-stop:
		return fmt.Errorf("audit: %w", errStopping)
	}
}

// run writes the pending records until the server stops; on the leader it
// also drops expired records every auditPruneEvery.
func (l *auditLog) run() {
	defer l.s.loops.Done()
	t := time.NewTicker(auditPruneEvery)
	defer t.Stop()
	sem := make(chan struct{}, auditInFlight)
	for {
		select {
		case <-l.s.stopCh:
			l.failPending(fmt.Errorf("audit: %w", errStopping))
			return
		case <-l.kick:
		case <-t.C:
			if l.s.b.IsLeader() {
				if _, err := l.s.b.Procedures(); err == nil {
					if err := l.commit(nil); err != nil {
						l.s.log.Debug("audit prune", "error", err)
					}
				}
			}
		}
		for {
			l.mu.Lock()
			n := min(len(l.pending), auditBatch)
			batch := l.pending[:n:n]
			l.pending = l.pending[n:]
			l.mu.Unlock()
			if n == 0 {
				break
			}
			recs := make([]*adminpb.AuditRecord, n)
			for i, p := range batch {
				recs[i] = p.rec
			}
			// Numbered here, in order; written with up to
			// auditInFlight entries in flight, so that a caller waits
			// for its own batch's commit, not for the one before it too.
			write, err := l.prepare(recs)
			if err != nil {
				for _, p := range batch {
					if p.done != nil {
						p.done <- err
					}
				}
				continue
			}
			sem <- struct{}{}
			l.s.loops.Add(1)
			go func() {
				defer l.s.loops.Done()
				err := write()
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
						l.s.log.Warn("audit record's outcome not committed; the record stays PENDING", "id", p.rec.GetId(), "method", p.rec.GetMethod(), "code", p.rec.GetCode(), "error", err)
					}
				}
			}()
		}
	}
}

func (l *auditLog) failPending(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.pending {
		if p.done != nil {
			p.done <- err
		}
	}
	l.pending = nil
}

// termer is a backend that knows the Raft term.
type termer interface{ Term() uint64 }

// commit writes recs (and the prunes due) as the leader, or sends recs to
// the leader, and waits.
func (l *auditLog) commit(recs []*adminpb.AuditRecord) error {
	write, err := l.prepare(recs)
	if err != nil {
		return err
	}
	return write()
}

// prepare numbers recs and works out the prunes due, on run's goroutine
// (the numbering's only writer), and returns the write to make.
func (l *auditLog) prepare(recs []*adminpb.AuditRecord) (func() error, error) {
	if !l.s.b.IsLeader() {
		return func() error {
			if len(recs) == 0 {
				return nil
			}
			ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), noHoldKey{}, true), auditWriteTimeout)
			defer cancel()
			for {
				_, err := forward(l.s, ctx, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.AppendAuditResponse, error) {
					return c.AppendAudit(ctx, &adminpb.AppendAuditRequest{Records: recs})
				})
				// Records not sent for want of a leader wait for one: an
				// outcome this node writes just after giving leadership
				// away (a leader removing itself) finds none for a moment.
				var ur *unreachableLeader
				if err == nil || !errors.As(err, &ur) || !ur.unsent {
					return err
				}
				select {
				case <-ctx.Done():
					return err
				case <-l.s.stopCh:
					return err
				case <-time.After(5 * holdPoll):
				}
			}
		}, nil
	}
	var term uint64
	if t, ok := l.s.b.(termer); ok {
		term = t.Term()
	}
	l.mu.Lock()
	if term != l.term {
		l.term, l.n = term, 0
		for _, sp := range l.spaces {
			sp.idx = nil
		}
		clear(l.started)
	}
	l.mu.Unlock()
	now := l.s.acc.Clock.Now().UnixMilli()
	muts := make([]raftfsm.Mutation, 0, len(recs))
	// What the writes change in each space's index.
	var added [2][]keyedRecord
	var moved []string
	fresh := 0
	for _, r := range recs {
		key, numbered := access.AuditKeyOf(r.GetId())
		switch {
		case !numbered:
			l.n++
			r.Id = fmt.Sprintf("%d-%d", term, l.n)
			sp := 0
			if r.GetRefused() {
				sp = 1
			}
			key = l.spaces[sp].Prefix + access.AuditSuffix(term, l.n)
			added[sp] = append(added[sp], keyedRecord{key, r})
			fresh++
			if r.GetCode() == access.AuditPending {
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
			muts = append(muts, raftfsm.Del(key))
			moved = append(moved, key)
			key = access.RefusedPrefix + strings.TrimPrefix(key, access.AuditPrefix)
			added[1] = append(added[1], keyedRecord{key, r})
		default:
			l.mu.Lock()
			delete(l.started, key)
			l.mu.Unlock()
		}
		if r.GetCommittedUnixMs() == 0 {
			r.CommittedUnixMs = now
		}
		b, err := proto.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		muts = append(muts, raftfsm.Put(key, b))
	}
	var prune []raftfsm.Mutation
	for i, sp := range l.spaces {
		var gone []string
		if i == 0 {
			gone = moved
		}
		prune = append(prune, l.prunes(sp, added[i], gone)...)
	}
	return func() error {
		if len(muts)+len(prune) == 0 {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), auditWriteTimeout)
		defer cancel()
		go func() { // Stop does not wait out a stuck write
			select {
			case <-l.s.stopCh:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := l.s.b.Mutate(ctx, append(muts, prune...))
		l.mu.Lock()
		for _, m := range prune {
			delete(l.pruning, m.Key)
		}
		if err != nil {
			for _, sp := range l.spaces {
				sp.idx = nil // what committed is unknown: count afresh
			}
		}
		l.mu.Unlock()
		if err != nil {
			return err
		}
		l.written.Add(float64(fresh))
		return nil
	}, nil
}

// keyedRecord is a record with the key it is written under.
type keyedRecord struct {
	key string
	rec *adminpb.AuditRecord
}

// prunes are the deletions due in space sp when adding records to it and
// deleting gone from it: those past a quota or the ceiling
// (audit_quota.go), and those committed longer than AuditRetention ago,
// at most auditPruneBatch.
func (l *auditLog) prunes(sp *auditSpace, adding []keyedRecord, gone []string) []raftfsm.Mutation {
	sc, ok := l.s.b.(domainScanner)
	if !ok {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	x := l.indexLocked(sp, sc)
	for _, k := range gone {
		x.Remove(k)
	}
	for _, a := range adding {
		x.Add(a.key, sp.GroupsFor(a.rec))
	}
	out := l.quotaPrunes(sp, x, auditPruneBatch)
	cutoff := l.s.acc.Clock.Now().Add(-l.s.acc.AuditRetention).UnixMilli()
	// From the oldest, past those a write in flight deletes already.
	sc.DomainScan(sp.Prefix, func(k string, v []byte) bool {
		if len(out) >= auditPruneBatch {
			return false
		}
		if l.pruning[k] || l.started[k] {
			return true
		}
		var r adminpb.AuditRecord
		if proto.Unmarshal(v, &r) == nil && r.GetCommittedUnixMs() >= cutoff {
			return false
		}
		out = append(out, raftfsm.Del(k))
		x.Remove(k)
		l.pruning[k] = true
		return true
	})
	return out
}

// AppendAudit implements adminpb.AdminServer: records of a standby,
// committed by the leader.
func (s *Server) AppendAudit(ctx context.Context, req *adminpb.AppendAuditRequest) (*adminpb.AppendAuditResponse, error) {
	if err := s.admitMasterCall(ctx, "AppendAudit", ""); err != nil {
		return nil, err
	}
	if s.audit == nil {
		return nil, status.Error(codes.FailedPrecondition, "admin: this master keeps no audit trail")
	}
	recs := req.GetRecords()
	if len(recs) > auditBatch {
		return nil, status.Errorf(codes.InvalidArgument, "admin: append audit: %d records, at most %d", len(recs), auditBatch)
	}
	for _, r := range recs {
		if r == nil || r.GetMethod() == "" {
			return nil, status.Error(codes.InvalidArgument, "admin: append audit: a record without a method")
		}
		access.SanitizeRecord(r)
	}
	return onLeader(s, ctx, func(Procedures) (*adminpb.AppendAuditResponse, error) {
		if err := s.audit.append(ctx, recs...); err != nil {
			return nil, err
		}
		return &adminpb.AppendAuditResponse{}, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.AppendAuditResponse, error) {
		return c.AppendAudit(ctx, req)
	})
}

// ListAudit implements adminpb.AdminServer.
func (s *Server) ListAudit(ctx context.Context, req *adminpb.ListAuditRequest) (*adminpb.ListAuditResponse, error) {
	limit := int(req.GetPageSize())
	switch {
	case limit < 0:
		return nil, status.Errorf(codes.InvalidArgument, "admin: list audit: negative page_size %d", limit)
	case limit == 0:
		limit = DefaultPageSize
	case limit > MaxPageSize:
		limit = MaxPageSize
	}
	kind := auditPageToken
	if req.GetNewestFirst() {
		kind = auditDescPageToken
	}
	var after string // the suffix (term-n) the page resumes after (before, newest first)
	if tok := req.GetPageToken(); tok != "" {
		last, ok := adminpb.DecodePageToken(kind, tok)
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "admin: list audit: bad page_token %q (pass next_page_token of the previous page, listed in the same order)", tok)
		}
		after = last
	}
	sc, ok := s.b.(auditScanner)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "admin: list audit: this node cannot list its state")
	}
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.ListAuditResponse, error) {
		return listAuditPage(sc, req, after, limit, ri), nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.ListAuditResponse, error) {
		return c.ListAudit(ctx, req)
	})
}

// auditScanner is a backend that can walk its domain keys both ways.
type auditScanner interface {
	domainScannerFrom
	domainScannerBefore
}

// domainScannerBefore is a backend that can walk its domain keys
// newest first.
type domainScannerBefore interface {
	DomainScanBefore(prefix, before string, fn func(string, []byte) bool)
}

// listAuditPage reads a page of both spaces from suffix after on (before
// it, newest first), merged in order: the first limit records of either
// that match req's filters.
func listAuditPage(sc auditScanner, req *adminpb.ListAuditRequest, after string, limit int, ri *adminpb.ReadInfo) *adminpb.ListAuditResponse {
	desc := req.GetNewestFirst()
	kind := auditPageToken
	if desc {
		kind = auditDescPageToken
	}
	// beyond says suffix a comes later than b in the listing's order.
	beyond := func(a, b string) bool { return (!desc && a > b) || (desc && a < b) }
	type found struct {
		suffix string
		rec    *adminpb.AuditRecord
		size   int
	}
	var all []found
	// cutAt: a space's read stopped here, so nothing beyond it is known.
	cutAt := ""
	for _, prefix := range []string{access.AuditPrefix, access.RefusedPrefix} {
		n, scanned, last, stopped := 0, 0, "", false
		from := ""
		if after != "" {
			from = prefix + after
		}
		visit := func(k string, v []byte) bool {
			if n > limit || scanned >= auditScanMax {
				stopped = true
				return false
			}
			scanned++
			last = k
			var r adminpb.AuditRecord
			if proto.Unmarshal(v, &r) != nil {
				return true
			}
			if (req.GetPrincipal() != "" && r.GetPrincipal() != req.GetPrincipal()) || (req.GetMethod() != "" && r.GetMethod() != req.GetMethod()) {
				return true
			}
			all = append(all, found{strings.TrimPrefix(k, prefix), &r, len(v)})
			n++
			return true
		}
		if desc {
			sc.DomainScanBefore(prefix, from, visit)
		} else {
			sc.DomainScanFrom(prefix, from, visit)
		}
		if suffix := strings.TrimPrefix(last, prefix); stopped && (cutAt == "" || beyond(cutAt, suffix)) {
			cutAt = suffix
		}
	}
	slices.SortFunc(all, func(a, b found) int {
		if desc {
			return strings.Compare(b.suffix, a.suffix)
		}
		return strings.Compare(a.suffix, b.suffix)
	})
	out := &adminpb.ListAuditResponse{Read: ri}
	size, last := 0, ""
	for _, f := range all {
		if cutAt != "" && beyond(f.suffix, cutAt) {
			break // everything up to cutAt is on the page
		}
		if len(out.Records) >= limit || size >= maxAuditPageBytes {
			out.NextPageToken = adminpb.EncodePageToken(kind, last)
			return out
		}
		out.Records = append(out.Records, clipAuditRecord(f.rec))
		size += f.size
		last = f.suffix
	}
	if cutAt != "" {
		out.NextPageToken = adminpb.EncodePageToken(kind, cutAt)
	}
	return out
}

// indexLocked is sp's index, built by a scan if unknown. l.mu is held.
func (l *auditLog) indexLocked(sp *auditSpace, sc domainScanner) *access.Index {
	if sp.idx == nil {
		sp.idx = sp.BuildIndex(sc.DomainScan, func(k string) bool { return l.pruning[k] })
	}
	return sp.idx
}

// quotaPrunes are the deletions due in sp by its quotas and ceiling, at
// most limit, noted in its index. l.mu is held.
func (l *auditLog) quotaPrunes(sp *auditSpace, x *access.Index, limit int) []raftfsm.Mutation {
	var out []raftfsm.Mutation
	for _, k := range x.QuotaPrunes(&sp.Space, limit, func(k string) bool { return l.pruning[k] || l.started[k] }) {
		out = append(out, raftfsm.Del(k))
		l.pruning[k] = true
	}
	return out
}
