package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/baton-dev/baton/internal/fsutil"
)

// The writer goroutine: the only one that touches segment files once the WAL
// is open. Group commit, rolls and syncs happen here; see wal.go.

func (w *WAL) cur() *segment { return w.segs[len(w.segs)-1] }

func (w *WAL) run() {
	defer close(w.doneCh)
	// The tickers are wall-clock by nature: the maintenance tick only sets
	// how often the writer looks (the age it judges comes from cfg.Now,
	// which tests inject), and SyncInterval bounds what a power loss takes,
	// which happens in real time.
	tick := w.cfg.RollInterval / 4
	tick = max(10*time.Millisecond, min(tick, time.Second))
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	var syncC <-chan time.Time // SyncOnRoll: bounded staleness
	if w.cfg.Sync == SyncOnRoll {
		t := time.NewTicker(w.cfg.SyncInterval)
		defer t.Stop()
		syncC = t.C
	}
	batch := make([]*request, 0, 256)
	for {
		select {
		case r, ok := <-w.reqCh:
			if !ok {
				w.shutdown()
				return
			}
			var closing bool
			batch, closing = w.collect(append(batch[:0], r))
			w.commit(batch)
			clear(batch)
			if closing {
				w.shutdown()
				return
			}
		case res := <-w.rewriteCh:
			w.applyCompaction(res)
		case fn := <-w.writerCh:
			fn()
		case <-ticker.C:
			w.maintain()
		case <-syncC:
			if w.failed == nil {
				_ = w.syncCur() // a failure is sticky (fail) and refuses later writes
			}
		}
	}
}

// collect adds every queued request to batch, up to MaxBatchBytes, lingering
// up to MaxBatchWait for writers that are still encoding. It reports whether
// the request channel was closed.
func (w *WAL) collect(batch []*request) ([]*request, bool) {
	bytes := len(batch[0].frame)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for bytes < w.cfg.MaxBatchBytes {
		var r *request
		var ok bool
		select {
		case r, ok = <-w.reqCh:
		default:
			if w.cfg.MaxBatchWait <= 0 || w.pending.Load() <= int64(len(batch)) {
				return batch, false
			}
			if timer == nil {
				// Wall clock: a linger sized to the device's sync latency.
				timer = time.NewTimer(w.cfg.MaxBatchWait)
			}
			select {
			case r, ok = <-w.reqCh:
			case <-timer.C:
				return batch, false
			}
		}
		if !ok {
			return batch, true
		}
		batch = append(batch, r)
		bytes += len(r.frame)
	}
	return batch, false
}

func (w *WAL) fail(err error) error {
	if w.failed == nil {
		w.failed = fmt.Errorf("store: WAL failed: %w", err)
		w.failedPub.Store(&w.failed)
		w.log.Error("WAL failed; further writes are refused", "dir", w.cfg.Dir, "error", err)
	}
	return w.failed
}

// Err returns the WAL's sticky failure (a write, fdatasync, roll or
// cleanup that failed; every later write is refused), or nil. It may be
// called at any time, also when no write is in flight: a failed background
// sync (SyncOnRoll) shows here before the next Append reports it.
func (w *WAL) Err() error {
	if p := w.failedPub.Load(); p != nil {
		return *p
	}
	return nil
}

func (w *WAL) syncData(f *os.File) error {
	if w.cfg.SyncData != nil {
		return w.cfg.SyncData(f)
	}
	return fdatasync(f)
}

func (w *WAL) commit(batch []*request) {
	err := w.failed
	if err == nil {
		err = w.writeBatch(batch)
	}
	w.pending.Add(-int64(len(batch)))
	for _, r := range batch {
		r.done <- err
	}
	if err == nil && w.cur().size >= w.cfg.SegmentSize {
		if rerr := w.roll(); rerr != nil {
			w.fail(rerr)
		}
	}
}

func (w *WAL) writeBatch(batch []*request) error {
	if c := w.cur(); c.records > 0 && w.cfg.Now().Sub(time.Unix(0, c.hdr.created)) >= w.cfg.RollInterval {
		if err := w.roll(); err != nil {
			return w.fail(err)
		}
	}
	buf := w.buf[:0]
	var index uint64
	sync := w.cfg.Sync != SyncOnRoll
	for _, r := range batch {
		buf = append(buf, r.frame...)
		index = max(index, r.b.Index)
		sync = sync || r.syncOnly
	}
	if len(buf) > 0 {
		if err := w.write(buf, index); err != nil {
			return err
		}
		w.earnRewriteCredit(len(buf))
	}
	if sync {
		if err := w.syncCur(); err != nil {
			return err
		}
	}
	c := w.cur()
	for _, r := range batch {
		if !r.syncOnly {
			w.apply(c, &r.b)
		}
	}
	w.keepBuf(buf)
	return nil
}

// write appends buf, which holds records up to external index index (0:
// none), to the current segment without syncing it.
func (w *WAL) write(buf []byte, index uint64) error {
	c := w.cur()
	if c.f == nil {
		return w.fail(errors.New("no current segment"))
	}
	n, err := c.f.Write(buf)
	c.size += int64(n)
	w.nSegBytes.Add(int64(n))
	c.dirty = c.dirty || n > 0
	w.nBytes.Add(uint64(n))
	if err != nil {
		return w.fail(fmt.Errorf("write %s: %w", c.name, err))
	}
	w.written = max(w.written, index)
	w.nSyncs.Add(1)
	return nil
}

// syncCur syncs the current segment if it holds unsynced data, and
// advances DurableIndex to everything written. Every older segment was
// synced when it was rolled.
func (w *WAL) syncCur() error {
	if w.failed != nil {
		return w.failed // never retry a failed fdatasync: it may falsely succeed
	}
	c := w.cur()
	if c.f == nil {
		return w.fail(errors.New("no current segment"))
	}
	if c.dirty {
		if !w.cfg.NoSync {
			if err := w.syncData(c.f); err != nil {
				return w.fail(fmt.Errorf("fdatasync %s: %w", c.path, err))
			}
		}
		c.dirty = false
		w.nDataSyncs.Add(1)
		w.event("sync", c.name)
	}
	if w.written > w.durable.Load() {
		w.durable.Store(w.written)
	}
	return nil
}

// inWriter runs fn in the writer goroutine, where it may read and drive the
// writer's state (tests: run maintenance deterministically, observe whether
// a merge is in flight). It reports false if the WAL is not running.
func (w *WAL) inWriter(fn func()) bool {
	w.mu.RLock()
	err := w.stateErr()
	w.mu.RUnlock()
	if err != nil {
		return false
	}
	done := make(chan struct{})
	select {
	case w.writerCh <- func() { fn(); close(done) }:
		<-done
		return true
	case <-w.doneCh:
		return false
	}
}

func (w *WAL) event(op, file string) {
	if w.testHook != nil {
		w.testHook(op, file)
	}
}

func (w *WAL) keepBuf(buf []byte) {
	if cap(buf) <= 2*w.cfg.MaxBatchBytes {
		w.buf = buf[:0]
	} else {
		w.buf = nil
	}
}

// apply records a written batch in the trackers.
func (w *WAL) apply(c *segment, b *Batch) {
	for _, ps := range [2][]Proc{b.Inserts, b.Updates} {
		for _, p := range ps {
			w.notePut(c, p)
		}
	}
	for _, id := range b.Deletes {
		c.tr.delete(id)
		if len(w.segs) > 1 {
			w.holding.remove(id)
		}
		if size, ok := w.liveSizes.remove(id); ok {
			w.liveBytes -= int64(size)
		}
		w.maxID = max(w.maxID, id)
	}
	if b.Index > w.index.Load() {
		w.index.Store(b.Index)
	}
	c.records++
	w.nRecords.Add(1)
	w.nLive.Store(int64(w.liveSizes.len()))
	w.nLiveBytes.Store(w.liveBytes)
}

func (w *WAL) notePut(c *segment, p Proc) {
	c.tr.put(p.ID)
	if len(w.segs) > 1 {
		w.holding.remove(p.ID)
	}
	size := imageSize(p)
	w.liveBytes += int64(size) - int64(w.liveSizes.set(p.ID, size))
	w.maxID = max(w.maxID, p.ID)
}

// imageSize is the encoded size of p's image in a record: what merging it
// writes.
func imageSize(p Proc) uint32 {
	return uint32(uvarintLen(p.ID) + uvarintLen(uint64(len(p.Data))) + len(p.Data))
}

// finishSegment writes s's trailer and footer, syncs and closes it.
func (w *WAL) finishSegment(s *segment) error {
	if s.f == nil {
		return nil
	}
	buf := appendTrailer(w.buf[:0], s.size, trailerInfo{maxID: w.maxID, index: w.index.Load(), records: s.records, tr: s.tr})
	err := w.write(buf, 0)
	w.keepBuf(buf)
	if err == nil {
		err = w.syncCur() // in every mode: only the newest segment may lose a suffix
	}
	if err != nil {
		return err
	}
	f := s.f
	s.f = nil
	if err := f.Close(); err != nil {
		return w.fail(fmt.Errorf("close %s: %w", s.name, err))
	}
	return nil
}

func (w *WAL) syncDir() error {
	if w.cfg.NoSync {
		return nil
	}
	return fsutil.SyncDir(w.cfg.Dir)
}

// createSegment creates the next segment: header to a .tmp file, sync,
// rename, directory sync. The file stays open for appending.
func (w *WAL) createSegment() (*segment, error) {
	id := w.nextID
	w.nextID++
	hdr := segHeader{id: id, maxID: w.maxID, index: w.index.Load(), created: w.cfg.Now().UnixNano()}
	if w.cfg.Sync == SyncOnRoll {
		hdr.flags |= flagUnsyncedAppends
	}
	s := &segment{id: id, name: segName(id), hdr: hdr, tr: newTracker(), size: headerSize}
	s.path = filepath.Join(w.cfg.Dir, s.name)
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, fsutil.PrivateFileMode)
	if err != nil {
		return nil, fmt.Errorf("create segment: %w", err)
	}
	err = func() error {
		// The mode whatever the umask.
		if err := f.Chmod(fsutil.PrivateFileMode); err != nil {
			return err
		}
		if _, err := f.Write(appendHeader(nil, hdr)); err != nil {
			return err
		}
		if !w.cfg.NoSync {
			if err := w.syncData(f); err != nil {
				return err
			}
		}
		if err := os.Rename(tmp, s.path); err != nil {
			return err
		}
		return w.syncDir()
	}()
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("create segment %s: %w", s.name, err)
	}
	s.f = f
	w.nBytes.Add(headerSize)
	return s, nil
}

// roll finishes the current segment and starts a new one, then cleans up.
func (w *WAL) roll() error {
	old := w.cur()
	if err := w.finishSegment(old); err != nil {
		return err
	}
	s, err := w.createSegment()
	if err != nil {
		return w.fail(err)
	}
	w.segs = append(w.segs, s)
	w.segsGen++
	w.nRolls.Add(1)
	w.log.Debug("rolled segment", "old", old.name, "size", old.size, "records", old.records, "new", s.name)
	if len(w.segs) == 2 {
		w.recomputeHolding()
	}
	w.cleanup()
	return nil
}

// maintain runs on a timer: age-based roll and cleanup. A segment that
// holds no appends is not rolled by age: rolling it would free nothing,
// and an idle WAL must not write.
func (w *WAL) maintain() {
	if w.failed != nil {
		return
	}
	if c := w.cur(); c.records > 0 && w.cfg.Now().Sub(time.Unix(0, c.hdr.created)) >= w.cfg.RollInterval {
		if err := w.roll(); err != nil {
			w.fail(err)
			return
		}
	}
	w.cleanup()
}

func (w *WAL) shutdown() {
	close(w.stopCh)
	if c := w.cur(); c.f != nil {
		if w.failed == nil {
			w.closeErr = w.finishSegment(c)
		}
		if c.f != nil {
			c.f.Close()
			c.f = nil
		}
	}
	w.bg.Wait()
	if w.closeErr == nil && w.failed != nil {
		w.closeErr = w.failed
	}
}
