package cluster

import (
	"fmt"
	"github.com/baton-dev/baton/security"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/defaults"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// Defaults of Config. The Raft timings are tuned for masters on one LAN;
// see Config.HeartbeatTimeout for the reasoning.
const (
	DefaultHeartbeatTimeout   = 300 * time.Millisecond
	DefaultElectionTimeout    = 300 * time.Millisecond
	DefaultLeaderLeaseTimeout = 300 * time.Millisecond
	DefaultCommitTimeout      = 50 * time.Millisecond
	DefaultSnapshotThreshold  = 8192
	DefaultSnapshotInterval   = 120 * time.Second
	DefaultTrailingLogs       = 10240
	DefaultMaxAppendEntries   = 64
	DefaultSnapshotRetain     = 2
	DefaultTransportTimeout   = 10 * time.Second
	DefaultTransportMaxPool   = 3
	DefaultBarrierTimeout     = 30 * time.Second
	DefaultRevokeTimeout      = 2 * time.Second
	DefaultHealthInterval     = time.Second
	DefaultWorkers            = 1024
	// Autopilot (autopilot.go), Consul's defaults.
	DefaultServerStabilizationTime = 10 * time.Second
	DefaultMaxTrailingLogs         = 250
	DefaultMinQuorum               = 3
	DefaultReadyMaxLag             = 250
)

// Peer is one member of the static bootstrap configuration.
type Peer struct {
	ID      string
	Address string // host:port of the peer's Raft transport
}

// String formats p as "id=host:port", the form ParsePeers reads.
func (p Peer) String() string { return p.ID + "=" + p.Address }

// ParsePeers reads a bootstrap list "id=host:port,id=host:port,...".
// Blanks around items are ignored, an empty string is an empty list. Every
// item needs a non-empty id and a host:port address with a numeric port;
// ids and addresses must be unique.
func ParsePeers(s string) ([]Peer, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var peers []Peer
	ids := map[string]int{}
	addrs := map[string]int{}
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		n := i + 1
		if item == "" {
			return nil, fmt.Errorf("cluster: peers: item %d is empty (stray comma?)", n)
		}
		id, addr, ok := strings.Cut(item, "=")
		id, addr = strings.TrimSpace(id), strings.TrimSpace(addr)
		if !ok {
			return nil, fmt.Errorf("cluster: peers: item %d %q: want id=host:port", n, item)
		}
		if id == "" {
			return nil, fmt.Errorf("cluster: peers: item %d %q: empty id", n, item)
		}
		if err := checkHostPort(addr); err != nil {
			return nil, fmt.Errorf("cluster: peers: item %d %q: %w", n, item, err)
		}
		if j, dup := ids[id]; dup {
			return nil, fmt.Errorf("cluster: peers: id %q appears in items %d and %d", id, j, n)
		}
		if j, dup := addrs[addr]; dup {
			return nil, fmt.Errorf("cluster: peers: address %q appears in items %d and %d", addr, j, n)
		}
		ids[id], addrs[addr] = n, n
		peers = append(peers, Peer{ID: id, Address: addr})
	}
	return peers, nil
}

// FormatPeers is the inverse of ParsePeers.
func FormatPeers(peers []Peer) string {
	parts := make([]string, len(peers))
	for i, p := range peers {
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}

func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: want host:port: %w", addr, err)
	}
	if host == "" {
		return fmt.Errorf("address %q: empty host", addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("address %q: port must be a number in 1..65535", addr)
	}
	return nil
}

// Config configures a master Node. Build it from DefaultConfig and set the
// identity fields; zero durations and counts are replaced by the defaults
// (Validate reports the effective values' problems).
type Config struct {
	// ID is this node's Raft server id: stable across restarts and unique in
	// the cluster. Required.
	ID string

	// DataDir holds the node's durable state: raft/ (the bolt log and
	// stable store), snapshots/ (Raft snapshots), fsm/ (the FSM's local
	// WAL). Required, also in tests that override the Raft stores, since
	// the FSM keeps its WAL there.
	DataDir string

	// RaftAddr is the host:port the Raft TCP transport binds to and
	// advertises to peers, so it must be reachable by them (not 0.0.0.0).
	// Required unless Transport is set.
	RaftAddr string

	// RaftBind, if set, is the host:port the Raft transport listens on
	// instead of RaftAddr (e.g. 0.0.0.0:7071 in a Kubernetes pod, whose
	// own DNS name may not resolve at its first second). RaftAddr is then
	// advertised as given, never resolved by this node. Empty (the
	// default): listen on RaftAddr, advertised as it resolves.
	RaftBind string

	// Peers is the static bootstrap configuration, identical on every node
	// (see ParsePeers). It is used only when the node has no Raft state yet:
	// the first start bootstraps the cluster from it, every later start
	// ignores it, so the same command line serves first start and restart.
	// If set it must contain this node with its advertised address. Empty
	// means "do not bootstrap": the node waits to be added with Join.
	Peers []Peer

	// BeforeBootstrap, if set, is asked on a start that would bootstrap
	// from Peers (no Raft state, Peers set), right before it does: false
	// leaves the node unbootstrapped, to be added with Join as if Peers
	// were empty; an error fails NewNode. The agent's derived-peers start
	// asks the other members whether a cluster runs already, so that a
	// member whose data was lost joins it instead of bootstrapping a
	// configuration of its own (cmd/node, agent_bootstrap_guard.go).
	// Default nil: bootstrap.
	BeforeBootstrap func() (bootstrap bool, err error)

	// Build is what this node's binary is: the version it reports to the
	// leader and the highest format level it writes and reads. A node
	// whose replicated state holds a cluster version above
	// Build.MaxFormat refuses to start. Default version.Current("") (this
	// binary, version.Dev); the agent gives the version it was linked
	// with, and a test a lower MaxFormat to stand in for an older binary.
	Build version.Build

	// HeartbeatTimeout: a follower that hears nothing from the leader for a
	// random time in [HeartbeatTimeout, 2×HeartbeatTimeout) starts an
	// election; the leader heartbeats every HeartbeatTimeout/10.
	// ElectionTimeout bounds a candidate's wait for votes the same way.
	// Defaults 300 ms each (raft's are 1 s, which users see as 2–3 s
	// failovers). Detection then takes 300–600 ms, the vote a LAN round
	// trip, and the new leader's Barrier plus executor start a few
	// milliseconds more, so a failover's p50 lands near 0.5 s, under the
	// 1 s goal. Lower values fail over faster but risk needless elections
	// on GC pauses or a busy network; raise them on a WAN.
	//
	// The trade-off, measured (TestElectionSoak, BENCHMARKS.md): with
	// raft's pre-vote (on) a follower that alone loses touch for a
	// HeartbeatTimeout asks the others first and is refused while they
	// still hear the leader, so it costs no term; the needless elections
	// on a loaded host come from the leader lease (LeaderLeaseTimeout,
	// which raft bounds by HeartbeatTimeout): a leader that has not heard
	// a quorum's heartbeat answers for that long, because its own process
	// or both followers' stalled (CPU busy loops plus disk freezes), steps
	// down, and a new term follows. Failover time is HeartbeatTimeout to
	// twice it plus a vote, so every stall these timings ride out adds to
	// it: `baton agent --raft-multiplier N` (or --raft-heartbeat-timeout,
	// --raft-leader-lease) is the operator's choice on a shared host or a
	// WAN, at the cost of a slower failover.
	HeartbeatTimeout time.Duration
	ElectionTimeout  time.Duration

	// LeaderLeaseTimeout: a leader that has not heard from a quorum for this
	// long steps down, which bounds how long a partitioned leader keeps
	// running its executor. Must be ≤ HeartbeatTimeout. Default 300 ms, the
	// heartbeat timeout (raft's is 500 ms), or HeartbeatTimeout if that is
	// set lower. It does not enter the failover
	// time (followers notice a dead leader by HeartbeatTimeout) nor read
	// safety (reads confirm leadership with a round, read.go); it only
	// decides how long a busy leader may go unanswered. At 150 ms a
	// saturated 2-core VM (3 masters encoding snapshots at once, load 10)
	// made leaders step down every few seconds, each step-down costing an
	// election and a reload of every live procedure (BENCHMARKS.md).
	LeaderLeaseTimeout time.Duration

	// CommitTimeout is how long an idle leader waits before sending a
	// heartbeat that tells followers the commit index. Default 50 ms
	// (raft's default); followers' FSMs lag at most about this much, and
	// only the leader executes, so lower buys little.
	CommitTimeout time.Duration

	// SnapshotThreshold (log entries since the last snapshot) and
	// SnapshotInterval (how often the threshold is checked) trigger Raft
	// snapshots; TrailingLogs is how many entries stay in the log after one,
	// so a follower that is a little behind catches up from the log instead
	// of a snapshot transfer. Defaults 8192, 120 s, 10240 (raft's). Each
	// node's FSM also keeps its own WAL, so snapshots only bound the Raft
	// log and the catch-up of new or far-behind nodes.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64

	// SnapshotRetain is how many Raft snapshots stay on disk. Default 2.
	SnapshotRetain int

	// LogBytesBudget bounds the Raft log in bytes rather than entries: each
	// SnapshotInterval the node sets raft's SnapshotThreshold and
	// TrailingLogs to LogBytesBudget ÷ the mean entry size it measured,
	// within [LogMinEntries, the configured counts] (logbudget.go), so the
	// entries since the last snapshot and the trailing entries each hold
	// about this many bytes. Default 0: max(the live state, 16 MiB), the
	// live state being the local WAL's live bytes. Negative turns the
	// bound off (the entry counts as configured).
	LogBytesBudget int64
	// LogMinEntries is the fewest entries the byte budget may set either
	// count to; a count configured below it stays as configured (tests
	// that snapshot every few entries). Default 64.
	LogMinEntries uint64

	// RaftLogCompactBytes: at start-up, raft.db is rewritten to hold only
	// its live pages when it is at least this big and more than twice
	// those pages (bbolt never shrinks a file, so a log that once held a
	// big backlog keeps its size; see filecare.CompactIfBloated). Default 64 MiB;
	// negative never rewrites it.
	RaftLogCompactBytes int64

	// MaxAppendEntries caps the entries per AppendEntries RPC and, with
	// BatchApplyCh, the Applies raft groups into one log write. Default 64
	// (raft's): a RaftStore entry already carries a whole group commit (up
	// to RaftStore.MaxBatchBytes), so more entries per RPC mostly grows the
	// RPC.
	MaxAppendEntries int

	// BatchApplyCh buffers raft's apply channel so concurrent Applies are
	// written in one batch. DefaultConfig sets it; leave it on.
	BatchApplyCh bool

	// TransportTimeout is the TCP transport's I/O timeout (snapshot
	// transfers scale it up). Default 10 s. TransportMaxPool is the number of
	// pooled connections per peer. Default 3.
	TransportTimeout time.Duration
	TransportMaxPool int

	// BarrierTimeout bounds the Barrier a new leader waits on before it
	// starts its executor. Default 30 s. If it expires the node gives up
	// leadership (see leader.go).
	BarrierTimeout time.Duration

	// RevokeTimeout bounds how long a node that lost leadership waits for
	// its executor's workers to let go. Its writes fail with ErrNotLeader
	// from the first moment anyway. Default 2 s.
	RevokeTimeout time.Duration

	// HealthInterval is how often the leader checks that its executor is
	// still running (an executor stops itself after a store failure); a
	// dead executor is rebuilt from the FSM, or leadership handed over.
	// Default 1 s.
	HealthInterval time.Duration

	// The autopilot (autopilot.go, after Consul's): with the cluster at
	// version 2, a member joins as a non-voter, and the leader promotes it
	// to voter once it has stayed healthy (answering the leader, at most
	// MaxTrailingLogs entries behind) for ServerStabilizationTime without
	// a break. Default 10 s; negative turns non-voter joins off (members
	// join as voters at once, as on 0.1.0). MaxTrailingLogs default 250.
	ServerStabilizationTime time.Duration
	MaxTrailingLogs         uint64
	// DeadMemberTimeout: a voter that has not answered the leader for
	// longer than this is removed, by the leader, once at least MinQuorum
	// other voters are healthy (its replacement promoted): the voters
	// never fall below MinQuorum. Default 0: never. MinQuorum default 3.
	DeadMemberTimeout time.Duration
	MinQuorum         int

	// Clock tells the time the autopilot judges by, and times its looks
	// and its waits for a member to answer. Default clock.Real{}. Raft
	// stamps the pipelined answers that make a member healthy with the
	// wall clock, so a test moves time with a testing/synctest bubble
	// (whose fake time clock.Real reads), not with a clock.Manual.
	Clock clock.Clock
	// ReadyMaxLag is how many entries a follower's applied index may be
	// behind the leader's commit index and still be ready (/readyz,
	// Node.CatchUp): a Kubernetes readiness gate, so a member restarted
	// or joining is not counted (by a rolling update, a disruption
	// budget) until it has caught up. Default 250, the autopilot's
	// MaxTrailingLogs: a member healthy enough to be promoted is ready.
	// Lower is stricter but may flap under a heavy write load.
	ReadyMaxLag uint64

	// Registry decodes persisted procedures. Required.
	Registry *procedure.Registry
	// Env is handed to every procedure step as Context.Env.
	Env any
	// Workers is the executor's core worker pool (0: procedure's default,
	// max(GOMAXPROCS/4, 16)). A step holds its worker until its transition
	// has committed through Raft, so the pool caps how many steps one
	// leader log write (one fsync) can carry: with 16, 64 procedures in
	// flight got 14 steps per fsync (`baton bench scale --commit`). More
	// workers cost an idle goroutine each. Default 1024 (DefaultWorkers),
	// as many as one Raft entry takes (raftfsm's MaxBatchWrites): at 300 k
	// regions on 2 cores, 64 opened 2,376 regions/s and reopened a crashed
	// server's 100 k regions in 26.6 s, 1024 opened 4,896–4,986 and
	// reopened them in 17.0–21.5 s (BENCHMARKS.md).
	Workers int
	// Executor, if set, adjusts each executor's configuration before it is
	// built (TTLs, backoffs, clock). Its Store, Registry, Env, Workers,
	// Logger, Metrics and Tracer are already filled in; a wrapper of the
	// Store must keep the interfaces it implements (store.DeleteMutator,
	// store.Reader) and write through it, which fences the writes by term. A new executor is
	// built every time this node becomes leader: the procedure package
	// adopts the collectors an earlier one registered on the same Metrics.
	Executor func(*procedure.Config)
	// PrepareExecutor, if set, is called with each new executor before it
	// starts (to add listeners). An error aborts establishing leadership.
	PrepareExecutor func(*procedure.Executor) error
	// LeaderServices, if set, starts the leader-only services of the domain
	// (dispatcher, lease monitor) for term, after PrepareExecutor and before
	// the executor starts, so resumed procedures find them running. The
	// returned stop is called when leadership ends, right after the
	// executor stopped. An error aborts establishing leadership.
	LeaderServices func(term uint64, x *procedure.Executor) (stop func(), err error)

	// WAL is the template of the FSM's local WAL configuration (its Dir is
	// ignored). Zero fields take the store package's defaults, except Sync,
	// which defaults to store.SyncOnRoll: the FSM's WAL only speeds up
	// restarts, raft's log (fsynced) and snapshots hold the truth, so its
	// appends are not fsynced one by one; a power loss costs a replay of at
	// most the last SyncInterval (or a snapshot restore), never data.
	// store.SyncEveryBatch fsyncs every apply batch (slower steps).
	WAL store.WALConfig
	// Store configures the Raft-backed procedure store of each executor.
	Store raftfsm.RaftStoreConfig

	// RaftNoSync skips fsync in the bolt log store. Tests only.
	RaftNoSync bool

	// Logger receives the node's log lines (raft's included). Default: a
	// null logger.
	Logger hclog.Logger

	// Metrics, when set, registers the node's collectors (baton_raft_*:
	// state, term, leader, indexes, last contact; baton_wal_*: the local
	// WAL) for as long as the node runs, and is each executor's
	// procedure.Config.Metrics (Executor may still change it). Raft's own
	// timings come through go-metrics instead: see admin.InstallRaftMetrics.
	Metrics prometheus.Registerer
	// TracerProvider, when set, gives each executor its tracer
	// (procedure.Config.Tracer): a span per procedure and step. Default
	// nil: no tracing.
	TracerProvider trace.TracerProvider

	// RaftTLS, if set, carries Raft over mutual TLS that admits only
	// masters' certificates (security.StreamLayer): a region server's or
	// a client's certificate from the same CA cannot speak Raft. Default
	// plaintext TCP. Ignored when Transport is set.
	RaftTLS *security.Credentials
	// RaftConnLimits bound the connections the Raft port accepts: the
	// TLS handshake (in plaintext, the first call) within its
	// HandshakeTimeout, and at most MaxPerSource at once from one address,
	// refusals counted in ListenerMetrics (nil: not counted). Zero: the
	// defaults. Ignored when Transport is set.
	RaftConnLimits  security.ConnLimits
	ListenerMetrics *security.ListenerMetrics

	// RecoverQuorum, if set, makes NewNode turn the node's raft state into
	// a cluster of this node alone before raft starts, for a cluster that
	// lost a majority of its voters for good (recover.go). It is called
	// with what the recovery would do; an error returned stops NewNode
	// with it, nothing changed. NewNode refuses a data directory without
	// raft state (ErrNothingToRecover), and a node that is the only voter
	// already, is no member, or still sees a quorum (ErrRecoveryRefused).
	// A one-shot operator action: never set it on an ordinary start.
	RecoverQuorum func(QuorumRecoveryPlan) error

	// Overrides for tests: when set, used instead of the TCP transport and
	// the bolt / file stores (e.g. raft.NewInmemTransport, raft.InmemStore,
	// raft.InmemSnapshotStore). LogStore and StableStore go together. The
	// node closes the transport if it implements io.Closer, but never
	// closes the stores it was given.
	Transport     raft.Transport
	LogStore      raft.LogStore
	StableStore   raft.StableStore
	SnapshotStore raft.SnapshotStore
}

// DefaultConfig returns a Config with every default filled in; the caller
// sets ID, DataDir, RaftAddr, Peers and Registry.
func DefaultConfig() Config {
	return Config{
		HeartbeatTimeout:        DefaultHeartbeatTimeout,
		ElectionTimeout:         DefaultElectionTimeout,
		LeaderLeaseTimeout:      DefaultLeaderLeaseTimeout,
		CommitTimeout:           DefaultCommitTimeout,
		SnapshotThreshold:       DefaultSnapshotThreshold,
		SnapshotInterval:        DefaultSnapshotInterval,
		TrailingLogs:            DefaultTrailingLogs,
		SnapshotRetain:          DefaultSnapshotRetain,
		LogMinEntries:           DefaultLogMinEntries,
		RaftLogCompactBytes:     DefaultRaftLogCompactBytes,
		MaxAppendEntries:        DefaultMaxAppendEntries,
		BatchApplyCh:            true,
		TransportTimeout:        DefaultTransportTimeout,
		TransportMaxPool:        DefaultTransportMaxPool,
		BarrierTimeout:          DefaultBarrierTimeout,
		RevokeTimeout:           DefaultRevokeTimeout,
		HealthInterval:          DefaultHealthInterval,
		ServerStabilizationTime: DefaultServerStabilizationTime,
		MaxTrailingLogs:         DefaultMaxTrailingLogs,
		MinQuorum:               DefaultMinQuorum,
		ReadyMaxLag:             DefaultReadyMaxLag,
		WAL:                     store.WALConfig{Sync: store.SyncOnRoll},
		Workers:                 DefaultWorkers,
	}
}

// withDefaults fills zero fields with their defaults (BatchApplyCh, a
// bool, is left as set).
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	defaults.Set(&c.HeartbeatTimeout, d.HeartbeatTimeout)
	defaults.Set(&c.ElectionTimeout, d.ElectionTimeout)
	// The lease must not exceed the heartbeat timeout: one set below the
	// default lease takes the lease down with it.
	defaults.Set(&c.LeaderLeaseTimeout, min(d.LeaderLeaseTimeout, c.HeartbeatTimeout))
	defaults.Set(&c.CommitTimeout, d.CommitTimeout)
	defaults.Set(&c.SnapshotInterval, d.SnapshotInterval)
	defaults.Set(&c.TransportTimeout, d.TransportTimeout)
	defaults.Set(&c.BarrierTimeout, d.BarrierTimeout)
	defaults.Set(&c.RevokeTimeout, d.RevokeTimeout)
	defaults.Set(&c.HealthInterval, d.HealthInterval)
	defaults.Set(&c.ServerStabilizationTime, d.ServerStabilizationTime)
	defaults.Set(&c.MaxTrailingLogs, d.MaxTrailingLogs)
	defaults.Set(&c.MinQuorum, d.MinQuorum)
	defaults.Set(&c.ReadyMaxLag, d.ReadyMaxLag)
	defaults.Set(&c.SnapshotThreshold, d.SnapshotThreshold)
	defaults.Set(&c.TrailingLogs, d.TrailingLogs)
	defaults.Set(&c.SnapshotRetain, d.SnapshotRetain)
	defaults.Set(&c.LogMinEntries, d.LogMinEntries)
	defaults.Set(&c.RaftLogCompactBytes, d.RaftLogCompactBytes)
	defaults.Set(&c.MaxAppendEntries, d.MaxAppendEntries)
	defaults.Set(&c.TransportMaxPool, d.TransportMaxPool)
	defaults.Set(&c.Logger, hclog.NewNullLogger())
	defaults.Set[clock.Clock](&c.Clock, clock.Real{})
	// What this binary says it is, as `baton version` does: a test
	// build's format stamp included (version.Current).
	self := version.Current("")
	defaults.Set(&c.Build.Version, self.Version)
	defaults.Set(&c.Build.MaxFormat, self.MaxFormat)
	return c
}

// Validate says what is wrong with c (after defaults are applied), naming
// every problem found.
func (c Config) Validate() error {
	c = c.withDefaults()
	problems := defaults.NewProblems("cluster: config: ")
	bad := problems.Addf
	if c.ID == "" {
		bad("ID is required")
	}
	if c.DataDir == "" {
		bad("DataDir is required")
	}
	if c.Transport == nil {
		if c.RaftAddr == "" {
			bad("RaftAddr is required (or a Transport override)")
		} else if err := checkHostPort(c.RaftAddr); err != nil {
			bad("RaftAddr: %v", err)
		} else if host, _, _ := net.SplitHostPort(c.RaftAddr); isUnspecified(host) {
			bad("RaftAddr %q is advertised to peers and must name a reachable host, not a wildcard", c.RaftAddr)
		}
		if c.RaftBind != "" {
			if err := checkHostPort(c.RaftBind); err != nil {
				bad("RaftBind: %v", err)
			}
		}
	}
	if (c.LogStore == nil) != (c.StableStore == nil) {
		bad("LogStore and StableStore overrides go together")
	}
	if c.Registry == nil {
		bad("Registry is required")
	}
	if c.Workers < 0 {
		bad("Workers %d is negative", c.Workers)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"HeartbeatTimeout", c.HeartbeatTimeout}, {"ElectionTimeout", c.ElectionTimeout},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout}, {"CommitTimeout", c.CommitTimeout},
		{"SnapshotInterval", c.SnapshotInterval}, {"TransportTimeout", c.TransportTimeout},
		{"BarrierTimeout", c.BarrierTimeout}, {"RevokeTimeout", c.RevokeTimeout},
		{"HealthInterval", c.HealthInterval}, {"DeadMemberTimeout", c.DeadMemberTimeout},
	} {
		if f.v < 0 {
			bad("%s %v is negative", f.name, f.v)
		}
	}
	if c.MinQuorum < 1 {
		bad("MinQuorum %d must be at least 1", c.MinQuorum)
	}
	if c.HeartbeatTimeout > 0 && c.HeartbeatTimeout < 5*time.Millisecond {
		bad("HeartbeatTimeout %v is below raft's minimum of 5ms", c.HeartbeatTimeout)
	}
	if c.ElectionTimeout > 0 && c.ElectionTimeout < 5*time.Millisecond {
		bad("ElectionTimeout %v is below raft's minimum of 5ms", c.ElectionTimeout)
	}
	if c.LeaderLeaseTimeout > 0 && c.LeaderLeaseTimeout < 5*time.Millisecond {
		bad("LeaderLeaseTimeout %v is below raft's minimum of 5ms", c.LeaderLeaseTimeout)
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		bad("LeaderLeaseTimeout %v exceeds HeartbeatTimeout %v", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if c.MaxAppendEntries < 0 || c.MaxAppendEntries > 1024 {
		bad("MaxAppendEntries %d is out of range 1..1024", c.MaxAppendEntries)
	}
	if c.SnapshotRetain < 0 {
		bad("SnapshotRetain %d is negative", c.SnapshotRetain)
	}
	if c.TransportMaxPool < 0 {
		bad("TransportMaxPool %d is negative", c.TransportMaxPool)
	}
	if len(c.Peers) > 0 {
		ids, addrs := map[string]bool{}, map[string]bool{}
		self := false
		for i, p := range c.Peers {
			if p.ID == "" {
				bad("Peers[%d]: empty id", i)
			}
			if p.Address == "" {
				bad("Peers[%d] %q: empty address", i, p.ID)
			}
			if ids[p.ID] {
				bad("Peers: id %q appears twice", p.ID)
			}
			if addrs[p.Address] {
				bad("Peers: address %q appears twice", p.Address)
			}
			ids[p.ID], addrs[p.Address] = true, true
			if p.ID == c.ID {
				self = true
				if c.Transport == nil && c.RaftAddr != "" && p.Address != c.RaftAddr {
					bad("Peers lists this node %q at %q but RaftAddr is %q", p.ID, p.Address, c.RaftAddr)
				}
			}
		}
		if !self && c.ID != "" {
			bad("Peers does not list this node's ID %q", c.ID)
		}
	}
	return problems.Err()
}

func isUnspecified(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// raftConfig builds raft's configuration from c (defaults applied).
func (c Config) raftConfig(notify chan<- bool) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.ID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.SnapshotThreshold = c.SnapshotThreshold
	rc.SnapshotInterval = c.SnapshotInterval
	rc.TrailingLogs = c.TrailingLogs
	rc.MaxAppendEntries = c.MaxAppendEntries
	rc.BatchApplyCh = c.BatchApplyCh
	rc.NotifyCh = notify
	rc.Logger = c.Logger.Named("raft")
	// A removed member keeps its raft running as a follower outside the
	// configuration, so that 'baton cluster join' brings it back without
	// a restart. It cannot disturb the cluster: raft does not start
	// elections on a node without a vote in its configuration, and the
	// members refuse (pre-)votes from a node not in theirs. Node.RemovePeer
	// hands leadership away before a leader's own removal; this covers a
	// leader removed some other way (raft steps it down to follower).
	rc.ShutdownOnRemove = false
	return rc
}
