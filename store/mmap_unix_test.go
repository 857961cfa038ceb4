//go:build unix

package store

import (
	"os"
	"testing"
)

// A merge reads its run's files through mappings, where a page that
// cannot be read (a media error, a file cut short underneath) is a fault,
// not an error: it killed the process, where a failed read kept the run
// and the WAL went on ("cannot merge segments; keeping them"). A file
// truncated once mapped faults the same way.
func TestMergeFaultOnAMappedFileIsAnError(t *testing.T) {
	const procs, size = 1000, 2000
	w, seg := closedSegment(t, procs, func(uint64) []byte { return make([]byte, size) })
	keep := &idSet{}
	keep.add(1)
	keep.add(procs)
	truncated := false
	hook := func(op, file string) {
		if op == "map" && file == seg.name {
			if err := os.Truncate(seg.path, 0); err != nil {
				t.Fatalf("truncate: %v", err)
			}
			truncated = true
		}
	}
	c := &compaction{segs: []*segment{seg}, read: []bool{true}, keep: keep, hdr: seg.hdr, maxID: procs, testHook: hook}
	res := w.compact(c)
	if !truncated {
		t.Fatal("the merge did not map the segment")
	}
	if res.err == nil {
		os.Remove(res.tmp)
		t.Fatalf("a merge of a file cut short under its mapping succeeded: %+v", res)
	}
	if res.tmp != "" {
		t.Errorf("failed merge left its output %s", res.tmp)
	}
	t.Logf("merge error: %v", res.err)
}
