package dispatch

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/tracectx"
	"github.com/baton-dev/baton/proto/rspb"
)

// TestMetricsAndSpans: one call carrying operations of two traces is
// counted once, its operations by result, and traced once in each trace,
// under the step that asked for the trace's first operation; each
// operation tells the region server its trace's span of the call.
func TestMetricsAndSpans(t *testing.T) {
	reg := prometheus.NewRegistry()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h := newHarness(t, func(c *Config) { c.Metrics, c.Tracer, c.MinBatch = reg, tp.Tracer("dispatch"), 2 })

	steps := tp.Tracer("steps")
	rootA, a := steps.Start(context.Background(), "procedure A")
	a1ctx, a1 := steps.Start(rootA, "A step 1")
	a2ctx, a2 := steps.Start(rootA, "A step 2")
	b1ctx, b1 := steps.Start(context.Background(), "B step 1")
	for _, s := range []trace.Span{a1, a2, b1, a} {
		s.End()
	}
	tg := target("rs1", 1)
	ops := []Op{
		{Kind: rspb.OpKind_OP_KIND_OPEN, Region: "ra1", ProcID: 1, Span: tracectx.RefOf(a1ctx)},
		{Kind: rspb.OpKind_OP_KIND_OPEN, Region: "ra2", ProcID: 2, Span: tracectx.RefOf(a2ctx)},
		{Kind: rspb.OpKind_OP_KIND_CLOSE, Region: "rb1", ProcID: 3, Span: tracectx.RefOf(b1ctx)},
	}
	for _, op := range ops {
		h.d.Dispatch(tg, op) // the third passes MinBatch: one call for all
	}
	c := h.nextCall()
	if n := len(c.req.GetOps()); n != 3 {
		t.Fatalf("call carries %d ops, want 3", n)
	}
	if v := testutil.ToFloat64(gaugeOf(t, reg, "baton_dispatch_queued_operations", "in_flight")); v != 3 {
		t.Errorf("in flight %v during the call, want 3", v)
	}
	tpA, tpA2, tpB := c.req.Ops[0].GetTraceParent(), c.req.Ops[1].GetTraceParent(), c.req.Ops[2].GetTraceParent()
	if tpA == "" || tpA != tpA2 || tpB == "" || tpB == tpA {
		t.Fatalf("trace parents %q %q %q: want one span for trace A's two ops, another for B's", tpA, tpA2, tpB)
	}
	inCtx := trace.SpanContextFromContext(c.ctx)
	if got := tracectx.Format(inCtx); got != tpA {
		t.Errorf("the call's context carries %q, want trace A's span %q (sent as metadata)", got, tpA)
	}
	h.answer(c, nil)
	h.collect(3)

	var callA, callB sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() != "RegionServer/ExecuteBatch" {
			continue
		}
		switch s.SpanContext().TraceID() {
		case a1.SpanContext().TraceID():
			callA = s
		case b1.SpanContext().TraceID():
			callB = s
		}
	}
	if callA == nil || callB == nil {
		t.Fatalf("call spans A %v, B %v: want one in each trace", callA, callB)
	}
	if callA.Parent().SpanID() != a1.SpanContext().SpanID() || callB.Parent().SpanID() != b1.SpanContext().SpanID() {
		t.Errorf("call spans hang under %v and %v, want the first op's step of each trace", callA.Parent().SpanID(), callB.Parent().SpanID())
	}
	if l := callA.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != a2.SpanContext().SpanID() {
		t.Errorf("trace A's call span links %v, want its other op's step", l)
	}
	if callA.SpanKind() != trace.SpanKindClient {
		t.Errorf("call span kind %v, want client", callA.SpanKind())
	}
	if tracectx.Parse(tpA).SpanID() != callA.SpanContext().SpanID() {
		t.Errorf("ops of trace A name span %q, not trace A's call span", tpA)
	}

	if v := testutil.ToFloat64(counterOf(t, reg, "baton_dispatch_rpcs_total", map[string]string{"method": "ExecuteBatch", "outcome": "ok"})); v != 1 {
		t.Errorf("rpcs ok %v, want 1", v)
	}
	if v := testutil.ToFloat64(counterOf(t, reg, "baton_dispatch_operations_total", map[string]string{"kind": "open", "result": "done"})); v != 2 {
		t.Errorf("opens done %v, want 2", v)
	}
	if v := testutil.ToFloat64(counterOf(t, reg, "baton_dispatch_operations_total", map[string]string{"kind": "close", "result": "done"})); v != 1 {
		t.Errorf("closes done %v, want 1", v)
	}
	if n := testutil.CollectAndCount(reg, "baton_dispatch_batch_operations"); n != 1 {
		t.Errorf("batch size series %d, want 1", n)
	}

	// A stopped dispatcher's buffers are no one's: no queue is reported.
	h.d.Stop()
	if n := testutil.CollectAndCount(reg, "baton_dispatch_queued_operations"); n != 0 {
		t.Errorf("a stopped dispatcher still reports %d queue series", n)
	}
}

// gaugeOf returns a collector of the one series of name with label
// state=state, for testutil.ToFloat64.
func gaugeOf(t *testing.T, g prometheus.Gatherer, name, state string) prometheus.Collector {
	return counterOf(t, g, name, map[string]string{"state": state})
}

// counterOf returns the value of the series of name with labels as a
// collector of one constant metric, for testutil.ToFloat64.
func counterOf(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) prometheus.Collector {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			n := 0
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok {
					if v != lp.GetValue() {
						continue next
					}
					n++
				}
			}
			if n != len(labels) {
				continue
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "value", Help: "value"}, func() float64 { return v })
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return nil
}
