package procedure

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Span attributes of procedures and steps (Config.Tracer).
const (
	AttrProcID    = attribute.Key("baton.procedure.id")
	AttrProcType  = attribute.Key("baton.procedure.type")
	AttrParentID  = attribute.Key("baton.procedure.parent_id")
	AttrRootID    = attribute.Key("baton.procedure.root_id")
	AttrState     = attribute.Key("baton.procedure.state")    // the framework state (SUCCESS, ROLLEDBACK, or where a handed-off one stood) when its span ends
	AttrSMState   = attribute.Key("baton.procedure.sm_state") // the state machine state a step ran
	AttrOutcome   = attribute.Key("baton.procedure.outcome")  // what a step returned: more, done, children, suspend, yield, failed
	AttrAttempt   = attribute.Key("baton.procedure.attempt")  // Context.Attempt of the step
	AttrResumed   = attribute.Key("baton.procedure.resumed")  // the span of a procedure taken over from an earlier executor
	AttrMaster    = attribute.Key("baton.master")             // Config.Node: the master that ran it
	AttrHandedOff = attribute.Key("baton.procedure.handed_off")
)

// startSpan starts e's span on this executor as a child of parent (a
// span context, possibly of a span another master made; invalid: e starts
// a new trace). The first span a procedure ever gets is also its
// persisted traceCtx. Call it before e is visible to others, or with x.mu
// held.
func (x *Executor) startSpan(e *entry, parent trace.SpanContext, resumed bool) {
	ctx := context.Background()
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, AttrProcID.Int64(int64(e.id)), AttrProcType.String(e.ti.name), AttrMaster.String(x.cfg.Node))
	if e.parent != 0 {
		attrs = append(attrs, AttrParentID.Int64(int64(e.parent)), AttrRootID.Int64(int64(e.root)))
	}
	if resumed {
		attrs = append(attrs, AttrResumed.Bool(true))
	}
	_, e.span = x.tracer.Start(ctx, e.ti.name, trace.WithAttributes(attrs...))
	e.spanCtx = nil
	if !e.traceCtx.IsValid() {
		e.traceCtx = e.span.SpanContext()
	}
}

// procSpanLocked returns the executor's context carrying e's span on this
// executor, starting the span if e runs here for the first time: under
// its persisted span, which an earlier executor started (after a
// failover, a restart, or with tracing turned on since: a new trace).
// Called with x.mu held and x.tracer set.
func (x *Executor) procSpanLocked(e *entry) context.Context {
	if e.span == nil {
		x.startSpan(e, e.traceCtx, e.traceCtx.IsValid())
	}
	if e.spanCtx == nil {
		e.spanCtx = trace.ContextWithSpan(x.ctx, e.span)
	}
	return e.spanCtx
}

// childSpans starts the spans of e's new children under e's span. e is
// claimed by the caller; the children are not visible yet.
func (x *Executor) childSpans(e *entry, kids []*entry) {
	x.mu.Lock()
	x.procSpanLocked(e)
	parent := e.span.SpanContext()
	x.unlock()
	for _, k := range kids {
		x.startSpan(k, parent, false)
	}
}

// endSpanIfDoneLocked takes e's span once e is finished, for the caller
// to end outside x.mu; nil if there is nothing to end.
func (x *Executor) endSpanIfDoneLocked(e *entry) func() {
	if e.span == nil || !e.state.Terminal() {
		return nil
	}
	span, state, msg := e.span, e.state, e.errMsg
	e.span, e.spanCtx = nil, nil
	return func() { endProcSpan(span, state, msg, false) }
}

// endProcSpan ends a procedure's span: with an error status if it rolled
// back, or marked handed off if it is not finished (the executor stopped;
// whoever leads next resumes it under a new span in the same trace).
func endProcSpan(span trace.Span, state State, errMsg string, handedOff bool) {
	span.SetAttributes(AttrState.String(state.String()))
	if handedOff {
		span.SetAttributes(AttrHandedOff.Bool(true))
	}
	if state == RolledBack || state == Failed {
		span.SetStatus(codes.Error, errMsg)
	}
	span.End()
}

// endAllSpansLocked takes the span of every procedure, for an executor
// that stops: the returned func ends them (outside x.mu).
func (x *Executor) endAllSpansLocked() func() {
	type ending struct {
		span  trace.Span
		state State
		msg   string
	}
	var all []ending
	for _, e := range x.procs {
		if e.span != nil {
			all = append(all, ending{e.span, e.state, e.errMsg})
			e.span, e.spanCtx = nil, nil
		}
	}
	return func() {
		for _, s := range all {
			endProcSpan(s.span, s.state, s.msg, !s.state.Terminal())
		}
	}
}

// stepSpan starts the span of one step (or rollback step: name says) of e
// under parent (procSpanLocked's context), and returns the context for
// the step and the span. The type and master are on the procedure's span.
// A procedure whose trace is not sampled gets no step spans (nil): the
// standard samplers decide by the parent's decision or by the trace id,
// so they would not be sampled either, and skipping them makes an
// unsampled trace nearly free. The step still carries the procedure's
// span context, so what it starts is not sampled either.
func (x *Executor) stepSpan(e *entry, parent context.Context, name string, attempt int32) (context.Context, trace.Span) {
	if !trace.SpanFromContext(parent).IsRecording() {
		return parent, nil
	}
	attrs := make([]attribute.KeyValue, 0, 3)
	attrs = append(attrs, AttrProcID.Int64(int64(e.id)), AttrAttempt.Int(int(attempt)+1))
	if sm, ok := e.proc.(stateMachineProcedure); ok {
		if m := sm.machine(); m.started && !m.eof {
			attrs = append(attrs, AttrSMState.Int(int(m.next)))
		} else if !m.started {
			attrs = append(attrs, AttrSMState.Int(int(sm.InitialState())))
		}
	}
	return x.tracer.Start(parent, name, trace.WithAttributes(attrs...))
}

// endStepSpan ends a step's span with its outcome.
func endStepSpan(span trace.Span, outcome string, err error) {
	span.SetAttributes(AttrOutcome.String(outcome))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// outcomeOf names a step's outcome for its span.
func outcomeOf(st Step, err error) string {
	if err != nil {
		return "failed"
	}
	switch st.kind {
	case stepDone:
		return "done"
	case stepMore:
		return "more"
	case stepChildren:
		return "children"
	case stepSuspend:
		return "suspend"
	case stepYield:
		return "yield"
	}
	return "unknown"
}
