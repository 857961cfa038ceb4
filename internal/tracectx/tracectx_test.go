package tracectx

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/metadata"
)

func testSpanContext() trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
}

func TestFormatParseRoundTrip(t *testing.T) {
	sc := testSpanContext()
	s := Format(sc)
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; s != want {
		t.Fatalf("Format = %q, want %q", s, want)
	}
	got := Parse(s)
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsSampled() || !got.IsRemote() {
		t.Fatalf("Parse(%q) = %+v, want %+v marked remote", s, got, sc)
	}
}

func TestInvalidIsEmpty(t *testing.T) {
	if s := Format(trace.SpanContext{}); s != "" {
		t.Errorf("Format(invalid) = %q, want empty", s)
	}
	for _, s := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if Parse(s).IsValid() {
			t.Errorf("Parse(%q) is valid, want invalid", s)
		}
	}
}

func TestInjectExtract(t *testing.T) {
	sc := testSpanContext()
	out := Inject(trace.ContextWithSpanContext(context.Background(), sc))
	md, ok := metadata.FromOutgoingContext(out)
	if !ok || len(md.Get("traceparent")) != 1 {
		t.Fatalf("outgoing metadata %v: want one traceparent", md)
	}
	in := Extract(metadata.NewIncomingContext(context.Background(), md))
	got := trace.SpanContextFromContext(in)
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsRemote() {
		t.Fatalf("extracted %+v, want %+v as remote", got, sc)
	}

	// Nothing to carry: the context is left as it was.
	plain := context.Background()
	if Inject(plain) != plain {
		t.Error("Inject without a span changed the context")
	}
	if Extract(plain) != plain {
		t.Error("Extract without metadata changed the context")
	}
}

func TestTracerOff(t *testing.T) {
	if Tracer(nil, "x") != nil {
		t.Error("Tracer(nil) is not nil")
	}
	if Tracer(noop.NewTracerProvider(), "x") != nil {
		t.Error("Tracer(noop provider) is not nil")
	}
}

func TestBinaryRoundTrip(t *testing.T) {
	sc := testSpanContext()
	b := AppendBinary(nil, sc)
	if len(b) != BinaryLen {
		t.Fatalf("encoded %d bytes, want %d", len(b), BinaryLen)
	}
	got := ParseBinary(b)
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsSampled() || !got.IsRemote() {
		t.Fatalf("ParseBinary = %+v, want %+v marked remote", got, sc)
	}
	if n := len(AppendBinary(nil, trace.SpanContext{})); n != 0 {
		t.Errorf("an invalid span context encoded to %d bytes", n)
	}
	for _, bad := range [][]byte{nil, b[:BinaryLen-1], make([]byte, BinaryLen)} {
		if ParseBinary(bad).IsValid() {
			t.Errorf("ParseBinary(%x) is valid", bad)
		}
	}
}
