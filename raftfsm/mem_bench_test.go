package raftfsm

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/memstat"
	"github.com/baton-dev/baton/store"
)

// Heap per region (issue 13: a master must hold a million regions in
// ≤ 1 KiB each). The benchmarks here build the FSM state a master holds for
// N regions and report what the Go heap grew by, per region, against the
// bytes of the state itself (keys plus values).
//
//	go test -run '^$' -bench FSMHeap -benchtime 1x ./raftfsm/
//	BATON_BENCH_1M=1 go test -run '^$' -bench FSMHeap -benchtime 1x -timeout 30m ./raftfsm/
//
// Metrics: heapB/region (HeapAlloc growth over N), liveB/region (sum of key
// and value lengths over N), heap/live (their ratio: 1 would be the data
// with no structure at all), rssMB (the process's resident set afterwards,
// which includes everything the benchmark binary ever allocated).

// heapSizes are the region counts the heap benchmarks run at; a million
// takes minutes with a WAL, so it needs BATON_BENCH_1M=1.
func heapSizes() []int {
	ns := []int{10_000, 100_000}
	if os.Getenv("BATON_BENCH_1M") != "" {
		ns = append(ns, 1_000_000)
	}
	return ns
}

// regionKey is shaped like cluster/domain.RegionKey(RegionName(...)):
// region/<ns>:<table>,<index %05d>,<create proc id>, tables of 1000 regions.
func regionKey(i int) string {
	t := i / 1000
	return fmt.Sprintf("region/default:t%d,%05d,%d", t, i%1000, 1000+t)
}

// regionValue is shaped like the JSON of a cluster/domain.Region today.
func regionValue(i int, state string, procID uint64) []byte {
	return fmt.Appendf(nil, `{"table":"default:t%d","state":%q,"server":"rs-%02d.baton.internal:16020","start_code":1732500000%03d,"proc_id":%d}`,
		i/1000, state, i%20, i%20, procID)
}

// procImage is a procedure image of a plausible size (a few hundred bytes
// of opaque state).
func procImage(id uint64, step int) []byte {
	b := fmt.Appendf(nil, "trsp:%d:step%d:", id, step)
	for len(b) < 160 {
		b = append(b, byte('a'+len(b)%26))
	}
	return b
}

// regionWorkload feeds f the entries that create n regions the way a master
// does: each CreateTable-like entry puts 100 regions OFFLINE, then each
// assign-like entry moves 10 of them to OPEN with a procedure update, and
// finally the procedures are deleted. withProcs keeps one live procedure
// per region instead (an idle master keeps none, a busy one many).
func regionWorkload(tb testing.TB, f *FSM, n int, withProcs bool) {
	tb.Helper()
	idx := f.AppliedIndex()
	var logs []*raft.Log
	apply := func(w Write) {
		idx++
		logs = append(logs, cmdLog(idx, procBatch(tb, w)))
		if len(logs) == 64 { // raft's MaxAppendEntries: what one ApplyBatch sees
			checkResps(tb, f.ApplyBatch(logs))
			logs = logs[:0]
		}
	}
	for lo := 0; lo < n; lo += 100 {
		var w Write
		for i := lo; i < min(lo+100, n); i++ {
			w.Mutations = append(w.Mutations, Put(regionKey(i), regionValue(i, "OFFLINE", 0)))
		}
		apply(w)
	}
	for lo := 0; lo < n; lo += 10 {
		var w Write
		for i := lo; i < min(lo+10, n); i++ {
			id := uint64(i + 1)
			w.Inserts = append(w.Inserts, store.Proc{ID: id, Data: procImage(id, 1)})
			w.Mutations = append(w.Mutations, Put(regionKey(i), regionValue(i, "OPEN", id)))
		}
		apply(w)
	}
	if !withProcs {
		for lo := 0; lo < n; lo += 100 {
			var w Write
			for i := lo; i < min(lo+100, n); i++ {
				w.Deletes = append(w.Deletes, uint64(i+1))
			}
			apply(w)
		}
	}
	if len(logs) > 0 {
		checkResps(tb, f.ApplyBatch(logs))
	}
}

// liveBytes is the sum of the lengths of the state's keys, values and
// procedure images (plus 8 bytes per procedure id).
func liveBytes(f *FSM) int {
	total := 0
	f.Scan("", func(k string, v []byte) bool { total += len(k) + len(v); return true })
	_ = f.Procs(func(p store.Proc) error { total += 8 + len(p.Data); return nil })
	return total
}

func reportHeap(b *testing.B, f *FSM, n int, heap0 uint64) {
	heap := float64(memstat.HeapAfterGC()) - float64(heap0)
	live := float64(liveBytes(f))
	b.ReportMetric(heap/float64(n), "heapB/region")
	b.ReportMetric(live/float64(n), "liveB/region")
	b.ReportMetric(heap/live, "heap/live")
	rss, _ := memstat.RSSMB(os.Getpid())
	b.ReportMetric(rss, "rssMB")
	runtime.KeepAlive(f)
}

// BenchmarkFSMHeap reports the heap an FSM holding n regions costs, built
// four ways: applied in memory (mem), applied with a local WAL (wal),
// loaded from that WAL by a restarting node (load), and restored from a
// snapshot (restore). procs=1 keeps one live procedure per region as well.
func BenchmarkFSMHeap(b *testing.B) {
	for _, n := range heapSizes() {
		for _, withProcs := range []bool{false, true} {
			name := func(path string) string { return fmt.Sprintf("n=%d/procs=%t/%s", n, withProcs, path) }
			b.Run(name("mem"), func(b *testing.B) {
				for range b.N {
					heap0 := memstat.HeapAfterGC()
					f := newTestFSM(b, "")
					regionWorkload(b, f, n, withProcs)
					reportHeap(b, f, n, heap0)
				}
			})
			b.Run(name("wal"), func(b *testing.B) {
				for range b.N {
					dir := b.TempDir()
					heap0 := memstat.HeapAfterGC()
					f := newTestFSM(b, dir)
					regionWorkload(b, f, n, withProcs)
					reportHeap(b, f, n, heap0)
					f.Close()
					b.StopTimer()
					heap0 = memstat.HeapAfterGC()
					b.StartTimer()
					g := newTestFSM(b, dir) // the "load" figure, taken in the same run
					b.StopTimer()
					heap := float64(memstat.HeapAfterGC()) - float64(heap0)
					b.ReportMetric(heap/float64(n), "loadHeapB/region")
					runtime.KeepAlive(g)
					g.Close()
					b.StartTimer()
				}
			})
			b.Run(name("restore"), func(b *testing.B) {
				for range b.N {
					b.StopTimer()
					src := newTestFSM(b, "")
					regionWorkload(b, src, n, withProcs)
					var snap bytes.Buffer
					s, _ := src.Snapshot()
					if err := s.(*fsmSnapshot).write(&snap); err != nil {
						b.Fatal(err)
					}
					src = nil
					heap0 := memstat.HeapAfterGC()
					b.StartTimer()
					f := newTestFSM(b, "")
					if err := f.Restore(io.NopCloser(&snap)); err != nil {
						b.Fatal(err)
					}
					reportHeap(b, f, n, heap0)
					runtime.KeepAlive(&snap) // counted in heap0: keep it in the second reading too
				}
			})
		}
	}
}

// BenchmarkApplyRegions is the write path's cost per entry at a given state
// size: each op applies one entry that updates one procedure image and one
// region (a step of an assign), into an FSM already holding n regions, in
// memory and with a WAL. Entries are pre-encoded outside the timer.
func BenchmarkApplyRegions(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		for _, dir := range []string{"mem", "wal"} {
			b.Run(fmt.Sprintf("n=%d/%s", n, dir), func(b *testing.B) {
				d := ""
				if dir == "wal" {
					d = b.TempDir()
				}
				f := newTestFSM(b, d)
				regionWorkload(b, f, n, false)
				const batch = 16
				entries := make([][]byte, 4096)
				for j := range entries {
					i := (j * 7919) % n
					id := uint64(i + 1)
					entries[j] = procBatch(b, Write{
						Updates:   []store.Proc{{ID: id, Data: procImage(id, 2+j%3)}},
						Mutations: []Mutation{Put(regionKey(i), regionValue(i, "OPEN", id))},
					})
				}
				idx := f.AppliedIndex()
				logs := make([]*raft.Log, 0, batch)
				b.ResetTimer()
				for j := 0; j < b.N; {
					logs = logs[:0]
					for ; len(logs) < batch && j < b.N; j++ {
						idx++
						logs = append(logs, cmdLog(idx, entries[j%len(entries)]))
					}
					f.ApplyBatch(logs)
				}
			})
		}
	}
}
