package store

import (
	"os"
	"runtime"
	"testing"
)

// A merge's heap is the images it keeps and its output buffer, not the
// run's files: a copy of a segment (32 MiB by default) on the heap raised
// the collector's next goal by three times that whenever a collection
// caught it. The images it writes are copied out of the mapped file
// before it is unmapped: written from the mapping afterwards they would
// fault or read garbage, which the output's check below would see.
func TestMergeMapsItsFilesAndCopiesTheImagesOut(t *testing.T) {
	const procs, size = 4000, 2000 // an 8 MB segment
	w, seg := closedSegment(t, procs, func(id uint64) []byte {
		img := make([]byte, size)
		img[0], img[size-1] = byte(id), byte(id>>8)
		return img
	})
	want := []uint64{1, 500, 1000, procs}
	keep := &idSet{}
	for _, id := range want {
		keep.add(id)
	}
	c := &compaction{segs: []*segment{seg}, read: []bool{true}, keep: keep, hdr: seg.hdr, maxID: procs}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := w.compact(c)
	runtime.ReadMemStats(&after)
	if res.err != nil || res.out == nil {
		t.Fatalf("compact: %v (output %v)", res.err, res.out)
	}
	defer os.Remove(res.tmp)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > int64ToU(seg.size)/2 {
		t.Fatalf("a merge keeping %d images of %d bytes allocated %d bytes from a %d-byte file", len(want), size, alloc, seg.size)
	}
	data, err := os.ReadFile(res.tmp)
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64][]byte{}
	if r, _ := scanSegment(data, func(_ int64, _ recType, _ uint64, p []byte) error {
		forEachOp(p, func(id uint64, d []byte) { got[id] = d }, func(uint64) {})
		return nil
	}); r.hdrErr != nil {
		t.Fatalf("the output: %v", r.hdrErr)
	}
	if len(got) != len(want) {
		t.Fatalf("the output holds %d images: want %d", len(got), len(want))
	}
	for _, id := range want {
		if d := got[id]; len(d) != size || d[0] != byte(id) || d[size-1] != byte(id>>8) {
			t.Errorf("image of %d in the output: %d bytes, ends %v %v", id, len(d), d[:min(1, len(d))], d[max(0, len(d)-1):])
		}
	}
}

func int64ToU(n int64) uint64 { return uint64(max(n, 0)) }

// closedSegment returns a closed WAL whose one segment holds the images
// img makes of ids 1 to procs, for merges driven by hand (w.compact).
func closedSegment(t *testing.T, procs uint64, img func(id uint64) []byte) (*WAL, *segment) {
	t.Helper()
	w, _, _ := openLoaded(t, testConfig(t.TempDir()))
	for id := uint64(1); id <= procs; id++ {
		if err := w.Append(Batch{Inserts: []Proc{{ID: id, Data: img(id)}}}); err != nil {
			t.Fatalf("Append: %v", err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if len(w.segs) != 1 {
		t.Fatalf("%d segments: want one", len(w.segs))
	}
	return w, w.segs[0]
}
