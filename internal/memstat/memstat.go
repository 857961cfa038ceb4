// Package memstat reads the memory figures the benchmarks report: the Go
// heap once garbage is collected, and a process's resident set.
package memstat

import (
	"bufio"
	"fmt"
	"io"
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
	r, ok := ReadRSS(pid)
	return r.TotalMB, ok
}

// RSS is a process's resident set, split as the kernel counts it.
type RSS struct {
	TotalMB float64 // VmRSS
	// AnonMB is private memory: the Go heap and stacks, whether in use or
	// freed by the collector and not yet returned.
	AnonMB float64 // RssAnon
	// FileMB is pages of mapped files, such as bolt's mmapped raft.db:
	// the kernel reclaims them under pressure.
	FileMB float64 // RssFile
}

// ReadRSS reads process pid's resident set from /proc/<pid>/status; ok is
// false where there is no /proc or no readable VmRSS line. A part of the
// split the file does not give (kernels older than 4.5 have no RssAnon and
// RssFile) or gives unreadably is -1, unknown, never a measured 0.
func ReadRSS(pid int) (r RSS, ok bool) {
	r.AnonMB, r.FileMB = -1, -1
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return r, false
	}
	defer f.Close()
	return parseStatus(f)
}

// parseStatus reads a /proc/<pid>/status file as ReadRSS says.
func parseStatus(status io.Reader) (r RSS, ok bool) {
	r.AnonMB, r.FileMB = -1, -1
	fields := map[string]*float64{"VmRSS:": &r.TotalMB, "RssAnon:": &r.AnonMB, "RssFile:": &r.FileMB}
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		name, rest, _ := strings.Cut(sc.Text(), "\t")
		field := fields[name]
		if field == nil {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
		switch {
		case err == nil:
			*field = kb / 1024
			ok = ok || name == "VmRSS:"
		case name == "VmRSS:":
			return r, false
		}
	}
	return r, ok
}
