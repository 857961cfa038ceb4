package main

import (
	"runtime/debug"

	"github.com/hashicorp/go-hclog"
)

// masterGCPercent is a master's GOGC unless the operator sets one.
//
// A master's heap is mostly its state (region records, procedures), which
// lives long, while every step allocates its records, Raft entries and
// RPCs anew: at Go's default of 100 the collector ran every time the heap
// grew by the size of that state, and took 19–25% of a saturated leader's
// CPU. At 300 k regions on 2 cores, the open ran at 6,305 regions/s with
// 200 (4,391 with 100, 6,442 with 400) for 1.3× the RSS (411–737 MB
// against 314–560; 608–1143 with 400): BENCHMARKS.md. The live heap, which
// bounds what the state costs, is the same.
const masterGCPercent = 200

// tuneGC sets the collector's target to masterGCPercent unless the
// operator chose one (GOGC) or a memory limit (GOMEMLIMIT, which works
// against a larger target), and logs what it did.
func tuneGC(getenv func(string) string, log hclog.Logger) {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return
	}
	prev := debug.SetGCPercent(masterGCPercent)
	log.Info("set the garbage collector's target so that a busy master collects less often (set GOGC to choose)",
		"from", prev, "to", masterGCPercent)
}
