package store

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// loadEntry is the state of one id during Load: settled by segment seg
// (segments are read newest first, so the first segment to mention an id
// settles it, and later records of that same segment override earlier ones).
type loadEntry struct {
	id    uint64
	data  []byte
	seg   int32
	alive bool
}

type loader struct {
	idx     map[uint64]int32
	entries []loadEntry
	cur     int32
	won     []int32 // entries settled by the current segment
	tr      *tracker
	maxID   uint64
	index   uint64
}

func (l *loader) put(id uint64, data []byte) {
	if l.tr != nil {
		l.tr.put(id)
	}
	l.settle(id, data, true)
}

func (l *loader) del(id uint64) {
	if l.tr != nil {
		l.tr.delete(id)
	}
	l.settle(id, nil, false)
}

// settle records the current segment's word on id unless a newer segment
// already settled it.
func (l *loader) settle(id uint64, data []byte, alive bool) {
	if id > l.maxID {
		l.maxID = id
	}
	i, ok := l.idx[id]
	if !ok {
		i = int32(len(l.entries))
		l.idx[id] = i
		l.entries = append(l.entries, loadEntry{id: id, data: data, seg: l.cur, alive: alive})
		l.won = append(l.won, i)
		return
	}
	if e := &l.entries[i]; e.seg == l.cur {
		e.data, e.alive = data, alive
	}
}

// Load implements Store. It must be called once, before any write; it
// reports damage in LoadInfo.Corruptions rather than failing, and fails only
// on I/O errors or an error from fn.
func (w *WAL) Load(fn func(Proc) error) (LoadInfo, error) {
	w.loadMu.Lock()
	defer w.loadMu.Unlock()
	w.mu.RLock()
	closed, loaded := w.closed, w.loaded
	w.mu.RUnlock()
	if closed {
		return LoadInfo{}, ErrClosed
	}
	if loaded {
		return LoadInfo{}, errors.New("store: WAL already loaded")
	}

	var info LoadInfo
	l := &loader{idx: make(map[uint64]int32)}
	segs := make([]*segment, len(w.files))
	newest := true // the newest readable segment may have a torn tail
	var buf []byte
	for i := len(w.files) - 1; i >= 0; i-- {
		sf := w.files[i]
		s, c, nbuf, err := w.loadSegment(l, int32(i), sf, newest, buf)
		buf = nbuf
		if err != nil {
			return info, err
		}
		info.Corruptions = append(info.Corruptions, c...)
		if s == nil {
			continue
		}
		newest = false
		segs[i] = s
		info.Records += int(s.records)
	}
	slices.Reverse(info.Corruptions) // report in file order

	alive := l.entries[:0:0]
	for _, e := range l.entries {
		if e.alive {
			alive = append(alive, e)
		}
	}
	l.entries, l.idx = nil, nil
	slices.SortFunc(alive, func(a, b loadEntry) int { return cmp.Compare(a.id, b.id) })
	info.MaxID, info.Index, info.Live = l.maxID, l.index, len(alive)
	for _, c := range info.Corruptions {
		w.log.Warn("WAL damage", "file", c.File, "offset", c.Offset, "reason", c.Reason)
	}
	for _, e := range alive {
		if err := fn(Proc{ID: e.id, Data: e.data}); err != nil {
			return info, err
		}
	}

	liveSizes := newSizeMap()
	var liveBytes int64
	for _, e := range alive {
		size := imageSize(Proc{ID: e.id, Data: e.data})
		liveSizes.set(e.id, size)
		liveBytes += int64(size)
	}
	w.segs = w.segs[:0]
	for _, s := range segs {
		if s != nil {
			w.segs = append(w.segs, s)
		}
	}
	w.liveSizes, w.liveBytes = liveSizes, liveBytes
	w.nLive.Store(int64(liveSizes.len()))
	w.nLiveBytes.Store(liveBytes)
	w.maxID = l.maxID
	w.index.Store(l.index)
	// The newest segment may hold records a previous process wrote but did
	// not sync (SyncOnRoll, then a crash): sync it before it becomes an
	// older segment, which must be whole on disk, and before the new
	// segment's header claims its index.
	if n := len(w.segs); n > 0 && !w.cfg.NoSync {
		if err := syncFile(w.segs[n-1].path); err != nil {
			return info, err
		}
		w.event("sync", w.segs[n-1].name)
	}
	w.written = l.index
	w.durable.Store(l.index)
	s, err := w.createSegment()
	if err != nil {
		return info, fmt.Errorf("store: %w", err)
	}
	w.segs = append(w.segs, s)
	w.segsGen++
	w.recomputeHolding()
	w.cleanup()
	w.log.Info("WAL loaded", "segments", len(w.segs), "live", info.Live, "records", info.Records,
		"max_id", info.MaxID, "index", info.Index, "corruptions", len(info.Corruptions))

	w.mu.Lock()
	w.loaded = true
	w.mu.Unlock()
	go w.run()
	return info, nil
}

// loadSegment replays one segment into l. It returns nil for a segment whose
// header is unreadable. buf is a reusable read buffer; the one to use next is
// returned.
func (w *WAL) loadSegment(l *loader, i int32, sf segFile, newest bool, buf []byte) (*segment, []Corruption, []byte, error) {
	path := filepath.Join(w.cfg.Dir, sf.name)
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, buf, fmt.Errorf("store: open %s: %w", sf.name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, buf, fmt.Errorf("store: stat %s: %w", sf.name, err)
	}
	size := st.Size()
	s := &segment{id: sf.id, name: sf.name, path: path, size: size}
	bad := func(off int64, reason string) []Corruption {
		return []Corruption{{File: sf.name, Offset: off, Reason: reason}}
	}
	l.cur = i
	l.won = l.won[:0]

	// A segment with a trailer need not be read if newer segments settled
	// every id it holds an image of.
	readAt := func(p []byte, off int64) error {
		_, err := f.ReadAt(p, off)
		return err
	}
	// Not for the newest segment if its records were not synced one by one:
	// a power loss may have left its trailer intact but a hole before it.
	if t, _, err := readTrailerAt(size, readAt); err == nil {
		var hb [headerSize]byte
		if err := readAt(hb[:], 0); err == nil {
			if hdr, err := parseHeader(hb[:]); err == nil && hdr.id == sf.id &&
				!(newest && hdr.flags&flagUnsyncedAppends != 0) {
				needed := false
				t.tr.forEach(func(id uint64, held bool) {
					if held && !needed {
						_, settled := l.idx[id]
						needed = !settled
					}
				})
				if !needed {
					l.tr = nil
					t.tr.forEach(func(id uint64, held bool) {
						if !held {
							l.del(id)
						}
					})
					l.maxID = max(l.maxID, t.maxID, hdr.maxID)
					l.index = max(l.index, t.index, hdr.index)
					s.hdr, s.tr = hdr, t.tr
					return s, nil, buf, nil
				}
			}
		}
	}

	if int64(cap(buf)) < size {
		buf = make([]byte, size)
	}
	data := buf[:size]
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, nil, buf, fmt.Errorf("store: read %s: %w", sf.name, err)
	}
	l.tr = newTracker()
	r, _ := scanSegment(data, func(_ int64, _ recType, index uint64, p []byte) error {
		if index > l.index {
			l.index = index
		}
		forEachOp(p, l.put, l.del)
		return nil
	})
	if r.hdrErr != nil {
		return nil, bad(0, "bad header: "+r.hdrErr.Error()), buf, nil
	}
	if r.hdr.id != sf.id {
		return nil, bad(0, fmt.Sprintf("bad header: segment id %d does not match the file name", r.hdr.id)), buf, nil
	}
	s.hdr, s.tr, s.records = r.hdr, l.tr, uint64(r.records)
	l.tr = nil
	l.maxID = max(l.maxID, r.hdr.maxID)
	l.index = max(l.index, r.hdr.index)
	if r.trailer != nil {
		l.maxID = max(l.maxID, r.trailer.maxID)
		l.index = max(l.index, r.trailer.index)
	}
	var corr []Corruption
	if r.bad != nil {
		// A segment written without a sync per record (SyncOnRoll) can hold
		// anything past its last synced byte after a power loss: in the
		// newest segment every bad record is a torn tail.
		if newest && (r.bad.torn || r.hdr.flags&flagUnsyncedAppends != 0) {
			w.log.Warn("truncating torn tail", "file", sf.name, "offset", r.bad.off, "detail", r.bad.reason, "to", r.goodEnd)
			if err := w.truncate(path, r.goodEnd); err != nil {
				return nil, nil, buf, err
			}
			s.size = r.goodEnd
			corr = bad(r.bad.off, "torn tail truncated")
		} else {
			s.damaged = true
			corr = bad(r.bad.off, r.bad.reason)
		}
	}

	// Keep the images this segment settled: alias the buffer if they are
	// most of it, else copy them out so the buffer can be reused.
	total := 0
	for _, k := range l.won {
		if e := &l.entries[k]; e.alive {
			total += len(e.data)
		}
	}
	if total > len(data)/2 {
		buf = nil
	} else if total > 0 {
		arena := make([]byte, 0, total)
		for _, k := range l.won {
			if e := &l.entries[k]; e.alive {
				n := len(arena)
				arena = append(arena, e.data...)
				e.data = arena[n:len(arena):len(arena)]
			}
		}
	}
	return s, corr, buf, nil
}

// syncFile fdatasyncs the file at path.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("store: sync %s: %w", filepath.Base(path), err)
	}
	err = fdatasync(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("store: sync %s: %w", filepath.Base(path), err)
	}
	return nil
}

func (w *WAL) truncate(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("store: truncate torn tail: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("store: truncate torn tail: %w", err)
	}
	if !w.cfg.NoSync {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("store: truncate torn tail: %w", err)
		}
	}
	return nil
}
