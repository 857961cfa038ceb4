package cluster

import (
	"context"
	"errors"
	"fmt"
	"github.com/baton-dev/baton/security"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/baton-dev/baton/cluster/filecare"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/fsutil"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// ErrNotLeader is wrapped by the errors of calls that only the leader
// serves. The error is a *NotLeaderError naming the leader, if known;
// errors.Is also matches raft.ErrNotLeader.
var ErrNotLeader = errors.New("cluster: not the leader")

// ErrNotReady is returned by Executor on a leader that has not finished
// establishing its leadership (Barrier, executor start) yet. Retry shortly.
var ErrNotReady = errors.New("cluster: leader not ready")

// ErrShutdown is returned by calls on a node that is shutting down.
var ErrShutdown = errors.New("cluster: node shut down")

// ErrUnknownPeer is returned by RemovePeer for an id that is not in the
// Raft configuration: a typo must not read as a successful removal.
var ErrUnknownPeer = errors.New("cluster: no such member")

// ErrLastVoter is returned by RemovePeer for the only voter: a cluster
// without one can decide nothing, not even to take a member back.
var ErrLastVoter = errors.New("cluster: the only voter cannot be removed")

// ErrTransferFailed is returned by RemovePeer when the leader, asked to
// remove itself, could not hand leadership to another voter first: nothing
// was removed. Retry once another voter is up and caught up.
var ErrTransferFailed = errors.New("cluster: leadership transfer failed")

// ErrNoQuorum is returned by Join and RemovePeer for a change whose new
// configuration would not have a majority of voters answering the leader
// now: Raft counts a configuration as soon as it is appended, so the
// leader would step down and no member could gather the new
// configuration's votes. Nothing was changed. Bring the members that are
// down back (or remove them first), then retry.
var ErrNoQuorum = errors.New("cluster: the new configuration would have no quorum of running voters")

// NotLeaderError says who the leader is, as far as this node knows. Both
// fields are empty while no leader is known (an election is under way).
type NotLeaderError struct {
	LeaderID   string
	LeaderAddr string
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" && e.LeaderAddr == "" {
		return "cluster: not the leader (no leader known)"
	}
	return fmt.Sprintf("cluster: not the leader (leader %q at %s)", e.LeaderID, e.LeaderAddr)
}

// Unwrap returns ErrNotLeader.
func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }

// Is matches raft.ErrNotLeader too, so callers that know only raft's
// sentinel (like raftfsm's store errors) treat both alike.
func (e *NotLeaderError) Is(target error) bool { return target == raft.ErrNotLeader }

// Node is one master: a Raft member running the replicated FSM, and, while
// it is the leader, the procedure executor. See the package documentation.
type Node struct {
	// formatMemo is ClusterFormat's last decoded record (version.go).
	formatMemo atomic.Pointer[formatMemo]

	cfg    Config
	log    hclog.Logger
	raft   *raft.Raft
	fsm    *raftfsm.FSM
	trans  raft.Transport
	snaps  raft.SnapshotStore
	bolt   *raftboltdb.BoltStore // nil when the log store is overridden
	notify chan bool

	noSnapshotRestore bool
	// startedEmpty: no raft state at start, and not bootstrapped
	// (StartedEmpty).
	startedEmpty bool

	// removedSeen is when the leader was last seen not to list this node
	// (MarkRemoved); nil if never.
	removedSeen atomic.Pointer[time.Time]

	reads   *readConfirmer  // batches the quorum rounds of linearizable reads
	contact *contactTracker // when each peer last accepted a request of ours
	// probing marks the peers a read round's probe waits on (probeQuorum).
	probing struct {
		sync.Mutex
		busy map[raft.ServerID]bool
	}
	// seq orders the entries carrying numbered records (the audit
	// trail's) among every path proposing them: the executors' stores
	// and the admin API's direct writes (Sequencer).
	seq raftfsm.Sequencer
	// memberRemover is the autopilot's way to remove a dead member
	// (SetMemberRemover); under mu.
	memberRemover func(ctx context.Context, id, why string) error
	// autopilotStats is what the autopilot did and last saw (metrics).
	autopilotStats autopilotStats

	// Storage failure tracking (storage.go).
	fsmDir      string
	logFault    *storageFault
	stableFault *storageFault
	stable      *guardedStable
	stopStorage chan struct{} // closed when raft shuts down (guardedStable)
	stopOnce    sync.Once

	mu     sync.Mutex // guards exec, rstore, execTerm, closed
	exec   *procedure.Executor
	rstore *raftfsm.RaftStore
	// stopServices stops the LeaderServices of the current term.
	stopServices func()
	execTerm     uint64 // the term exec was established in
	closed       bool
	// execChanged is closed, and replaced, whenever exec is published or
	// revoked (see ExecutorChanged).
	execChanged chan struct{}

	collector *nodeCollector // registered on cfg.Metrics, nil if not

	// The cluster version this binary cannot read, once applied (version.go).
	unreadable     chan struct{} // closed when one is applied
	unreadableOnce sync.Once
	unreadableAt   atomic.Uint32 // the version.Format applied
	failed         chan struct{} // closed once the node stopped for it
	failErr        error         // why; set before failed is closed

	shutdownCh   chan struct{}
	loopDone     chan struct{}
	tuneDone     chan struct{} // closed when tuneLogLoop ends; nil if it never ran
	shutdownOnce sync.Once
	shutdownErr  error
}

// NewNode opens the node's stores and the FSM, starts Raft (bootstrapping
// the cluster from Config.Peers if the node has no Raft state yet) and the
// leadership monitor. The node becomes leader, or follows one, on its own.
func NewNode(cfg Config) (n *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger.With("node", cfg.ID)
	n = &Node{
		cfg:         cfg,
		log:         log,
		notify:      make(chan bool, 1), // raft overwrites a pending value
		shutdownCh:  make(chan struct{}),
		loopDone:    make(chan struct{}),
		stopStorage: make(chan struct{}),
		execChanged: make(chan struct{}),
		unreadable:  make(chan struct{}),
		failed:      make(chan struct{}),
	}
	// Undo whatever was opened if a later step fails.
	var closers []func() error
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()

	if cfg.RecoverQuorum != nil {
		// Before anything is created in it.
		if err := noRaftState(cfg); err != nil {
			return nil, err
		}
	}
	// Before anything is opened: what 0.1.0 left readable is tightened.
	if err := filecare.TightenDataDir(cfg.DataDir, log); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	for _, d := range []string{cfg.DataDir, filepath.Join(cfg.DataDir, "raft"), filepath.Join(cfg.DataDir, "fsm")} {
		if err := fsutil.MkdirPrivate(d); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	// The FSM first: its WAL gives W, which decides how raft starts.
	walCfg := cfg.WAL
	walCfg.Logger = nil
	n.fsm, err = raftfsm.NewFSM(raftfsm.Config{
		Dir:    filepath.Join(cfg.DataDir, "fsm"),
		WAL:    walCfg,
		Logger: log.Named("fsm"),
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: open FSM: %w", err)
	}
	closers = append(closers, n.fsm.Close)
	// Before raft replays anything into it: the start check below sees
	// only what the local WAL holds, and the raft log may hold more.
	n.watchClusterFormat()

	n.fsmDir = filepath.Join(cfg.DataDir, "fsm")
	logs, stable := cfg.LogStore, cfg.StableStore
	logPath := "(log store given in Config)"
	if logs == nil {
		logPath = filepath.Join(cfg.DataDir, "raft", "raft.db")
		// A damaged file is refused here, with the page at fault, rather
		// than met later by a read that bbolt answers with a panic.
		if err := filecare.CheckRaftLog(logPath); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		if _, err := filecare.CompactIfBloated(logPath, cfg.RaftLogCompactBytes, log.Named("raftlog")); err != nil {
			// The original is untouched: a node that cannot shrink its
			// log still runs with it.
			log.Warn("cannot compact the raft log file; running with it as it is", "path", logPath, "error", err)
		}
		n.bolt, err = raftboltdb.New(raftboltdb.Options{
			Path:        logPath,
			BoltOptions: &bbolt.Options{Timeout: time.Second},
			NoSync:      cfg.RaftNoSync,
		})
		if err != nil {
			return nil, fmt.Errorf("cluster: open raft log %s: %w", logPath, err)
		}
		closers = append(closers, n.bolt.Close)
		logs, stable = n.bolt, n.bolt
	}
	n.logFault = &storageFault{what: "raft log", path: logPath, log: log}
	n.stableFault = &storageFault{what: "raft stable store", path: logPath, log: log}
	n.stable = &guardedStable{StableStore: stable, fault: n.stableFault, stop: n.stopStorage}
	stable = n.stable
	meter := &logMeter{}
	logs = &guardedLogs{LogStore: logs, fault: n.logFault, meter: meter}
	if n.bolt != nil {
		logs, err = raft.NewLogCache(512, logs)
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}

	n.snaps = cfg.SnapshotStore
	if n.snaps == nil {
		// NewFileSnapshotStore keeps its files in <base>/snapshots.
		n.snaps, err = filecare.NewPrivateSnapshots(cfg.DataDir, cfg.SnapshotRetain, log.Named("snapshots"))
		if err != nil {
			return nil, fmt.Errorf("cluster: open snapshot store: %w", err)
		}
	}

	// After the stores open, which a directory from before node-id files
	// needs to be judged by its raft configuration.
	if err := checkNodeID(cfg.DataDir, cfg.ID, cfg.RaftAddr, logs, stable, n.snaps); err != nil {
		return nil, err
	}

	// Damaged snapshots are set aside (or the start refused) before raft
	// would meet them (filecare.CheckSnapshots).
	replaceSnap, err := n.checkSnapshots(logs)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}

	// The FSM persists itself: skip raft's restore of the newest snapshot
	// at start when the local WAL already reaches it (raftfsm doc, Restart).
	need, err := raftfsm.NeedsSnapshotRestore(n.snaps, n.fsm.LoadedIndex())
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n.noSnapshotRestore = !need

	n.trans = cfg.Transport
	if n.trans == nil {
		adv, bind, err := raftListenAddrs(cfg.RaftAddr, cfg.RaftBind)
		if err != nil {
			return nil, err
		}
		// MaxRPCsInFlight 1 turns raft's pipelined replication off: in
		// raft 1.7.3 a follower that refuses an AppendEntries (its log
		// store failed: a full disk) while the pipeline is busy leaves the
		// leader's sender blocked for good (hashicorp/raft#612), and the
		// follower never gets another entry although heartbeats go on.
		// Raft's own measurements found pipelining of little benefit with
		// batching (hashicorp/raft#541). TestFullDiskFollower caught it.
		tc := &raft.NetworkTransportConfig{
			MaxPool:         cfg.TransportMaxPool,
			Timeout:         cfg.TransportTimeout,
			Logger:          log.Named("transport"),
			MaxRPCsInFlight: 1,
		}
		var tt *raft.NetworkTransport
		var layer *security.StreamLayer
		layer, err = security.NewRaftStreamLayer(security.RaftLayerConfig{Bind: bind, Advertise: adv, TLS: cfg.RaftTLS,
			Limits: cfg.RaftConnLimits, Metrics: cfg.ListenerMetrics, Logger: log.Named("transport")})
		if err == nil {
			tc.Stream = layer
			tt = raft.NewNetworkTransportWithConfig(tc)
		}
		if err != nil {
			return nil, fmt.Errorf("cluster: raft transport on %s: %w", bind, err)
		}
		n.trans = tt
		closers = append(closers, tt.Close)
	}

	rc := cfg.raftConfig(n.notify)
	rc.NoSnapshotRestoreOnStart = n.noSnapshotRestore

	existing, err := raft.HasExistingState(logs, stable, n.snaps)
	if err != nil {
		return nil, fmt.Errorf("cluster: read raft state: %w", err)
	}
	if cfg.RecoverQuorum != nil {
		if !existing {
			return nil, fmt.Errorf("%w: %s holds no raft state: recover on the surviving member's own data directory", ErrNothingToRecover, cfg.DataDir)
		}
		if err := n.recoverQuorum(rc, logs, stable); err != nil {
			return nil, err
		}
		// The FSM holds everything the new snapshot does (it was taken
		// from it), and the log is empty: raft has nothing to restore.
		need, n.noSnapshotRestore = false, true
		rc.NoSnapshotRestoreOnStart = true
	}
	bootstrap := !existing && len(cfg.Peers) > 0
	if bootstrap && cfg.BeforeBootstrap != nil {
		if bootstrap, err = cfg.BeforeBootstrap(); err != nil {
			return nil, fmt.Errorf("cluster: before bootstrap: %w", err)
		}
		if !bootstrap {
			log.Info("not bootstrapping: a cluster runs already; waiting to be added to it (join)", "peers", FormatPeers(cfg.Peers))
		}
	}
	if bootstrap {
		var conf raft.Configuration
		for _, p := range cfg.Peers {
			// Every node must bootstrap the very same configuration, so the
			// addresses are taken as given (a name stays a name, even for
			// ourselves: a container's IP changes across restarts).
			conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Address), Suffrage: raft.Voter})
		}
		if err := raft.BootstrapCluster(rc, logs, stable, n.snaps, n.trans, conf); err != nil {
			return nil, fmt.Errorf("cluster: bootstrap: %w", err)
		}
		log.Info("bootstrapped cluster", "peers", FormatPeers(cfg.Peers))
	}
	n.startedEmpty = !existing && !bootstrap
	if existing {
		log.Info("restarting from existing raft state", "fsm_wal_index", n.fsm.LoadedIndex(), "snapshot_restore", need)
	}

	var rtrans raft.Transport
	rtrans, n.contact = newContactTracker(n.trans)
	n.raft, err = raft.NewRaft(rc, n.fsm, logs, stable, n.snaps, rtrans)
	if err != nil {
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}
	// The local state is loaded now (the WAL, or the snapshot NewRaft
	// restored), and nothing is served yet.
	if err := n.checkClusterFormat(); err != nil {
		_ = n.raft.Shutdown().Error()
		return nil, err
	}
	n.reads = newReadConfirmer(n.raft, cfg.BarrierTimeout, n.shutdownCh)
	n.probing.busy = map[raft.ServerID]bool{}
	n.reads.probe = n.probeQuorum
	// From here on raft panics on a failed term write: wait for the disk
	// instead (before, a failure is returned, and NewNode fails with it).
	n.stable.arm()
	if cfg.Metrics != nil {
		n.collector = newNodeCollector(n)
		if err := cfg.Metrics.Register(n.collector); err != nil {
			n.collector = nil
			n.log.Warn("node metrics not registered (another node's on this registry?)", "error", err)
		}
	}
	go n.monitorLeadership()
	if cfg.LogBytesBudget >= 0 {
		n.tuneDone = make(chan struct{})
		go n.tuneLogLoop(meter, &logTuner{
			budget:     cfg.LogBytesBudget,
			floor:      DefaultLogBytesFloor,
			minEntries: cfg.LogMinEntries,
			maxThresh:  cfg.SnapshotThreshold,
			maxTrail:   cfg.TrailingLogs,
		})
	}
	if replaceSnap {
		go n.replaceSnapshot()
	}
	// Last: it may shut the node down at once, and close reads what the
	// lines above set (tuneDone).
	go n.stopOnUnreadable()
	return n, nil
}

// ID returns the node's server id.
func (n *Node) ID() string { return n.cfg.ID }

// Addr returns the node's advertised Raft address.
func (n *Node) Addr() string { return string(n.trans.LocalAddr()) }

// Raft exposes the Raft instance, for tests and diagnostics.
func (n *Node) Raft() *raft.Raft { return n.raft }

// StartedEmpty reports whether this node found no Raft state in its data
// directory at start and did not bootstrap: a new member, or one whose
// disk was replaced or wiped, that waits to be added. Its join says so
// (JoinEmpty), so that a leader that still lists it as a voter stops
// counting on a log and vote it no longer holds.
func (n *Node) StartedEmpty() bool { return n.startedEmpty }

// FSM exposes the replicated state machine (read side: View, Get, Scan).
func (n *Node) FSM() *raftfsm.FSM { return n.fsm }

// IsLeader reports whether this node is the Raft leader. The executor may
// not be running yet (see Executor).
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the leader's id and address as this node knows them, or
// empty strings while none is known.
func (n *Node) Leader() (id, addr string) {
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

func (n *Node) notLeader() error {
	id, addr := n.Leader()
	return &NotLeaderError{LeaderID: id, LeaderAddr: addr}
}

// Executor returns the leader's running executor. On a follower it
// returns a *NotLeaderError (wrapping ErrNotLeader) that names the leader;
// on a leader still establishing itself, ErrNotReady; after Shutdown,
// ErrShutdown; on any node whose local storage failed, a *StorageError
// (wrapping ErrStorageFailed), so that the node reports not ready. The executor is valid only while this node stays leader:
// after losing leadership it is stopped and its calls fail.
func (n *Node) Executor() (*procedure.Executor, error) {
	n.mu.Lock()
	x, term, closed := n.exec, n.execTerm, n.closed
	n.mu.Unlock()
	if closed {
		return nil, ErrShutdown
	}
	if err := n.StorageErr(); err != nil {
		return nil, err
	}
	switch {
	case n.raft.State() != raft.Leader:
		return nil, n.notLeader()
	case x == nil || term != n.raft.CurrentTerm():
		return nil, ErrNotReady
	}
	return x, nil
}

// ExecutorChanged returns a channel closed the next time Executor's
// answer changes: an executor published (this leader became ready) or
// revoked. Take it before calling Executor, so a change in between is not
// missed; it spares waiters a poll.
func (n *Node) ExecutorChanged() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.execChanged
}

// execChangedLocked wakes ExecutorChanged's waiters. Call with n.mu held.
func (n *Node) execChangedLocked() {
	close(n.execChanged)
	n.execChanged = make(chan struct{})
}

// PeerStatus is one member of the Raft configuration.
type PeerStatus struct {
	ID       string
	Address  string
	Suffrage string // "Voter", "Nonvoter", "Staging"
	Leader   bool
	// Progress is what this node knows of the member as leader; nil on a
	// node that does not lead.
	Progress *PeerProgress
}

// Status is a point-in-time summary of a node.
type Status struct {
	ID           string
	Address      string
	State        string // raft state: "Leader", "Follower", "Candidate", "Shutdown"
	LeaderID     string
	LeaderAddr   string
	Term         uint64
	LastIndex    uint64 // last entry in the local log
	CommitIndex  uint64
	AppliedIndex uint64 // raft's view of what the FSM applied
	FSMIndex     uint64 // the FSM's own applied index
	FSMWALIndex  uint64 // applied index written to the local WAL (survives a process crash; fsynced at most SyncInterval later)
	StorageErr   string // the local storage failure (StorageErr), if any
	LastContact  time.Time
	Executor     bool // an executor is running here
	// WAL describes the FSM's local WAL; zero for a memory-only FSM.
	WAL   store.WALStats
	Peers []PeerStatus
	// PeersErr is set when the configuration could not be read.
	PeersErr string
	// Removed: this node is not a member (Node.Removed).
	Removed bool
}

// Status returns the node's current status. It does not block on the
// network.
func (n *Node) Status() Status {
	lid, laddr := n.Leader()
	s := Status{
		ID:           n.cfg.ID,
		Address:      n.Addr(),
		State:        n.raft.State().String(),
		LeaderID:     lid,
		LeaderAddr:   laddr,
		Term:         n.raft.CurrentTerm(),
		LastIndex:    n.raft.LastIndex(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.raft.AppliedIndex(),
		FSMIndex:     n.fsm.AppliedIndex(),
		FSMWALIndex:  n.fsm.WALIndex(),
		LastContact:  n.raft.LastContact(),
	}
	if err := n.StorageErr(); err != nil {
		s.StorageErr = err.Error()
	}
	n.mu.Lock()
	s.Executor = n.exec != nil
	n.mu.Unlock()
	s.WAL, _ = n.fsm.WALStats()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		s.PeersErr = err.Error()
		return s
	}
	s.Removed = removedFrom(f.Configuration(), n.cfg.ID) || n.removedByLeader()
	leading, now := s.State == raft.Leader.String(), time.Now()
	for _, srv := range f.Configuration().Servers {
		ps := PeerStatus{
			ID:       string(srv.ID),
			Address:  string(srv.Address),
			Suffrage: srv.Suffrage.String(),
			Leader:   string(srv.ID) == lid,
		}
		if leading {
			p := n.progressOf(srv.ID, s.Term, s.LastIndex, now)
			ps.Progress = &p
		}
		s.Peers = append(s.Peers, ps)
	}
	return s
}

// await waits for a raft future, or until ctx ends (the operation may then
// still complete).
func await(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *Node) raftErr(what string, err error) error {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return fmt.Errorf("cluster: %s: %w", what, n.notLeader())
	}
	if errors.Is(err, raft.ErrRaftShutdown) {
		return fmt.Errorf("cluster: %s: %w", what, ErrShutdown)
	}
	return fmt.Errorf("cluster: %s: %w", what, err)
}

// Join adds server id at addr: as a non-voter that the leader's autopilot
// promotes once it has caught up and stayed healthy (autopilot.go), at
// cluster version 2 with the autopilot on; else, as on 0.1.0, as a voter.
// It returns once the member is added, not promoted. Only the leader may; others
// return a *NotLeaderError. As in rqlite, a member already known under the
// same id and address is left alone, and one that shares only the id or
// only the address (a node rebuilt with a new address, or an address
// reused by a new node) is removed first. A change whose new
// configuration would lack a majority of running voters is refused with
// ErrNoQuorum (checkQuorum).
func (n *Node) Join(ctx context.Context, id, addr string) error {
	return n.join(ctx, id, addr, false)
}

// JoinEmpty is Join for a member that says it holds no Raft state (it
// found none in its data directory at start: StartedEmpty). One still
// listed as a voter at the same id and address had its disk replaced or
// wiped: it lost the log and the vote that Raft's safety rests on, and as
// a voter it could elect a candidate that lacks committed entries (the
// leader and it held them, a lagging third did not). So it is demoted to
// a non-voter, which the autopilot promotes again once it has caught up
// and stayed healthy, as etcd replaces such a member and Consul re-adds
// it as a non-voter. It is demoted only when the autopilot can promote it
// (joinsAsNonvoter); else it stays a voter, as before, with a warning.
// The demotion is refused with ErrNoQuorum if the other voters running
// are no majority of the voters left (checkQuorum).
func (n *Node) JoinEmpty(ctx context.Context, id, addr string) error {
	return n.join(ctx, id, addr, true)
}

func (n *Node) join(ctx context.Context, id, addr string, holdsNoState bool) error {
	if id == "" {
		return errors.New("cluster: join: empty id")
	}
	if err := checkHostPort(addr); err != nil && n.cfg.Transport == nil {
		return fmt.Errorf("cluster: join %q: %w", id, err)
	}
	if n.raft.State() != raft.Leader {
		return fmt.Errorf("cluster: join %q: %w", id, n.notLeader())
	}
	cf := n.raft.GetConfiguration()
	if err := await(ctx, cf); err != nil {
		return n.raftErr("join: read configuration", err)
	}
	nonvoter := n.joinsAsNonvoter()
	suffrage := raft.Voter
	if nonvoter {
		suffrage = raft.Nonvoter
	}
	next := []raft.Server{{ID: raft.ServerID(id), Address: raft.ServerAddress(addr), Suffrage: suffrage}}
	for _, srv := range cf.Configuration().Servers {
		sameID, sameAddr := srv.ID == raft.ServerID(id), srv.Address == raft.ServerAddress(addr)
		if sameID && sameAddr {
			if holdsNoState && srv.Suffrage == raft.Voter {
				return n.demoteEmptyVoter(ctx, cf, srv, nonvoter)
			}
			n.log.Info("join: already a member", "id", id, "addr", addr)
			return nil
		}
		if !sameID && !sameAddr {
			next = append(next, srv)
		}
	}
	// The member added has not been replicated to yet, so it is not
	// counted: those running now must be a quorum of the larger group
	// (etcd's strict reconfiguration check does the same). Except the
	// second member of a single-voter cluster, as etcd allows too: there
	// is no other way to grow one, and nothing running is lost.
	if len(next) != 2 || next[1].ID != raft.ServerID(n.cfg.ID) {
		if err := n.checkQuorum(ctx, fmt.Sprintf("join %q", id), next, raft.ServerID(id)); err != nil {
			return err
		}
	}
	for _, srv := range cf.Configuration().Servers {
		sameID, sameAddr := srv.ID == raft.ServerID(id), srv.Address == raft.ServerAddress(addr)
		switch {
		case sameID || sameAddr:
			n.log.Info("join: removing stale member", "id", srv.ID, "addr", srv.Address)
			if err := await(ctx, n.raft.RemoveServer(srv.ID, 0, 0)); err != nil {
				return n.raftErr(fmt.Sprintf("join %q: remove stale member %q", id, srv.ID), err)
			}
		}
	}
	if nonvoter {
		// The autopilot promotes it once caught up and stable
		// (autopilot.go); until then it holds back no quorum.
		if err := await(ctx, n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 0)); err != nil {
			return n.raftErr(fmt.Sprintf("join %q", id), err)
		}
		n.log.Info("join: added non-voter; the leader promotes it to voter once it has caught up and stayed healthy",
			"id", id, "addr", addr, "stabilization", n.cfg.ServerStabilizationTime)
		return nil
	}
	if err := await(ctx, n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 0)); err != nil {
		return n.raftErr(fmt.Sprintf("join %q", id), err)
	}
	n.log.Info("join: added voter", "id", id, "addr", addr)
	return nil
}

// demoteEmptyVoter makes srv, a voter of cf that rejoined holding no Raft
// state, a non-voter (JoinEmpty), when the autopilot can promote it again
// (canPromote).
func (n *Node) demoteEmptyVoter(ctx context.Context, cf raft.ConfigurationFuture, srv raft.Server, canPromote bool) error {
	id, addr := string(srv.ID), string(srv.Address)
	if srv.ID == raft.ServerID(n.cfg.ID) {
		// A leader holds the log it leads with: the claim is not ours.
		n.log.Warn("join: a join for this leader's own id says it holds no raft state; left alone", "id", id, "addr", addr)
		return nil
	}
	if !canPromote {
		n.log.Warn("join: member rejoined holding no raft state (data directory replaced or wiped) and stays a voter: "+
			"nothing promotes a non-voter below cluster version 2 or with non-voter joins off (server stabilization time < 0), "+
			"so demoting it would leave it a non-voter for good; until it has caught up, its vote may elect a member that lacks committed entries",
			"id", id, "addr", addr, "cluster_version", n.ClusterFormat(), "stabilization", n.cfg.ServerStabilizationTime)
		return nil
	}
	next := slices.Clone(cf.Configuration().Servers)
	for i := range next {
		if next[i].ID == srv.ID {
			next[i].Suffrage = raft.Nonvoter
		}
	}
	if err := n.checkQuorum(ctx, fmt.Sprintf("join %q (holding no raft state): demote to non-voter", id), next, ""); err != nil {
		return err
	}
	// Not fenced to the configuration read: GetConfiguration's Index is
	// always 0 in raft v1.7.3 (see promote). Unfenced is safe here, unlike
	// AddVoter: raft demotes only a server it has, so a member removed
	// meanwhile does not come back, and one the autopilot promoted again
	// meanwhile was caught up (it is demoted once more, which is only
	// slower).
	if err := await(ctx, n.raft.DemoteVoter(srv.ID, 0, 0)); err != nil {
		return n.raftErr(fmt.Sprintf("join %q: demote the voter that rejoined holding no raft state", id), err)
	}
	n.log.Warn("join: member rejoined holding no raft state (data directory replaced or wiped): demoted to non-voter; "+
		"the leader promotes it again once it has caught up and stayed healthy",
		"id", id, "addr", addr, "stabilization", n.cfg.ServerStabilizationTime)
	return nil
}

// RemovePeer removes server id from the cluster. Only the leader may.
// An id that is not a member is ErrUnknownPeer (NOT_FOUND).
//
// The leader does not remove itself: a leader that commits its own
// removal steps down at once, and whoever asked never hears that it
// committed (nor does anything written after it, like an audit record).
// Asked for its own id, it hands leadership to another voter (raft's
// LeadershipTransfer, as etcd and Consul do) and answers a *NotLeaderError,
// so that the caller asks the new leader, which removes it as any other
// member; ErrTransferFailed if no voter took over, ErrLastVoter if there
// is no other voter. ErrNoQuorum if the members left would not have a
// majority running (checkQuorum): a member that is down is removed while
// the others are up, not the other way round.
func (n *Node) RemovePeer(ctx context.Context, id string) error {
	if n.raft.State() != raft.Leader {
		return fmt.Errorf("cluster: remove %q: %w", id, n.notLeader())
	}
	cf := n.raft.GetConfiguration()
	if err := await(ctx, cf); err != nil {
		return n.raftErr("remove: read configuration", err)
	}
	if id == n.cfg.ID && slices.ContainsFunc(cf.Configuration().Servers, func(s raft.Server) bool { return s.ID == raft.ServerID(id) }) {
		if !n.hasOtherVoter() {
			return fmt.Errorf("cluster: remove %q: %w", id, ErrLastVoter)
		}
		// Checked here too, not only by the leader it hands over to:
		// a removal that cannot go through must not move leadership.
		if err := n.checkQuorum(ctx, fmt.Sprintf("remove %q", id), without(cf.Configuration().Servers, id), ""); err != nil {
			return err
		}
		n.log.Info("remove: this leader is the member to remove; transferring leadership first", "id", id)
		if err := await(ctx, n.raft.LeadershipTransfer()); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("cluster: remove %q: transfer leadership first: %w", id, ctx.Err())
			}
			return fmt.Errorf("cluster: remove %q: could not hand leadership to another voter first (%v), so nothing was removed: %w", id, err, ErrTransferFailed)
		}
		n.log.Info("remove: leadership transferred; the new leader removes this node", "id", id)
		return fmt.Errorf("cluster: remove %q: leadership handed over: %w", id, n.notLeader())
	}
	for _, srv := range cf.Configuration().Servers {
		if srv.ID == raft.ServerID(id) {
			if err := n.checkQuorum(ctx, fmt.Sprintf("remove %q", id), without(cf.Configuration().Servers, id), ""); err != nil {
				return err
			}
			if err := await(ctx, n.raft.RemoveServer(srv.ID, 0, 0)); err != nil {
				return n.raftErr(fmt.Sprintf("remove %q", id), err)
			}
			n.log.Info("removed peer", "id", id)
			return nil
		}
	}
	return fmt.Errorf("cluster: remove %q: %w", id, ErrUnknownPeer)
}

// without is servers less id.
func without(servers []raft.Server, id string) []raft.Server {
	return slices.DeleteFunc(slices.Clone(servers), func(s raft.Server) bool { return s.ID == raft.ServerID(id) })
}

// checkQuorum returns nil once the voters of next that answer this leader
// (itself, if in next, and each that accepts a request sent after the
// call began; never fresh, which is not replicated to yet) are a majority
// of next's voters, and ErrNoQuorum if they are not within two heartbeat
// timeouts (the leader heartbeats ten times a timeout). A configuration
// entry counts from the moment it is appended: one without such a
// majority would make this leader step down and leave no member able to
// win an election, for good while the members it counts on stay down.
// Only requests sent after the call count, so a member that stopped a
// moment ago is not taken for a running one.
func (n *Node) checkQuorum(ctx context.Context, what string, next []raft.Server, fresh raft.ServerID) error {
	clk := n.cfg.Clock
	since := clk.Now()
	wait := 2 * max(n.cfg.HeartbeatTimeout, n.cfg.LeaderLeaseTimeout)
	deadline := since.Add(wait)
	poll := max(n.cfg.HeartbeatTimeout/10, time.Millisecond)
	for {
		// A leader that stepped down meanwhile (cut off, or outvoted)
		// says so: its caller retries on the new leader, which may well
		// have the quorum this one no longer sees.
		if n.raft.State() != raft.Leader {
			return fmt.Errorf("cluster: %s: %w", what, n.notLeader())
		}
		voters, running := 0, 0
		var down []string
		for _, s := range next {
			if s.Suffrage != raft.Voter {
				continue
			}
			voters++
			switch {
			case s.ID == raft.ServerID(n.cfg.ID), s.ID != fresh && n.contact.ackedSince(s.ID, since):
				running++
			default:
				down = append(down, string(s.ID))
			}
		}
		if 2*running > voters {
			return nil
		}
		if clk.Now().After(deadline) {
			return fmt.Errorf("cluster: %s: of the %d voters of the new configuration, only %d answer this leader (not %s), fewer than a majority: nothing was changed: %w",
				what, voters, running, strings.Join(down, ", "), ErrNoQuorum)
		}
		if err := clock.Sleep(ctx, clk, poll); err != nil {
			return fmt.Errorf("cluster: %s: checking the new configuration keeps a quorum: %w", what, err)
		}
	}
}

// Shutdown stops the node gracefully. A leader first stops its executor
// (running steps finish and persist, bounded by ctx) and hands leadership
// to another voter, so no procedure is failed and the next leader takes
// over at once instead of after an election timeout; then Raft shuts down
// and the stores close. Calling it again returns the first result.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutdownOnce.Do(func() { n.shutdownErr = n.shutdown(ctx) })
	return n.shutdownErr
}

func (n *Node) shutdown(ctx context.Context) error {
	n.mu.Lock()
	n.closed = true // no new executor from here on
	n.mu.Unlock()
	if n.raft.State() == raft.Leader {
		// Whoever takes the executor out of n.exec stops it: here, or
		// the leader loop if leadership goes first. establish never
		// publishes one once closed is set.
		n.revoke(ctx)
		if n.hasOtherVoter() {
			if err := await(ctx, n.raft.LeadershipTransfer()); err != nil {
				n.log.Warn("shutdown: leadership transfer failed; peers will elect after a timeout", "error", err)
			} else {
				n.log.Info("shutdown: leadership transferred")
			}
		}
	}
	return n.close()
}

// Removed reports whether this node is not a member of the cluster, as
// after 'baton cluster remove': its latest Raft configuration lists
// members but not it, or the leader was seen not to list it (MarkRemoved)
// and has not replicated to it since. A node that has not joined yet (an
// empty configuration) is not removed. Cheap: raft keeps the latest
// configuration at hand.
func (n *Node) Removed() bool {
	f := n.raft.GetConfiguration()
	return f.Error() == nil && removedFrom(f.Configuration(), n.cfg.ID) || n.removedByLeader()
}

// MarkRemoved records that the leader's configuration, as the leader
// answered it, does not list this node. A removed member does not always
// learn of its removal from raft: the leader stops replicating to it as it
// appends the change, so the entry reaches it only if that last attempt
// succeeds (and a member removed while down never sees it). The mark holds
// until a leader replicates to this node again (it re-joined).
func (n *Node) MarkRemoved() {
	now := time.Now()
	if n.removedSeen.Load() == nil {
		n.log.Warn("this node is not a member of the cluster: the leader's configuration does not list it (removed); it serves nothing until it re-joins")
	}
	n.removedSeen.Store(&now)
}

func (n *Node) removedByLeader() bool {
	t := n.removedSeen.Load()
	if t == nil {
		return false
	}
	if n.raft.State() == raft.Leader || n.raft.LastContact().After(*t) {
		// A leader replicated to this node since: a member again.
		if n.removedSeen.CompareAndSwap(t, nil) {
			n.log.Info("this node is a member of the cluster again: a leader replicates to it")
		}
		return false
	}
	return true
}

func removedFrom(c raft.Configuration, id string) bool {
	return len(c.Servers) > 0 && !slices.ContainsFunc(c.Servers, func(s raft.Server) bool { return s.ID == raft.ServerID(id) })
}

func (n *Node) hasOtherVoter() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.ID != raft.ServerID(n.cfg.ID) && s.Suffrage == raft.Voter {
			return true
		}
	}
	return false
}

// close stops the leader loop (which revokes any executor), raft and the
// stores, in that order.
func (n *Node) close() error {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	close(n.shutdownCh)
	<-n.loopDone
	if n.tuneDone != nil {
		<-n.tuneDone
	}
	if n.collector != nil {
		// A node restarted on the same registry registers its own.
		n.cfg.Metrics.Unregister(n.collector)
	}
	var errs []error
	if err := n.shutdownRaft(); err != nil {
		errs = append(errs, err)
	}
	if c, ok := n.trans.(io.Closer); ok {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("transport: %w", err))
		}
	}
	if err := n.fsm.Close(); err != nil {
		errs = append(errs, fmt.Errorf("fsm: %w", err))
	}
	if n.bolt != nil {
		if err := n.bolt.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raft log: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster: shutdown: %w", err)
	}
	return nil
}

// shutdownRaft shuts raft down. A stable-store write that still fails for
// want of disk never returns (storage.go), and raft's shutdown would wait
// for it forever: in that case the node gives up on raft's goroutines after
// saying so, and lets the process exit.
func (n *Node) shutdownRaft() error {
	n.stopOnce.Do(func() { close(n.stopStorage) })
	err := raftfsm.AwaitFuture(n.raft.Shutdown(), nil, 50*time.Millisecond, func() error {
		if !n.stable.isStuck() {
			return nil
		}
		err := n.stableFault.get()
		n.log.Error("raft did not stop: a term or vote write is still waiting for the failing disk; abandoning it", "error", err)
		return err
	})
	if err != nil {
		return fmt.Errorf("raft shutdown: %w", err)
	}
	return nil
}

// Kill stops the node abruptly, as a crash would as far as the cluster
// can tell: no leadership transfer and no graceful executor stop; Raft is
// shut down first, so a leader's in-flight writes fail. The disk state is
// left as it is. For tests.
func (n *Node) Kill() error {
	var err error
	n.shutdownOnce.Do(func() {
		n.mu.Lock()
		n.closed = true
		n.mu.Unlock()
		err = n.shutdownRaft()
		n.shutdownErr = n.close()
		err = errors.Join(err, n.shutdownErr)
	})
	return err
}

// TransferLeadership hands this leader's leadership to voter to (empty:
// raft's choice, the most caught-up voter), as RemovePeer does for a
// leader removing itself, and returns once raft says the transfer is
// done (this node has stepped down); the new leader may not be known here
// yet. Only the leader may (*NotLeaderError otherwise). ErrUnknownPeer if
// to is not a member; ErrLastVoter if no other voter could take over;
// ErrTransferFailed if none did.
func (n *Node) TransferLeadership(ctx context.Context, to string) error {
	if n.raft.State() != raft.Leader {
		return fmt.Errorf("cluster: transfer leadership: %w", n.notLeader())
	}
	var f raft.Future
	if to == "" {
		if !n.hasOtherVoter() {
			return fmt.Errorf("cluster: transfer leadership: %w", ErrLastVoter)
		}
		f = n.raft.LeadershipTransfer()
	} else {
		cf := n.raft.GetConfiguration()
		if err := await(ctx, cf); err != nil {
			return n.raftErr("transfer leadership: read configuration", err)
		}
		i := slices.IndexFunc(cf.Configuration().Servers, func(s raft.Server) bool { return s.ID == raft.ServerID(to) })
		if i < 0 {
			return fmt.Errorf("cluster: transfer leadership to %q: %w", to, ErrUnknownPeer)
		}
		srv := cf.Configuration().Servers[i]
		if srv.Suffrage != raft.Voter {
			return fmt.Errorf("cluster: transfer leadership to %q: it is a %s, not a voter (the autopilot promotes it once caught up): %w", to, srv.Suffrage, ErrTransferFailed)
		}
		f = n.raft.LeadershipTransferToServer(srv.ID, srv.Address)
	}
	n.log.Info("transferring leadership", "to", to)
	if err := await(ctx, f); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("cluster: transfer leadership: %w", ctx.Err())
		}
		return fmt.Errorf("cluster: transfer leadership: no voter took over (%v): %w", err, ErrTransferFailed)
	}
	n.log.Info("leadership transferred", "to", to)
	return nil
}
