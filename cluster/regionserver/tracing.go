package regionserver

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/tracectx"
	"github.com/baton-dev/baton/proto/rspb"
)

// batchSpan starts the server span of a batch, under the master's call
// span the request's metadata names (or ctx's own span, when a master in
// the same process called without gRPC).
func (s *Server) batchSpan(ctx context.Context, req *rspb.BatchRequest) (context.Context, trace.Span) {
	return s.tracer.Start(tracectx.Extract(ctx), "RegionServer/ExecuteBatch",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("rpc.system", "grpc"),
			attribute.String("rpc.service", rspb.RegionServer_ServiceDesc.ServiceName),
			attribute.String("rpc.method", "ExecuteBatch"),
			attribute.String("baton.server_id", s.cfg.ID),
			attribute.String("baton.master", req.GetMasterId()),
			attribute.Int64("baton.term", int64(req.GetTerm())),
			attribute.Int64("baton.batch.seq", int64(req.GetSeq())),
			attribute.Int("baton.batch.ops", len(req.GetOps())),
		))
}

// opSpan starts the span of one operation of a batch. An operation of the
// batch span's trace hangs under it; one of another trace (a batch mixes
// procedures of several trees) hangs under the master's call span of its
// own trace, which the operation names, and links to the batch.
func (s *Server) opSpan(ctx context.Context, batch trace.Span, op *rspb.RegionOp) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithAttributes(
		attribute.String("baton.region", op.GetRegion()),
		attribute.String("baton.table", op.GetTable()),
		attribute.Int64("baton.procedure.id", int64(op.GetProcId())),
	)}
	parent := ctx
	if own := tracectx.Parse(op.GetTraceParent()); own.IsValid() && own.TraceID() != batch.SpanContext().TraceID() {
		parent = trace.ContextWithSpanContext(ctx, own)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: batch.SpanContext()}))
	}
	return s.tracer.Start(parent, "RegionServer/"+op.GetKind().Label(), opts...)
}

// reportSpan starts the client span of a transition report, under the
// span of the operation it is about.
func (s *Server) reportSpan(ctx context.Context, q report) (context.Context, trace.Span) {
	return s.tracer.Start(trace.ContextWithSpanContext(ctx, q.span), "Master/ReportTransition",
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("rpc.system", "grpc"),
			attribute.String("rpc.service", rspb.Master_ServiceDesc.ServiceName),
			attribute.String("rpc.method", "ReportTransition"),
			attribute.String("baton.region", q.req.GetRegion()),
			attribute.String("baton.region.state", q.req.GetState()),
		))
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
