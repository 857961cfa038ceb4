// Package dispatch is Baton's remote procedure dispatcher: it carries the
// region opens and closes that procedures ask for to the region servers,
// in batches, and hands each operation's outcome back. It follows HBase's
// RemoteProcedureDispatcher / RSProcedureDispatcher.
//
// # Batching
//
// Dispatch puts an Op in the buffer of its target server and returns at
// once. A buffer is flushed when it holds more than Config.MinBatch ops
// (default 32, so the 33rd op sends a batch of 33 at once) or when its
// oldest op has waited Config.Delay (default 150 ms, measured on
// Config.Clock, so tests drive it with a clock.Manual). One
// RegionServer.ExecuteBatch call carries the buffer, up to
// Config.MaxBatch ops (default 1,000)
// (BatchRequest{term, master_id, server_id, start_code, ops}), and the
// response's per-op results are handed to Config.OnResult, one Result per
// dispatched op, exactly once.
//
// Calls to one server are paced (Config.Pace, default 20 ms): a batch due
// sooner than Pace after the server's last call started waits out the
// rest, unless it holds MaxBatch ops or is a retry. Many small tables
// created back to back each send a few dozen opens per server, every one
// over MinBatch: unpaced, each went in a call of its own, and the calls'
// fixed cost on both ends was most of a region server's CPU. Paced, a call
// carries the bursts of Pace; a server quiet for Pace gets its burst at
// once.
//
// A server is an incarnation: buffers are keyed by ServerID and StartCode,
// like HBase's ServerName (host, port, start code). An op is only ever sent
// with the start code it was dispatched with; re-using a buffer across a
// restart would let an open meant for the dead incarnation land on the new
// one, behind the back of the ServerCrashProcedure that is about to
// reassign that region elsewhere.
//
// # One call in flight per server
//
// At most one ExecuteBatch call is in flight per server; ops arriving
// meanwhile wait for the next batch, which is sent as soon as the call
// returns if it is due: over MinBatch, or its oldest op waited Delay, or
// the returning call carried more than MinBatch ops. That last rule sizes
// batches by the work: under a stream (a crash reassigning a third of a
// million regions) each call carries everything that arrived during the
// previous one, up to MaxBatch, and the last few ops of a burst go with
// the next call instead of waiting out the Delay. Why one call:
//
//   - Order. A procedure may close a region right after opening it (a
//     move, a disable racing an assign). Two concurrent calls can be
//     served in either order, and a close overtaken by its open leaves the
//     region open with nobody owning it. With one call at a time the
//     server sees batches in dispatch order, and a retry keeps the failed
//     ops ahead of newer ones. (A call abandoned on timeout may still be
//     executing on the server when the next one arrives: the region server
//     must serialize operations per region, and open/close being
//     idempotent makes a retried op's second arrival harmless.)
//   - Back-pressure. A slow server gets fewer, bigger batches instead of a
//     growing number of concurrent calls; the wait of one call is exactly
//     what lets the next batch fill up: BenchmarkDispatch sends 20,000 ops
//     to 20 servers in 45 to 190 calls (100 to 450 ops per call, the more
//     the slower the round trip). One batch carries at most MaxBatch ops
//     (at most 4096, which keeps a response far below gRPC's 4 MiB
//     default message limit).
//   - Retries cannot pile up: a server that is failing has at most one
//     call out, then waits its backoff (HBASE-22287 was a retry storm).
//
// # Errors and retries
//
// The outcome of a call decides what happens to the ops it carried:
//
//   - A response: every op gets its own result (OK, Already, or Err
//     wrapping ErrOpFailed with the server's message). An op the server
//     refused individually is not retried; the procedure decides.
//   - FAILED_PRECONDITION "stale term": a region server has seen a newer
//     leader, so this master is deposed. The ops get ErrStaleTerm and are
//     not retried. The term is fixed for a Dispatcher's life, so every
//     other server would answer the same: the dispatcher latches the
//     error, fails every buffered op with it and refuses new ones.
//   - FAILED_PRECONDITION "wrong start code": the server restarted, the
//     incarnation the ops were meant for is gone. They fail with
//     ErrWrongStartCode (which matches ErrServerRemoved), are not
//     retried, and OnServerFailed is called once for the incarnation. The
//     new incarnation re-registered after closing everything, so nothing
//     these ops (or earlier attempts of them) did survives.
//   - A region server says which refusal it is in an rspb.RefusalDomain
//     ErrorInfo detail (reason STALE_TERM, WRONG_START_CODE, or
//     CLUSTER_ID_MISMATCH, which counts as a wrong start code), and that
//     decides. A server that sends no detail (0.1.0), or a reason this
//     master does not know, is read by its message as above, and the
//     message is kept for that: a 0.1.0 master reads only it.
//   - Another refusal that proves the request was not acted upon
//     (INVALID_ARGUMENT, UNIMPLEMENTED, PERMISSION_DENIED, …): the ops fail
//     with ErrRefused, not retried.
//   - Anything else is retried: DEADLINE_EXCEEDED, CANCELED, UNAVAILABLE,
//     INTERNAL, UNKNOWN, plain (non-status) errors such as connection
//     refused. Some of these mean the request never left (connection
//     refused, UNAVAILABLE before the request was written); others may
//     mean it arrived and was applied (DEADLINE_EXCEEDED, CANCELED,
//     UNAVAILABLE after the request was written, a lost response), and
//     gRPC does not tell which. Re-sending is safe only because open and
//     close are idempotent on the region server (a repeated open of an
//     open region succeeds with already = true). This is the one place
//     the dispatcher relies on idempotency; an operation that is not
//     idempotent must not go through this retry path.
//
// Retried ops go back to the front of their server's buffer, and the next
// attempt, after RetryBase × attempts² (capped at RetryMax, plus up to 10%
// jitter), sends them together with whatever arrived meanwhile. attempts
// counts consecutive failed calls to the server; a response resets it.
//
// After MaxFailures consecutive failed calls, OnServerFailed is called once
// and the server is held: its ops (the failed ones and any dispatched
// later) stay buffered, unsent and unanswered, until RemoveServer (or
// Stop). They are not failed at once on purpose: a call that timed out may
// have opened the region, and answering "failed" would let the procedure
// open it elsewhere while it is still open here (HBASE-14012, HBASE-21811).
// OnServerFailed asks the caller to expire the server; the caller's
// ServerCrashProcedure fences it (its start code is no longer accepted)
// and then calls RemoveServer, and only then do the ops fail, with
// ErrServerRemoved, when reassigning them is safe.
//
// # Removal and stop
//
// RemoveServer drops every incarnation of a server id: buffered, retrying,
// held and in-flight ops get ErrServerRemoved before it returns, and the
// in-flight call is cancelled (its eventual answer is ignored). A
// Transport that also has a RemoveServer(serverID) method (GRPCTransport
// does) is told, so it can close its connections. Stop does the same for
// every server with ErrStopped, waits for the sender goroutines and
// returns; no callback runs after Stop returns.
//
// # Pause
//
// Pause stops every send until Resume (the leader's maintenance mode): ops
// keep arriving in their buffers and retries keep their place, but no
// ExecuteBatch call starts; Resume sends what is due at once. A call on
// the wire when Pause comes is not recalled.
//
// # Callbacks
//
// OnResult and OnServerFailed are never called under the dispatcher's
// lock, so they may call back into it (re-dispatching from OnResult is
// fine). They are called from the dispatcher's goroutines, concurrently
// for different servers, and from the calling goroutine for ops that are
// answered at once: inside Dispatch (invalid op, stopped, deposed, dead
// incarnation), RemoveServer and Stop. OnServerFailed is called before the
// results of the ops it concerns.
//
// # Transports
//
// Transport is the boundary: GRPCTransport is the production one (lazy
// grpc.NewClient per server address, cached); LocalTransport calls
// in-process rspb.RegionServerServer implementations, for tests of the
// layers above; TransportFunc adapts a function.
//
// # Metrics and traces
//
// Config.Metrics registers the baton_dispatch_* collectors: calls by
// outcome and their latency, operations per call, operations answered by
// result, retries, servers given up, and, read at scrape time, the
// operations buffered and in flight. Config.Tracer makes a client span of
// every call in the trace of each operation it carries (Op.Span: a batch
// can mix procedures of several trees), and tells the region server each
// operation's span (RegionOp.trace_parent) and the first one in the call's
// metadata (GRPCTransport), so that its spans join the same traces.
package dispatch
