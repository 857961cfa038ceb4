package memstat

import (
	"os"
	"runtime"
	"strings"
	"testing"
)

func TestRSSOfThisProcess(t *testing.T) {
	mb, ok := RSSMB(os.Getpid())
	if runtime.GOOS != "linux" {
		t.Skip("no /proc here")
	}
	if !ok || mb <= 0 {
		t.Fatalf("RSSMB(self) = %v, %v: want a positive size", mb, ok)
	}
}

// The split adds up: this process's heap is private, its binary's text
// is a mapped file.
func TestRSSSplitOfThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no /proc here")
	}
	r, ok := ReadRSS(os.Getpid())
	if !ok || r.AnonMB <= 0 || r.FileMB <= 0 {
		t.Fatalf("ReadRSS(self) = %+v, %v: want positive anonymous and file parts", r, ok)
	}
	// Shared memory (RssShmem) is the rest of VmRSS.
	if r.AnonMB+r.FileMB > r.TotalMB+0.01 {
		t.Fatalf("ReadRSS(self) = %+v: the parts exceed the total", r)
	}
}

func TestRSSOfNoProcess(t *testing.T) {
	if mb, ok := RSSMB(-1); ok {
		t.Fatalf("RSSMB(-1) = %v, true: want no figure", mb)
	}
}

// A heap holding a live 8 MiB slice is at least that large.
func TestHeapAfterGCCountsLiveMemory(t *testing.T) {
	keep := make([]byte, 8<<20)
	if h := HeapAfterGC(); h < uint64(len(keep)) {
		t.Fatalf("HeapAfterGC = %d with %d bytes live", h, len(keep))
	}
	runtime.KeepAlive(keep)
}

// Without the split (kernels before 4.5), or with a part unreadable, the
// total is still read and the parts are unknown (-1), not a measured 0.
func TestStatusWithoutTheSplit(t *testing.T) {
	for _, status := range []string{
		"Name:\tbaton\nVmRSS:\t  2048 kB\nThreads:\t9\n",
		"VmRSS:\t2048 kB\nRssAnon:\t?? kB\nRssFile:\tx kB\n",
	} {
		r, ok := parseStatus(strings.NewReader(status))
		if !ok || r.TotalMB != 2 || r.AnonMB != -1 || r.FileMB != -1 {
			t.Errorf("parseStatus(%q) = %+v, %v: want 2 MB in all, the parts -1", status, r, ok)
		}
	}
	if r, ok := parseStatus(strings.NewReader("VmRSS:\tlots kB\nRssAnon:\t1024 kB\n")); ok {
		t.Errorf("an unreadable VmRSS gave %+v, true: want no figure", r)
	}
}
