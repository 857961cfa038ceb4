package procedure

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/baton-dev/baton/internal/memstat"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/store"
)

// sleepLike is a short root as the console's users submit them (the diag
// `sleep` type): five steps, its arguments in its JSON state, a result.
type sleepLike struct {
	Base
	Steps int
	Delay time.Duration
	Done  int
}

func (p *sleepLike) Execute(ctx *Context) (Step, error) {
	if p.Done >= p.Steps {
		ctx.SetResult([]byte(fmt.Sprintf("slept %d steps", p.Done)))
		return Done(), nil
	}
	p.Done++
	return More(), nil
}

func (p *sleepLike) Rollback(*Context) error { p.Done--; return nil }

// footprint is what n finished roots cost: the heap the executor keeps
// for them (its share of HeapAlloc), and the bytes of their stored
// records, which the replicated state holds on every master.
type footprint struct {
	execBytes, recordBytes, storeHeap float64 // per finished root
	// summaryBytes is the record's share of recordBytes that summarises
	// its children (field fChildSummaries, its tag and length included).
	summaryBytes float64
}

// measureFinished runs n sleepLike roots to completion (from 8 clients,
// each with a nonce, as clients submit them) on an executor over a
// MemStore and measures what they cost once finished.
func measureFinished(tb testing.TB, n int) footprint { return measureFinishedTrees(tb, n, 0) }

// fanoutLike spawns Kids sleepLike children, then ends: the diag fanout.
type fanoutLike struct {
	Base
	Kids    int
	Spawned bool
}

func (p *fanoutLike) Execute(ctx *Context) (Step, error) {
	if p.Spawned || p.Kids == 0 {
		return Done(), nil
	}
	p.Spawned = true
	kids := make([]Procedure, p.Kids)
	for i := range kids {
		kids[i] = &sleepLike{Steps: 2, Delay: time.Second}
	}
	return Spawn(kids...), nil
}

func (p *fanoutLike) Rollback(*Context) error { return nil }

// measureFinishedTrees is measureFinished for roots with kids children
// each (none: sleepLike roots).
func measureFinishedTrees(tb testing.TB, n, kids int) footprint {
	reg := NewRegistry()
	reg.MustRegister("sleep", 1, func() Procedure { return &sleepLike{} })
	reg.MustRegister("fanout", 1, func() Procedure { return &fanoutLike{} })
	base := memstat.HeapAfterGC()
	st := store.NewMemStore()
	x, err := New(Config{RecordFormat: version.Newest, Store: st, Registry: reg, Node: "master-1", Workers: 8, Metrics: prometheus.NewRegistry()})
	if err != nil {
		tb.Fatal(err)
	}
	if err := x.Start(); err != nil {
		tb.Fatal(err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var nb [12]byte
			for next.Add(1) <= int64(n) {
				_, _ = rand.Read(nb[:])
				var p Procedure = &sleepLike{Steps: 5, Delay: time.Second}
				if kids > 0 {
					p = &fanoutLike{Kids: kids}
				}
				id, err := x.Submit(p, SubmitOptions{Owner: "admin", Nonce: "c-" + hex.EncodeToString(nb[:])})
				if err != nil {
					tb.Error(err)
					return
				}
				if info, err := x.Wait(context.Background(), id); err != nil || info.State != Success {
					tb.Errorf("proc %d: %v %v", id, info.State, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	withExec := memstat.HeapAfterGC()
	if err := x.Stop(context.Background()); err != nil {
		tb.Fatal(err)
	}
	x = nil
	storeOnly := memstat.HeapAfterGC()
	var recBytes, sumBytes int
	if _, err := st.Load(func(p store.Proc) error {
		recBytes += len(p.Data)
		var r record
		if err := r.unmarshal(p.Data); err == nil && r.summaries != nil {
			sumBytes += len(protowire.AppendBytes(protowire.AppendTag(nil, fChildSummaries, protowire.BytesType), r.summaries))
		}
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
	if st.Len() != n {
		tb.Fatalf("%d records stored, want %d", st.Len(), n)
	}
	f := float64(n)
	return footprint{
		execBytes:    (float64(withExec) - float64(storeOnly)) / f,
		recordBytes:  float64(recBytes) / f,
		storeHeap:    (float64(storeOnly) - float64(base)) / f,
		summaryBytes: float64(sumBytes) / f,
	}
}

// BenchmarkFinishedFootprint measures the memory a finished root costs a
// master while its result is kept (Config.ResultTTL): exec-B/proc is the
// leader's executor heap per finished root, record-B/proc the bytes of
// its stored record (held by the replicated state on every master, plus
// that tree's own per-record overhead), total-B/proc their sum (issue 13's
// goal: at most 200), store-heap-B/proc the MemStore's heap for it (record
// plus a Go map's overhead). 1M runs with BATON_BENCH_1M=1. One iteration
// measures; run with -benchtime=1x.
//
// Figures (bytes per finished root; 2-core VM shared with other work, so
// the times are noisy, the bytes much less so):
//
//	                        exec-B   record-B  total-B  store-heap-B  run time
//	live entry  N=10k        2,864     233      3,097     308           1.5 s
//	            N=100k       2,842     235      3,077     293            18 s
//	            N=1M         2,891     235      3,126     324           243 s
//	retired     N=10k           59     165        224     243           0.3 s
//	            N=100k          48     167        215     229           3.8 s
//	            N=1M            46     167        213     260            44 s
//	packed rows N=10k           29     165        194     244           0.5 s
//	            N=100k          27     167        194     229           5.1 s
//	            N=1M            26     167        193     260            56 s
//
// A live entry is the whole of it (procedure object, history, runs,
// rootState, a nonce entry with its channel). Retired, it is a row and a
// ref of its nonce's hash (finished.go); the run time fell with the heap
// the GC walks. The record went from 233 to 165 bytes: its history
// packed (55 bytes to 19), its runs' times relative (37 to 15), Updated
// left out. Packed rows: the row names owner, type, state and flags by an
// interned class and keeps its expiry in seconds (24 bytes to 16), the
// nonce ref keeps 32 bits of hash and id (16 to 8), and the refs not
// merged yet are at most a sixteenth, in a map made anew at each merge
// (a cleared one kept its slots: what made 10k dearer per root).
//
// Of the 165-167 record bytes, the nonce (28), the result (16) and the
// type's own state (42, which the console shows as the procedure's
// arguments) are the caller's, and so are its type and owner names (7
// each); the framework's own are about 65: ids, version and state (8-12),
// submission and finish times (21, absolute: a reader before the compact
// format takes its retention and times from them), the run (15) and the
// packed history (19). The nonce stays whole (GetProcedure, the console
// and the repair commands' retries read it back), not its hash.
func BenchmarkFinishedFootprint(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if os.Getenv("BATON_BENCH_1M") != "" {
		sizes = append(sizes, 1_000_000)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			var f footprint
			for i := 0; i < b.N; i++ {
				f = measureFinished(b, n)
			}
			b.ReportMetric(f.execBytes, "exec-B/proc")
			b.ReportMetric(f.recordBytes, "record-B/proc")
			b.ReportMetric(f.execBytes+f.recordBytes, "total-B/proc")
			b.ReportMetric(f.storeHeap, "store-heap-B/proc")
			b.Logf("N=%d: executor %.0f B + record %.0f B = %.0f B, MemStore heap %.0f B per finished root",
				n, f.execBytes, f.recordBytes, f.execBytes+f.recordBytes, f.storeHeap)
		})
	}
}

// BenchmarkFinishedTreeFootprint is BenchmarkFinishedFootprint for roots
// with 10 children each (the diag fanout's shape): their records go with
// the root's finish, which keeps a summary of each in its record and a
// span of their ids in the executor's index (childsummary.go).
//
// Figures (bytes per finished root, 10 children each; 2-core VM shared
// with other work):
//
//	               exec-B   record-B  of it summaries  store-heap-B
//	N=10k           47.5      218          76              293
//	N=100k          46.3      218          76              277
//
// Against roots without children (BenchmarkFinishedFootprint, same run:
// 28.9 B of heap), a finished tree costs 16-18 B more heap: its span in
// the child index (16 B) and the slack of that slice's growth. Its
// summaries cost the record 76 B for ten children, 7.6 B a child (the
// table of one type name, the entries, the field's tag and length;
// BenchmarkChildSummaryBytes: 7.9 B a child of a 10,000-region create),
// besides the ten ids the record listed already. The rest of the record
// differs from a sleep root's by the type's own state and result.
func BenchmarkFinishedTreeFootprint(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			var f footprint
			for i := 0; i < b.N; i++ {
				f = measureFinishedTrees(b, n, 10)
			}
			b.ReportMetric(f.execBytes, "exec-B/proc")
			b.ReportMetric(f.recordBytes, "record-B/proc")
			b.ReportMetric(f.execBytes+f.recordBytes, "total-B/proc")
			b.ReportMetric(f.storeHeap, "store-heap-B/proc")
			b.ReportMetric(f.summaryBytes, "summary-B/proc")
		})
	}
}
