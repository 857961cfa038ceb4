package regionserver

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/baton-dev/baton/internal/promkit/scrapetest"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/tracectx"
	"github.com/baton-dev/baton/proto/rspb"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestHTTPEndpoints: /readyz says whether the server is registered, /livez
// that it serves, and
// /metrics shows its regions, operations and heartbeats.
func TestHTTPEndpoints(t *testing.T) {
	c, addrs := newFakeCluster(t, 1, 60_000)
	cfg := testConfig(addrs...)
	cfg.HTTPAddr, cfg.HeartbeatInterval = "127.0.0.1:0", fastHeartbeats
	s, sc := startServer(t, cfg)
	base := "http://" + s.HTTPAddr()
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusOK || !strings.HasPrefix(body, "ready: registered") {
		t.Fatalf("/readyz = %d %q, want 200 ready", code, body)
	}
	if code, body := httpGet(t, base+"/livez"); code != http.StatusOK || body != "alive\n" {
		t.Fatalf("/livez = %d %q, want 200 alive", code, body)
	}
	if _, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: c.currentTerm(), StartCode: sc,
		Ops: append(ops(opOpen, "r1", "r2"), ops(opClose, "r1")...)}); err != nil {
		t.Fatal(err)
	}
	_, _ = s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: c.currentTerm(), StartCode: sc + 1, Ops: ops(opOpen, "r3")})
	testwait.For(t, 10*time.Second, "a heartbeat counted", func() bool {
		return testutil.ToFloat64(s.metrics.heartbeats.WithLabelValues("ok")) > 0
	})
	_, body := httpGet(t, base+"/metrics")
	for _, want := range []string{
		`baton_regionserver_regions{state="open"} 1`,
		`baton_regionserver_region_operations_total{kind="open",result="done"} 2`,
		`baton_regionserver_region_operations_total{kind="close",result="done"} 1`,
		`baton_regionserver_refused_batches_total{reason="wrong_start_code"} 1`,
		`baton_regionserver_registered 1`,
		`baton_regionserver_heartbeat_age_seconds`,
		`baton_regionserver_heartbeats_total{result="ok"}`,
		`baton_regionserver_highest_term 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}

	// Expired by the masters: the regions it closed are counted, and it
	// is not ready until it registers again.
	c.expireNext("rs1")
	testwait.For(t, 10*time.Second, "the expiry counted", func() bool {
		return testutil.ToFloat64(s.metrics.selfClosed.WithLabelValues("lease_expired")) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Get(base + "/readyz"); err == nil {
		resp.Body.Close()
		t.Errorf("/readyz still answers (%s) after Stop", resp.Status)
	}
}

// TestTracing: a batch's span hangs under the master's call span its
// metadata names; each operation's span under the batch's, or, for an
// operation of another trace, under its own call span, linked to the
// batch; a failed open's report carries the operation's span back.
func TestTracing(t *testing.T) {
	c, addrs := newFakeCluster(t, 1, 60_000)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := testConfig(addrs...)
	cfg.TracerProvider, cfg.FailureRate = tp, 1 // every open fails, and is reported
	s, sc := startServer(t, cfg)

	master := tp.Tracer("master")
	callACtx, callA := master.Start(context.Background(), "call A")
	_, callB := master.Start(context.Background(), "call B")
	callA.End()
	callB.End()
	req := &rspb.BatchRequest{Term: c.currentTerm(), StartCode: sc, Ops: []*rspb.RegionOp{
		{Kind: opOpen, Region: "ra", Table: "t", ProcId: 1, TraceParent: tracectx.Format(callA.SpanContext())},
		{Kind: opOpen, Region: "rb", Table: "t", ProcId: 2, TraceParent: tracectx.Format(callB.SpanContext())},
	}}
	// As it arrives over gRPC: the first trace's call span in the metadata.
	out, _ := metadata.FromOutgoingContext(tracectx.Inject(callACtx))
	if _, err := s.ExecuteBatch(metadata.NewIncomingContext(context.Background(), out), req); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "both failed opens reported", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.reportParents) == 2
	})

	spans := rec.Ended()
	find := func(name string, traceOf trace.Span) sdktrace.ReadOnlySpan {
		t.Helper()
		for _, sp := range spans {
			if sp.Name() == name && sp.SpanContext().TraceID() == traceOf.SpanContext().TraceID() {
				return sp
			}
		}
		t.Fatalf("no span %q in the trace of %v", name, traceOf.SpanContext().TraceID())
		return nil
	}
	batch := find("RegionServer/ExecuteBatch", callA)
	if batch.Parent().SpanID() != callA.SpanContext().SpanID() || batch.SpanKind() != trace.SpanKindServer {
		t.Errorf("batch span under %v (kind %v), want the call span A %v as a server span", batch.Parent().SpanID(), batch.SpanKind(), callA.SpanContext().SpanID())
	}
	opA := find("RegionServer/open", callA)
	if opA.Parent().SpanID() != batch.SpanContext().SpanID() {
		t.Errorf("trace A's op span under %v, want the batch span", opA.Parent().SpanID())
	}
	opB := find("RegionServer/open", callB)
	if opB.Parent().SpanID() != callB.SpanContext().SpanID() {
		t.Errorf("trace B's op span under %v, want call span B", opB.Parent().SpanID())
	}
	if l := opB.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != batch.SpanContext().SpanID() {
		t.Errorf("trace B's op span links %v, want the batch span", l)
	}
	// The reports go back in the ops' traces, under their spans.
	testwait.For(t, 10*time.Second, "report spans ended", func() bool {
		n := 0
		for _, sp := range rec.Ended() {
			if sp.Name() == "Master/ReportTransition" {
				n++
			}
		}
		return n == 2
	})
	for _, sp := range rec.Ended() {
		if sp.Name() != "Master/ReportTransition" {
			continue
		}
		if p := sp.Parent().SpanID(); p != opA.SpanContext().SpanID() && p != opB.SpanContext().SpanID() {
			t.Errorf("report span under %v, want an op's span", p)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.reportParents {
		if !tracectx.Parse(p).IsValid() {
			t.Errorf("a report reached the master without a trace parent (%q)", p)
		}
	}
}

// blockingCollector's Collect waits for release: a scrape held in
// progress.
// TestMetricsScrapesBounded: a region server's /metrics is the bounded
// one (see scrapetest.CheckBounded).
func TestMetricsScrapesBounded(t *testing.T) {
	cfg := testConfig("127.0.0.1:1")
	cfg.Metrics = prometheus.NewRegistry()
	bc := scrapetest.NewBlockingCollector()
	cfg.Metrics.MustRegister(bc)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	scrapetest.CheckBounded(t, s.HTTPHandler(), bc)
}
