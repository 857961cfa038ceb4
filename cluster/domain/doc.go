// Package domain is Baton's domain layer: namespaces, tables, regions and
// region servers, managed by procedures on the leader (HBase's
// AssignmentManager, ServerManager and table procedures, on Baton's
// procedure framework and Raft).
//
// # Pieces
//
//   - Domain (one per master node, living as long as the node) is the
//     procedures' Env, serves the region servers' rspb.Master service
//     (RegisterMasterService, on the admin gRPC server) and the domain
//     calls of the admin API. It answers those in the plain values of
//     package catalog and knows nothing of the API: package admin depends
//     on it through its Domain interface and translates the answers into
//     adminpb messages; the API's leader hint reaches the Master service
//     through the UnavailableFunc it is registered with, and the access
//     grants it tells region servers through the GrantsFunc.
//   - Domain.LeaderServices (cluster.Config.LeaderServices) builds, for
//     each term this node leads, the leader-only services: a dispatcher
//     (package dispatch) stamped with the term, a lease manager for region
//     servers and, for external lock holders, one per lease length a lock
//     asked for (package lease; see lockLeaseSteps), and the table of procedures waiting for a remote operation. They are dropped
//     when the term ends.
//   - The procedures (Register adds their types): TransitRegionState,
//     CreateTable, DeleteTable, EnableTable, DisableTable,
//     CreateNamespace, DeleteNamespace, ServerCrash, Balance and
//     LockProcedure.
//
// # Replicated state
//
// The domain lives in the FSM's key/value state (raftfsm), as JSON:
//
//	ns/<name>               {"name"}                    (default is implicit)
//	table/<ns>:<name>       {"state", "region_count", "proc_id"}
//	                        state CREATING, ENABLED, DISABLING, DISABLED,
//	                        ENABLING, DELETING; proc_id: the creating procedure,
//	                        whose id names the regions (older records list
//	                        the names instead, as "regions")
//	region/<region>         {"table", "state", "server", "start_code", "proc_id"}
//	                        state OFFLINE, OPENING, OPEN, CLOSING, CLOSED,
//	                        FAILED_OPEN; proc_id: the procedure moving it
//	                        (stored in binary, see region_codec.go; older
//	                        records are JSON)
//	server/<id>             {"address", "start_code", "state"}  state live, expired
//	lock/<proc id, %020d>   {"kind", "names", "exclusive", "holder", ...}
//	maintenance             {"on", "since", "by", "reason"}  (absent: off)
//	repair/<seq, %020d>     {"action", "args", "caller", "peer", "via",
//	                        "node", "at", "outcome", "code", "result"}
//	nodes/<id>/admin_addr   (cluster.AdminAddrKey: where each master's API is)
//
// Region names are "<ns>:<table>,<index %05d>,<create proc id>": unique
// across a table's deletion and re-creation, so an open meant for an old
// region can never be taken for a new one.
//
// Every change is a ctx.Put or ctx.Delete inside a procedure step, and so
// commits in the same Raft entry as the step's transition (a step's effect
// and its procedure state never commit apart), with two exceptions that
// are not procedure steps: a server's registration (a new start code) and
// its expiry by the lease monitor. The leader commits those directly as a
// mutations-only batch fenced by its term (raftfsm.EncodeFencedProcBatch):
// every FSM refuses the entry in any other term, so a deposed leader's
// registration or expiry never lands. Reads come from the local FSM, which
// on the leader has applied everything it committed.
//
// # Leases
//
// Each server incarnation holds a lease "rs/<id>/<start code>" (separate
// incarnations, separate leases: the late expiry of an old one is never
// taken for the new one's). RegisterServer commits the new start code
// (term<<32 | a counter: unique across terms, increasing), grants the
// lease and answers the heartbeat interval (a third of the soft limit).
// Heartbeat renews it; a server that is not the live incarnation, whose
// lease is unknown or past its hard limit, or that the dispatcher gave up
// on, is answered expired = true: it drops every region and registers
// again. A suspect server (soft limit passed) gets no new regions. When the
// monitor expires a lease, the incarnation is recorded expired and its
// ServerCrash procedure submitted with the nonce "scp-<id>-<start code>"
// (once per incarnation). Renewals are not replicated: a new leader grants
// every server the log says is live and calls GraceAll, so nothing expires
// before a full hard limit under the new leader (ListServers shows such a
// server "unconfirmed" until it heartbeats to this leader: the grace says
// nothing of whether it lives, and a dead one would otherwise look live
// for a whole hard limit); then, once its executor
// runs, it submits a crash procedure for every incarnation that is not
// the live one but still has regions recorded on it (a predecessor may
// have died between an expiry and its submission).
//
// A server the dispatcher cannot reach (dispatch's OnServerFailed) is NOT
// expired at once, unlike HBase: it may be alive and serving, and
// reassigning its regions then would open them twice (HBASE-14012,
// HBASE-21811). Its lease is revoked instead: no more renewals, no new
// regions, and its next heartbeat is told expired (upon which it drops its
// regions and registers again) while the incarnation is recorded expired
// and its crash procedure submitted; a server that does not heartbeat at
// all expires with its lease. Either way the crash procedure reassigns
// nothing before the proof below. The dispatcher holds its unanswered ops meanwhile, and fails
// them (ErrServerRemoved) only when the crash procedure has fenced the
// incarnation.
//
// # Why a crash never opens a region twice
//
// A region is reassigned away from incarnation I only once I is fenced
// and proven to have stopped serving:
//
//  1. I cannot open anything any more once fenced, that is, no longer
//     the live incarnation in the replicated state (it expired, or the
//     server registered again): every dispatch carries I's start code,
//     which the server refuses once it registered again ("wrong start
//     code"), and the leader's term, which a server refuses once it saw a
//     newer leader ("stale term"); the leader dispatches an open only
//     after committing OPENING@I, having checked that I was live, and
//     records OPEN only if I is still live when the confirmation comes.
//  2. I holds nothing any more (services.presenceOf): either the process
//     that held I registered again saying so (RegisterServerRequest's
//     dropped_start_code ≥ I: it drops every region before registering,
//     and a registration listing regions still hosted is refused), or I's
//     self-fence deadline has certainly passed. Being told "expired" is no
//     proof: that answer may be lost, and a server that never hears it
//     keeps serving until it fences itself. Nor is a newer start code
//     alone: it may come from a late copy of an earlier registration, or
//     from another process under the same id; a restarted process, which
//     cannot know what it held, waits out the deadline.
//
// # Proof that a server stopped serving
//
// A region server counts its self-fence period from the moment it SENT
// the last heartbeat (or registration) that renewed its lease, and serves
// nothing once the period is over: every read and operation checks the
// deadline first (package rs). The period is at most P = 3 ×
// HeartbeatInterval, the interval the master told it (every master must
// be configured with the same one). The leader records each renewal it
// grants (a registration is one) before its last liveness check of the
// incarnation, and answers it only after verifying its leadership with a
// quorum (raft VerifyLeader). So for a fenced incarnation I the leader
// knows a time R no earlier than I's last renewal: the latest renewal it
// recorded for I, or, if it granted none, the moment its leader services
// started, since a predecessor can verify its leadership (and so renew)
// only before this leader's election. I is proven gone at
//
//	R + P + FenceMargin   (defaults: 6 s + 1 s)
//
// on the leader's clock. FenceMargin covers the rate drift between the two
// clocks over P: the bound holds while the server's clock runs no more
// than FenceMargin/P slower than the leader's (16% with the defaults).
// The lease hard limit (15 s) is longer still, so an expiry by the lease
// monitor is normally proven gone by the time it is recorded; an
// incarnation revoked by the dispatcher and told "expired" waits out the
// bound unless the server registers again first. Until then its regions
// stay recorded on it, locked by whichever procedure waits for the proof,
// and a revoked or expired server gets no new regions.
//
// TransitRegionState applies the same rule at every step: it re-reads the
// target's record before it sends and when the answer arrives, and treats
// a region recorded on a fenced incarnation as closed once that
// incarnation is proven gone, waiting for the proof until then (a
// rollback retries until it). ServerCrash runs
// its reassignments as children that re-check each region under the
// region's lock, so a region some other procedure moved meanwhile is left
// alone, and loops until no region is recorded on the incarnation, so a
// region that raced into OPENING on it is caught too. Because a crash
// procedure is an ordinary procedure, a crash during a master failover is
// simply resumed by the next leader.
//
// Within a term, the attempts the leader sends one incarnation are
// ordered (BatchRequest.seq, one counter per node): a server refuses an
// attempt older than one it admitted, also at the moment each operation
// applies, so an attempt the dispatcher gave up on (timed out, retried)
// can never reopen a region a later batch closed.
//
// # Remote operations
//
// A region procedure records its target (OPENING@S or CLOSING@S) in one
// step, and sends the operation from the next, which suspends on an event
// with a timeout. The dispatcher's result (OnResult) is matched to the
// waiting procedure by proc id, incarnation, region and kind, and wakes it;
// the step then reads the result and records OPEN or CLOSED, or retries.
// The wait is armed before the send, so a result that arrives before the
// procedure suspended leaves the event ready and the suspension returns at
// once. Events do not survive a failover; the new leader re-runs the
// sending step, which sends again: open and close are idempotent on the
// region server (already = true). Within a term an unanswered operation is
// not sent twice (the dispatcher answers every op exactly once); a
// timeout only re-checks the target's liveness. A region server's
// ReportTransition is not trusted to answer an operation (it may be late
// and belong to an earlier send, even an OPEN: of an earlier open on the
// same incarnation, closed since): no report is handed to a waiting
// procedure; a region that closed by itself while recorded OPEN is reopened by a REOPEN procedure (close first, idempotently, then open).
//
// # Procedures and their states
//
//	TransitRegionState  PREPARE → [CLOSE_DISPATCH → OPEN_PREPARE] → [OPEN_DISPATCH]
//	                    (PREPARE does OPEN_PREPARE's work when nothing is to close)
//	                    kinds assign, unassign, move, reopen; region locks for life;
//	                    opens retried on other servers (a create's or enable's
//	                    bounded by Config.MaxOpenAttempts, then it fails)
//	CreateTable         PRE_OPERATION → WRITE_LAYOUT → ASSIGN_REGIONS → MARK_ENABLED
//	                    (from cluster version 2, PRE_OPERATION writes the
//	                    layout and WRITE_LAYOUT is not run)
//	DeleteTable         PRE_OPERATION → MARK_DELETING → UNASSIGN → DELETE_LAYOUT
//	EnableTable         PRE_OPERATION → MARK_ENABLING → ASSIGN_REGIONS → MARK_ENABLED
//	DisableTable        PRE_OPERATION → MARK_DISABLING → UNASSIGN_REGIONS → MARK_DISABLED
//	CreateNamespace     PRE_OPERATION → WRITE;  DeleteNamespace (empty only) the same
//	ServerCrash         FENCE → ASSIGN (a wave of at most Config.CrashWave
//	                    children each time, the next spawned once at most
//	                    CrashInFlight − CrashWave are unfinished, until no
//	                    region is left; a child whose region lock is free
//	                    is prepared in the wave's write and starts at
//	                    OPEN_DISPATCH; from cluster version 2 the children
//	                    are AssignBatch, one per server picked and
//	                    Config.CrashBatch regions)
//	AssignBatch         OPEN (send every region's open, suspend for the
//	                    answers, record the opened OPEN in one write;
//	                    hand the rest to TransitRegionState children) → REST
//	Balance             PLAN (MOVE children, counts within one)
//	LockProcedure       ACQUIRED → HELD, until released or its lease expires
//
// Table procedures hold their table exclusively (namespace shared) for
// life, namespace procedures their namespace exclusively; region
// procedures inherit their parent's table lock. Rollback is real: a failed
// or aborted create (or enable) rolls back its children first, each
// closing the region it opened (a rollback cannot suspend, so it waits for
// the close's answer and fails, to be retried with backoff, without one)
// and recording it OFFLINE (CLOSED), then deletes its layout: a failed
// create never leaves "table exists" behind. Disable and delete can be
// aborted only before their point of no return; crash recovery never.
// ServerCrash and the region transitions that may not be aborted (all but
// a create's or an enable's) have no meaningful rollback: they retry a
// failing step until done (procedure.RetriesUntilDone), so recovering a
// dead server never ends ROLLEDBACK with regions left on it or closed.
//
// Region servers fence themselves (package rs): a server whose heartbeats
// have not got through for three intervals (the soft limit) drops every
// region, well before the hard limit after which the masters reassign them.
//
// # Repair kit and maintenance mode
//
// HBCK2's jobs, done within the guarantees above (repair*.go). Each call
// runs on the leader, serialized with the others; it plans against the
// replicated state and either refuses (FAILED_PRECONDITION, naming what
// stands in the way and what to do) or says what it would do, which is
// all a dry run does. A call that acts is recorded at repair/<seq> before
// it acts and completed after; a refusal is recorded too, but not bad
// input (an over-long name or reason is INVALID_ARGUMENT before anything
// is written). A record's fields are cut to a bound, and the last 10,000
// records are kept: each new one deletes the oldest beyond that in its
// own write. No repair touches a region record itself:
//
//   - AssignRegion / UnassignRegion submit a TransitRegionState. Without
//     override they refuse a region in transition (OPENING, CLOSING,
//     FAILED_OPEN, a proc_id) or locked by another procedure. With
//     override the region's own procedures (the TransitRegionState on
//     its record or holding its lock) are bypassed, unless rolling back
//     (checked at the plan and again, atomically, by the bypass itself),
//     and the new procedure queues behind their lock: it runs after them
//     and reads the record they left, closes the region where it may be
//     open (on a fenced server: waits for the proof it stopped serving)
//     and only then opens it. An override therefore never opens a region
//     twice, whatever the bypassed procedure had sent.
//   - RecoverServer submits a ServerCrash for the server's recorded
//     incarnation if it expired (regions or not) and for each older
//     incarnation still holding regions (the nonce shares one under way).
//     A live incarnation is left alone unless override, the call refused
//     if nothing else is owed; with override it is recorded expired first
//     (fenced, as the lease monitor would), and its crash procedure waits
//     for the proof that it stopped serving before moving anything.
//   - CancelProcedures aborts the unfinished roots matching a filter,
//     evaluated when the call is made; ids or a highest id bind a
//     confirmation to what its dry run listed, so that nothing submitted
//     in between is cancelled with it;
//     BypassProcedure is Executor.Bypass behind guards (a running step, a
//     lock wait, held locks, a rollback need override; children need
//     recursive).
//
// Maintenance mode (maintenance.go) is the replicated key maintenance.
// While it is on, the leader's dispatcher is paused, a region procedure
// about to send an open or close suspends on an event that the mode's end
// wakes, saying "maintenance mode: dispatch paused", a rollback's close
// fails and is retried, and the admin API refuses new submissions with
// FAILED_PRECONDITION (a refusal that lasts until an operator acts;
// UNAVAILABLE would invite retries), except the retry of a submission
// that got through (its nonce is known: it gets its procedure back). The
// leader's dispatch follows the key, not the call that writes it: the
// write does not depend on the caller staying, "on" pauses before it is
// written, and every write, once resolved, sets dispatch from what the
// key then says (as does a call that finds the mode already as asked).
// A new leader reads the key when its services start, so the mode
// survives failovers and restarts. Repair
// calls, lock heartbeats and releases, and the master's own procedures
// (crash recovery) go on; the latter wait at dispatch like the rest.
//
// # Left to do
//
//   - Splits, merges and per-table replica counts; meta regions and their
//     priority; a smarter balancer (locality, per-table spread).
package domain
