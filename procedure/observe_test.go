package procedure

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// metricValue is the value of the series of family name whose labels
// include want, and whether there is one.
func metricValue(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, want) {
				continue
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok && v == lp.GetValue() {
			n++
		}
	}
	return n == len(want)
}

// TestLiveMetrics: the gauges read at scrape time follow the executor's
// table (procedures by state, lock waiters, stuck ones, steps in flight),
// and a lock wait is counted once and timed when it ends.
func TestLiveMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	mc := clock.NewManual(time.Unix(1e6, 0))
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) {
		c.Metrics, c.Clock, c.StuckProcedureThreshold = reg, mc, time.Minute
	})
	value := func(name string, labels map[string]string) float64 {
		v, _ := metricValue(t, reg, name, labels)
		return v
	}
	waitValue := func(name string, labels map[string]string, want float64) {
		t.Helper()
		testwait.For(t, 10*time.Second, fmt.Sprintf("%s%v = %v", name, labels, want), func() bool { return value(name, labels) == want })
	}

	// A holder takes table t1 and waits for an event; a second procedure
	// needing t1 is parked behind it.
	release := scheduler.NewEvent("release")
	var holds atomic.Int32
	funcs.Store("live-hold", suspendOnce(release, &holds))
	funcs.Store("live-wait", func(ctx *Context) (Step, error) { return Done(), nil })
	holder := h.submit(&lockedProc{funcProc{ID: "live-hold"}}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "holder waiting", func() bool {
		i, err := h.x.Get(holder)
		return err == nil && i.State == Waiting
	})
	waiter := h.submit(&lockedProc{funcProc{ID: "live-wait"}}, SubmitOptions{})
	waitValue("baton_procedures_lock_waiting", map[string]string{"type": "locked"}, 1)
	if v := value("baton_procedure_lock_waits_total", map[string]string{"type": "locked"}); v != 1 {
		t.Errorf("lock waits %v, want 1", v)
	}
	if v := value("baton_procedures", map[string]string{"type": "locked", "state": "WAITING"}); v != 1 {
		t.Errorf("procedures WAITING %v, want 1", v)
	}
	if v := value("baton_procedures", map[string]string{"type": "locked", "state": "RUNNABLE"}); v != 1 {
		t.Errorf("procedures RUNNABLE %v, want 1 (the parked one)", v)
	}
	if v, ok := metricValue(t, reg, "baton_procedures_stuck", map[string]string{"type": "locked"}); !ok || v != 0 {
		t.Errorf("stuck %v (reported %v) before the threshold passed, want a 0", v, ok)
	}

	// Past the threshold, both count as stuck: neither moved.
	mc.Advance(time.Minute)
	if v := value("baton_procedures_stuck", map[string]string{"type": "locked"}); v != 2 {
		t.Errorf("stuck %v after the threshold, want 2", v)
	}

	// Releasing the holder ends the wait: one observation of a minute.
	h.x.Wake(release)
	if info := h.wait(waiter); info.State != Success {
		t.Fatalf("waiter %s", info.State)
	}
	waitValue("baton_procedure_lock_wait_duration_seconds", map[string]string{"type": "locked"}, 1)
	if v := value("baton_procedures_lock_waiting", map[string]string{"type": "locked"}); v != 0 {
		t.Errorf("%v lock waiters reported after the wait ended", v)
	}
	// The holder's last step is timed once it returns, which may be after
	// the waiter it let in has finished.
	if info := h.wait(holder); info.State != Success {
		t.Fatalf("holder %s", info.State)
	}
	testwait.For(t, 10*time.Second, "three step duration observations (holder twice, waiter once)", func() bool {
		return value("baton_procedure_step_duration_seconds", map[string]string{"type": "locked"}) >= 3
	})

	// A step in progress shows as in flight.
	var entered atomic.Bool
	unblock := make(chan struct{})
	funcs.Store("live-block", func(ctx *Context) (Step, error) {
		entered.Store(true)
		<-unblock
		return Done(), nil
	})
	blocked := h.submit(&funcProc{ID: "live-block"}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "step running", entered.Load)
	if v := value("baton_executor_steps_in_flight", nil); v != 1 {
		t.Errorf("steps in flight %v, want 1", v)
	}
	close(unblock)
	h.wait(blocked)
	waitValue("baton_executor_steps_in_flight", nil, 0)

	// A stopped executor reports nothing: the next leader's does.
	if err := h.x.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, ok := metricValue(t, reg, "baton_procedures", nil); ok {
		t.Error("a stopped executor still reports its procedures")
	}
}

// spanRecorder returns a tracer recording every span into rec.
func spanRecorder(t *testing.T) (*tracetest.SpanRecorder, trace.Tracer) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	return rec, tp.Tracer("test")
}

func attrOf(s sdktrace.ReadOnlySpan, key string) (string, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit(), true
		}
	}
	return "", false
}

// procSpan finds the span of procedure id (not a step's).
func procSpan(t *testing.T, spans []sdktrace.ReadOnlySpan, name string, id uint64) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if v, ok := attrOf(s, string(AttrProcID)); ok && s.Name() == name && v == itoa(id) {
			return s
		}
	}
	t.Fatalf("no span %q for procedure %d among %d spans", name, id, len(spans))
	return nil
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// TestTracingTree: a root's span starts a trace; its children's spans are
// its children; every step has a span under its procedure's; the tree is
// one trace.
func TestTracingTree(t *testing.T) {
	rec, tracer := spanRecorder(t)
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) { c.Tracer, c.Node = tracer, "m1" })
	p := newSteps("tree", 2)
	p.SpawnAt, p.Children, p.ChildSteps = 0, 2, 2
	id := h.submit(p, SubmitOptions{})
	if info := h.wait(id); info.State != Success {
		t.Fatalf("state %s", info.State)
	}
	// The root's span ends with its last write, which Wait may beat; the
	// span of its last step ends once that step returns, after the write.
	testwait.For(t, 10*time.Second, "root span and six step spans ended", func() bool {
		rootEnded, steps := false, 0
		for _, s := range rec.Ended() {
			if v, _ := attrOf(s, string(AttrProcID)); s.Name() == "steps" && v == itoa(id) {
				rootEnded = true
			}
			if s.Name() == "steps step" {
				steps++
			}
		}
		return rootEnded && steps >= 2+2*2
	})
	spans := rec.Ended()
	root := procSpan(t, spans, "steps", id)
	if root.Parent().IsValid() {
		t.Errorf("root span has parent %v, want a new trace", root.Parent())
	}
	if v, _ := attrOf(root, string(AttrMaster)); v != "m1" {
		t.Errorf("root span master %q, want m1", v)
	}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("span %q is in trace %v, not the root's %v", s.Name(), s.SpanContext().TraceID(), root.SpanContext().TraceID())
		}
		byID[s.SpanContext().SpanID()] = s
	}
	kids, steps := 0, 0
	for _, s := range spans {
		switch s.Name() {
		case "steps":
			if s == root {
				continue
			}
			kids++
			if s.Parent().SpanID() != root.SpanContext().SpanID() {
				t.Errorf("child span %v's parent is %v, want the root's span", s.Attributes(), s.Parent().SpanID())
			}
		case "steps step":
			steps++
			parent := byID[s.Parent().SpanID()]
			pid, _ := attrOf(parent, string(AttrProcID))
			sid, _ := attrOf(s, string(AttrProcID))
			if parent == nil || parent.Name() != "steps" || pid != sid {
				t.Errorf("step span of proc %s hangs under %v, want its procedure's span", sid, parent)
			}
			if _, ok := attrOf(s, string(AttrOutcome)); !ok {
				t.Errorf("step span without outcome: %v", s.Attributes())
			}
		}
	}
	if kids != 2 || steps != 2+2*2 {
		t.Errorf("%d child spans and %d step spans, want 2 and 6", kids, steps)
	}
}

// TestTracingResumes: a procedure taken over by a new executor (a new
// leader, a restart) gets a span in the trace it started in, under its
// first span, which its record carries.
func TestTracingResumes(t *testing.T) {
	st := store.NewMemStore()
	rec1, tracer1 := spanRecorder(t)
	h1 := startExecutor(t, st, newDomain(), func(c *Config) { c.Tracer, c.Node = tracer1, "m1" })
	var resumed atomic.Bool
	funcs.Store("resume", func(ctx *Context) (Step, error) {
		if !resumed.Load() {
			return Suspend(OnEvent(scheduler.NewEvent("never"))), nil
		}
		return Done(), nil
	})
	id := h1.submit(&funcProc{ID: "resume"}, SubmitOptions{})
	testwait.For(t, 10*time.Second, "procedure waiting", func() bool {
		i, err := h1.x.Get(id)
		return err == nil && i.State == Waiting
	})
	if err := h1.x.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	first := procSpan(t, rec1.Ended(), "func", id)
	if v, _ := attrOf(first, string(AttrHandedOff)); v != "true" {
		t.Errorf("the stopped executor's span is not marked handed off: %v", first.Attributes())
	}

	resumed.Store(true)
	rec2, tracer2 := spanRecorder(t)
	h2 := startExecutor(t, st, newDomain(), func(c *Config) { c.Tracer, c.Node = tracer2, "m2" })
	if info := h2.wait(id); info.State != Success {
		t.Fatalf("state %s", info.State)
	}
	testwait.For(t, 10*time.Second, "resumed span ended", func() bool { return len(rec2.Ended()) >= 2 })
	second := procSpan(t, rec2.Ended(), "func", id)
	if second.SpanContext().TraceID() != first.SpanContext().TraceID() {
		t.Errorf("resumed span in trace %v, want %v", second.SpanContext().TraceID(), first.SpanContext().TraceID())
	}
	if second.Parent().SpanID() != first.SpanContext().SpanID() {
		t.Errorf("resumed span's parent %v, want the first span %v", second.Parent().SpanID(), first.SpanContext().SpanID())
	}
	if v, _ := attrOf(second, string(AttrResumed)); v != "true" {
		t.Errorf("resumed span not marked resumed: %v", second.Attributes())
	}
	if v, _ := attrOf(second, string(AttrMaster)); v != "m2" {
		t.Errorf("resumed span master %q, want m2", v)
	}
}

// TestNoTracerNoTraceParent: with tracing off nothing is persisted.
func TestNoTracerNoTraceParent(t *testing.T) {
	st := store.NewMemStore()
	h := startExecutor(t, st, newDomain(), nil)
	id := h.submit(newSteps("plain", 1), SubmitOptions{})
	h.wait(id)
	var r record
	_, err := st.Load(func(p store.Proc) error {
		if p.ID == id {
			return r.unmarshal(p.Data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.trace.IsValid() {
		t.Errorf("span context %v persisted with tracing off", r.trace)
	}
}

// TestTracingUnsampled: a procedure whose trace the sampler drops records
// nothing, and its steps still carry its span context, so that what they
// start is dropped too.
func TestTracingUnsampled(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) { c.Tracer = tp.Tracer("test") })
	var carried atomic.Bool
	funcs.Store("unsampled", func(ctx *Context) (Step, error) {
		sc := trace.SpanContextFromContext(ctx)
		carried.Store(sc.IsValid() && !sc.IsSampled())
		return Done(), nil
	})
	h.wait(h.submit(&funcProc{ID: "unsampled"}, SubmitOptions{}))
	if !carried.Load() {
		t.Error("the step's context carries no (unsampled) span context")
	}
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("%d spans recorded of an unsampled trace", n)
	}
}
