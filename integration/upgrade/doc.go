// Package upgrade proves rolling upgrades and downgrades with real
// processes: each released version (harness.Releases) is built from the
// repository's history, a cluster of it is started with work in flight
// (long diagnostic sleeps, a table create of many regions, a held
// exclusive lock with a waiter, a region server's crash recovery, a
// balance), and every process is replaced one by one by the current build
// (region servers, then the follower masters, the leader last), under the
// chaos suite's namespace load and region sampling. At the end every
// acknowledged procedure finished exactly once, the namespace history is
// linearizable, no region was ever open on two servers, and every region
// of the big table is open exactly once.
//
// The short runs are part of `go test ./...` (a few minutes); `make
// chaos-upgrade` runs the long one (BATON_UPGRADE_LONG=1: 2,000 regions,
// leader kills and pauses between the upgrade's steps). Without the
// releases' commits (a shallow clone) the tests skip, saying so, unless
// BATON_REQUIRE_RELEASES is set, as CI sets it on a full clone.
//
// Past the raise there is no way back, and that needs a release newer
// than the current build: future_test.go simulates it with the current
// tree built with internal/version's format stamp (harness.BuildStamped),
// which needs no history and runs on a shallow clone too.
package upgrade
