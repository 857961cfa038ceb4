// Package scheduler decides which procedure runs next and which may run at
// all. It is the Go counterpart of HBase's MasterProcedureScheduler with its
// FairQueue, LockAndQueue and ProcedureEvent, used by the executor in package
// procedure. It knows procedures only by id; it persists nothing.
//
// # Run queues
//
// Every runnable procedure waits in the queue of one entity, named by a
// QueueKey: a table ("ns:table"), a server, a peer, or meta. Poll picks:
//
//  1. the first Kind with work, in the order meta, server, peer, table:
//     meta must be online before anything else can make progress, and a
//     server crash must be handled before the table operations that wait
//     on its regions;
//  2. within that kind, the highest priority (tables: meta 3, system 2,
//     user 1; a server carrying meta may be given more);
//  3. within that priority, the entities in turn: after one id of entity A
//     the next poll of that priority takes from the entity after A, so a
//     table with 10,000 queued procedures cannot starve one with a single
//     procedure;
//  4. within an entity, FIFO order. AddBack appends; AddFront prepends and
//     also moves the entity to the head of its rotation, so a procedure put
//     at the front is the very next one of its priority. AddFront is for
//     procedures that already waited (woken from a lock or an event) and for
//     children, whose parent waits for them.
//
// An id is queued at most once: adding a queued id is a no-op that returns
// false. An entity queue that empties leaves the rotation and is recycled, so
// idle tables cost no memory. Poll blocks until work arrives, the timeout
// passes, or Close. One mutex guards everything; blocked Polls each wait on
// a pooled one-slot channel and an add wakes exactly one of them, so a busy
// scheduler does no allocation per add or poll in the steady state.
//
// # Locks
//
// A procedure takes all the locks of a step in one Acquire, all or nothing.
// Entities form a hierarchy expressed by what a request contains, not by
// the lock table:
//
//	namespace op (create/delete ns)   namespace X
//	table op (create/delete/alter)    namespace S + table X
//	region op (assign/split/merge)    namespace S + table S + region X ...
//	server op (crash)                 server X
//	peer op                           peer X
//
// so a table lock held exclusively keeps out every region operation in that
// table, region operations in one table run side by side, and a namespace
// held exclusively keeps out every table operation in it. NamespaceLocks,
// TableLocks, RegionLocks, ServerLocks and PeerLocks build these requests.
//
// A request is normalised (duplicates merged, exclusive winning) and sorted
// by (type, name). Nothing is taken unless everything can be: a procedure
// therefore never holds part of a request while it waits for the rest, which
// together with the fixed order rules out lock-order deadlocks among
// requests. When refused, the procedure is parked on the first conflicting
// lock and will be woken when a holder of that lock releases it; it then
// calls Acquire again.
//
// Compatibility, for a request by id of a lock in mode m:
//
//   - held by id itself in a mode at least m: granted again (idempotent);
//   - held by an ancestor of id (its parent, grandparent, ...) exclusively,
//     or shared when m is shared: inherited. Children must be able to work
//     on what their parent locked, or parent and child would deadlock. An
//     inherited lock is not recorded as a hold of the child, so the child's
//     Release leaves the ancestor's lock alone;
//   - exclusive: every holder must be id or an ancestor (a child may take
//     exclusively what its ancestor holds shared);
//   - shared: no exclusive holder outside the family, and no one queued
//     waiting for the lock. The queue check is what keeps a stream of
//     readers from starving a writer: once an exclusive request waits, later
//     shared requests queue behind it.
//
// Release(id) drops all of id's own holds and wakes every waiter of each
// lock it dropped, in arrival order (the earliest first across all those
// locks), and takes id itself out of any lock wait queue.
//
// # Events
//
// An Event is something a suspended procedure waits for: a region server's
// report, a server coming online. WaitEvent parks a procedure unless the
// event is ready; WakeEvent makes it ready and wakes all its waiters in
// arrival order; SuspendEvent makes it not ready again.
//
// # Waking
//
// Woken procedures, from locks and events alike, are handed to Config.Wake
// one by one in arrival order, after the scheduler's mutex is released, so
// the callback may call any Scheduler method. Without a callback the
// scheduler puts them at the front of their queues itself, in reverse, so
// the earliest waiter is polled first.
//
// # Introspection
//
// Why(id) says whether a procedure is queued, which lock it waits for and
// who holds it, which event it waits for, and which locks it holds; Locks
// lists the whole lock table. Together they answer "why is it stuck?".
package scheduler
