package store

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/baton-dev/baton/internal/fsutil"
)

// Cleanup: retiring superseded segments and merging runs of sparse ones,
// paid for by appends (see "Cleanup" and "Merges" in wal.go).

// rewriteCreditPercent is how many bytes of merges each 100 bytes appended
// pay for at most. Merges copy a byte only to free at least as much (until
// the segments hold twice the live bytes), so a workload whose images die
// young spends little of it; it bounds what cleanup can write when the
// live images are dense in every segment, or churn through them.
const rewriteCreditPercent = 150

// earnRewriteCredit credits n appended bytes. The credit is capped at what
// one segment of appends earns, so that after a long stretch with nothing
// to clean up, or once appends stop, cleanup writes at most that much.
func (w *WAL) earnRewriteCredit(n int) {
	limit := w.cfg.SegmentSize * rewriteCreditPercent / 100
	w.rewriteCredit = min(w.rewriteCredit+int64(n)*rewriteCreditPercent/100, limit)
}

func (w *WAL) recomputeHolding() {
	if len(w.segs) < 2 {
		w.holding = &idSet{}
		return
	}
	h := heldSet(w.segs[0].tr)
	for _, s := range w.segs[1:] {
		if h.len() == 0 {
			break
		}
		h.subtractTouched(s.tr)
	}
	w.holding = h
}

// cleanup removes oldest segments that hold no latest image, and starts a
// merge when the segments are over their bounds (overSegments), appends
// have paid for it (rewriteCredit) and a run is worth it (pickRun). The
// records that superseded a segment may be unsynced in the current segment
// (SyncOnRoll), so the current segment is synced before any segment goes.
func (w *WAL) cleanup() {
	for len(w.segs) > 1 && w.holding.len() == 0 && w.failed == nil {
		old := w.segs[0]
		if err := w.syncCur(); err != nil {
			w.log.Error("cannot sync before removing superseded segment", "file", old.name, "error", err)
			break
		}
		if err := w.retire(old); err != nil {
			w.log.Error("cannot remove superseded segment", "file", old.name, "error", err)
			break
		}
		w.segs[0] = nil
		w.segs = w.segs[1:]
		w.segsGen++
		w.recomputeHolding()
	}
	w.nSegments.Store(int64(len(w.segs)))
	var size int64
	for _, s := range w.segs {
		size += s.size
	}
	w.nSegBytes.Store(size)
	w.noteLiveOverLimit()
	if !w.overSegments(size) || w.rewriteCredit <= 0 || w.rewriting || w.failed != nil || w.pickedAt == w.segsGen {
		return
	}
	run, ok := w.pickRun(size)
	if !ok {
		w.pickedAt = w.segsGen // nothing worth it until the segments change
		return
	}
	w.startCompaction(run)
}

// liveBoundPercent and liveBoundMinSegments: cleanup also merges when the
// segments hold more than liveBoundPercent% of the live images' bytes, as
// long as more than liveBoundMinSegments segments are live (below that, a
// small WAL would churn its one full segment over and over for a few KB).
// That is when cleanup looks for a run, not a bound on the segments: runs
// that copy more than they free wait for pressedPercent, and the current
// and newest closed segments are never merged.
const (
	liveBoundPercent     = 150
	liveBoundMinSegments = 2
)

// overSegments reports whether the segments, of size bytes in all, call for
// a merge: more of them than MaxSegments, or more bytes than
// liveBoundPercent% of the live images. Without the second test a WAL
// whose oldest segments are pinned by a few rarely written ids (a region's
// key written once among hot keys rewritten all the time) kept
// MaxSegments×SegmentSize on disk whatever its live data: 207 MB for 18 MB
// at 100 k regions (BENCHMARKS.md). The credit still bounds the work.
func (w *WAL) overSegments(size int64) bool {
	n := len(w.segs)
	return n > w.fileLimit() || (n > liveBoundMinSegments && size*100 > liveBoundPercent*w.liveBytes)
}

// fileLimit is the number of segments past which merges also count the
// files they remove: MaxSegments, plus one per eighth of a segment of live
// images. A merge of a sparse segment leaves a file of its live images,
// an eighth of a segment or so when they are cold records among
// short-lived ones (a large open's region records); merging those files
// again only to bring their count to MaxSegments copied every cold image
// a second time (BenchmarkWALColdGrowth: 0.16 bytes written per byte
// appended against 0.09). The files stay bounded by the live bytes all
// the same.
func (w *WAL) fileLimit() int {
	return w.cfg.MaxSegments + int(w.liveBytes/max(w.cfg.SegmentSize/8, 1))
}

// noteLiveOverLimit warns, once, when the live images alone exceed what
// MaxSegments segments hold: the WAL then keeps as many segments as they
// need (merging cannot bring the count down), which is worth knowing
// (procedures piling up, or limits set too low). The warning is re-armed
// once the live images are back under half of that.
func (w *WAL) noteLiveOverLimit() {
	limit := int64(w.cfg.MaxSegments) * w.cfg.SegmentSize
	switch {
	case !w.overLimitWarned && w.liveBytes > limit:
		w.overLimitWarned = true
		w.log.Warn("live procedure data exceeds MaxSegments segments; keeping the segments it needs",
			"live_bytes", w.liveBytes, "live_procs", w.liveSizes.len(), "segments", len(w.segs),
			"max_segments", w.cfg.MaxSegments, "segment_size", w.cfg.SegmentSize, "limit_bytes", limit)
	case w.overLimitWarned && w.liveBytes <= limit/2:
		w.overLimitWarned = false
		w.log.Info("live procedure data back under MaxSegments segments",
			"live_bytes", w.liveBytes, "live_procs", w.liveSizes.len(), "segments", len(w.segs),
			"max_segments", w.cfg.MaxSegments, "limit_bytes", limit)
	}
}

// retire deletes a superseded segment, or renames it aside if damaged. The
// directory is synced before the next segment may go, so removals cannot be
// reordered by a crash.
func (w *WAL) retire(s *segment) error {
	if s.damaged {
		w.log.Warn("damaged segment superseded; keeping it aside", "file", s.name, "as", s.name+".damaged")
		if err := os.Rename(s.path, s.path+".damaged"); err != nil {
			return err
		}
	} else if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	w.nSegmentsDel.Add(1)
	w.event("remove", s.name)
	return w.syncDir()
}

// Compaction: cleanup frees space by merging a run of consecutive closed
// segments into one new file that holds only what the run still says
// (see "Merges" in wal.go). What it copies stays where it was in the
// log's order, behind the appends: a cold image is copied once into a
// dense segment and then left alone, where copying it forward to the
// current segment (HBase's straggler rewrite) brought it back to the
// front of the log to be copied again a few segments later, for ever. At a
// million regions that rewrite wrote more than the appends did.

// pressedPercent: while the segments hold more than this share of the live
// images' bytes, cleanup also merges runs that copy more than they free
// (at most a segment's worth, paid by the credit), so that segments just
// over half live cannot pile up: the segments stay within about twice the
// live bytes plus the two segments cleanup leaves alone.
const pressedPercent = 200

// maxMergeSegments bounds the segments one compaction merges: the files it
// reads, and the output, stay within a few segments' bytes.
const maxMergeSegments = 8

// compaction is a run of consecutive closed segments to merge, and what
// the writer found they must keep.
type compaction struct {
	segs  []*segment // oldest first; the output takes the last one's id
	read  []bool     // per segment: it holds images to copy
	keep  *idSet     // ids whose latest image the run holds
	dels  []uint64   // deletes the output must carry, ascending
	hdr   segHeader  // the output's header
	maxID uint64     // for the output's trailer
	index uint64
	// testHook is w's when the merge started, called with ("map", file)
	// once the merge mapped a file: the merge's goroutine may not read w's.
	testHook func(op, file string)
}

type compactResult struct {
	c      *compaction
	out    *segment // nil: the run holds nothing to keep, remove it whole
	tmp    string   // the output, synced, to rename over the run's last segment
	images int
	err    error
}

// candidate is a run of segments cleanup could merge, with what merging it
// would copy and free.
type candidate struct {
	first, last int // indexes in w.segs
	live, size  int64
	score       float64
}

// pickRun chooses the run of closed segments to merge, or reports false
// when no run is worth its copying. Runs may hold any closed segment but
// the newest one (its short-lived images are still dying), none damaged or
// failed. A run's benefit is the bytes it frees (its size less its live
// images), plus a segment's size per file it removes while there are more
// than fileLimit; its cost is what it copies, plus a quarter of what it
// reads (scanning is cheaper than encoding, checksumming and writing),
// plus an eighth of a segment for the file it creates and syncs (so that,
// of runs as sparse, the longer wins: fewer, larger merges). A run is
// worth merging when it frees at least as much as it copies, and at least
// that eighth of a segment: cleanup never copies more than a byte per byte
// it frees (or per file, valued at a segment), and never merges small
// files only to save their headers. The best ratio wins: the sparsest
// segments, mostly the oldest of the short-lived appends, are merged, and
// the dense ones (cold images already merged) are left as they are
// (Rosenblum and Ousterhout's cost-benefit cleaning, without their age
// term: the newest closed segment is excluded instead). Merged runs are
// capped at a segment of live images so that dense segments are not
// merged into ever larger files, copying their images each time.
func (w *WAL) pickRun(size int64) (candidate, bool) {
	n := len(w.segs)
	if n < 3 {
		return candidate{}, false
	}
	live := w.latestLive()
	var segBonus int64
	if n > w.fileLimit() {
		segBonus = w.cfg.SegmentSize
	}
	perMerge := w.cfg.SegmentSize / 8
	// Past pressedPercent of the live bytes, a run that copies more than
	// it frees is merged too, the credit pacing it.
	pressed := size*100 > pressedPercent*w.liveBytes
	var best candidate
	found := false
	for first := 0; first < n-2; first++ {
		c := candidate{first: first}
		for last := first; last < n-2 && last-first < maxMergeSegments; last++ {
			s := w.segs[last]
			if s.damaged || s.rewriteFailed {
				break
			}
			c.last = last
			c.live += live[last]
			c.size += s.size
			if last > first && c.live > w.cfg.SegmentSize {
				break
			}
			benefit := c.size - c.live + int64(last-first)*segBonus
			if benefit < perMerge || (benefit < c.live && !pressed) {
				continue
			}
			c.score = float64(benefit) / float64(c.live+c.size/4+perMerge)
			if !found || c.score > best.score {
				best, found = c, true
			}
		}
	}
	return best, found
}

// latestLive returns, for each segment but the current one, the bytes of
// the live images whose latest copy it holds.
func (w *WAL) latestLive() []int64 {
	n := len(w.segs)
	out := make([]int64, n-1)
	newer := &idSet{}
	newer.addTouched(w.segs[n-1].tr)
	for k := n - 2; k >= 0; k-- {
		latest := &idSet{}
		latest.addLatest(w.segs[k].tr, newer, false)
		out[k] = w.liveSizes.sumSet(latest)
		newer.addTouched(w.segs[k].tr)
	}
	return out
}

// planCompaction works out what the run c must keep: the ids whose latest
// image it holds (images superseded by newer segments are dropped), and
// the deletes whose ids an older segment, or one of the run's own, may
// still hold an image of. The run's own count because its files are
// removed one by one after the output is in place: a crash may leave any
// of them beside it. Deletes of ids no older segment holds are dropped.
func (w *WAL) planCompaction(run candidate) *compaction {
	n := len(w.segs)
	newer := &idSet{}
	for k := n - 1; k > run.last; k-- {
		newer.addTouched(w.segs[k].tr)
	}
	c := &compaction{keep: &idSet{}}
	dels := &idSet{}
	for k := run.last; k >= run.first; k-- {
		s := w.segs[k]
		before := c.keep.len()
		c.keep.addLatest(s.tr, newer, false)
		dels.addLatest(s.tr, newer, true)
		newer.addTouched(s.tr)
		c.read = append(c.read, c.keep.len() > before)
		c.segs = append(c.segs, s)
	}
	slices.Reverse(c.segs)
	slices.Reverse(c.read)
	older := &idSet{}
	for k := 0; k < run.last; k++ {
		older.addLatest(w.segs[k].tr, &idSet{}, false)
	}
	dels.intersect(older)
	c.dels = dels.ids()
	last, next := w.segs[run.last], w.segs[run.last+1]
	// The next segment's header already claims the max id and index
	// everything before it reached (they were synced when it was
	// created): repeating them keeps Load's figures without claiming more.
	c.maxID, c.index = next.hdr.maxID, next.hdr.index
	c.hdr = segHeader{id: last.id, maxID: c.maxID, index: c.index, created: last.hdr.created}
	return c
}

func (w *WAL) startCompaction(run candidate) {
	c := w.planCompaction(run)
	c.testHook = w.testHook
	w.rewriting = true
	w.log.Debug("merging segments", "first", c.segs[0].name, "last", c.segs[len(c.segs)-1].name,
		"keep", c.keep.len(), "deletes", len(c.dels), "live_bytes", run.live, "bytes", run.size,
		"segments", len(w.segs), "credit", w.rewriteCredit)
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		res := w.compact(c)
		select {
		case w.rewriteCh <- res:
		case <-w.stopCh:
			if res.tmp != "" {
				os.Remove(res.tmp)
			}
		}
	}()
}

const rewriteChunk = 1 << 20

// compact writes the output of c to a temporary file and syncs it. It runs
// in the background: it reads only closed segments and writes a file no
// one else knows of.
func (w *WAL) compact(c *compaction) compactResult {
	res := compactResult{c: c}
	if c.keep.len() == 0 && len(c.dels) == 0 {
		return res
	}
	last := c.segs[len(c.segs)-1]
	out := &segment{id: last.id, name: last.name, path: last.path, hdr: c.hdr, tr: newTracker()}
	res.tmp = last.path + ".tmp"
	os.Remove(res.tmp) // left by a compaction cut short by Close
	f, err := os.OpenFile(res.tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, fsutil.PrivateFileMode)
	if err != nil {
		res.err, res.tmp = err, ""
		return res
	}
	fail := func(err error) compactResult {
		f.Close()
		os.Remove(res.tmp)
		res.err, res.tmp = err, ""
		return res
	}
	if err := f.Chmod(fsutil.PrivateFileMode); err != nil {
		return fail(err)
	}
	buf := appendHeader(make([]byte, 0, 2*rewriteChunk), c.hdr)
	flush := func() error {
		_, err := f.Write(buf)
		out.size += int64(len(buf))
		buf = buf[:0]
		return err
	}
	var chunk []Proc
	writeChunk := func(typ recType, dels []uint64) error {
		if len(chunk) == 0 && len(dels) == 0 {
			return nil
		}
		buf = appendRecord(buf, typ, 0, [2][]Proc{chunk}, dels)
		out.records++
		chunk, dels = chunk[:0], nil
		if len(buf) >= rewriteChunk {
			return flush()
		}
		return nil
	}
	// Newest first: the first segment of the run to hold an image of a
	// kept id holds its latest, as its last put of it (keep has only ids
	// whose latest word in the run is an image, so that segment's last
	// word on the id is one: its deletes can be ignored).
	remaining := &idSet{}
	c.keep.forEach(remaining.add)
	// Each file is mapped, not read onto the heap: a copy of a segment
	// (32 MiB by default) on the heap while a collection marked it set the
	// heap's next goal (1+GOGC/100 times what it marked) that much higher,
	// the peaks of a 300 k-region master's RSS (issue 33).
	var puts, latest []Proc
	// The chunk written at the end aliases data: it is copied into buf
	// before the mapping goes (withMapped).
	mergeFile := func(data []byte, k int) error {
		if c.testHook != nil {
			c.testHook("map", c.segs[k].name)
		}
		puts = puts[:0]
		r, _ := scanSegment(data, func(_ int64, _ recType, _ uint64, p []byte) error {
			forEachOp(p, func(id uint64, d []byte) {
				if remaining.has(id) {
					puts = append(puts, Proc{ID: id, Data: d})
				}
			}, func(uint64) {})
			return nil
		})
		if r.hdrErr != nil {
			return fmt.Errorf("%s: %w", c.segs[k].name, r.hdrErr)
		}
		latest = latest[:0]
		for i := len(puts) - 1; i >= 0; i-- {
			if id := puts[i].ID; remaining.has(id) {
				remaining.remove(id)
				latest = append(latest, puts[i])
			}
		}
		slices.SortFunc(latest, func(a, b Proc) int { return cmp.Compare(a.ID, b.ID) })
		size := 0
		for _, pr := range latest {
			out.tr.put(pr.ID)
			if size > 0 && size+len(pr.Data) > rewriteChunk {
				if err := writeChunk(recRewrite, nil); err != nil {
					return err
				}
				size = 0
			}
			chunk = append(chunk, pr)
			size += len(pr.Data) + 20
			res.images++
		}
		return writeChunk(recRewrite, nil)
	}
	for k := len(c.segs) - 1; k >= 0; k-- {
		if !c.read[k] {
			continue
		}
		if err := withMapped(c.segs[k].path, func(data []byte) error { return mergeFile(data, k) }); err != nil {
			return fail(err)
		}
	}
	if remaining.len() > 0 {
		return fail(fmt.Errorf("%d images missing from their segments", remaining.len()))
	}
	for start := 0; start < len(c.dels); start += rewriteChunk / 8 {
		dels := c.dels[start:min(len(c.dels), start+rewriteChunk/8)]
		for _, id := range dels {
			out.tr.delete(id)
		}
		if err := writeChunk(recDelete, dels); err != nil {
			return fail(err)
		}
	}
	buf = appendTrailer(buf, out.size+int64(len(buf)), trailerInfo{maxID: c.maxID, index: c.index, records: out.records, tr: out.tr})
	if err := flush(); err != nil {
		return fail(err)
	}
	if !w.cfg.NoSync {
		if err := w.syncData(f); err != nil {
			return fail(err)
		}
	}
	if err := f.Close(); err != nil {
		os.Remove(res.tmp)
		res.err, res.tmp = err, ""
		return res
	}
	res.out = out
	return res
}

// applyCompaction puts a compaction's output in place of its run: the
// output is renamed over the run's last segment, then the others are
// removed. A crash in between leaves the output beside some of them, which
// Load reads to the same result: the output holds the run's latest word on
// every id no newer segment settles, deletes included whenever an older
// file may hold an image.
func (w *WAL) applyCompaction(res compactResult) {
	w.rewriting = false
	c := res.c
	discard := func() {
		if res.tmp != "" {
			os.Remove(res.tmp)
		}
	}
	if w.failed != nil {
		discard()
		return
	}
	first := slices.Index(w.segs, c.segs[0])
	if first < 0 || first+len(c.segs) > len(w.segs)-1 || !slices.Equal(w.segs[first:first+len(c.segs)], c.segs) {
		// Cleanup removed the oldest segment meanwhile.
		discard()
		w.cleanup()
		return
	}
	if res.err != nil {
		w.log.Error("cannot merge segments; keeping them", "first", c.segs[0].name, "last", c.segs[len(c.segs)-1].name, "error", res.err)
		for _, s := range c.segs {
			s.rewriteFailed = true
		}
		discard()
		return
	}
	// The output drops images newer records superseded, which may sit
	// unsynced in the current segment (SyncOnRoll).
	if err := w.syncCur(); err != nil {
		discard()
		return
	}
	gone := c.segs
	if res.out != nil {
		if err := os.Rename(res.tmp, res.out.path); err != nil {
			discard()
			w.fail(fmt.Errorf("merge segments: %w", err))
			return
		}
		if err := w.syncDir(); err != nil {
			w.fail(fmt.Errorf("merge segments: %w", err))
			return
		}
		gone = gone[:len(gone)-1]
		n := uint64(res.out.size)
		w.nBytes.Add(n)
		w.nRecords.Add(res.out.records)
		w.nRewriteB.Add(n)
		w.rewriteCredit -= int64(n)
		w.nStragglers.Add(uint64(res.images))
		w.event("merge", res.out.name)
	}
	for _, s := range gone {
		if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			w.fail(fmt.Errorf("merge segments: remove %s: %w", s.name, err))
			return
		}
		w.nSegmentsDel.Add(1)
		w.event("remove", s.name)
	}
	if err := w.syncDir(); err != nil {
		w.fail(fmt.Errorf("merge segments: %w", err))
		return
	}
	var keep []*segment
	if res.out != nil {
		keep = []*segment{res.out}
	}
	w.segs = slices.Replace(w.segs, first, first+len(c.segs), keep...)
	w.segsGen++
	w.log.Debug("merged segments", "into", c.segs[len(c.segs)-1].name, "segments", len(c.segs), "images", res.images, "deletes", len(c.dels))
	w.recomputeHolding()
	w.cleanup()
}
