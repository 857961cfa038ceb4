// Package admin serves Baton's admin API (proto/adminpb/admin.proto) on every
// master, and the node's HTTP endpoints (/status, /readyz, /metrics,
// and, with WithDebugEndpoints, /debug/pprof and /debug/domain).
//
// # Leader-only calls and forwarding
//
// Submit, Abort, Pause, Resume, Ack, AddPeer, RemovePeer and RegisterNode
// are served by the leader. A standby forwards them over gRPC to the
// leader's admin address and relays the answer, status codes and details
// unchanged (forward.go). Reads are linearizable unless the caller asks for
// stale ones (read.go): a standby forwards a linearizable read to the
// leader, which confirms its leadership before answering. Procedures are
// read from the FSM's committed records (procread.go), never from the
// executor's memory, which runs ahead of its commits. ClusterStatus is
// answered locally: it is the answering node's view.
//
// The leader's admin address is learned from the replicated domain state:
// the key cluster.AdminAddrKey(id) ("nodes/<id>/admin_addr") holds node
// id's admin address (registration.go). Each node's Server runs a registration loop: a leader writes its
// own key directly, a standby that sees a leader and finds its own key
// missing or stale calls RegisterNode, which it forwards to the leader's
// address once the leader has registered itself. Every node therefore
// converges to knowing every address, with no configuration beyond each
// node's own advertised address.
//
// Beside it, under cluster.HTTPAddrKey(id), a node registers its HTTP
// address when Config.HTTPAddr names one: ClusterStatus reports every
// member's, so that a standby's web console (cluster/console) can link to
// the leader's.
//
// Forwarding connections use client.FailoverDialOptions: keepalive notices
// a leader that vanished without closing its connections (a SIGKILLed
// container, a dead host) within seconds. A forwarded call is also
// cancelled, and answered UNAVAILABLE with a LeaderHint naming the new
// leader, as soon as this node's view of the leader changes (it becomes
// the leader itself, or learns of another one, or of none), so a client
// whose call was forwarded to a dead leader retries at once; and a
// forwarded unary call whose caller set no deadline is bounded by
// Config.ForwardTimeout. Servers must allow the forwarding connections'
// pings: Serve does, and a gRPC server built otherwise should be given
// KeepaliveEnforcement.
//
// A forwarded call is marked with the gRPC metadata key "x-baton-forwarded";
// a node that receives a marked call and is not the leader (stale state)
// does not forward again but answers UNAVAILABLE. UNAVAILABLE answers carry
// an adminpb.LeaderHint (leader id and admin address, as far as known), so
// the client library can retry at the leader. What the mark and the
// origin it carries say (for the rate limit and the records) is believed
// only from a master: its certificate, or without TLS a call carrying
// Config.ClusterSecret; a caller that only says so is itself.
//
// # Watch
//
// WatchProcedure polls the leader's committed state every
// Config.WatchInterval (default 50 ms) and sends the procedure each time it
// differs from what was last sent, starting with its current state (read
// after a leadership confirmation), until it is terminal or the client goes
// away. Polling was chosen over Executor.AddListener
// because a new executor is built at every leadership change and listeners
// cannot be removed: a hub would have to be re-attached per executor and
// would keep stopped executors alive; polling re-resolves the executor at
// each tick and costs one map lookup per watcher per tick. A tick that
// finds the procedure's committed record unchanged builds nothing, but
// once a second: its Why and progress move with its children, and
// computing them walks the children, which at every tick took a leader
// serving a thousand watches of creates 43% of its CPU. If the node loses
// leadership mid-watch the stream ends with UNAVAILABLE (and a hint); the
// client re-watches at the new leader, which sends the current state first.
//
// # Introspection
//
// ListLocks shows the leader's lock table (a snapshot of its scheduler's,
// which takes the scheduler's own short lock and never the executor's),
// each party described from its committed record; ProcedureStats counts
// the committed procedures in one pass over their Summaries. Both, and
// ListProcedures' filters, are what the web console pages through.
//
// # Health
//
// The standard gRPC health service reports SERVING, for "" and for
// "baton.admin.v1.Admin", while the node is ready: it is the leader with a
// running executor, or a follower that knows a leader. Server reflection is
// registered too.
package admin
