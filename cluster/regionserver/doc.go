// Package regionserver is Baton's simulated region server: the process behind
// `baton regionserver`. It hosts regions in memory, serves the RegionServer
// service of proto/rspb/regionserver.proto (ExecuteBatch, ListRegions) to the
// leader's dispatcher, and keeps a lease with the masters through their
// Master service (RegisterServer, Heartbeat, ReportTransition).
//
// # Hosting
//
// A region is hosted once an open has succeeded and until a close has.
// Open and close are idempotent: an open of a region already open here and
// a close of a region not open here succeed with already = true, so the
// dispatcher may re-send a batch whose fate it does not know (a timeout, a
// master failover) without harm. Each operation takes Config.OpLatency and
// an open fails with probability Config.FailureRate ("injected failure"),
// for tests and demos. The operations of a batch run in parallel across
// regions (at most Config.OpParallelism at once) and in order within a
// region; concurrent batches are serialized per region by a per-region
// lock held for the whole operation, latency included.
//
// # Fencing
//
// Every master request carries the leader's Raft term. The server keeps the
// highest term it has seen (from batches and from the masters' answers to
// its own calls) and refuses a whole batch whose term is lower
// (FAILED_PRECONDITION, "stale term"), so a deposed leader can neither open
// nor close regions. A batch quoting another start code than the current
// one is refused the same way ("wrong start code"): it was meant for an
// earlier incarnation of this server, whose regions the masters have
// already reassigned. Both checks are made again when each operation
// applies, under the same lock as the hosting map: an operation of a batch
// that a newer term or a re-registration overtook while it was running
// (during its latency) is not applied, so a deposed leader's slow open can
// never land after the new leader's close.
//
// The highest term lives in memory only: a restarted process starts from
// 0, but it also registers for a new start code, which a deposed leader
// cannot have learnt (registration commits through Raft), so the start
// code check fences it instead.
//
// Terms count within one cluster. A cluster restored from a snapshot
// (docs/operations.md, Restore) starts at the snapshot's term, below what
// the old one may have reached, and records regions where they were at the
// save. The masters name their cluster id in every answer and batch: a
// server that learned one and meets another (or none) closes every region,
// forgets the highest term and registers again, and refuses a batch of
// another cluster as a wrong start code, judged before the term.
//
// Each of these refusals also carries an rspb.RefusalDomain ErrorInfo
// (proto/rspb/refusal.go) naming it (STALE_TERM, WRONG_START_CODE,
// CLUSTER_ID_MISMATCH) with this server's highest term, start code and
// cluster id, which the dispatcher reads instead of the message. The code
// and message are 0.1.0's, which is all a 0.1.0 master reads.
//
// # Lease
//
// Start registers with the leader (RegisterServer names the regions still
// hosted, normally none) and heartbeats at the interval the master answers
// (or Config.HeartbeatInterval). A master that answers expired = true (or
// NOT_FOUND, for a server it does not know) has
// given this server up and reassigned its regions: the server drops every
// region at once (no latency: they must be gone before anyone can open
// them elsewhere, and fencing already refuses the old start code) and
// registers again, getting a new start code. Calls go to the believed
// leader; an UNAVAILABLE answer carrying an adminpb.LeaderHint is followed
// at once, any other UNAVAILABLE (or a dead address) moves to the next
// master after a backoff, as cluster/client does. Heartbeats therefore go
// on through failovers; a new leader knows the lease (grants are
// replicated), so the start code survives a failover.
//
// Transitions the masters did not ask for are reported, best effort, with
// ReportTransition: an open that failed (FAILED_OPEN) and a region that
// closed by itself (Server.CloseRegion, CLOSED). Reports are queued and
// sent by one goroutine; a report that cannot be delivered within
// Config.RPCTimeout, or that belongs to an earlier start code, is dropped
// (the masters learn the same from the batch results and from ListRegions).
//
// # Metrics, readiness and traces
//
// With Config.HTTPAddr the server serves /metrics (baton_regionserver_*:
// regions by state, operations by kind and result, heartbeats and
// registrations by result, the age of the last renewal, self-fences and
// the regions it closed by itself, batches refused by fencing, reports)
// /readyz (ready while registered) and /livez (serving). With TLS the two
// probes are served also to a caller without a client certificate (a
// kubelet's probe), every other path only to one with. Its metrics live in a registry of
// its own unless Config.Metrics gives one, so several servers run in one
// process. With Config.TracerProvider a batch gets a server span under
// the master's call, each operation a span in its procedure's trace, and
// a FAILED_OPEN report a client span under its operation, whose context
// goes to the master in the call's metadata.
package regionserver
