package memstat

import (
	"os"
	"runtime"
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
