package domain_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/procedure"
)

func spanAttr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// spanTree draws the spans of one trace, children under parents, for a
// failure message.
func spanTree(spans []sdktrace.ReadOnlySpan) string {
	kids := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if p := s.Parent().SpanID(); p.IsValid() && ids[p] {
			kids[p] = append(kids[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var draw func(s sdktrace.ReadOnlySpan, depth int)
	draw = func(s sdktrace.ReadOnlySpan, depth int) {
		fmt.Fprintf(&b, "%s%s (proc %s, region %s)\n", strings.Repeat("  ", depth), s.Name(),
			spanAttr(s, string(procedure.AttrProcID)), spanAttr(s, "baton.region"))
		k := kids[s.SpanContext().SpanID()]
		sort.Slice(k, func(i, j int) bool { return k[i].StartTime().Before(k[j].StartTime()) })
		for _, c := range k {
			draw(c, depth+1)
		}
	}
	for _, r := range roots {
		draw(r, 0)
	}
	return b.String()
}

// TestTableCreateIsOneTrace: a table create, traced on every master and
// region server, is one trace: CreateTable's span, its steps and its
// TransitRegionState children under it, their steps under them, the
// dispatcher's calls under the steps that asked for them, and the region
// servers' spans of those calls and of each region's open under the calls.
func TestTableCreateIsOneTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c := clustertest.New(t, clustertest.Config{Masters: 3, RegionServers: 3, TracerProvider: tp})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const regions = 4
	id, err := c.Client().CreateTable(ctx, "", "traced", regions, "")
	if err != nil {
		t.Fatal(err)
	}
	c.MustSucceed(id, 30*time.Second)

	var root sdktrace.ReadOnlySpan
	c.WaitFor("CreateTable's span ended", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == "CreateTable" && spanAttr(s, string(procedure.AttrProcID)) == strconv.FormatUint(id, 10) {
				root = s
				return true
			}
		}
		return false
	})
	if root.Parent().IsValid() {
		t.Errorf("CreateTable's span has a parent %v: want it to start the trace", root.Parent())
	}
	tid := root.SpanContext().TraceID()
	// A step's span ends once its step is wholly done, after its
	// procedure's end has woken the parent: the last children's steps
	// may end after CreateTable's.
	complete := func(count map[string]int) bool {
		return count["TransitRegionState"] == regions && count["RegionServer/open"] == regions && count["CreateTable step"] > 0 &&
			count["TransitRegionState step"] >= regions && count["RegionServer/ExecuteBatch"] >= 2
	}
	c.WaitFor("the trace's spans ended", func() bool {
		count := map[string]int{}
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID() == tid {
				count[s.Name()]++
			}
		}
		return complete(count)
	})
	var mine []sdktrace.ReadOnlySpan
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == tid {
			mine = append(mine, s)
			byID[s.SpanContext().SpanID()] = s
		} else if strings.HasPrefix(spanAttr(s, "baton.region"), "default:traced,") {
			t.Errorf("span %q about region %s is in another trace", s.Name(), spanAttr(s, "baton.region"))
		}
	}
	parentOf := func(s sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan { return byID[s.Parent().SpanID()] }

	count := map[string]int{}
	for _, s := range mine {
		count[s.Name()]++
		p := parentOf(s)
		want := ""
		switch s.Name() {
		case "CreateTable":
			continue
		case "CreateTable step", "TransitRegionState":
			want = "CreateTable"
		case "TransitRegionState step":
			want = "TransitRegionState"
		case "RegionServer/ExecuteBatch":
			if s.SpanKind() == trace.SpanKindClient {
				// The master's call, under the step that dispatched, or
				// under the child a create prepared and sent the open
				// for (firstOpens).
				want = "TransitRegionState step"
				if p != nil && p.Name() == "TransitRegionState" {
					want = p.Name()
				}
			} else {
				want = "RegionServer/ExecuteBatch" // the region server's, under the master's call
			}
		case "RegionServer/open":
			want = "RegionServer/ExecuteBatch"
		default:
			t.Errorf("unexpected span %q in the trace", s.Name())
			continue
		}
		if p == nil || p.Name() != want {
			t.Errorf("span %q (proc %s) hangs under %v, want a %q span", s.Name(), spanAttr(s, string(procedure.AttrProcID)), p, want)
			continue
		}
		switch s.Name() {
		case "TransitRegionState step":
			if spanAttr(s, string(procedure.AttrProcID)) != spanAttr(p, string(procedure.AttrProcID)) {
				t.Errorf("a step of proc %s hangs under proc %s", spanAttr(s, string(procedure.AttrProcID)), spanAttr(p, string(procedure.AttrProcID)))
			}
		case "RegionServer/ExecuteBatch":
			if s.SpanKind() == trace.SpanKindServer && p.SpanKind() != trace.SpanKindClient {
				t.Errorf("the region server's batch span hangs under a %v span, want the master's client span", p.SpanKind())
			}
		case "RegionServer/open":
			if p.SpanKind() != trace.SpanKindServer {
				t.Errorf("open of %s hangs under a %v span, want the region server's", spanAttr(s, "baton.region"), p.SpanKind())
			}
		}
	}
	if !complete(count) {
		t.Errorf("span counts %v: want %d TransitRegionState children, %d opens, the steps and the calls", count, regions, regions)
	}
	if t.Failed() {
		t.Logf("the trace:\n%s", spanTree(mine))
	}
}
