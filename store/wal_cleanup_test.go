package store

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/syncbuf"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/hashicorp/go-hclog"
)

// linesWith returns the lines of text that contain substr.
func linesWith(text, substr string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// maintainIdle moves the clock past RollInterval and runs the writer's
// periodic maintenance (age roll, cleanup) once, in the writer goroutine. It
// reports whether a merge is in flight afterwards.
func maintainIdle(t *testing.T, w *WAL, clk *clock.Manual) (rewriting bool) {
	t.Helper()
	clk.Advance(2 * w.cfg.RollInterval)
	if !w.inWriter(func() {
		w.maintain()
		rewriting = w.rewriting
	}) {
		t.Fatal("the WAL's writer is not running")
	}
	return rewriting
}

// waitNoRewrite waits until no merge is in flight.
func waitNoRewrite(t *testing.T, w *WAL) {
	t.Helper()
	testwait.For(t, 10*time.Second, "the merge in flight to finish", func() bool {
		var rewriting bool
		if !w.inWriter(func() { rewriting = w.rewriting }) {
			t.Fatal("the WAL's writer is not running")
		}
		return !rewriting
	})
}

// settle drives maintenance until no merge is in flight and nothing was
// written since the previous round, and fails if that takes longer than a
// deadline.
func settle(t *testing.T, w *WAL, clk *clock.Manual, since WALStats) WALStats {
	t.Helper()
	var last, st WALStats
	round := 0
	settled := testwait.Until(10*time.Second, func() bool {
		rewriting := maintainIdle(t, w, clk)
		st = w.Stats()
		done := round > 0 && !rewriting && st.Bytes == last.Bytes
		last = st
		round++
		return done
	})
	if !settled {
		t.Fatalf("cleanup did not settle in 10 s without appends: since the last append %d rolls, %d images merged, %d bytes written (%d segments, MaxSegments %d)",
			st.Rolls-since.Rolls, st.StragglersRewritten-since.StragglersRewritten, st.Bytes-since.Bytes, st.Segments, w.cfg.MaxSegments)
	}
	return st
}

// When the live procedures need more than MaxSegments segments, the WAL
// keeps more segments (MaxSegments is a soft limit), says so once, and,
// once appends stop, writes nothing: cleanup must not copy the same live
// images forward again and again. Maintenance is driven by the test with
// the clock moved past RollInterval each round, so age rolls and the
// timer's cleanup run many times without waiting for them.
func TestWALIdleWritesNothingWithLiveDataOverLimit(t *testing.T) {
	for _, mode := range []SyncMode{SyncEveryBatch, SyncOnRoll} {
		t.Run(mode.String(), func(t *testing.T) { testIdleWritesNothing(t, mode) })
	}
}

func testIdleWritesNothing(t *testing.T, mode SyncMode) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.Sync = mode
	cfg.SegmentSize = MinSegmentSize
	cfg.MaxSegments = 4
	cfg.RollInterval = time.Hour // its ticker fires once a second; the test runs maintenance itself
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	cfg.Now = clk.Now
	logs := &syncbuf.Buffer{}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info, JSONFormat: true})
	w, _, _ := openLoaded(t, cfg)
	defer w.Close()

	// 100 procedures of ~100 bytes, three in four updated a few times:
	// about 10 KiB of live images, 2.5 times what MaxSegments segments of
	// 1 KiB hold; the first round's segments end a quarter live, so
	// cleanup merges them.
	want := map[uint64]string{}
	for round := range 4 {
		for id := uint64(1); id <= 100; id++ {
			if round > 0 && id%4 == 0 {
				continue
			}
			v := fmt.Sprintf("proc-%d-round-%d-%s", id, round, strings.Repeat("p", 80))
			b := Batch{Updates: []Proc{p(id, v)}}
			if round == 0 {
				b = Batch{Inserts: b.Updates}
			}
			mustAppend(t, w, b)
			want[id] = v
		}
	}
	// The merge the appends started reads its segments in the
	// background: on a loaded machine it lands after the last append.
	var appended WALStats
	if !testwait.Until(10*time.Second, func() bool { appended = w.Stats(); return appended.StragglersRewritten > 0 }) {
		t.Fatalf("the appends did not make cleanup merge segments: %+v", appended)
	}

	settled := settle(t, w, clk, appended)
	files := segFiles(t, dir)
	for round := range 50 {
		if maintainIdle(t, w, clk) {
			t.Fatalf("maintenance round %d of an idle WAL started a merge", round)
		}
	}
	idle := w.Stats()
	t.Logf("after the appends %+v; settled %+v; after 50 idle rounds %+v", appended, settled, idle)
	if idle.Bytes != settled.Bytes || idle.Rolls != settled.Rolls || idle.StragglersRewritten != settled.StragglersRewritten {
		t.Errorf("idle WAL wrote %d bytes, rolled %d segments, rewrote %d images",
			idle.Bytes-settled.Bytes, idle.Rolls-settled.Rolls, idle.StragglersRewritten-settled.StragglersRewritten)
	}
	if got := segFiles(t, dir); !slices.Equal(got, files) {
		t.Errorf("idle WAL changed its segments: %d files, then %d", len(files), len(got))
	}
	if idle.Segments <= cfg.MaxSegments {
		t.Errorf("%d segments hold %d live bytes: want more than MaxSegments %d", idle.Segments, idle.LiveBytes, cfg.MaxSegments)
	}
	if idle.LiveBytes <= int64(cfg.MaxSegments)*cfg.SegmentSize {
		t.Errorf("LiveBytes %d: want more than %d", idle.LiveBytes, int64(cfg.MaxSegments)*cfg.SegmentSize)
	}
	warns := linesWith(logs.String(), "live procedure data exceeds MaxSegments")
	if len(warns) != 1 {
		t.Fatalf("%d warnings about live data over the limit, want 1: %q", len(warns), warns)
	}
	for _, field := range []string{`"@level":"warn"`, `"live_bytes":`, `"segments":`, `"max_segments":4`, `"segment_size":1024`} {
		if !strings.Contains(warns[0], field) {
			t.Errorf("warning %s lacks %s", warns[0], field)
		}
	}
	closeAndCheck(t, w, cfg, want)
}

// appendedBytes is the size of the record Append writes for b.
func appendedBytes(b Batch) int {
	return frameHeaderSize + recordSize(b.Index, [2][]Proc{b.Inserts, b.Updates}, b.Deletes)
}

// Invariant: under a steady workload the number of segments stays bounded,
// whether the live procedures fit in MaxSegments segments or not, and
// cleanup writes at most rewriteCreditPercent bytes per 100 appended. The
// workload is long-lived procedures that are never touched again (they pin
// old segments unless merged) beside a churn of short-lived ones; without
// merges the segment count would grow with the length of the run, here to
// over a hundred.
func TestWALSegmentCountBoundedUnderSteadyWorkload(t *testing.T) {
	for _, tc := range []struct {
		name string
		live float64 // long-lived data, in units of MaxSegments×SegmentSize
	}{
		{"live data below the limit", 0.5},
		{"live data over the limit", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.SegmentSize = 4 << 10
			cfg.MaxSegments = 4
			limit := int64(cfg.MaxSegments) * cfg.SegmentSize
			w, _, _ := openLoaded(t, cfg)
			defer w.Close()
			want := map[uint64]string{}
			var newBytes int64
			app := func(b Batch) {
				mustAppend(t, w, b)
				newBytes += int64(appendedBytes(b))
				// A merge runs in the background while appends go on;
				// appends here come much faster than a real workload's,
				// so let each one finish: the test is about how much
				// cleanup does, not how fast a goroutine is scheduled.
				waitNoRewrite(t, w)
			}
			// The long-lived procedures, interleaved with churn so that
			// they are spread over many segments.
			next := uint64(1)
			var active []uint64
			churn := func(step int) {
				switch {
				case len(active) < 20:
					v := fmt.Sprintf("new-%d", next)
					app(Batch{Inserts: []Proc{p(next, v)}})
					want[next] = v
					active = append(active, next)
					next++
				case step%4 == 0:
					app(Batch{Deletes: active[:1]})
					delete(want, active[0])
					active = active[1:]
				default:
					id := active[step%len(active)]
					v := fmt.Sprintf("upd-%d-%d-%s", id, step, strings.Repeat("u", 100))
					app(Batch{Updates: []Proc{p(id, v)}})
					want[id] = v
				}
			}
			longLived := int64(tc.live * float64(limit))
			step := 0
			for size := int64(0); size < longLived; step++ {
				v := fmt.Sprintf("long-lived-%d-%s", next, strings.Repeat("l", 150))
				app(Batch{Inserts: []Proc{p(next, v)}})
				want[next] = v
				size += int64(imageSize(p(next, v)))
				next++
				churn(step)
			}
			// The steady part: churn only, many times the live data.
			afterSetup := w.Stats()
			steady := 20 * max(longLived, limit)
			maxSegs, end := 0, newBytes+steady
			for ; newBytes < end; step++ {
				churn(step)
				maxSegs = max(maxSegs, w.Stats().Segments)
			}
			st := w.Stats()
			t.Logf("live %d bytes (limit %d); steady phase: %d bytes appended, %d rolls, at most %d segments, %d at the end; cleanup wrote %d bytes in all for %d appended",
				st.LiveBytes, limit, steady, st.Rolls-afterSetup.Rolls, maxSegs, st.Segments, st.RewriteBytes, newBytes)
			if st.Rolls-afterSetup.Rolls < 50 {
				t.Fatalf("only %d rolls in the steady phase", st.Rolls-afterSetup.Rolls)
			}
			// Below the limit the count stays near MaxSegments (a merge is
			// asynchronous: some slack). Over it, the bound is the one the
			// straggler rewrite kept, the live data about
			// 1+100/rewriteCreditPercent times over plus the segments
			// written while a pass of rewrites caught up; merges stay
			// within it.
			bound := cfg.MaxSegments + 3
			if st.LiveBytes > limit {
				perSeg := float64(cfg.SegmentSize)
				bound = cfg.MaxSegments + 3 + int(float64(st.LiveBytes)/perSeg*(1+100.0/rewriteCreditPercent)+0.5)
			}
			if maxSegs > bound {
				t.Errorf("segments reached %d, want at most %d", maxSegs, bound)
			}
			if max := newBytes*rewriteCreditPercent/100 + 3*cfg.SegmentSize; int64(st.RewriteBytes) > max {
				t.Errorf("cleanup wrote %d bytes for %d appended: more than %d", st.RewriteBytes, newBytes, max)
			}
			closeAndCheck(t, w, cfg, want)
		})
	}
}

// TestWALBytesBoundedByLiveData: cold ids written once (a region's keys)
// pin the segments they were written in while hot ids are rewritten over
// and over. The segments' bytes must follow the live data (at most 1.5×
// it, plus the segment being filled), not sit at MaxSegments×SegmentSize;
// and a crash at any point, merges included, loses nothing.
func TestWALBytesBoundedByLiveData(t *testing.T) {
	dir, cfg, w := openSegmented(t, 4<<10, 16) // 64 KiB: far above twice the live data
	defer w.Close()
	want := map[uint64]string{}
	var appended int64
	app := func(b Batch) {
		mustAppend(t, w, b)
		appended += int64(appendedBytes(b))
	}
	// 40 cold ids among hot updates, so that they spread over segments.
	const cold, hot = 40, 10
	step := 0
	hotUpdate := func() {
		id := uint64(1000 + step%hot)
		v := fmt.Sprintf("hot-%d-%d-%s", id, step, strings.Repeat("h", 120))
		app(Batch{Updates: []Proc{p(id, v)}})
		want[id] = v
		step++
	}
	for id := uint64(1); id <= cold; id++ {
		v := fmt.Sprintf("cold-%d-%s", id, strings.Repeat("c", 150))
		app(Batch{Inserts: []Proc{p(id, v)}})
		want[id] = v
		for range 8 {
			hotUpdate()
		}
	}
	// A process crash right after cleanup removed a segment, the moment a
	// merge must already have put that segment's live images elsewhere:
	// the hook runs in the writer goroutine, so the files are still.
	var (
		mu      sync.Mutex
		crashes int
	)
	coldWant := maps.Clone(want)
	// Set in the writer goroutine, which reads it: the WAL is running.
	hook := func(op, _ string) {
		if op != "remove" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		crashes++
		if crashes%5 != 0 {
			return
		}
		ccfg := cfg
		ccfg.Dir = snapshot(t, dir)
		got, _ := loadDir(t, ccfg)
		for id := uint64(1); id <= cold; id++ {
			if got[id] != coldWant[id] {
				t.Errorf("crash image after a removal: cold id %d is %q, want %q", id, got[id], coldWant[id])
			}
		}
		for id := uint64(1000); id < 1000+hot; id++ {
			if _, ok := got[id]; !ok {
				t.Errorf("crash image after a removal: hot id %d lost", id)
			}
		}
	}
	if !w.inWriter(func() { w.testHook = hook }) {
		t.Fatal("the WAL is not running")
	}
	maxBytes := int64(0)
	for range 3000 {
		hotUpdate()
		maxBytes = max(maxBytes, w.Stats().SegmentBytes)
	}
	waitNoRewrite(t, w)
	st := w.Stats()
	mu.Lock()
	removals := crashes
	mu.Unlock()
	t.Logf("live %d bytes; segments %d, %d bytes at the end (at most %d during the run); cleanup wrote %d bytes for %d appended; %d removals, a crash image loaded at every fifth",
		st.LiveBytes, st.Segments, st.SegmentBytes, maxBytes, st.RewriteBytes, appended, removals)
	if bound := st.LiveBytes*liveBoundPercent/100 + cfg.SegmentSize; st.SegmentBytes > bound {
		t.Errorf("segments hold %d bytes for %d live: more than %d (%d%% of the live data and a segment)", st.SegmentBytes, st.LiveBytes, bound, liveBoundPercent)
	}
	if limit := int64(appended)*rewriteCreditPercent/100 + 3*cfg.SegmentSize; int64(st.RewriteBytes) > limit {
		t.Errorf("cleanup wrote %d bytes for %d appended: more than %d", st.RewriteBytes, appended, limit)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if removals < 10 {
		t.Errorf("only %d segments removed: the workload did not exercise cleanup", removals)
	}
	if removals < 10 {
		t.Errorf("only %d segments removed: the workload did not exercise cleanup", removals)
	}
	got, _ := loadDir(t, cfg)
	equalMaps(t, got, want)
}

// Live data that fills a few segments, below MaxSegments, puts only the
// live-bytes rule (liveBoundPercent) in play: with a few hot ids rewritten
// over it, cleanup merges the cold images' segments while appends pay for
// it, and at most rewriteCreditPercent bytes per 100 appended (plus what
// the credit's cap holds); once appends stop, it settles, and an idle WAL
// then writes nothing, however many segments the live data needs.
func TestWALLiveBoundRewritesBoundedByCredit(t *testing.T) {
	for _, tc := range []struct{ img, segs int }{{64, 3}, {200, 4}, {1000, 8}, {200, 16}} {
		t.Run(fmt.Sprintf("%dB-images-%d-segments", tc.img, tc.segs), func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig(dir)
			cfg.SegmentSize = 4 << 10
			cfg.MaxSegments = 64 // the live-bytes rule alone calls for merges
			cfg.RollInterval = time.Hour
			clk := clock.NewManual(time.Unix(1_000_000, 0))
			cfg.Now = clk.Now
			w, _, _ := openLoaded(t, cfg)
			defer w.Close()
			want := map[uint64]string{}
			// Cold images that exactly fill tc.segs segments' worth of bytes.
			cold := tc.segs * int(cfg.SegmentSize) / tc.img
			for id := 1; id <= cold; id++ {
				v := strings.Repeat(string(rune('a'+id%26)), tc.img)
				mustAppend(t, w, Batch{Inserts: []Proc{p(uint64(id), v)}})
				want[uint64(id)] = v
			}
			before := w.Stats()
			var appended int64
			for i := range 3000 {
				b := Batch{Updates: []Proc{p(uint64(1+i%3), fmt.Sprintf("%0*d", tc.img, i))}}
				mustAppend(t, w, b)
				appended += int64(appendedBytes(b))
				want[uint64(1+i%3)] = string(b.Updates[0].Data)
			}
			settled := settle(t, w, clk, w.Stats())
			rewrote := int64(settled.RewriteBytes - before.RewriteBytes)
			if limit := appended*rewriteCreditPercent/100 + 3*cfg.SegmentSize; rewrote > limit {
				t.Errorf("cleanup wrote %d bytes for %d appended: more than %d", rewrote, appended, limit)
			}
			for round := range 20 {
				if maintainIdle(t, w, clk) {
					t.Fatalf("maintenance round %d of an idle WAL started a merge", round)
				}
			}
			if idle := w.Stats(); idle.Bytes != settled.Bytes {
				t.Errorf("idle WAL wrote %d bytes", idle.Bytes-settled.Bytes)
			}
			t.Logf("live %d bytes in %d segments, %d bytes; cleanup wrote %d bytes for %d appended",
				settled.LiveBytes, settled.Segments, settled.SegmentBytes, rewrote, appended)
			closeAndCheck(t, w, cfg, want)
		})
	}
}

// Cold images filling many segments (16 here) with a few hot ids updated
// over them are a big cluster's usual case (region records written once,
// procedures rewritten). The straggler rewrite freed only the oldest
// segment, copying its cold images to the front of the log, so segments of
// dead hot images piled up behind the cold ones while they waited their
// turn: 2.4–3× the live bytes at worst, with about a byte rewritten per
// byte appended. Merges free the dead segments where they are and leave
// the cold ones alone: measured, at most 1.5× the live bytes, and nothing
// copied (the dead segments go without a copy: runs with nothing
// to keep are removed whole). The bounds asserted are near that measurement, so that a change
// making it worse is noticed; each append waits for the merge in flight,
// so the figures do not depend on the machine's load.
func TestWALBytesWithColdDataFillingSegments(t *testing.T) {
	_, cfg, w := openSegmented(t, 4<<10, 64)
	defer w.Close()
	const img, segs = 200, 16
	for id := 1; id <= segs*int(cfg.SegmentSize)/img; id++ {
		mustAppend(t, w, Batch{Inserts: []Proc{p(uint64(id), strings.Repeat("c", img))}})
	}
	start := w.Stats()
	var appended int64
	var worst WALStats
	worstRatio := 0.0
	for i := range 6000 {
		b := Batch{Updates: []Proc{p(uint64(1+i%3), fmt.Sprintf("%0*d", img, i))}}
		mustAppend(t, w, b)
		appended += int64(appendedBytes(b))
		waitNoRewrite(t, w)
		if i < 3000 {
			continue // the steady state
		}
		s := w.Stats()
		if r := float64(s.SegmentBytes) / float64(max(s.LiveBytes, 1)); r > worstRatio {
			worst, worstRatio = s, r
		}
	}
	copied := w.Stats().RewriteBytes - start.RewriteBytes
	t.Logf("at worst %d bytes in %d segments for %d live (%.2f×); merges wrote %d bytes for %d appended",
		worst.SegmentBytes, worst.Segments, worst.LiveBytes, worstRatio, copied, appended)
	if worstRatio > 1.7 {
		t.Errorf("at worst %d bytes in %d segments for %d live: %.2f×, more than 1.7×", worst.SegmentBytes, worst.Segments, worst.LiveBytes, worstRatio)
	}
	if limit := uint64(appended) / 10; copied > limit {
		t.Errorf("merges wrote %d bytes for %d appended: more than a tenth", copied, appended)
	}
}

// A merge puts its output in place of its run's last segment and then
// removes the others one by one; a crash at any of those steps must load
// exactly the acknowledged state: no image the output dropped may be lost,
// and no delete it dropped may let an older image come back. Old ids are
// deleted, updated and put again long after their first image, so that
// merged runs carry deletes an older file still needs. At every merge and
// removal (the writer paused in the hook) the directory is copied and
// loaded, and compared with the state as of the index it loads.
func TestWALMergeCrashImagesLoadTheAckedState(t *testing.T) {
	dir, cfg, w := openSegmented(t, 2<<10, 64)
	defer w.Close()
	var (
		mu             sync.Mutex
		acked          = newAckedStates(t, w)
		merges, images int
		mergedDeletes  int
	)
	check := func(op, file string) {
		ccfg := cfg
		ccfg.Dir = snapshot(t, dir)
		got, info := loadDir(t, ccfg)
		mu.Lock()
		defer mu.Unlock()
		images++
		want, ok := acked.at(info.Index)
		if !ok {
			t.Errorf("crash image at %s %s loads index %d, past the %d appends", op, file, info.Index, acked.last())
			return
		}
		if !maps.Equal(got, want) {
			for id, v := range want {
				if got[id] != v {
					t.Errorf("crash image at %s %s (index %d): id %d is %.20q, want %.20q", op, file, info.Index, id, got[id], v)
				}
			}
			for id := range got {
				if _, ok := want[id]; !ok {
					t.Errorf("crash image at %s %s (index %d): deleted id %d is back", op, file, info.Index, id)
				}
			}
		}
	}
	hook := func(op, file string) {
		switch op {
		case "merge":
			data, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				t.Errorf("read merged %s: %v", file, err)
				return
			}
			scanSegment(data, func(_ int64, _ recType, _ uint64, pl []byte) error {
				forEachOp(pl, func(uint64, []byte) {}, func(uint64) {
					mu.Lock()
					mergedDeletes++
					mu.Unlock()
				})
				return nil
			})
			mu.Lock()
			merges++
			mu.Unlock()
			check(op, file)
		case "remove":
			check(op, file)
		}
	}
	if !w.inWriter(func() { w.testHook = hook }) {
		t.Fatal("the WAL is not running")
	}
	want := map[uint64]string{}
	app := func(b Batch) { acked.append(want, b) } // want already includes b
	const old = 30
	next := uint64(1000)
	var active []uint64
	churn := func(step int) {
		switch {
		case len(active) < 8:
			want[next] = fmt.Sprintf("new-%d", next)
			app(Batch{Inserts: []Proc{p(next, want[next])}})
			active = append(active, next)
			next++
		case step%3 == 0:
			delete(want, active[0])
			app(Batch{Deletes: active[:1]})
			active = active[1:]
		default:
			id := active[step%len(active)]
			want[id] = fmt.Sprintf("upd-%d-%d-%s", id, step, strings.Repeat("u", 60))
			app(Batch{Updates: []Proc{p(id, want[id])}})
		}
	}
	step := 0
	for id := uint64(1); id <= old; id++ {
		want[id] = fmt.Sprintf("old-%d-%s", id, strings.Repeat("o", 40))
		app(Batch{Inserts: []Proc{p(id, want[id])}})
		for range 10 {
			churn(step)
			step++
		}
	}
	for ; step < 4000; step++ {
		churn(step)
		if step%100 != 0 {
			continue
		}
		switch id := uint64(1 + (step/100)%old); {
		case id%2 == 1:
			if _, ok := want[id]; ok {
				delete(want, id)
				app(Batch{Deletes: []uint64{id}})
			} else {
				want[id] = fmt.Sprintf("again-%d-%d", id, step)
				app(Batch{Updates: []Proc{p(id, want[id])}})
			}
		case id%3 == 0:
			want[id] = fmt.Sprintf("old-%d-%d", id, step)
			app(Batch{Updates: []Proc{p(id, want[id])}})
		}
		waitNoRewrite(t, w)
	}
	waitNoRewrite(t, w)
	mu.Lock()
	t.Logf("%d merges (%d deletes carried), %d crash images loaded; %+v", merges, mergedDeletes, images, w.Stats())
	if merges < 10 || mergedDeletes == 0 {
		t.Errorf("%d merges carrying %d deletes: the workload did not exercise merges with deletes", merges, mergedDeletes)
	}
	mu.Unlock()
	closeAndCheck(t, w, cfg, want)
}

// Close while a merge writes its output: the output must not outlive the
// WAL, whose lock Close releases. The merge's goroutine removes it when it
// sees the WAL stopping, but it chose between that and handing it to a
// writer that had gone (a buffered channel's send is ready too), so half
// the time the output stayed. Each round holds the merge's sync of its
// output until Close finished the current segment (the WAL is then
// stopping), so both were ready: twelve rounds all pass only if the
// choice is not left to chance.
func TestWALCloseDuringAMergeLeavesNoOutput(t *testing.T) {
	for round := range 12 {
		dir := t.TempDir()
		cfg := testConfig(dir)
		cfg.NoSync = false
		cfg.SegmentSize, cfg.MaxSegments = 2<<10, 4
		start := time.Now()
		cfg.Now = func() time.Time { return start } // no age rolls
		var closing atomic.Bool
		merging := make(chan struct{}, 1)
		release := make(chan struct{})
		stopping := make(chan struct{}, 1)
		cfg.SyncData = func(f *os.File) error {
			// A merge's output: still under its .tmp name (a segment keeps
			// the name it was opened by after its rename), past a header
			// (a new segment's is synced before its rename).
			if st, err := os.Stat(f.Name()); err == nil && strings.HasSuffix(f.Name(), ".tmp") && st.Size() > headerSize {
				merging <- struct{}{}
				<-release
				return nil
			}
			if closing.Load() {
				select {
				case stopping <- struct{}{}:
				default:
				}
			}
			return nil
		}
		w, _, _ := openLoaded(t, cfg)
		for id := uint64(1); id <= 5; id++ {
			mustAppend(t, w, Batch{Inserts: []Proc{p(id, "cold")}})
		}
		merged := false
		for id := uint64(100); id < 5000 && !merged; id++ {
			mustAppend(t, w, Batch{Inserts: []Proc{p(id, strings.Repeat("h", 100))}})
			mustAppend(t, w, Batch{Deletes: []uint64{id}})
			select {
			case <-merging:
				merged = true
			default:
			}
		}
		if !merged {
			t.Fatalf("round %d: no merge started", round)
		}
		closing.Store(true)
		closed := make(chan error, 1)
		go func() { closed <- w.Close() }()
		<-stopping // Close is finishing the current segment: the WAL is stopping
		close(release)
		if err := <-closed; err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) > 0 {
			t.Fatalf("round %d: Close left a merge's output: %v", round, left)
		}
	}
}
