package procedure_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// noop is a procedure of Steps no-op steps: it measures the framework.
type noop struct {
	procedure.Base
	Steps, Done int
}

func (p *noop) Execute(*procedure.Context) (procedure.Step, error) {
	p.Done++
	if p.Done >= p.Steps {
		return procedure.Done(), nil
	}
	return procedure.More(), nil
}

func (p *noop) Rollback(*procedure.Context) error { return nil }

const benchSteps = 10

// runProcs submits n 10-step procedures from `clients` goroutines and waits
// for all of them; it returns the elapsed time.
func runProcs(b *testing.B, st store.Store, workers, clients, n int) time.Duration {
	return runProcsTraced(b, st, workers, clients, n, nil)
}

// runProcsTraced is runProcs with the executor's Config.Tracer set.
func runProcsTraced(b *testing.B, st store.Store, workers, clients, n int, tracer trace.Tracer) time.Duration {
	reg := procedure.NewRegistry()
	reg.MustRegister("noop", 1, func() procedure.Procedure { return &noop{} })
	x, err := procedure.New(procedure.Config{RecordFormat: version.Newest, Store: st, Registry: reg, Workers: workers, Tracer: tracer})
	if err != nil {
		b.Fatal(err)
	}
	if err := x.Start(); err != nil {
		b.Fatal(err)
	}
	defer x.Stop(context.Background())
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				id, err := x.Submit(&noop{Steps: benchSteps}, procedure.SubmitOptions{})
				if err != nil {
					b.Error(err)
					return
				}
				if info, err := x.Wait(context.Background(), id); err != nil || info.State != procedure.Success {
					b.Errorf("proc %d: %v %v", id, info.State, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// rawAppends writes n×(steps+1) 1-record updates of recordSize bytes to
// the WAL from `writers` goroutines: what the executor's writes cost with
// no framework around them.
func rawAppends(b *testing.B, w *store.WAL, writers, n, recordSize int) time.Duration {
	payload := make([]byte, recordSize)
	var next atomic.Int64
	var wg sync.WaitGroup
	total := int64(n * (benchSteps + 1))
	start := time.Now()
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := next.Add(1)
				if k > total {
					return
				}
				if err := w.Update(store.Proc{ID: uint64(k%100000 + 1), Data: payload}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

func openWAL(b *testing.B, load bool) *store.WAL {
	w, err := store.OpenWAL(store.DefaultWALConfig(b.TempDir()))
	if err != nil {
		b.Fatal(err)
	}
	if load {
		if _, err := w.Load(func(store.Proc) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	return w
}

// BenchmarkExecutor runs 10-step no-op procedures end to end (submit,
// 10 persisted steps, wait) on the in-memory store and on the WAL. On the
// WAL it first runs the same number of bare WAL updates of the same size
// with the same concurrency, and reports the executor's throughput as a
// ratio of that baseline.
func BenchmarkExecutor(b *testing.B) {
	for _, clients := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("store=mem/clients=%d", clients), func(b *testing.B) {
			d := runProcs(b, store.NewMemStore(), 16, clients, b.N)
			b.ReportMetric(float64(b.N)/d.Seconds(), "procs/s")
			b.ReportMetric(float64(b.N*benchSteps)/d.Seconds(), "steps/s")
		})
		b.Run(fmt.Sprintf("store=wal/clients=%d", clients), func(b *testing.B) {
			raw := openWAL(b, true)
			// ~120 bytes is what one noop procedure's record weighs.
			base := rawAppends(b, raw, clients, b.N, 120)
			raw.Close()
			w := openWAL(b, false) // the executor loads it
			defer w.Close()
			d := runProcs(b, w, max(16, clients), clients, b.N)
			b.ReportMetric(float64(b.N)/d.Seconds(), "procs/s")
			b.ReportMetric(float64(b.N*benchSteps)/d.Seconds(), "steps/s")
			b.ReportMetric(base.Seconds()/d.Seconds(), "x_bare_wal")
			st := w.Stats()
			b.ReportMetric(st.RecordsPerSync(), "records/fsync")
		})
	}
}

// discardExporter receives finished spans and drops them: the cost of
// exporting is the exporter's (and another process's), not the step's.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkStepTracing runs the same 10-step no-op procedures (the step
// path with nothing else to do, where tracing weighs most) with tracing
// off (no Config.Tracer), on (the SDK sampling every span, through the
// batch span processor that production uses, to an exporter that drops
// them), and on with 10% of the traces sampled (OTEL_TRACES_SAMPLER=
// parentbased_traceidratio, OTEL_TRACES_SAMPLER_ARG=0.1), and reports the
// throughput of each and the ratios to off. The b.N procedures of each mode
// run in four rounds, the modes alternating, so that a machine whose speed
// drifts (other load, the disk) weighs on all alike. It runs on the WAL
// (every step an append, group committed, as on a master's FSM) and on the
// in-memory store (no I/O: the worst case for the ratio, where a span
// costs about as much as a step).
func BenchmarkStepTracing(b *testing.B) {
	const rounds = 4
	for _, st := range []string{"wal", "mem"} {
		for _, clients := range []int{1, 16} {
			b.Run(fmt.Sprintf("store=%s/clients=%d", st, clients), func(b *testing.B) {
				all := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
				defer all.Shutdown(context.Background())
				tenth := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}),
					sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))))
				defer tenth.Shutdown(context.Background())
				run := func(n int, tracer trace.Tracer) time.Duration {
					if st == "mem" {
						return runProcsTraced(b, store.NewMemStore(), 16, clients, n, tracer)
					}
					w := openWAL(b, false)
					defer w.Close()
					return runProcsTraced(b, w, 16, clients, n, tracer)
				}
				var off, on, on10 time.Duration
				for r := 0; r < rounds; r++ {
					n := b.N / rounds
					if r == 0 {
						n += b.N % rounds
					}
					if n == 0 {
						continue
					}
					off += run(n, nil)
					on += run(n, all.Tracer("bench"))
					on10 += run(n, tenth.Tracer("bench"))
				}
				steps := float64(b.N * benchSteps)
				b.ReportMetric(steps/off.Seconds(), "steps/s_off")
				b.ReportMetric(steps/on.Seconds(), "steps/s_on")
				b.ReportMetric(off.Seconds()/on.Seconds(), "x_on/off")
				b.ReportMetric(off.Seconds()/on10.Seconds(), "x_on10%/off")
			})
		}
	}
}

// parked is a procedure that waits for an event that never comes.
type parked struct{ procedure.Base }

var never = scheduler.NewEvent("never")

func (p *parked) Execute(*procedure.Context) (procedure.Step, error) {
	return procedure.Suspend(procedure.OnEvent(never)), nil
}

func (p *parked) Rollback(*procedure.Context) error { return nil }

// parkedExecutor starts an executor, stopped when b ends, holding n
// procedures that wait for ever, and returns it with the registry its
// metrics are scraped from and the last procedure's id.
func parkedExecutor(b *testing.B, n int) (*procedure.Executor, *prometheus.Registry, uint64) {
	b.Helper()
	reg := procedure.NewRegistry()
	reg.MustRegister("parked", 1, func() procedure.Procedure { return &parked{} })
	metrics := prometheus.NewRegistry()
	x, err := procedure.New(procedure.Config{RecordFormat: version.Newest, Store: store.NewMemStore(), Registry: reg, Metrics: metrics})
	if err != nil {
		b.Fatal(err)
	}
	if err := x.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { x.Stop(context.Background()) })
	var last uint64
	for range n {
		if last, err = x.Submit(&parked{}, procedure.SubmitOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	return x, metrics, last
}

// BenchmarkScrapeLive measures one scrape of the gauges about the
// executor's table (baton_procedures, _stuck, _lock_waiting, steps in
// flight) with 100,000 procedures waiting, scrapes back to back: what a
// Prometheus scrape costs the leader. Scrapes within 5 s share one stuck
// count, so this is mostly the copy of the kept counts; the walk a stuck
// count makes every 5 s is BenchmarkCountStuck.
func BenchmarkScrapeLive(b *testing.B) {
	_, metrics, _ := parkedExecutor(b, 100_000)
	b.ResetTimer()
	for b.Loop() {
		mfs, err := metrics.Gather()
		if err != nil || len(mfs) == 0 {
			b.Fatalf("gather: %d families, %v", len(mfs), err)
		}
	}
}
