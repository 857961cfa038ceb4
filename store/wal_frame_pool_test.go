package store

import (
	"fmt"
	"strings"
	"testing"
)

// TestWALPooledFramesWriteOnlyTheirRecord: Append reuses the frame of a
// request the writer answered. A Sync between appends, and a smaller
// record after a bigger one, must put exactly the records appended in
// the log: no older frame's bytes again, no tail of a bigger one.
func TestWALPooledFramesWriteOnlyTheirRecord(t *testing.T) {
	dir := t.TempDir()
	w, _, _ := openLoaded(t, syncOnRollConfig(dir))
	want := map[uint64]string{}
	const n = 40
	for i := 1; i <= n; i++ {
		id := uint64(i)
		// Sizes go up and down, so that a frame is reused for records
		// both smaller and bigger than the one it held.
		v := fmt.Sprintf("v%d-%s", i, strings.Repeat("x", (i*37)%300))
		if err := w.Append(Batch{Index: id, Inserts: []Proc{p(id, v)}}); err != nil {
			t.Fatal(err)
		}
		want[id] = v
		if i%3 == 0 {
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.Close()
	segs := segFiles(t, dir)
	records := 0
	for _, s := range segs {
		records += len(recordOffsets(t, s))
	}
	if records != n {
		t.Fatalf("%d records in the log, want the %d appended", records, n)
	}
	w2, got, info := openLoaded(t, syncOnRollConfig(dir))
	defer w2.Close()
	if info.Index != n || len(info.Corruptions) != 0 {
		t.Fatalf("index %d, corruptions %v", info.Index, info.Corruptions)
	}
	equalMaps(t, got, want)
}
