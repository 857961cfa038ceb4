package main

import (
	"runtime"

	"github.com/hashicorp/go-hclog"
)

// minMasterProcs is the fewest Go Ps (GOMAXPROCS) a master runs with.
//
// Raft's heartbeats and their answers are goroutines like any other: on a
// saturated leader they wait in its run queues behind the executor's
// workers, the FSM and the RPC handlers. With 2 Ps (the 2-core machine
// running 3 masters and 3 region servers at a million regions), the leader
// went 300 ms (its lease) without a word from either follower and stepped
// down 3 to 4 minutes into the open, in both clean runs of `baton bench
// scale --regions 1000000`; each new leader's load started the next stall,
// and no leader lasted more than a few seconds for minutes on end (an
// election storm of hundreds of terms). With 4 Ps (two runs) and with 8
// (one), none stepped down through the open and the crash recovery. More Ps than
// cores leave the time-slicing to the kernel, which runs a ready thread
// within milliseconds, rather than to one process's run queue. Its cost in
// throughput is within the noise: at 300 k regions, runs one after another
// opened 2,376 regions/s with 4 Ps and 2,724 with 2 (BENCHMARKS.md).
const minMasterProcs = 4

// raiseProcs sets GOMAXPROCS to at least minMasterProcs unless the
// operator chose it (the GOMAXPROCS variable), and logs what it did.
func raiseProcs(getenv func(string) string, log hclog.Logger) {
	if getenv("GOMAXPROCS") != "" {
		return
	}
	if n := runtime.GOMAXPROCS(0); n < minMasterProcs {
		runtime.GOMAXPROCS(minMasterProcs)
		log.Info("raised GOMAXPROCS so that raft's heartbeats are not queued behind a saturated leader's work (set GOMAXPROCS to choose)",
			"from", n, "to", minMasterProcs, "cpus", runtime.NumCPU())
	}
}
