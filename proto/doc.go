// Package proto is the bottom of Baton's import graph: each subpackage
// keeps a .proto file beside the Go code generated from it (as etcd keeps
// raftpb/), and imports nothing of Baton's.
//
//   - adminpb: the admin API every master serves (clients, the CLI, the
//     console).
//   - rspb: the region-server protocol (the leader's dispatcher to region
//     servers, and region servers' leases with the masters).
//   - raftpb: the commands of the replicated log that raftfsm applies.
//
// Regenerate the code with `make proto`.
package proto
