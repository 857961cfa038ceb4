// Package chaos is Baton's fault-injection suite: real agent and region
// server processes (package harness), each under a uid of its own so that
// iptables can cut one process's loopback traffic, while a nemesis kills,
// pauses, restarts and partitions them and clients keep working.
//
// What it checks:
//   - linearizability (invariant 7): namespace create/delete/list
//     histories of concurrent clients, checked with porcupine against a
//     per-namespace model; an operation whose outcome is unknown counts as
//     possibly applied, until the end of the history;
//   - the region invariant (invariant 2): sampled during the run from the
//     region servers' own answers, no region open on two servers at one
//     moment; after healing, every region of every enabled table open
//     exactly once, none of a disabled or deleted table open anywhere, and
//     no procedure left unfinished;
//   - liveness: once the faults stop and everything is healed, within
//     livenessBound (a sum of the system's own timeouts: election, region
//     server lease, self-fence period, dispatch timeout and retry backoff,
//     dispatcher retry, plus slack; see livenessTerms), every procedure
//     the clients got acknowledged is finished, every region server is
//     live, every region of every enabled table is open on exactly one
//     live server, no procedure waits on a live server, none is
//     unfinished. The summary gives the time each condition took.
//
// Fault schedules: the seed (BATON_CHAOS_NEMESIS_SEED) draws the run's
// whole schedule up front (NewPlan: which fault, on whom, at which offset
// from the workload's start, held how long), and the clients' choices. The
// plan is logged and written to schedule-<test>.json; what ran (each
// fault's actual start, the node it hit, its outcome) to
// schedule-<test>.ran.json, which BATON_CHAOS_SCHEDULE replays at the
// times the faults started. A failing run prints both replay commands.
//
// The short run is part of `go test ./...`; `make chaos` runs the long one
// (see chaos_test.go for its environment variables; `make chaos SEED=…`
// and `make chaos SCHEDULE=…` replay). Partitions need root and iptables:
// without them those faults are left out of the plan, saying why, and a
// replay must run with the same privileges to draw the same plan.
//
// Artifacts (the schedule files, porcupine's HTML visualization of a
// non-linearizable history) go to $BATON_CHAOS_ARTIFACTS, or a directory
// under os.TempDir() named in the test's log.
package chaos
