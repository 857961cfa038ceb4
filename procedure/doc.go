// Package procedure runs multi-step, crash-proof, rollback-able operations:
// a Go re-creation of HBase's Procedure Framework v2 (Pv2).
//
// docs/procedures.md is the guide: a procedure's path through a cluster,
// what a procedure's author must get right, and the semantics compared with
// Pv2 and Temporal. The examples/ directory holds runnable programs, and
// package procedure/proceduretest proves a procedure survives a crash at
// every store write.
//
// # The contract
//
// A procedure is a Go type registered in a Registry under a name and a
// version. It runs either as a Stepper (embed Base; Execute runs one step,
// Rollback undoes one) or as a state machine (embed StateMachine, implement
// StateSteps); the embedding is what makes it a Procedure. After every step the executor persists the procedure through
// a store.Store — the framework's fields (id, parent, root, owner, nonce,
// times, state, error, result, rollback-stack positions, flags) and the
// type's own state, serialised by StateMarshaler or, by default, JSON — so
// after a crash every procedure resumes from its last persisted step. Steps
// must therefore be idempotent: the step whose outcome was not yet persisted
// runs again. A state the type cannot serialise fails the step whose outcome
// it is (its tree rolls back); that write and those of the rollback carry
// the last state that did serialise (a procedure's first state always does:
// Submit refuses one that does not, and Spawn fails its parent's step), so
// a restart before the rollback is done rolls back from it, never from a
// zero-valued procedure. It is older than the steps run since it was
// written, the failed one among them: after such a restart their Rollback
// runs with that older state, and undoes only what it can tell from it. A
// root's final write (SUCCESS, or ROLLEDBACK) goes without a state, the
// procedure's outcome unchanged.
//
// A step's outcome, as in Pv2:
//
//   - Done: SUCCESS. A child's success counts down its parent's latch; the
//     parent runs again when all its children are done.
//   - More: persisted, and the next step runs at once on the same worker.
//     A state-machine state that asks for itself again this way, without
//     waiting for anything, DefaultMaxStateRepeats times in a row is
//     failed with ErrStateLoop; a state that waits (Suspend, its wake or
//     timeout, children, Yield) does not count, however long it waits.
//   - Spawn(children...): the parent (WAITING, shown so once written) and
//     its children are persisted in one atomic Insert; children run
//     first. A step that asks Context.WakeAtChildren(n) runs the parent's
//     next step once at most n of its children are unfinished (waves of
//     children in a pipeline); the parent is stored WAITING meanwhile,
//     and a load waits for them all.
//   - Suspend(OnEvent, Timeout, SkipPersistence): the worker leaves; the
//     procedure is WAITING (or WAITING_TIMEOUT) until Executor.Wake(event) or
//     its timer (plus up to 10% jitter) makes it RUNNABLE. Get and List show
//     it WAITING once the write of its suspension committed (RUNNABLE, as
//     while its step ran, until then), as they show a spawning parent
//     WAITING and an end: once shown, the step is durable, and a restart
//     resumes the procedure after it, never before (an event wait is
//     loaded RUNNABLE at its next step, as events do not outlive a
//     restart). Only the state waits: Info's History, Runs and Updated
//     count the write as it is sent. A suspension with SkipPersistence is
//     never written and shows at once.
//   - Yield: persisted like More (the step's transition stands), but the
//     worker lets go: the procedure goes to the back of its queue.
//   - an error (or a panic): FAILED. The whole root rolls back, newest step
//     first and across children, once nothing in that tree still runs
//     (below a procedure that retries until done, only a subtree: see
//     below).
//
// Framework states: INITIALIZING, RUNNABLE, WAITING, WAITING_TIMEOUT,
// ROLLEDBACK, SUCCESS, FAILED (FAILED is transient: the tree then rolls back
// and the root ends ROLLEDBACK, keeping the error).
//
// # Procedures that cannot roll back
//
// Some operations have no meaningful undo and must be driven to the end
// instead, like HBase's ServerCrashProcedure. Such a type implements
// RetriesUntilDone. Its failing step is not a failure: the error is logged,
// the step's domain changes are dropped, and the step (for a state machine,
// the same state) runs again after a backoff (Config.RollbackBackoff
// doubling to RollbackBackoffMax); Why says
// "retrying after an error" and Info.Error holds the error meanwhile. It
// cannot be aborted or given a timeout. A descendant of it that fails rolls
// back only the subtree of the procedure's child it belongs to: that child
// ends ROLLEDBACK with the error, the rest of the tree waits for that
// rollback and then goes on, and the procedure runs its next step once all
// its children are finished, free to look at the outcome and spawn again.
// A root that retries until done therefore never ends ROLLEDBACK.
//
// # Locks and queues
//
// A procedure that implements Locker takes its locks (package scheduler:
// namespace > table > region, server, peer; shared or exclusive) before each
// step, all or nothing, and releases them after the step, or holds them for
// its whole life with HoldLock. Children inherit their ancestors' locks.
// A procedure lets go of held-for-life locks once it is finished: a child
// at its SUCCESS, or at its ROLLEDBACK while the rest of its tree still
// rolls back. Held-for-life locks of unfinished procedures are persisted
// and re-acquired on load, root first; a finished procedure never gets one
// back (HBASE-20846), whatever its record says. A step may take a child's
// locks for it before spawning it (Context.AddLockedChild, never waiting):
// it can then write domain state in the child's name, committed with the
// spawn, which persists the child holding its locks. It can also make the
// child's first remote call itself once the spawn is written
// (Context.AfterSpawn) and have the child start suspended on its answer
// (Context.SuspendChild), sparing each child a step that would only make
// the call: no child runs before the calls are made, and a restart finds
// the child runnable, to make the call again itself. A Queued procedure
// picks its run queue (meta > server > peer > table).
//
// # Executor services
//
// Submit with a nonce is idempotent, also across restarts. Ids are monotonic
// across restarts. Results of finished roots are kept for ResultTTL, or
// AckedResultTTL after Ack. A finished root is kept compactly: its record
// is written without what only a live procedure needs (its history packed,
// times relative to its submission), and the executor keeps 16 bytes and
// 8 of its nonce's hash, reading the rest back from the store when asked
// (store.Reader; a store without one has the executor keep the record). Abort (which reaches a procedure waiting for a
// lock, and children spawned after it), Pause/Resume, a guarded Bypass, Wait,
// Why ("what is it waiting for, who holds it"), listeners, Prometheus
// metrics, and a monitor that adds keep-alive workers when half the pool is
// stuck. Stop is graceful: in-flight procedures are left resumable, never
// failed by the shutdown.
//
// # Metrics and traces
//
// With Config.Metrics the executor counts events where they happen
// (submissions, steps and their latency, failures, lock waits and their
// length) and reports what it holds when Prometheus scrapes. Procedures by
// type and state, lock waiters and steps in flight are counted as the
// table changes, under the lock the change holds anyway, so that a scrape
// copies a few numbers: a walk of the table under that lock, per scrape,
// stalled every transition for tens of milliseconds at 100,000 procedures.
// Stuck procedures depend on the time, so a scrape walks the table for
// them, letting go of the lock every 1,024 procedures, and the scrapes of
// the next 5 s share that count. A stopped executor reports nothing, so a
// master that does not lead shows none.
//
// With Config.Tracer every procedure gets an OpenTelemetry span (a root's
// starts a trace, a child's hangs under its parent's) and every step and
// rollback step a span under it, carried in the step's Context so that
// remote work it starts can join the trace. A procedure's first span
// context is persisted with it (28 bytes per record, but for a finished
// root's, which is never resumed), so the executor that resumes it after a
// failover starts its span in the same trace. Without a
// tracer no span is made and nothing is persisted.
//
// # Loading
//
// Start loads the store: it rebuilds each tree's rollback stack (gaps left
// by lost writes are compacted; two steps claiming one position make the
// tree corrupt), recomputes children latches, turns procedures suspended on
// events back to RUNNABLE (events do not survive a restart), re-arms
// timers, re-acquires locks, and queues procedures that had already started
// before fresh ones. A procedure that cannot be decoded, an orphan, a live
// child under a parent stored as before its spawn, or one of an unknown
// type is reported by Problems and in the log and kept in the store
// untouched; its whole tree is held, not run. Nothing is dropped. A
// held root keeps its nonce: a retry of its submission gets its id with an
// error wrapping ErrHeld (an ErrNotAllowed), never a second procedure.
//
// # Versions
//
// The rule for evolving a procedure type: the version registered is the
// version this binary writes (once the cluster version allows it, below);
// it must read the state of every older version.
// On load, UnmarshalState receives the version that wrote the state (with
// the default JSON encoding, added fields read as zero and removed ones are
// ignored, so compatible changes need no code). A procedure written by a
// newer version than the one registered is not loaded: it is reported and
// kept until a binary that knows it starts. A version an older release
// cannot read is registered with the format level that introduced it
// (RegisterWith, TypeOptions.Since): until the cluster version
// (Config.RecordFormat) reaches that level, the executor writes the older
// version through the type's StateDowngrader, and Context.StateVersion
// tells the steps which version they write: while it is the older one, a
// step leaves the procedure in a state that version holds (no state
// machine state, and no field, that only the newer version has), so that
// a member of the older release can resume it after a failover. A
// procedure's version never goes down. The framework's own record is
// protobuf wire format; unknown fields are skipped, so framework upgrades
// stay loadable in both directions.
package procedure
