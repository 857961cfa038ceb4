package domain

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/internal/tracectx"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/scheduler"
)

// opWait is a region procedure waiting for one dispatched op.
type opWait struct {
	ref    ServerRef
	region string
	kind   rspb.OpKind
	ev     *scheduler.Event // nil in a batch: its procedure blocks, it does not suspend
	res    *dispatch.Result
	done   chan struct{} // closed with the first result; nil in a batch, whose done is waited for
}

func (w *opWait) matches(ref ServerRef, region string, kind rspb.OpKind) bool {
	return w.ref == ref && w.region == region && w.kind == kind
}

// arm prepares procID's wait for an op, replacing any earlier one.
func (s *services) arm(procID uint64, ref ServerRef, region string, kind rspb.OpKind) *opWait {
	return s.armWith(procID, ref, region, kind, newOpEvent(ref, region, kind))
}

// armWith is arm with the event the wait wakes.
func (s *services) armWith(procID uint64, ref ServerRef, region string, kind rspb.OpKind, ev *scheduler.Event) *opWait {
	w := &opWait{ref: ref, region: region, kind: kind, done: make(chan struct{}), ev: ev}
	s.mu.Lock()
	s.waits[procID] = w
	s.mu.Unlock()
	return w
}

func newOpEvent(ref ServerRef, region string, kind rspb.OpKind) *scheduler.Event {
	return scheduler.NewEvent(kind.String() + " " + region + " on " + ref.String())
}

// outstanding returns procID's wait for the op if it was sent in this term
// and is not answered yet: it need not be sent again (the dispatcher
// answers every op exactly once).
func (s *services) outstanding(procID uint64, ref ServerRef, region string, kind rspb.OpKind) *opWait {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.waits[procID]; w != nil && w.matches(ref, region, kind) && w.res == nil {
		return w
	}
	return nil
}

// take returns and forgets procID's result for the op, if one arrived.
func (s *services) take(procID uint64, ref ServerRef, region string, kind rspb.OpKind) *dispatch.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.waits[procID]
	if w == nil || !w.matches(ref, region, kind) || w.res == nil {
		return nil
	}
	delete(s.waits, procID)
	return w.res
}

// forget drops procID's wait.
func (s *services) forget(procID uint64) {
	s.mu.Lock()
	delete(s.waits, procID)
	s.mu.Unlock()
}

// onResult is the dispatcher's OnResult, the only answer to a wait: it
// hands r to the procedure waiting for exactly that op (same incarnation,
// region and kind) with no result yet, and wakes it; failing that, to the
// wait for exactly that op in the procedure's batch. Transition reports
// answer no wait (see ReportTransition).
func (s *services) onResult(r dispatch.Result) {
	ref := ServerRef{r.Target.ServerID, r.Target.StartCode}
	s.mu.Lock()
	w := s.waits[r.Op.ProcID]
	if w == nil || !w.matches(ref, r.Op.Region, r.Op.Kind) || w.res != nil {
		var ev *scheduler.Event
		if b := s.batches[r.Op.ProcID]; b != nil && b.deliverLocked(ref, &r) {
			ev = b.ev
		}
		s.mu.Unlock()
		if ev != nil {
			s.x.Wake(ev)
		}
		return
	}
	w.res = &r
	close(w.done)
	s.mu.Unlock()
	s.x.Wake(w.ev)
}

// opBatch is one step's ops of a kind, one per region, sent together and
// waited for together: by a procedure that cannot suspend (a rollback
// closing many regions), blocking in wait, or by one that suspends on its
// event (AssignBatch, newSuspendedBatch). Sent one at a time, each would
// sit alone in the dispatcher for its whole batching delay; sent
// together, the dispatcher batches them per server. Its waits are keyed
// by (proc id, region), beside the single waits keyed by proc id;
// onResult tries the single wait first. A procedure has at most one
// batch; a blocking step forgets it on every exit, a suspending one once
// it has read the answers, so a late answer finds no waiter.
type opBatch struct {
	s      *services
	procID uint64
	kind   rspb.OpKind
	waits  map[string]*opWait // by region
	left   int                // sent ops without a result
	sealed bool               // every op is sent: done may close
	done   chan struct{}      // closed once sealed with nothing left
	// ev, if set, is woken when done closes: the suspended procedure's.
	ev *scheduler.Event
	// waitFrom is when the wait for its answers began (the domain's
	// clock): the seal, or the last extend. A suspended procedure's
	// deadline counts from it.
	waitFrom time.Time
}

// newBatch starts procID's batch of ops of kind. The step making it is
// the procedure's only running step and waits for the batch alone: any
// earlier wait of procID, single or batch, is stale, and is dropped so
// that it cannot take an answer meant for the batch.
func (s *services) newBatch(procID uint64, kind rspb.OpKind) *opBatch {
	b := &opBatch{s: s, procID: procID, kind: kind, waits: map[string]*opWait{}, done: make(chan struct{})}
	s.mu.Lock()
	if s.batches == nil {
		s.batches = map[uint64]*opBatch{}
	}
	delete(s.waits, procID)
	s.batches[procID] = b
	s.mu.Unlock()
	return b
}

// newSuspendedBatch starts procID's batch of ops of kind for a step that
// suspends on the returned batch's event (woken once every op sent has
// its answer) rather than blocking.
func (s *services) newSuspendedBatch(procID uint64, kind rspb.OpKind) *opBatch {
	b := s.newBatch(procID, kind)
	b.ev = scheduler.NewEvent(fmt.Sprintf("%s batch of procedure %d", kind, procID))
	return b
}

// batchOf is procID's batch sent in this term, nil if none.
func (s *services) batchOf(procID uint64) *opBatch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batches[procID]
}

// deliverLocked hands r to the batch's wait for exactly that op with no
// result yet, if there is one, and reports whether that completed the
// batch.
func (b *opBatch) deliverLocked(ref ServerRef, r *dispatch.Result) bool {
	w := b.waits[r.Op.Region]
	if w == nil || !w.matches(ref, r.Op.Region, r.Op.Kind) || w.res != nil {
		return false
	}
	w.res = r
	b.left--
	if b.sealed && b.left == 0 {
		close(b.done)
		return true
	}
	return false
}

// send dispatches the batch's op for region to ref, its wait armed first
// (the answer can come inside Dispatch). One op per region: sending a
// region again replaces its wait.
func (b *opBatch) send(ctx context.Context, ref ServerRef, address, region, table string) {
	b.arm(ref, region)
	b.s.disp.Dispatch(dispatch.Target{ServerID: ref.ID, Address: address, StartCode: ref.StartCode},
		dispatch.Op{Kind: b.kind, Region: region, Table: table, ProcID: b.procID, Span: tracectx.RefOf(ctx)})
}

// arm prepares the batch's wait for its op on region at ref.
func (b *opBatch) arm(ref ServerRef, region string) {
	w := &opWait{ref: ref, region: region, kind: b.kind}
	b.s.mu.Lock()
	if old := b.waits[region]; old == nil || old.res != nil {
		b.left++
	}
	b.waits[region] = w
	b.s.mu.Unlock()
}

// seal says every op is sent: done closes (and ev is woken) once the
// last answer is in, at once if it is already.
func (b *opBatch) seal() {
	b.s.mu.Lock()
	b.sealed = true
	b.waitFrom = b.s.d.cfg.Clock.Now()
	complete := false
	if b.left == 0 {
		select {
		case <-b.done:
		default:
			close(b.done)
			complete = true
		}
	}
	b.s.mu.Unlock()
	if complete && b.ev != nil {
		b.s.x.Wake(b.ev)
	}
}

// waitLeft is how much of timeout, counted from the seal (or the last
// extend), is left.
func (b *opBatch) waitLeft(timeout time.Duration) time.Duration {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.waitFrom.Add(timeout).Sub(b.s.d.cfg.Clock.Now())
}

// extend counts the wait for the answers still to come from now.
func (b *opBatch) extend() {
	b.s.mu.Lock()
	b.waitFrom = b.s.d.cfg.Clock.Now()
	b.s.mu.Unlock()
}

// complete says every op sent has its answer (once sealed).
func (b *opBatch) complete() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// wait blocks until every op sent has its answer, or until timeout, ctx's
// end or the services' stop, whichever comes first: that one's error.
// The answers that came are kept either way (result).
func (b *opBatch) wait(ctx context.Context, timeout time.Duration) error {
	b.seal()
	expired, stopTimer := b.s.d.after(timeout)
	defer stopTimer()
	select {
	case <-b.done:
		return nil
	case <-expired:
		return fmt.Errorf("no answer within %v", timeout)
	case <-ctx.Done():
		return ctx.Err()
	case <-b.s.stopCh:
		return ErrNoServices
	}
}

// result is region's answer, nil if none came (or none was sent).
func (b *opBatch) result(region string) *dispatch.Result {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if w := b.waits[region]; w != nil {
		return w.res
	}
	return nil
}

// forget drops the batch: answers still to come find no waiter.
func (b *opBatch) forget() {
	b.s.mu.Lock()
	if b.s.batches[b.procID] == b {
		delete(b.s.batches, b.procID)
	}
	b.s.mu.Unlock()
}

// noteClosed remembers, for procID's rollback, that region was confirmed
// closed on ref in this term. A rollback step that fails commits nothing,
// so its retry reads the region still recorded open there; nothing sends
// it an open meanwhile (the rollback's tree holds the table, and the
// dispatcher keeps a server's ops in order), so the retry need not close
// it again. A new term starts with none: its leader closes them all.
func (s *services) noteClosed(procID uint64, region string, ref ServerRef) {
	s.mu.Lock()
	if s.rbClosed == nil {
		s.rbClosed = map[uint64]map[string]ServerRef{}
	}
	m := s.rbClosed[procID]
	if m == nil {
		m = map[string]ServerRef{}
		s.rbClosed[procID] = m
	}
	m[region] = ref
	s.mu.Unlock()
}

// closedBefore reports whether noteClosed saw region closed on ref.
func (s *services) closedBefore(procID uint64, region string, ref ServerRef) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.rbClosed[procID][region]
	return ok && at == ref
}

// forgetClosed drops what noteClosed remembered for procID.
func (s *services) forgetClosed(procID uint64) {
	s.mu.Lock()
	delete(s.rbClosed, procID)
	s.mu.Unlock()
}

// forgetFirstOpens drops the waits firstOpens armed for the children of
// create procID, once it ended: those of children that never ran (it
// failed or was aborted with them suspended) would otherwise stay for the
// term. The others took theirs already.
func (s *services) forgetFirstOpens(procID uint64) {
	s.mu.Lock()
	for _, id := range s.firstOpenKids[procID] {
		delete(s.waits, id)
	}
	delete(s.firstOpenKids, procID)
	s.mu.Unlock()
}

// firstOpens sends, once the spawn of a parent's step is written, the
// first open of each child the step prepared in its name (prepareCrashed,
// prepareIdle: the region recorded OPENING on its target in the same
// write), each child suspended on that open's answer meanwhile
// (procedure.Context.SuspendChild): the first step each child would
// otherwise run would only send it and suspend. The child wakes on the
// answer (or DispatchTimeout) in OPEN_DISPATCH, as after its own send;
// its wait is armed before the write, so a child woken early (an abort, a
// timeout) finds the open outstanding and does not send it twice. A
// restart or a new leader finds the children runnable, and they send it
// themselves. In maintenance mode nothing is sent here: the children
// send, once it ends, as they would.
//
// A create's children that never ran (the create failed or was aborted
// with them suspended) end with its tree, unheard; their waits are
// dropped when the create ends (forgetFirstOpens). A crash's children
// always run: it never rolls back.
type firstOpens struct {
	ctx  *procedure.Context
	svc  *services
	d    *Domain
	sent []firstOpen
	// track: remember the children by parent, for forgetFirstOpens.
	track bool
}

type firstOpen struct {
	id      uint64
	ref     ServerRef
	address string
	region  string
	table   string
}

func newFirstOpens(ctx *procedure.Context, d *Domain, svc *services) *firstOpens {
	return &firstOpens{ctx: ctx, svc: svc, d: d}
}

// add suspends child id, prepared to open p.Region on p.Server, until the
// answer of the open sent once the spawn is written.
func (f *firstOpens) add(id uint64, p *TransitRegionState) error {
	if !p.Prepared || f.svc.dispatchPaused() != nil {
		return nil
	}
	if failPoint(f.d, "region.first_open") != nil {
		return nil // a test's: the child sends its open itself, through its own fail point
	}
	kind := rspb.OpKind_OP_KIND_OPEN
	ev := newOpEvent(p.Server, p.Region, kind)
	if err := f.ctx.SuspendChild(id, procedure.OnEvent(ev), procedure.Timeout(f.d.cfg.DispatchTimeout)); err != nil {
		return err
	}
	f.svc.armWith(id, p.Server, p.Region, kind, ev)
	if f.track {
		f.svc.mu.Lock()
		if f.svc.firstOpenKids == nil {
			f.svc.firstOpenKids = map[uint64][]uint64{}
		}
		f.svc.firstOpenKids[f.ctx.ID()] = append(f.svc.firstOpenKids[f.ctx.ID()], id)
		f.svc.mu.Unlock()
	}
	if len(f.sent) == 0 {
		f.ctx.AfterSpawn(f.send)
	}
	f.sent = append(f.sent, firstOpen{id: id, ref: p.Server, address: p.Address, region: p.Region, table: p.fullTable()})
	return nil
}

// send sends the opens once the spawn is written, each traced under its
// child's span; a spawn that is not drops their waits (their ids are
// never used).
func (f *firstOpens) send(out procedure.SpawnOutcome) {
	for _, o := range f.sent {
		if !out.Committed {
			f.svc.forget(o.id)
			continue
		}
		f.svc.disp.Dispatch(dispatch.Target{ServerID: o.ref.ID, Address: o.address, StartCode: o.ref.StartCode},
			dispatch.Op{Kind: rspb.OpKind_OP_KIND_OPEN, Region: o.region, Table: o.table, ProcID: o.id,
				Span: tracectx.RefOf(out.ChildContext(f.ctx, o.id))})
	}
	f.sent = nil
}

// dispatch sends op for procID to ref and returns its wait. The wait is
// armed before the send: a result can arrive (even inside Dispatch) before
// the procedure suspends; the event then stays ready, so the suspension
// returns at once. ctx's span (the step's) is the one the call is traced
// under.
func (s *services) dispatch(ctx context.Context, procID uint64, ref ServerRef, address, region, table string, kind rspb.OpKind) *opWait {
	w := s.arm(procID, ref, region, kind)
	s.disp.Dispatch(dispatch.Target{ServerID: ref.ID, Address: address, StartCode: ref.StartCode},
		dispatch.Op{Kind: kind, Region: region, Table: table, ProcID: procID, Span: tracectx.RefOf(ctx)})
	return w
}
