// Package cluster is Baton's master node: Raft wiring, the leadership
// lifecycle, fencing by term, linearizable reads and the checks of the
// node's own storage. What the master manages lives above it: the domain of
// namespaces, tables, regions and region servers in cluster/domain, which
// plugs its leader-only services in through Config.LeaderServices, and the
// admin API in cluster/admin (docs/architecture.md draws the floors).
//
// # A node
//
// NewNode opens, under Config.DataDir:
//
//   - node-id: the id of the node the directory belongs to, written at
//     its first start; a start with another Config.ID is refused
//     (ErrWrongNode) rather than left waiting for a cluster that does not
//     know it;
//   - raft/raft.db: the Raft log and stable store (hashicorp/raft-boltdb/v2,
//     one bbolt file, behind a 512-entry log cache). bbolt reuses freed
//     pages but never shrinks its file, so the file keeps the size of the
//     largest backlog raft ever held between snapshots; at start-up it is
//     rewritten with its live pages alone when it is at least
//     Config.RaftLogCompactBytes and more than twice those (cluster/filecare).
//     That backlog is bounded in bytes, not only entries: the node sets
//     raft's SnapshotThreshold and TrailingLogs from Config.LogBytesBudget
//     (default max(live state, 16 MiB)) over the measured entry size, and
//     snapshots as soon as the threshold is passed (logbudget.go);
//   - snapshots/: Raft snapshots (raft's file snapshot store);
//   - fsm/: the raftfsm.FSM and its local WAL, the node's durable copy of
//     the applied state with its applied index W.
//
// and raft's TCP transport on Config.RaftAddr. Tests substitute raft's
// in-memory transport and stores through the Config overrides.
//
// Start-up order matters. The FSM is opened first, so W is known before
// raft starts: if raft's newest snapshot is not newer than W
// (raftfsm.NeedsSnapshotRestore), raft's NoSnapshotRestoreOnStart is set and
// the restart costs only a replay of the log tail, whose entries up to W the
// FSM skips. Otherwise (the WAL was lost, or is older than the snapshot) raft
// restores the snapshot as usual.
//
// Bootstrapping is static, as in Consul's bootstrap_expect-free mode and
// rqlite's -bootstrap-expect with a fixed list: every node gets the same
// Peers list, and a node bootstraps the cluster from it only when it has no
// Raft state at all. All nodes bootstrapping the same configuration is safe
// (raft's BootstrapCluster contract), and on every later start the list is
// ignored, so one command line serves both first start and restart. Nodes
// added later start with no Peers and are added by the leader with Join,
// which (like rqlite) first removes a stale member with the same id or the
// same address, so a node rebuilt with a new address, or a new node on a
// reused address, rejoins cleanly.
//
// # Leadership
//
// Only the leader runs a procedure.Executor; followers only apply the log.
// leader.go holds the whole lifecycle (monitor → Barrier → establish →
// revoke, after Nomad's leader.go): it watches raft's NotifyCh (buffered;
// LeaderCh may drop transitions), and on gaining leadership waits for a
// Barrier, so every entry committed by earlier leaders is applied, then
// builds a raftfsm.RaftStore over this raft and FSM and an executor on it,
// and starts it: the executor loads the FSM's procedures and resumes the
// half-finished ones (procedure's load rules: re-queue, re-arm timers,
// re-take held locks). On losing leadership the executor is unpublished and
// stopped at once; it could not persist anything anyway, since RaftStore
// writes on a non-leader fail with raft.ErrNotLeader, and a step whose
// outcome was not persisted runs again on the next leader (steps are
// idempotent by contract). If establishing fails, the node transfers
// leadership and retries if it is still leader.
//
// Raft's NotifyCh keeps only its latest value, so a leadership lost and
// regained between two reads looks like no change, while another leader
// may have run the same procedures in between. The executor's store is
// therefore fenced by term (fence.go): it writes only while this node leads
// the term it was established in; otherwise the executor stops itself and
// the leader loop rebuilds it from the FSM.
//
// Executor() hands out the leader's executor; elsewhere it returns a
// *NotLeaderError naming the leader (errors.Is matches ErrNotLeader and
// raft.ErrNotLeader), so an API layer can redirect or forward.
//
// # Shutdown
//
// Shutdown on a leader first stops the executor gracefully (running steps
// finish and persist; nothing is failed), then transfers leadership, so the
// next leader takes over after one round trip instead of an election
// timeout, then shuts raft down and closes the stores. This departs from
// "transfer, then stop": transferring first would make every in-flight
// write fail with ErrNotLeader and the interrupted steps run again on the
// next leader; stopping first costs the cluster only the length of the
// longest running step without an executor, and leaves no repeated step.
// Kill is the crash-like variant for tests.
//
// The FSM enforces the same fence: every batch carries the executor's term
// (raftfsm.RaftStoreConfig.FenceTerm) and is refused in an entry of any
// other term, which closes the gap between the check before raft.Apply and
// the Apply itself.
//
// # Storage failures
//
// A node whose disk fills up or fails keeps running, does not lead and is
// not ready; it does not exit. Exiting would take /readyz and /status, the
// operator's view of why, with it, and a supervisor restarting it on a disk
// that is still full would only crash it again. Node.StorageErr reports the
// failure as a *StorageError (what failed, the path, the cause; wrapping
// ErrStorageFailed): Executor answers it on every node, leader or not, so
// the admin API answers UNAVAILABLE (clients retry elsewhere) and /readyz
// answers 503 with it; /status carries it as storage_error. Each store's
// failure is logged once, at ERROR, with the store, the path and the error.
//
//   - The raft log (raft.db). Raft handles a failed write itself: a leader
//     answers the writes with the error (nothing is acknowledged that its
//     log did not take) and steps down; a follower refuses the
//     AppendEntries, so nothing it could not store counts towards a commit.
//     The node reports the failure until a log write succeeds again: this
//     one recovers in place once space is freed.
//   - The stable store (current term and vote, in raft.db). Raft panics when
//     it cannot persist a new term; a failed write is retried every second
//     instead, holding the raft goroutine that made it (the node neither
//     votes nor acknowledges meanwhile) until the disk takes it: it too
//     recovers in place. A write is never reported done when it was not
//     (a forgotten vote could elect two leaders in one term).
//   - The FSM's local WAL (fsm/): a failed write or fdatasync is sticky
//     (raftfsm package doc), since after a failed fsync what the file holds
//     is unknown. The FSM applies on in memory, so the replicated state
//     stays right, but the node is out of leadership until it is restarted;
//     on restart its WAL loads up to its last good record and raft replays
//     or restores the rest.
//   - Raft snapshots: a snapshot that cannot be written is cancelled by
//     raft and tried again later; it does not change readiness.
//
// A node started on a disk that is still full fails to start with the
// error (its WAL opens a new segment at start), and exits non-zero.
//
// The leader loop (leader.go) checks StorageErr every HealthInterval: a
// leader with a failure stops its executor and transfers leadership, and a
// node with one that is elected gives leadership away instead of
// establishing it. After the space is freed, restart the node (a failed
// WAL needs it); it rejoins with the same command line and catches up.
//
// # Damaged files at start
//
// NewNode refuses to start, with an error naming the file and what is
// wrong (wrapping ErrDamaged), rather than serve state it cannot trust:
//
//   - raft.db: before bbolt opens it, its page structure is walked from
//     the newer valid meta page by reading the file directly (every
//     reachable page inside the file and below the high-water mark, a
//     branch or leaf whose elements fit, reached once), since bbolt trusts
//     its pages and on damage faults, panics or loops for ever; then bbolt
//     reads every log and term key, with faults and panics turned into the
//     error, and the log keys must be consecutive indexes whose entries
//     decode with their own index (cluster/filecare). The error
//     names the page and its offset, or the log index. The node's terms,
//     votes and acknowledged entries live there, so there is no local
//     recovery: remove the node's data directory and add it back to the
//     cluster.
//   - The local WAL: a torn tail (a crash mid-write, a truncated file) is
//     cut at the last good record and the node recovers, raft replaying the
//     rest; any other damage (a bad checksum before the tail) is refused
//     with the segment file and offset (raftfsm.ErrWALDamaged). Moving the
//     fsm/ directory aside makes the node rebuild it from raft.
//   - Snapshots: a snapshot whose meta.json is unreadable or whose state.bin
//     fails its CRC is damaged. Raft starts from its newest snapshot and
//     reads the log from the entry after it (it panics if that entry was
//     compacted away). If an older intact snapshot still reaches the log,
//     the damaged ones are moved to snapshots.damaged/ and the node starts
//     from it (restoring it if its WAL is older). Else, if the damaged one
//     is the newest and the local WAL reaches its index, it stays (raft
//     need not read it) and the node takes a new snapshot as soon as it
//     can, so it is never restored or sent to a follower. Else the start
//     is refused, naming the snapshot (cluster/filecare).
//
// bbolt has no checksums outside its meta pages: the start-up walk of
// raft.db catches damage to the tree's structure, keys and log indexes,
// and entries that no longer decode, but not every flipped byte inside an
// entry's payload or a free page.
//
// A failed fsync of bbolt is reported by its commit and, like any failed
// log write, never acknowledged. What the file holds after a device failed
// writes is another matter: TestFsyncFailureOnDevice has seen ext4, after
// failed writeback and an fsck, hand back raft.db with pages bbolt had
// synced lost (zeroed), and a tree that leads in a circle. The start-up
// walk refuses such a file, and the node must be rebuilt from the others,
// whose copies are intact.
//
// # Timings
//
// The defaults (heartbeat, election and lease 300 ms) aim at a
// failover p50 under one second on a LAN; raft's 1 s defaults give 2–3 s.
// See Config.HeartbeatTimeout. TestFailoverTimeDefaultTimings measures it.
package cluster
