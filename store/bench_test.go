package store

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const benchRecordSize = 1 << 10

func benchData(seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, benchRecordSize)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// runWriters runs n goroutines that together call op b.N times.
func runWriters(b *testing.B, n int, op func(g int, i int64) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := op(g, i); err != nil {
					failed.Store(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
}

func reportRate(b *testing.B, records int, syncs uint64) {
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
	if syncs > 0 {
		b.ReportMetric(float64(records)/float64(syncs), "records/fsync")
	}
}

// BenchmarkWALAppend measures 1 KiB Update records through the WAL with
// fsync, against a file shared under a mutex with one write+fdatasync per
// record (what a WAL without group commit costs), and against an ideal
// single-writer loop that writes the batch size the WAL achieved per sync.
func BenchmarkWALAppend(b *testing.B) {
	data := benchData(1)
	for _, writers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			batch := 1.0
			b.Run("wal", func(b *testing.B) {
				w, err := OpenWAL(DefaultWALConfig(b.TempDir()))
				if err != nil {
					b.Fatal(err)
				}
				defer w.Close()
				if _, err := w.Load(func(Proc) error { return nil }); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(benchRecordSize)
				b.ResetTimer()
				runWriters(b, writers, func(g int, i int64) error {
					return w.Update(Proc{ID: uint64(g)<<20 | uint64(i%1000) + 1, Data: data})
				})
				b.StopTimer()
				st := w.Stats()
				reportRate(b, b.N, st.Syncs)
				batch = max(1, st.RecordsPerSync())
			})
			b.Run("raw-mutex", func(b *testing.B) {
				f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				frame := appendRecord(nil, recUpdate, 0, [2][]Proc{nil, {{ID: 1, Data: data}}}, nil)
				var mu sync.Mutex
				b.SetBytes(benchRecordSize)
				b.ResetTimer()
				runWriters(b, writers, func(int, int64) error {
					mu.Lock()
					defer mu.Unlock()
					if _, err := f.Write(frame); err != nil {
						return err
					}
					return fdatasync(f)
				})
				b.StopTimer()
				reportRate(b, b.N, uint64(b.N))
			})
			b.Run("raw-ideal-batch", func(b *testing.B) {
				f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				k := int(batch + 0.5)
				frame := appendRecord(nil, recUpdate, 0, [2][]Proc{nil, {{ID: 1, Data: data}}}, nil)
				buf := make([]byte, 0, k*len(frame))
				for i := 0; i < k; i++ {
					buf = append(buf, frame...)
				}
				b.SetBytes(benchRecordSize)
				b.ResetTimer()
				syncs := uint64(0)
				for done := 0; done < b.N; done += k {
					n := min(k, b.N-done)
					if _, err := f.Write(buf[:n*len(frame)]); err != nil {
						b.Fatal(err)
					}
					if err := fdatasync(f); err != nil {
						b.Fatal(err)
					}
					syncs++
				}
				b.StopTimer()
				reportRate(b, b.N, syncs)
			})
		})
	}
}

// benchLoadProcs is the number of procedures of BenchmarkWALLoad; the full
// case (1 M procedures, ~5.5 GB of segments) is BATON_WAL_LOAD_PROCS=1000000.
func benchLoadProcs() int {
	if s := os.Getenv("BATON_WAL_LOAD_PROCS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 1 {
			return n
		}
	}
	return 100_000
}

// writeLoadFixture writes segments holding n procs × (insert + 4 updates)
// of 1 KiB, then deletes of every other proc, one record per write, in
// DefaultSegmentSize segments. Proc 1 is only inserted, so it pins the
// oldest segment and loading deletes nothing. With trailers every segment
// but the last is closed as by a roll; without, as after crashes.
func writeLoadFixture(b *testing.B, dir string, n int, trailers bool) (records int, bytes int64) {
	data := benchData(2)
	var (
		f     *os.File
		bw    *bufio.Writer
		id    uint64
		size  int64
		tr    *tracker
		nrec  uint64
		frame []byte
	)
	open := func() {
		id++
		var err error
		f, err = os.Create(filepath.Join(dir, segName(id)))
		if err != nil {
			b.Fatal(err)
		}
		bw = bufio.NewWriterSize(f, 1<<20)
		h := appendHeader(nil, segHeader{id: id, maxID: uint64(n)})
		bw.Write(h)
		size, tr, nrec = int64(len(h)), newTracker(), 0
	}
	closeSeg := func(last bool) {
		if trailers && !last {
			t := appendTrailer(nil, size, trailerInfo{maxID: uint64(n), records: nrec, tr: tr})
			bw.Write(t)
			size += int64(len(t))
		}
		if err := bw.Flush(); err != nil {
			b.Fatal(err)
		}
		f.Close()
		bytes += size
	}
	write := func(typ recType, put *Proc, del uint64) {
		if size >= DefaultSegmentSize {
			closeSeg(false)
			open()
		}
		frame = frame[:0]
		if put != nil {
			frame = appendRecord(frame, typ, 0, [2][]Proc{nil, {*put}}, nil)
			tr.put(put.ID)
		} else {
			frame = appendRecord(frame, typ, 0, [2][]Proc{}, []uint64{del})
			tr.delete(del)
		}
		bw.Write(frame)
		size += int64(len(frame))
		nrec++
		records++
	}
	open()
	for round := 0; round < 5; round++ {
		for i := 1; i <= n; i++ {
			if round > 0 && i == 1 {
				continue
			}
			typ := recUpdate
			if round == 0 {
				typ = recInsert
			}
			write(typ, &Proc{ID: uint64(i), Data: data}, 0)
		}
	}
	for i := 2; i <= n; i += 2 {
		write(recDelete, nil, uint64(i))
	}
	closeSeg(true)
	return records, bytes
}

// BenchmarkWALLoad measures Load of n procs × 5 images of 1 KiB, half of
// them deleted (BATON_WAL_LOAD_PROCS, default 100 k). "notrailers" replays
// every segment; "trailers" lets Load skip segments whose trailer shows
// they hold nothing still needed.
func BenchmarkWALLoad(b *testing.B) {
	n := benchLoadProcs()
	for _, trailers := range []bool{false, true} {
		name := "notrailers"
		if trailers {
			name = "trailers"
		}
		b.Run(fmt.Sprintf("procs=%d/%s", n, name), func(b *testing.B) {
			dir := b.TempDir()
			records, bytes := writeLoadFixture(b, dir, n, trailers)
			cfg := DefaultWALConfig(dir)
			cfg.NoSync = true
			cfg.MaxSegments = 1 << 30
			b.SetBytes(bytes)
			b.ResetTimer()
			read := 0
			for i := 0; i < b.N; i++ {
				w, err := OpenWAL(cfg)
				if err != nil {
					b.Fatal(err)
				}
				live := 0
				info, err := w.Load(func(p Proc) error { live++; return nil })
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if live != n/2+n%2 || len(info.Corruptions) != 0 {
					b.Fatalf("loaded %d live, want %d; %v", live, n/2+n%2, info.Corruptions)
				}
				read += info.Records
				w.Close()
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(float64(records*b.N)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(read)/b.Elapsed().Seconds(), "read-records/s")
		})
	}
}

// BenchmarkWALCleanupWrites measures what cleanup writes for the appends it
// serves, when the live procedures need 0.5, 1 or 10 times what MaxSegments
// segments hold. The live ones are long-lived (written once, never again:
// they pin old segments unless rewritten); the appends are a steady churn
// of short-lived procedures (insert, updates, delete). One op is one
// append. Reported per run (after a warm-up that reaches the steady state):
//
//	cleanup-B/new-B  bytes merges wrote per byte appended (goal ≤ 2)
//	written-B/new-B  all bytes written (appends, merges, headers, trailers)
//	                 per byte appended
//	max-segments     most segments alive at once, against MaxSegments 4
//
// Appends here (NoSync) come far faster than fsynced ones, so a merge's
// background read can fall a few segments behind and max-segments is
// higher than a real device would see (the test
// TestWALSegmentCountBoundedUnderSteadyWorkload waits for each merge).
func BenchmarkWALCleanupWrites(b *testing.B) {
	const (
		segmentSize = 64 << 10
		maxSegments = 4
		imageSize   = 200
		hot         = 64 // short-lived procedures alive at once
	)
	limit := int64(maxSegments * segmentSize)
	for _, x := range []float64{0.5, 1, 10} {
		b.Run(fmt.Sprintf("live=%gx-limit", x), func(b *testing.B) {
			cfg := DefaultWALConfig(b.TempDir())
			cfg.NoSync = true
			cfg.SegmentSize = segmentSize
			cfg.MaxSegments = maxSegments
			w, err := OpenWAL(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			if _, err := w.Load(func(Proc) error { return nil }); err != nil {
				b.Fatal(err)
			}
			data := benchData(3)[:imageSize]
			var newBytes int64
			app := func(batch Batch) {
				if err := w.Append(batch); err != nil {
					b.Fatal(err)
				}
				newBytes += int64(appendedBytes(batch))
			}
			next := uint64(1)
			var active []uint64
			churn := func(i int) {
				switch {
				case len(active) < hot:
					app(Batch{Inserts: []Proc{{ID: next, Data: data}}})
					active = append(active, next)
					next++
				case i%8 == 0:
					app(Batch{Deletes: active[:1]})
					active = active[1:]
				default:
					app(Batch{Updates: []Proc{{ID: active[i%len(active)], Data: data}}})
				}
			}
			// The long-lived procedures, spread over the segments by churn.
			longLived := int64(x * float64(limit))
			i := 0
			for size := int64(0); size < longLived; i++ {
				app(Batch{Inserts: []Proc{{ID: next, Data: data}}})
				size += int64(imageSize)
				next++
				churn(i)
			}
			// Warm-up: enough churn for cleanup to pass over all of it.
			for end := newBytes + 2*max(longLived, limit); newBytes < end; i++ {
				churn(i)
			}
			start, startBytes := w.Stats(), newBytes
			maxSegs := 0
			b.SetBytes(imageSize)
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				churn(i + n)
				if n%64 == 0 {
					maxSegs = max(maxSegs, w.Stats().Segments)
				}
			}
			b.StopTimer()
			st := w.Stats()
			appended := float64(newBytes - startBytes)
			b.ReportMetric(float64(st.RewriteBytes-start.RewriteBytes)/appended, "cleanup-B/new-B")
			b.ReportMetric(float64(st.Bytes-start.Bytes)/appended, "written-B/new-B")
			b.ReportMetric(float64(maxSegs), "max-segments")
		})
	}
}

// BenchmarkWALColdGrowth mimics a large open on a master's local WAL: a
// growing set of cold region records (written once, updated once a while
// later, then never again) beside short-lived procedure records (inserted,
// updated twice, deleted), with as many regions in flight as the open's
// waves keep. At the end the live region records fill about two segments,
// as 62 MB does 32 MB segments at 1 M regions. ops-per-record=1 writes a
// record per operation; 256 gathers the operations of 256 regions in one
// record, as raftfsm applies a Raft entry's batch (~400 regions at 1 M).
// Reported (the whole run, from an empty WAL):
//
//	cleanup-B/new-B  bytes written by cleanup per byte appended
//	cpu-ns/new-B     process CPU (getrusage) per byte appended, cleanup's
//	                 background reads included
//	peak-disk/live   most segment bytes over the live bytes, sampled once
//	                 the live bytes passed a segment
//	end-disk/live    the same at the end
func BenchmarkWALColdGrowth(b *testing.B) {
	for _, perRecord := range []int{1, 256} {
		b.Run(fmt.Sprintf("ops-per-record=%d", perRecord), func(b *testing.B) { benchColdGrowth(b, perRecord) })
	}
}

func benchColdGrowth(b *testing.B, perRecord int) {
	const (
		segmentSize = 2 << 20
		regionImage = 52  // a region's record: ~62 encoded bytes with id and length
		procImage   = 140 // a region procedure's record
		inFlight    = 1024
		regionBase  = 1 << 40 // region records and procedures use apart id ranges
	)
	regions := int(2 * segmentSize / (regionImage + 10))
	cfg := DefaultWALConfig(b.TempDir())
	cfg.NoSync = true
	cfg.Sync = SyncOnRoll
	cfg.SegmentSize = segmentSize
	region, proc := benchData(4)[:regionImage], benchData(5)[:procImage]
	b.ResetTimer()
	var appended int64
	var peak, end float64
	var cleanup uint64
	var cpu time.Duration
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		cfg.Dir = b.TempDir()
		w, err := OpenWAL(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Load(func(Proc) error { return nil }); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		cpu0 := cpuTime(b)
		var batch Batch
		flush := func() {
			if batch.empty() {
				return
			}
			if err := w.Append(batch); err != nil {
				b.Fatal(err)
			}
			appended += int64(appendedBytes(batch))
			batch = Batch{}
		}
		add := func(ins, upd []Proc, del []uint64) {
			batch.Inserts = append(batch.Inserts, ins...)
			batch.Updates = append(batch.Updates, upd...)
			batch.Deletes = append(batch.Deletes, del...)
			if perRecord == 1 {
				flush()
			}
		}
		for r := 0; r < regions+inFlight; r++ {
			if r < regions {
				id := uint64(r + 1)
				add([]Proc{{ID: regionBase + id, Data: region}}, nil, nil)
				add([]Proc{{ID: id, Data: proc}}, nil, nil)
			}
			if mid := r - inFlight/2; mid >= 0 && mid < regions {
				add(nil, []Proc{{ID: uint64(mid + 1), Data: proc}}, nil)
			}
			if done := r - inFlight; done >= 0 {
				id := uint64(done + 1)
				add(nil, []Proc{{ID: regionBase + id, Data: region}, {ID: id, Data: proc}}, nil)
				add(nil, nil, []uint64{id})
			}
			if r%perRecord == perRecord-1 {
				flush()
			}
			if r%256 == 0 {
				if st := w.Stats(); st.LiveBytes > segmentSize {
					peak = max(peak, float64(st.SegmentBytes)/float64(st.LiveBytes))
				}
			}
		}
		flush()
		cpu += cpuTime(b) - cpu0
		st := w.Stats()
		end = float64(st.SegmentBytes) / float64(st.LiveBytes)
		cleanup += st.RewriteBytes
		b.StopTimer()
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(cleanup)/float64(appended), "cleanup-B/new-B")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(appended), "cpu-ns/new-B")
	b.ReportMetric(peak, "peak-disk/live")
	b.ReportMetric(end, "end-disk/live")
	b.ReportMetric(float64(appended)/float64(b.N*regions), "new-B/region")
}
