package dispatch

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/tracectx"
	"github.com/baton-dev/baton/proto/rspb"
)

// callSpans starts the client spans of one call. A batch may carry
// operations of several traces (procedures of different trees): each trace
// gets a span of the call, under the step of its first operation, linked
// to the steps of its other operations; each operation carries its trace's
// span to the region server (RegionOp.trace_parent). The returned context
// holds the first trace's span, which goes in the call's metadata.
func (d *Dispatcher) callSpans(ctx context.Context, s *server, batch []pending, req *rspb.BatchRequest, attempt int) (context.Context, []trace.Span) {
	var spans []trace.Span
	var firstCtx context.Context
	byTrace := map[trace.TraceID]int{} // trace → index in spans
	for i, p := range batch {
		sc := p.op.Span.SpanContext()
		if !sc.IsValid() {
			continue
		}
		j, ok := byTrace[sc.TraceID()]
		if !ok {
			// Links to the other operations of this trace are added as
			// they are met; a span takes links only at its start, so
			// collect them first.
			var links []trace.Link
			for _, q := range batch[i+1:] {
				if qs := q.op.Span; qs.IsValid() && qs.TraceID == sc.TraceID() && qs.SpanID != sc.SpanID() {
					links = append(links, trace.Link{SpanContext: qs.SpanContext()})
				}
			}
			sctx, span := d.cfg.Tracer.Start(trace.ContextWithSpanContext(ctx, sc), "RegionServer/"+rpcMethod,
				trace.WithSpanKind(trace.SpanKindClient),
				trace.WithLinks(links...),
				trace.WithAttributes(
					attribute.String("rpc.system", "grpc"),
					attribute.String("rpc.service", rspb.RegionServer_ServiceDesc.ServiceName),
					attribute.String("rpc.method", rpcMethod),
					attribute.String("baton.server", s.key.String()),
					attribute.Int64("baton.term", int64(d.cfg.Term)),
					attribute.Int64("baton.batch.seq", int64(req.GetSeq())),
					attribute.Int("baton.batch.ops", len(batch)),
					attribute.Int("baton.batch.attempt", attempt),
				))
			j = len(spans)
			byTrace[sc.TraceID()] = j
			spans = append(spans, span)
			if firstCtx == nil {
				firstCtx = sctx
			}
		}
		req.Ops[i].TraceParent = tracectx.Format(spans[j].SpanContext())
	}
	if firstCtx == nil {
		return ctx, nil
	}
	return firstCtx, spans
}

// endCallSpans ends a call's spans with its outcome.
func endCallSpans(spans []trace.Span, outcome string, err error) {
	for _, span := range spans {
		span.SetAttributes(attribute.String("baton.outcome", outcome))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
