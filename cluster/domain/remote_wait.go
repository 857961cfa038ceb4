package domain

import (
	"context"
	"fmt"

	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/internal/tracectx"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/scheduler"
)

// opWait is a region procedure waiting for one dispatched op.
type opWait struct {
	ref    ServerRef
	region string
	kind   rspb.OpKind
	ev     *scheduler.Event
	res    *dispatch.Result
	done   chan struct{} // closed with the first result
}

func (w *opWait) matches(ref ServerRef, region string, kind rspb.OpKind) bool {
	return w.ref == ref && w.region == region && w.kind == kind
}

// arm prepares procID's wait for an op, replacing any earlier one.
func (s *services) arm(procID uint64, ref ServerRef, region string, kind rspb.OpKind) *opWait {
	w := &opWait{ref: ref, region: region, kind: kind, done: make(chan struct{}),
		ev: scheduler.NewEvent(fmt.Sprintf("%v %s on %s", kind, region, ref))}
	s.mu.Lock()
	s.waits[procID] = w
	s.mu.Unlock()
	return w
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
// region and kind) with no result yet, and wakes it. Transition reports
// answer no wait (see ReportTransition).
func (s *services) onResult(r dispatch.Result) {
	ref := ServerRef{r.Target.ServerID, r.Target.StartCode}
	s.mu.Lock()
	w := s.waits[r.Op.ProcID]
	if w == nil || !w.matches(ref, r.Op.Region, r.Op.Kind) || w.res != nil {
		s.mu.Unlock()
		return
	}
	w.res = &r
	close(w.done)
	s.mu.Unlock()
	s.x.Wake(w.ev)
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
