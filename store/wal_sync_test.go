package store

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
)

func syncOnRollConfig(dir string) WALConfig {
	c := testConfig(dir)
	c.Sync = SyncOnRoll
	c.SyncInterval = time.Hour // only explicit syncs, unless a test says otherwise
	return c
}

// appendHistory appends n records with indexes 1..n mixing inserts, updates
// and deletes, and returns the state after each prefix: states[k] is the
// state after the first k records.
func appendHistory(t *testing.T, w *WAL, n int) []map[uint64]string {
	t.Helper()
	want := map[uint64]string{}
	states := []map[uint64]string{{}}
	for i := 1; i <= n; i++ {
		id := uint64(i)
		b := Batch{Index: id, Inserts: []Proc{p(id, fmt.Sprintf("v%d-%s", i, strings.Repeat("x", i*7)))}}
		want[id] = string(b.Inserts[0].Data)
		if i > 2 {
			u := fmt.Sprintf("u%d", i)
			b.Updates = []Proc{p(id-2, u)}
			want[id-2] = u
		}
		if i > 5 && i%2 == 0 {
			b.Deletes = []uint64{id - 5}
			delete(want, id-5)
		}
		mustAppend(t, w, b)
		states = append(states, maps.Clone(want))
	}
	return states
}

// loadImage writes data as the only segment file name of a new directory and
// loads it with the default configuration (the header flag, not the
// loader's mode, decides how a bad record is treated).
func loadImage(t *testing.T, name string, data []byte) (string, *WAL, map[uint64]string, LoadInfo) {
	t.Helper()
	d := t.TempDir()
	path := filepath.Join(d, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	w, got, info := openLoaded(t, testConfig(d))
	return path, w, got, info
}

// Power loss under SyncOnRoll: the newest segment may end anywhere, or be
// followed by zeros or garbage, or miss a page in the middle while later
// pages made it. Every such image loads as the consistent prefix of the
// records before the first damaged byte, with Index that of its last
// record, as a torn tail (not damage), and writing continues cleanly.
func TestWALSyncOnRollTornNewestSegment(t *testing.T) {
	dir := t.TempDir()
	w, _, _ := openLoaded(t, syncOnRollConfig(dir))
	const n = 12
	states := appendHistory(t, w, n)
	if w.Index() != n || w.DurableIndex() != 0 {
		t.Fatalf("Index %d DurableIndex %d, want %d and 0 (nothing synced yet)", w.Index(), w.DurableIndex(), n)
	}
	crashed := snapshot(t, dir) // a process crash: the page cache has everything
	w.Close()
	files := segFiles(t, crashed)
	if len(files) != 1 {
		t.Fatalf("%d segments", len(files))
	}
	name := filepath.Base(files[0])
	full, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if h, err := parseHeader(full); err != nil || h.flags&flagUnsyncedAppends == 0 {
		t.Fatalf("header %+v, %v: want flagUnsyncedAppends", h, err)
	}
	offs := recordOffsets(t, files[0])
	if len(offs) != n {
		t.Fatalf("%d records", len(offs))
	}
	ends := append(slices.Clone(offs[1:]), int64(len(full)))
	// intact returns how many records lie wholly before off.
	intact := func(off int64) int {
		k := 0
		for k < n && ends[k] <= off {
			k++
		}
		return k
	}
	// check loads img; the records wholly before its first byte that differs
	// from full must load, and nothing else.
	check := func(what string, img []byte) {
		t.Helper()
		diff := int64(min(len(img), len(full)))
		for i := range diff {
			if img[i] != full[i] {
				diff = i
				break
			}
		}
		k := intact(diff)
		path, w, got, info := loadImage(t, name, img)
		equalMaps(t, got, states[k])
		if info.Index != uint64(k) {
			t.Fatalf("%s: Index %d, want %d", what, info.Index, k)
		}
		if w.DurableIndex() != uint64(k) {
			t.Fatalf("%s: DurableIndex after load %d, want %d", what, w.DurableIndex(), k)
		}
		end := int64(headerSize)
		if k > 0 {
			end = ends[k-1]
		}
		clean := int64(len(img)) == end
		if clean && len(info.Corruptions) != 0 || !clean && (len(info.Corruptions) != 1 ||
			info.Corruptions[0].Reason != "torn tail truncated" || info.Corruptions[0].Offset != end) {
			t.Fatalf("%s: corruptions %v (good end %d)", what, info.Corruptions, end)
		}
		if _, err := os.Stat(path); k == 0 && errors.Is(err, os.ErrNotExist) {
			// Nothing left in it: cleanup removed it.
		} else if sz := fileSize(t, path); sz != end {
			t.Fatalf("%s: file is %d bytes, want truncated to %d", what, sz, end)
		}
		mustAppend(t, w, Batch{Inserts: []Proc{p(1000, "after")}, Index: 500})
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		got, info = loadDir(t, testConfig(filepath.Dir(path)))
		if got[1000] != "after" || len(info.Corruptions) != 0 || info.Index != 500 {
			t.Fatalf("%s: reload %v %v index %d", what, got, info.Corruptions, info.Index)
		}
	}

	check("process crash", full)
	rng := rand.New(rand.NewPCG(1, 2))
	for off := int64(headerSize); off < int64(len(full)); off++ {
		check(fmt.Sprint("cut at ", off), full[:off])
		// Size updated, data pages not written: zeros to the end.
		img := slices.Clone(full)
		clear(img[off:])
		check(fmt.Sprint("zeros from ", off), img)
		// Stale blocks: garbage to the end, and past the old end.
		img = slices.Clone(full)
		for i := off; i < int64(len(img)); i++ {
			img[i] = byte(rng.Uint32())
		}
		img = append(img, 0xde, 0xad, 0xbe, 0xef)
		check(fmt.Sprint("garbage from ", off), img)
	}
	// A lost page in the middle: one record's bytes are zeros or garbage,
	// the later records made it to disk.
	for r := range n {
		img := slices.Clone(full)
		clear(img[offs[r]:ends[r]])
		check(fmt.Sprintf("hole at record %d", r+1), img)
		img = slices.Clone(full)
		for i := offs[r] + 3; i < ends[r]; i++ {
			img[i] ^= 0x5a
		}
		check(fmt.Sprintf("garbled record %d", r+1), img)
	}
}

// A SyncOnRoll segment that was rolled (it has a trailer) but lost a page
// before its trailer reached the disk loads as a prefix too when it is the
// newest: the trailer is not trusted to skip reading it. The same hole in
// an older segment, synced whole at roll, is damage; and in a segment written
// under SyncEveryBatch it stays damage as before.
func TestWALSyncOnRollTrailerAndOlderSegments(t *testing.T) {
	dir := t.TempDir()
	w, _, _ := openLoaded(t, syncOnRollConfig(dir))
	states := appendHistory(t, w, 8)
	w.Close() // trailer written and synced
	seg := segFiles(t, dir)[0]
	name := filepath.Base(seg)
	full, _ := os.ReadFile(seg)
	offs := recordOffsets(t, seg)
	img := slices.Clone(full)
	clear(img[offs[5]:offs[6]])
	_, w2, got, info := loadImage(t, name, img)
	w2.Close()
	equalMaps(t, got, states[5])
	if info.Index != 5 || len(info.Corruptions) != 1 || info.Corruptions[0].Reason != "torn tail truncated" {
		t.Fatalf("index %d, corruptions %v", info.Index, info.Corruptions)
	}

	// The same segment followed by a newer one: the hole is damage.
	d := t.TempDir()
	os.WriteFile(filepath.Join(d, name), img, 0o644)
	w3, _, _ := openLoaded(t, syncOnRollConfig(d))
	mustAppend(t, w3, Batch{Inserts: []Proc{p(100, "new")}, Index: 100})
	w3.Close()
	// openLoaded above truncated the torn tail; put the hole back.
	os.WriteFile(filepath.Join(d, name), img, 0o644)
	_, info = loadDir(t, testConfig(d))
	if len(info.Corruptions) != 1 || strings.Contains(info.Corruptions[0].Reason, "torn") {
		t.Fatalf("hole in an older segment: corruptions %v, want damage", info.Corruptions)
	}

	// SyncEveryBatch (the default): a hole in the newest segment is damage.
	d = t.TempDir()
	w4, _, _ := openLoaded(t, testConfig(d))
	appendHistory(t, w4, 8)
	crashed := snapshot(t, d)
	w4.Close()
	seg = segFiles(t, crashed)[0]
	data, _ := os.ReadFile(seg)
	if h, _ := parseHeader(data); h.flags != 0 {
		t.Fatalf("default mode header flags %#x, want 0", h.flags)
	}
	offs = recordOffsets(t, seg)
	clear(data[offs[5]:offs[6]])
	_, w5, _, info := loadImage(t, filepath.Base(seg), data)
	w5.Close()
	if len(info.Corruptions) != 1 || strings.Contains(info.Corruptions[0].Reason, "torn") {
		t.Fatalf("SyncEveryBatch hole: corruptions %v, want damage", info.Corruptions)
	}
}

func TestWALDurableIndex(t *testing.T) {
	t.Run("SyncOnRoll", func(t *testing.T) {
		dir := t.TempDir()
		cfg := syncOnRollConfig(dir)
		cfg.NoSync = false
		cfg.SegmentSize = MinSegmentSize
		w, _, _ := openLoaded(t, cfg)
		defer w.Close()
		for i := uint64(1); i <= 3; i++ {
			mustAppend(t, w, Batch{Updates: []Proc{p(i, "x")}, Index: i})
		}
		if w.Index() != 3 || w.DurableIndex() != 0 {
			t.Fatalf("after appends: Index %d DurableIndex %d", w.Index(), w.DurableIndex())
		}
		syncs := w.Stats().DataSyncs
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
		if w.DurableIndex() != 3 || w.Stats().DataSyncs != syncs+1 {
			t.Fatalf("after Sync: DurableIndex %d, DataSyncs %d (was %d)", w.DurableIndex(), w.Stats().DataSyncs, syncs)
		}
		if err := w.Sync(); err != nil || w.Stats().DataSyncs != syncs+1 {
			t.Fatalf("Sync of a clean segment: %v, DataSyncs %d", err, w.Stats().DataSyncs)
		}
		mustAppend(t, w, Batch{Updates: []Proc{p(4, "x")}, Index: 4})
		if w.DurableIndex() != 3 {
			t.Fatalf("DurableIndex %d after an unsynced append", w.DurableIndex())
		}
		// A record past SegmentSize rolls the segment, which syncs it.
		mustAppend(t, w, Batch{Updates: []Proc{p(5, strings.Repeat("r", MinSegmentSize))}, Index: 5})
		testwait.For(t, 5*time.Second, "the roll", func() bool { return w.Stats().Rolls == 1 })
		if w.DurableIndex() != 5 {
			t.Fatalf("after roll: DurableIndex %d", w.DurableIndex())
		}
	})
	t.Run("SyncInterval", func(t *testing.T) {
		cfg := syncOnRollConfig(t.TempDir())
		cfg.SyncInterval = 10 * time.Millisecond
		w, _, _ := openLoaded(t, cfg)
		mustAppend(t, w, Batch{Updates: []Proc{p(1, "x")}, Index: 7})
		testwait.For(t, 5*time.Second, "DurableIndex 7", func() bool { return w.DurableIndex() == 7 })
		mustAppend(t, w, Batch{Updates: []Proc{p(1, "y")}, Index: 8})
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if w.DurableIndex() != 8 {
			t.Fatalf("DurableIndex %d after Close, want 8", w.DurableIndex())
		}
		if err := w.Sync(); !errors.Is(err, ErrClosed) {
			t.Fatalf("Sync after Close: %v", err)
		}
		w2, _, info := openLoaded(t, cfg)
		defer w2.Close()
		if info.Index != 8 || w2.DurableIndex() != 8 {
			t.Fatalf("reloaded Index %d DurableIndex %d", info.Index, w2.DurableIndex())
		}
	})
	t.Run("SyncEveryBatch", func(t *testing.T) {
		cfg := DefaultWALConfig(t.TempDir())
		w, err := OpenWAL(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Sync(); !errors.Is(err, ErrNotLoaded) {
			t.Fatalf("Sync before Load: %v", err)
		}
		if _, err := w.Load(func(Proc) error { return nil }); err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		for i := uint64(1); i <= 3; i++ {
			mustAppend(t, w, Batch{Updates: []Proc{p(i, "x")}, Index: i})
			if w.DurableIndex() != i || w.Stats().DataSyncs != i {
				t.Fatalf("append %d: DurableIndex %d DataSyncs %d", i, w.DurableIndex(), w.Stats().DataSyncs)
			}
		}
		if err := w.Sync(); err != nil || w.Stats().DataSyncs != 3 {
			t.Fatalf("Sync: %v, DataSyncs %d (nothing left to sync)", err, w.Stats().DataSyncs)
		}
	})
}

// Under SyncOnRoll, whenever a superseded segment is removed, everything
// that superseded it must already be durable. At every removal (the writer
// is paused in the hook) the test builds the image a power loss would leave
// — older segments as they are, the current one cut at its last sync — and
// loads it: it must hold exactly the state as of DurableIndex. Older
// segments must be synced whole.
func TestWALSyncOnRollSyncsBeforeRemoval(t *testing.T) {
	dir := t.TempDir()
	cfg := syncOnRollConfig(dir)
	cfg.SegmentSize = 4 << 10
	cfg.MaxSegments = 4
	w, err := OpenWAL(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		acked    = newAckedStates(t, w)
		synced   = map[string]int64{} // segment → size at its last sync
		events   []string
		removals int
	)
	w.testHook = func(op, file string) {
		// Runs in the writer goroutine: writer state may be read here.
		mu.Lock()
		defer mu.Unlock()
		events = append(events, op+" "+file)
		switch op {
		case "sync":
			if c := w.cur(); c.name == file {
				synced[file] = c.size
			}
		case "merge":
			// A merge's output was synced whole before it took its name.
			synced[file] = fileSize(t, filepath.Join(dir, file))
		case "remove":
			removals++
			c := w.cur()
			if c.dirty {
				t.Errorf("removed %s while the current segment %s holds unsynced records", file, c.name)
			}
			img := t.TempDir()
			for _, s := range w.segs {
				if s.name == file {
					continue
				}
				data, err := os.ReadFile(s.path)
				if errors.Is(err, os.ErrNotExist) {
					continue // merged away: removed before this file
				}
				if err != nil {
					t.Errorf("read %s: %v", s.name, err)
					return
				}
				size, ok := synced[s.name]
				if s != c && (!ok || size != int64(len(data))) {
					t.Errorf("older segment %s: %d bytes, synced %d (%v)", s.name, len(data), size, ok)
				}
				if !ok {
					size = headerSize // created synced
				}
				os.WriteFile(filepath.Join(img, s.name), data[:size], 0o644)
			}
			d := w.durable.Load()
			got, info := loadDir(t, testConfig(img))
			if info.Index != d {
				t.Errorf("power loss at removal of %s: loaded index %d, DurableIndex %d", file, info.Index, d)
			}
			if want, ok := acked.at(d); !ok || !maps.Equal(got, want) {
				t.Errorf("power loss at removal of %s: loaded state differs from the state at index %d", file, d)
			}
		}
	}
	if _, err := w.Load(func(Proc) error { return nil }); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]string{}
	app := func(b Batch) { acked.append(want, b) } // want already includes b
	for id := uint64(1); id <= 5; id++ {           // stragglers
		v := fmt.Sprintf("straggler-%d-%s", id, strings.Repeat("s", int(id)*10))
		want[id] = v
		app(Batch{Inserts: []Proc{p(id, v)}})
	}
	next := uint64(100)
	var active []uint64
	// At least 1,500 steps, and on until cleanup removed 10 files: merges
	// run in the background, so on a loaded machine they lag the appends.
	removed := func() int {
		mu.Lock()
		defer mu.Unlock()
		return removals
	}
	for step := 0; step < 1500 || (removed() < 10 && step < 30000); step++ {
		switch {
		case len(active) < 20:
			want[next] = fmt.Sprintf("new-%d", next)
			app(Batch{Inserts: []Proc{p(next, want[next])}})
			active = append(active, next)
			next++
		case step%4 == 0:
			id := active[0]
			active = active[1:]
			delete(want, id)
			app(Batch{Deletes: []uint64{id}})
		default:
			id := active[step%len(active)]
			want[id] = fmt.Sprintf("upd-%d-%d-%s", id, step, strings.Repeat("u", 100))
			app(Batch{Updates: []Proc{p(id, want[id])}})
		}
	}
	st := w.Stats()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	t.Logf("stats %+v, %d removals, %d events", st, removals, len(events))
	mu.Unlock()
	if removals < 10 || st.StragglersRewritten == 0 {
		t.Fatalf("%d removals, %d stragglers rewritten: the test did not exercise cleanup", removals, st.StragglersRewritten)
	}
	if st.DataSyncs > st.Rolls+uint64(removals)+2 {
		t.Errorf("%d data syncs for %d rolls and %d removals: appends are being synced", st.DataSyncs, st.Rolls, removals)
	}
	got, _ := loadDir(t, cfg)
	equalMaps(t, got, want)
}

// A superseded segment can also go between rolls (the timer's cleanup),
// when a record in the current segment supersedes its last image: the
// current segment is synced first.
func TestWALSyncOnRollSyncBeforeTimedCleanup(t *testing.T) {
	dir := t.TempDir()
	cfg := syncOnRollConfig(dir)
	cfg.NoSync = false
	cfg.SegmentSize = MinSegmentSize
	cfg.RollInterval = 40 * time.Millisecond // maintenance every 10 ms
	start := time.Now()
	cfg.Now = func() time.Time { return start } // no age-based rolls
	w, err := OpenWAL(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []string
	w.testHook = func(op, file string) {
		mu.Lock()
		events = append(events, op+" "+file)
		mu.Unlock()
	}
	if _, err := w.Load(func(Proc) error { return nil }); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first := filepath.Base(segFiles(t, dir)[0])
	mustAppend(t, w, Batch{Inserts: []Proc{p(1, strings.Repeat("a", MinSegmentSize))}, Index: 1}) // rolls
	testwait.For(t, 5*time.Second, "the roll", func() bool { return w.Stats().Rolls == 1 })
	second := filepath.Base(segFiles(t, dir)[1])
	mu.Lock()
	if !slices.Equal(events, []string{"sync " + first}) {
		t.Fatalf("events %v: want only the roll's sync of %s", events, first)
	}
	mu.Unlock()
	if w.DurableIndex() != 1 {
		t.Fatalf("DurableIndex %d after the roll, want 1", w.DurableIndex())
	}
	// Supersedes the only image first holds; the timer's cleanup removes it.
	mustAppend(t, w, Batch{Updates: []Proc{p(1, "b")}, Index: 2})
	testwait.For(t, 5*time.Second, "the removal", func() bool { return w.Stats().SegmentsDeleted == 1 })
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(events, []string{"sync " + first, "sync " + second, "remove " + first}) {
		t.Fatalf("events %v: want %s synced before %s is removed", events, second, first)
	}
	if w.DurableIndex() != 2 {
		t.Fatalf("DurableIndex %d after the cleanup's sync, want 2", w.DurableIndex())
	}
}

func TestWALSyncConfig(t *testing.T) {
	c := DefaultWALConfig("d")
	if c.Sync != SyncEveryBatch || c.SyncInterval != DefaultSyncInterval {
		t.Fatalf("defaults %v %v", c.Sync, c.SyncInterval)
	}
	if got := (WALConfig{Dir: "d"}).withDefaults(); got.Sync != SyncEveryBatch || got.SyncInterval != time.Second {
		t.Fatalf("zero config: %v %v", got.Sync, got.SyncInterval)
	}
	c.Sync, c.SyncInterval = SyncOnRoll+1, -time.Second
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "Sync") || !strings.Contains(err.Error(), "SyncInterval") {
		t.Fatalf("Validate: %v", err)
	}
}

// After a process crash under SyncOnRoll the newest segment may hold
// records that were written but never synced; Load syncs it before it
// becomes an older segment and reports everything it loaded as durable.
func TestWALSyncOnRollLoadSyncsNewestSegment(t *testing.T) {
	dir := t.TempDir()
	cfg := syncOnRollConfig(dir)
	cfg.NoSync = false
	w, _, _ := openLoaded(t, cfg)
	states := appendHistory(t, w, 5)
	crashed := snapshot(t, dir)
	w.Close()
	ccfg := cfg
	ccfg.Dir = crashed
	w, err := OpenWAL(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	w.testHook = func(op, file string) { events = append(events, op+" "+file) } // Load runs in this goroutine
	got := map[uint64]string{}
	info, err := w.Load(func(p Proc) error { got[p.ID] = string(p.Data); return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	equalMaps(t, got, states[5])
	want := []string{"sync " + filepath.Base(segFiles(t, dir)[0])}
	if info.Index != 5 || w.DurableIndex() != 5 || !slices.Equal(events, want) {
		t.Fatalf("Index %d, DurableIndex %d, events %v: want 5, 5, %v", info.Index, w.DurableIndex(), events, want)
	}
}
