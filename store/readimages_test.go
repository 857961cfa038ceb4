package store

import (
	"path/filepath"
	"runtime"
	"testing"
)

// A rewrite's images are the latest of each wanted id in the segment, and
// stay readable once the segment is unmapped: reading them after
// readImages returned would fault if they still pointed into the mapping.
func TestReadImagesCopiesTheLatestOut(t *testing.T) {
	dir := t.TempDir()
	w, _, _ := openLoaded(t, testConfig(dir))
	for _, b := range []Batch{
		{Inserts: []Proc{{ID: 1, Data: []byte("a1")}, {ID: 2, Data: []byte("b1")}, {ID: 3, Data: []byte("c1")}}},
		{Updates: []Proc{{ID: 1, Data: []byte("a2")}, {ID: 4, Data: nil}}, Deletes: []uint64{3}},
	} {
		if err := w.Append(b); err != nil {
			t.Fatalf("Append: %v", err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, segPrefix+"*"+segSuffix))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v (%v): want one", segs, err)
	}
	found, err := readImages(segs[0], []uint64{1, 3, 4, 5})
	if err != nil {
		t.Fatalf("readImages: %v", err)
	}
	want := map[uint64]string{1: "a2", 4: ""}
	if len(found) != len(want) {
		t.Fatalf("found ids %v: want %v", found, want)
	}
	for id, img := range want {
		if d, ok := found[id]; !ok || string(d) != img || cap(d) != len(d) {
			t.Errorf("image of %d = %q (ok %v, cap %d): want %q, capped at its length", id, d, ok, cap(d), img)
		}
	}
}

// A rewrite's heap is the images it wants, not the segment: a copy of the
// segment (32 MiB by default) on the heap raised the collector's next goal
// by three times that whenever a collection caught it.
func TestReadImagesHeapIsTheWantedImages(t *testing.T) {
	dir := t.TempDir()
	w, _, _ := openLoaded(t, testConfig(dir))
	const procs, size = 2000, 2000 // a 4 MB segment
	for id := uint64(1); id <= procs; id++ {
		if err := w.Append(Batch{Inserts: []Proc{{ID: id, Data: make([]byte, size)}}}); err != nil {
			t.Fatalf("Append: %v", err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, segPrefix+"*"+segSuffix))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v (%v): want one", segs, err)
	}
	want := []uint64{1, 500, 1000, 2000}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	found, err := readImages(segs[0], want)
	runtime.ReadMemStats(&after)
	if err != nil || len(found) != len(want) {
		t.Fatalf("readImages: %d images, %v", len(found), err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<10 {
		t.Fatalf("readImages allocated %d bytes for %d images of %d bytes from a %d-byte segment", alloc, len(want), size, procs*size)
	}
}
