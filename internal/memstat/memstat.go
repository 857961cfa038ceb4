// Package memstat reads the memory figures the benchmarks report: the Go
// heap once garbage is collected, and a process's resident set.
package memstat

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// HeapAfterGC is the live Go heap (HeapAlloc) after two collections: the
// second frees what finalizers queued by the first kept alive.
func HeapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// RSSMB is process pid's resident set size in MB, from VmRSS in
// /proc/<pid>/status; ok is false where there is no /proc or no such line.
func RSSMB(pid int) (mb float64, ok bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, found := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !found {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
		if err != nil {
			return 0, false
		}
		return kb / 1024, true
	}
	return 0, false
}
