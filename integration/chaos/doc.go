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
//     no procedure left unfinished.
//
// The short run is part of `go test ./...`; `make chaos` runs the long one
// (see chaos_test.go for its environment variables). Partitions need root
// and iptables: without them those tests skip, saying why.
//
// Artifacts (porcupine's HTML visualization of a non-linearizable history)
// go to $BATON_CHAOS_ARTIFACTS, or a directory under os.TempDir() named in
// the test's log.
package chaos
