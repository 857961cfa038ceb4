// Package tracectx carries OpenTelemetry span contexts where Baton's
// packages hand work to each other across a process or a persisted record:
// as a W3C traceparent string (a procedure record outlives the master that
// wrote it, so a child run after a failover still joins its parent's trace)
// and in gRPC metadata (a dispatcher batch into a region server, a region
// server's report back to the master).
//
// It sits at the bottom floor so that procedure, dispatch, the region
// server and the domain share one encoding without knowing of each other.
// Everything here is a no-op on an invalid span context: with tracing off
// no string is built and no metadata added.
package tracectx

import (
	"context"
	"encoding/hex"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/metadata"
)

// w3c is the W3C Trace Context propagator: stateless, so one value serves
// every call (no process-global propagator is consulted).
var w3c propagation.TraceContext

// Format returns sc as a W3C traceparent ("00-<trace id>-<span id>-<flags>"),
// or "" if sc is not valid. Written out by hand: a procedure formats one
// for every span it starts, and the propagator's carrier costs a map.
func Format(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	var b [55]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	flags := [1]byte{byte(sc.TraceFlags() & trace.FlagsSampled)}
	hex.Encode(b[53:55], flags[:])
	return string(b[:])
}

// Ref names a span by its ids, without its trace state: unlike
// trace.SpanContext it is comparable, so it can sit in a value that is
// compared (dispatch.Op). The zero Ref names no span.
type Ref struct {
	TraceID trace.TraceID
	SpanID  trace.SpanID
	Flags   trace.TraceFlags
}

// RefOf returns the Ref of ctx's span (zero if it has none).
func RefOf(ctx context.Context) Ref {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return Ref{}
	}
	return Ref{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: sc.TraceFlags()}
}

// IsValid reports whether r names a span.
func (r Ref) IsValid() bool { return r.TraceID.IsValid() && r.SpanID.IsValid() }

// SpanContext returns the span context r names, marked remote (its span
// may have ended).
func (r Ref) SpanContext() trace.SpanContext {
	if !r.IsValid() {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: r.TraceID, SpanID: r.SpanID, TraceFlags: r.Flags, Remote: true})
}

// BinaryLen is the length of AppendBinary's encoding.
const BinaryLen = 16 + 8 + 1

// AppendBinary appends sc in binary to b: the fields of a W3C traceparent
// (trace id, span id, flags), 25 bytes rather than the text form's 55, for
// records that carry a span context in every write. It appends nothing
// if sc is not valid.
func AppendBinary(b []byte, sc trace.SpanContext) []byte {
	if !sc.IsValid() {
		return b
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	b = append(b, tid[:]...)
	b = append(b, sid[:]...)
	return append(b, byte(sc.TraceFlags()&trace.FlagsSampled))
}

// ParseBinary reads AppendBinary's encoding, as a remote span context; a
// wrong length or zero ids yield an invalid one.
func ParseBinary(b []byte) trace.SpanContext {
	if len(b) != BinaryLen {
		return trace.SpanContext{}
	}
	var cfg trace.SpanContextConfig
	copy(cfg.TraceID[:], b[:16])
	copy(cfg.SpanID[:], b[16:24])
	cfg.TraceFlags = trace.TraceFlags(b[24]) & trace.FlagsSampled
	cfg.Remote = true
	return trace.NewSpanContext(cfg)
}

// Parse reads a traceparent written by Format. The span context is marked
// remote: the span it names may have been ended by another process. An
// empty or malformed string yields an invalid span context.
func Parse(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	ctx := w3c.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return trace.SpanContextFromContext(ctx)
}

// Inject adds ctx's span context, if valid, to ctx's outgoing gRPC
// metadata, so the callee's spans become children of it.
func Inject(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	w3c.Inject(ctx, metadataCarrier(md))
	return metadata.NewOutgoingContext(ctx, md)
}

// Extract returns ctx carrying the span context of its incoming gRPC
// metadata as the remote parent, if the caller sent one; otherwise ctx as
// it is (an in-process caller may have put a span in ctx directly).
func Extract(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok || len(md.Get("traceparent")) == 0 {
		return ctx
	}
	return w3c.Extract(ctx, metadataCarrier(md))
}

// Tracer returns tp's tracer for the instrumentation scope name, or nil
// when tp is nil or a no-op provider: callers test for nil and skip all
// span work, so that tracing off costs nothing (a no-op tracer still
// allocates a context per span).
func Tracer(tp trace.TracerProvider, name string) trace.Tracer {
	if tp == nil {
		return nil
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		return nil
	}
	return tp.Tracer(name)
}

// metadataCarrier adapts gRPC metadata to the propagator's carrier.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}
