package store

import (
	"errors"
	"os"
)

// Cleanup: retiring superseded segments and rewriting the stragglers of the
// oldest one, paid for by appends (see "Cleanup" and "Rewrites" in wal.go).

// rewriteCreditPercent is how many bytes of straggler rewrites each 100
// bytes appended pay for. It trades write amplification for space: when the
// oldest segments are mostly live (live data near or over the soft limit),
// cleanup writes this share of what is appended, and the segments hold
// about 1+100/rewriteCreditPercent times the live data (in the steady state
// a rewritten segment is that dense when its short-lived images are gone).
// At 150, cleanup writes at most 1.5 bytes per byte appended, and keeps the
// count at MaxSegments as long as the oldest segment is at most 60% live
// when its turn comes: the 1.5 segments rewritten per segment appended then
// free 2.5 segments, as many as the appends and the rewrites fill.
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
// straggler rewrite when more than MaxSegments segments remain and appends
// have paid for it (rewriteCredit). The records that superseded a segment
// may be unsynced in the current segment (SyncOnRoll), so the current
// segment is synced before any segment goes.
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
		w.recomputeHolding()
	}
	w.nSegments.Store(int64(len(w.segs)))
	var size int64
	for _, s := range w.segs {
		size += s.size
	}
	w.nSegBytes.Store(size)
	w.noteLiveOverLimit()
	if w.overSegments(size) && w.rewriteCredit > 0 && !w.rewriting && w.failed == nil && !w.segs[0].rewriteFailed {
		w.startRewrite()
	}
}

// liveBoundPercent and liveBoundMinSegments: cleanup also rewrites when the
// segments hold more than liveBoundPercent% of the live images' bytes, as
// long as more than liveBoundMinSegments segments are live (below that, a
// small WAL would churn its one full segment over and over for a few KB).
// That is when cleanup starts, not a bound on the segments: the rewrite
// credit paces the copying (and so bounds its work per byte appended
// whatever the factor), and with cold images filling many segments under
// a few hot ids the segments stay at 2–3× the live bytes while the cold
// images move forward (TestWALBytesWithColdDataFillingSegments). At 1 M
// regions (62 MB live, 32 MB segments) a factor of 2 left 2.5×
// (BENCHMARKS.md).
const (
	liveBoundPercent     = 150
	liveBoundMinSegments = 2
)

// overSegments reports whether the segments, of size bytes in all, call for
// straggler rewrites: more of them than MaxSegments, or more bytes than
// liveBoundPercent% of the live images. Without the second test a WAL
// whose oldest segments are pinned by a few rarely written ids (a region's
// key written once among hot keys rewritten all the time) kept
// MaxSegments×SegmentSize on disk whatever its live data: 207 MB for 18 MB
// at 100 k regions (BENCHMARKS.md). The credit still bounds the work.
func (w *WAL) overSegments(size int64) bool {
	n := len(w.segs)
	return n > w.cfg.MaxSegments || (n > liveBoundMinSegments && size*100 > liveBoundPercent*w.liveBytes)
}

// noteLiveOverLimit warns, once, when the live images alone exceed what
// MaxSegments segments hold: the WAL then keeps as many segments as they
// need (rewriting cannot bring the count down), which is worth knowing
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

func (w *WAL) startRewrite() {
	old := w.segs[0]
	want := w.holding.ids()
	w.rewriting = true
	w.log.Debug("rewriting stragglers", "file", old.name, "count", len(want), "segments", len(w.segs), "credit", w.rewriteCredit)
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		res := rewriteResult{segID: old.id}
		res.found, res.err = readImages(old.path, want)
		select {
		case w.rewriteCh <- res:
		case <-w.stopCh:
		}
	}()
}

// readImages returns the latest image in the segment file of each id of want
// (ascending), copied into one buffer of their size.
//
// The segment is mapped, not read onto the heap: a copy of it (32 MiB by
// default) lived through every rewrite, which at a large state runs every
// few seconds, and a collection that marked it set the heap's next goal
// (1+GOGC/100 times what it marked) that much higher: the peaks of a
// 300 k-region master's marked heap (161 MB against 85-100 MB between
// rewrites) and so its RSS (issue 33).
func readImages(path string, want []uint64) (map[uint64][]byte, error) {
	data, release, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	defer release()
	set := &idSet{}
	for _, id := range want {
		set.add(id)
	}
	found := make(map[uint64][]byte, len(want))
	put := func(id uint64, d []byte) {
		if set.has(id) {
			found[id] = d
		}
	}
	del := func(id uint64) { delete(found, id) }
	r, _ := scanSegment(data, func(_ int64, _ recType, _ uint64, p []byte) error {
		forEachOp(p, put, del)
		return nil
	})
	if r.hdrErr != nil {
		return nil, r.hdrErr
	}
	size := 0
	for _, d := range found {
		size += len(d)
	}
	buf := make([]byte, 0, size)
	for id, d := range found {
		start := len(buf)
		buf = append(buf, d...)
		found[id] = buf[start:len(buf):len(buf)]
	}
	return found, nil
}

const rewriteChunk = 1 << 20

func (w *WAL) applyRewrite(res rewriteResult) {
	w.rewriting = false
	if w.failed != nil {
		return
	}
	if len(w.segs) < 2 || w.segs[0].id != res.segID {
		w.cleanup()
		return
	}
	old := w.segs[0]
	if res.err != nil {
		w.log.Error("cannot read stragglers; segment kept", "file", old.name, "error", res.err)
		old.rewriteFailed = true
		return
	}
	procs := make([]Proc, 0, len(res.found))
	missing := 0
	w.holding.forEach(func(id uint64) {
		if d, ok := res.found[id]; ok {
			procs = append(procs, Proc{ID: id, Data: d})
		} else {
			missing++
		}
	})
	if missing > 0 {
		w.log.Error("stragglers missing from their segment; segment kept", "file", old.name, "missing", missing)
		old.rewriteFailed = true
	}
	var chunks [][]Proc
	need := 0
	for start := 0; start < len(procs); {
		end, size := start, 0
		for end < len(procs) && (end == start || size+len(procs[end].Data) <= rewriteChunk) {
			size += len(procs[end].Data) + 20
			end++
		}
		chunks = append(chunks, procs[start:end])
		need += frameHeaderSize + recordSize(0, [2][]Proc{procs[start:end]}, nil)
		start = end
	}
	// Sized once: grown by appends, the copies of a rewrite of tens of MB
	// were a tenth of a 1 M-region leader's CPU during a crash recovery.
	buf := w.buf[:0]
	if cap(buf) < need {
		buf = make([]byte, 0, need)
	}
	for _, ch := range chunks {
		buf = appendRecord(buf, recRewrite, 0, [2][]Proc{ch}, nil)
	}
	if len(chunks) > 0 {
		if err := w.write(buf, 0); err != nil {
			return
		}
		if w.cfg.Sync != SyncOnRoll {
			if err := w.syncCur(); err != nil {
				return
			}
		} // else cleanup syncs before the old segment goes
		c := w.cur()
		for _, ch := range chunks {
			w.apply(c, &Batch{Updates: ch})
		}
		w.rewriteCredit -= int64(len(buf))
		w.nRewriteB.Add(uint64(len(buf)))
		w.nStragglers.Add(uint64(len(procs)))
		w.log.Debug("rewrote stragglers", "from", old.name, "count", len(procs), "records", len(chunks))
	}
	w.keepBuf(buf)
	w.cleanup()
	if w.cur().size >= w.cfg.SegmentSize {
		if err := w.roll(); err != nil {
			w.fail(err)
		}
	}
}
