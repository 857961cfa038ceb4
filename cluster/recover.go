package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Quorum recovery: when a majority of the voters are gone for good (their
// disks lost), no member can ever be elected again, and raft has no way
// out from inside the cluster. Config.RecoverQuorum makes NewNode rewrite
// this node's raft state into a cluster of one (hashicorp/raft's
// RecoverCluster, what Consul's peers.json does) before raft starts: the
// newest snapshot and every entry of the local log are applied to the FSM,
// a snapshot of the result is stored carrying the new configuration, and
// the log is emptied. The node then starts as the only voter, elects
// itself, and new members join it ('baton cluster join').
//
// What the survivor holds is all the new cluster will have. Raft does not
// persist the commit index, so the best this node knows is what it had
// applied (its local WAL, or its newest snapshot): the entries after that
// were received but never known committed here, and recovery commits them.
// Whatever the lost members committed past this node's last entry never
// reached it and is gone.
//
// The local WAL may be ahead of the log: raft.db lost its tail (a restored
// copy, a disk that lied about a sync, RaftNoSync) while the FSM's WAL kept
// what it had applied, which was committed. RecoverCluster would then roll
// the FSM back to the newest snapshot, or store the WAL's state under the
// log's shorter index so that the FSM skips the next new entries as
// applied; recovery instead keeps the FSM's state and stores it at its own
// index (recoverKeepingState).

// ErrNothingToRecover is returned by NewNode with Config.RecoverQuorum for
// a data directory that holds no raft state: there is nothing to recover
// from, and a quiet start of an empty cluster would hide the mistake.
var ErrNothingToRecover = errors.New("cluster: nothing to recover")

// ErrRecoveryRefused is returned by NewNode with Config.RecoverQuorum when
// the recovery would not help or would do harm: this node already is the
// only voter, is not a member at all, or a quorum of the members still
// answers. Nothing was changed.
var ErrRecoveryRefused = errors.New("cluster: quorum recovery refused")

// QuorumRecoveryPlan is what a quorum recovery would do, as this node's
// stores tell it, for the operator to confirm (Config.RecoverQuorum).
type QuorumRecoveryPlan struct {
	DataDir string
	// Self is this node, the only voter after the recovery, at the
	// address it advertises now.
	Self Peer
	// Members is the latest configuration the node holds; Dropped those of
	// them recovery leaves out (all but this node), each with whether it
	// answered on its raft address (Answering).
	Members []Peer
	Dropped []Peer
	// Answering are the dropped members that accepted a connection on
	// their raft address: they may still be running.
	Answering []string
	// LastIndex and LastTerm are the local log's last entry (or the
	// newest snapshot's, for an empty log).
	LastIndex, LastTerm uint64
	// KnownCommitted is the highest index this node knows was committed:
	// what it had applied (its local WAL, or its newest snapshot).
	KnownCommitted uint64
	// WALIndex is the index the local procedure WAL (the FSM's own store)
	// had applied, SnapshotIndex the newest raft snapshot's (0: none).
	// Both are printed beside the log's last index, so that an operator
	// choosing among survivors compares what each would keep (Keeps).
	WALIndex, SnapshotIndex uint64
	// StateAheadOfLog is set when the local WAL had applied past the end
	// of the log and the snapshots (KnownCommitted > LastIndex: the raft
	// log lost its tail, a restored copy or a disk that lied about a
	// sync). Recovery then keeps the FSM's state at KnownCommitted instead
	// of replaying the shorter log.
	StateAheadOfLog bool
	// Uncertain counts the entries after KnownCommitted up to LastIndex,
	// and UncertainCommands those of them that change the state: recovery
	// commits them, though the old cluster may never have.
	Uncertain, UncertainCommands uint64
}

// Keeps is the highest index the recovered cluster starts from: the log's
// last entry, or the local WAL's index when that is ahead of the log. Of
// several survivors, the one whose Keeps is highest loses the least.
func (p QuorumRecoveryPlan) Keeps() uint64 { return max(p.LastIndex, p.KnownCommitted) }

// String is the plan as the operator reads it.
func (p QuorumRecoveryPlan) String() string {
	var b strings.Builder
	names := func(ps []Peer) string {
		var s []string
		for _, m := range ps {
			s = append(s, m.String())
		}
		return strings.Join(s, ", ")
	}
	fmt.Fprintf(&b, "quorum recovery of %s (data directory %s)\n", p.Self.ID, p.DataDir)
	fmt.Fprintf(&b, "  members now:       %s\n", names(p.Members))
	fmt.Fprintf(&b, "  after recovery:    %s, the only voter\n", p.Self)
	fmt.Fprintf(&b, "  members dropped:   %s\n", names(p.Dropped))
	fmt.Fprintf(&b, "  this node's log:   up to index %d (term %d); known committed here up to index %d\n", p.LastIndex, p.LastTerm, p.KnownCommitted)
	snap := "no snapshot"
	if p.SnapshotIndex > 0 {
		snap = fmt.Sprintf("newest snapshot at index %d", p.SnapshotIndex)
	}
	fmt.Fprintf(&b, "  local WAL:         applied up to index %d; %s\n", p.WALIndex, snap)
	fmt.Fprintf(&b, "  keeps:             up to index %d, the higher of the log's and the WAL's: of several survivors, recover the one\n"+
		"                     whose log ends in the latest term, and among those the one that keeps the most\n"+
		"                     (run this plan on each, without --yes)\n", p.Keeps())
	if p.StateAheadOfLog {
		fmt.Fprintf(&b, "  local state:       applied up to index %d (its WAL), past the log's end: the raft log lost entries %d..%d;\n"+
			"                     recovery keeps this state, at index %d, and new entries follow it\n",
			p.KnownCommitted, p.LastIndex+1, p.KnownCommitted, p.KnownCommitted)
	}
	if p.Uncertain > 0 {
		fmt.Fprintf(&b, "  may be lost:       entries %d..%d (%d, %d of them state changes) were received here but never known committed:\n"+
			"                     recovery commits them, though their callers may have been told they failed\n",
			p.KnownCommitted+1, p.LastIndex, p.Uncertain, p.UncertainCommands)
		fmt.Fprintf(&b, "                     ")
	} else {
		fmt.Fprintf(&b, "  may be lost:       ")
	}
	fmt.Fprintf(&b, "anything the dropped members committed after index %d never reached this node and is lost\n", p.Keeps())
	if len(p.Answering) > 0 {
		fmt.Fprintf(&b, "  WARNING:           %s accepted a connection on its raft address: if it still runs, stop it for good before\n"+
			"                     recovering, or two clusters will each believe they are this one\n", strings.Join(p.Answering, ", "))
	}
	fmt.Fprintf(&b, "  then:              %s leads alone; add members with 'baton cluster join', each started with an empty data\n"+
		"                     directory and without --peers\n", p.Self.ID)
	return b.String()
}

// recoverProbeTimeout bounds each dial of a dropped member's raft address.
const recoverProbeTimeout = time.Second

// noRaftState refuses a quorum recovery in a data directory without a
// raft log, before NewNode creates one: a refusal changes nothing.
func noRaftState(cfg Config) error {
	if cfg.LogStore != nil {
		return nil
	}
	path := filepath.Join(cfg.DataDir, "raft", "raft.db")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s holds no raft log (%s): recover on the surviving member's own data directory", ErrNothingToRecover, cfg.DataDir, path)
	} else if err != nil {
		return fmt.Errorf("cluster: recover quorum: %w", err)
	}
	return nil
}

// planQuorumRecovery reads what recovery would do from the opened stores;
// it refuses what recovery cannot or should not do (ErrNothingToRecover,
// ErrRecoveryRefused). It changes nothing.
func (n *Node) planQuorumRecovery(logs raft.LogStore, stable raft.StableStore) (QuorumRecoveryPlan, error) {
	self := Peer{ID: n.cfg.ID, Address: string(n.trans.LocalAddr())}
	p := QuorumRecoveryPlan{DataDir: n.cfg.DataDir, Self: self}
	conf, ok, err := latestConfiguration(logs, stable, n.snaps)
	if err != nil {
		return p, fmt.Errorf("cluster: recover quorum: read the raft configuration: %w", err)
	}
	if !ok || len(conf.Servers) == 0 {
		return p, fmt.Errorf("%w: %s holds no raft state: recover on the surviving member's own data directory", ErrNothingToRecover, n.cfg.DataDir)
	}
	member, otherVoters := false, 0
	for _, s := range conf.Servers {
		peer := Peer{ID: string(s.ID), Address: string(s.Address)}
		p.Members = append(p.Members, peer)
		if s.ID == raft.ServerID(n.cfg.ID) {
			member = true
			continue
		}
		p.Dropped = append(p.Dropped, peer)
		if s.Suffrage == raft.Voter {
			otherVoters++
		}
	}
	if !member {
		return p, fmt.Errorf("%w: %s is not a member of the configuration its log holds (%s): it was removed, and its state may be long out of date; recover on a member",
			ErrRecoveryRefused, n.cfg.ID, peerIDs(p.Members))
	}
	if otherVoters == 0 {
		return p, fmt.Errorf("%w: %s already is the only voter (members: %s): it has a quorum on its own; start it without --recover-quorum",
			ErrRecoveryRefused, n.cfg.ID, peerIDs(p.Members))
	}

	snaps, err := n.snaps.List()
	if err != nil {
		return p, fmt.Errorf("cluster: recover quorum: list snapshots: %w", err)
	}
	var snapIndex uint64
	if len(snaps) > 0 {
		snapIndex, p.LastIndex, p.LastTerm = snaps[0].Index, snaps[0].Index, snaps[0].Term
	}
	last, err := logs.LastIndex()
	if err != nil {
		return p, fmt.Errorf("cluster: recover quorum: read the log: %w", err)
	}
	if last > p.LastIndex {
		var l raft.Log
		if err := logs.GetLog(last, &l); err != nil {
			return p, fmt.Errorf("cluster: recover quorum: read log entry %d: %w", last, err)
		}
		p.LastIndex, p.LastTerm = l.Index, l.Term
	}
	p.WALIndex, p.SnapshotIndex = n.fsm.LoadedIndex(), snapIndex
	p.KnownCommitted = min(max(n.fsm.LoadedIndex(), snapIndex), p.LastIndex)
	if w := n.fsm.LoadedIndex(); w > p.LastIndex {
		// The local WAL applied entries the log no longer holds (raft.db
		// lost its tail). They were committed (only committed entries are
		// applied), so recovery keeps them (recoverKeepingState).
		p.KnownCommitted, p.StateAheadOfLog = w, true
	}
	p.Uncertain = p.LastIndex - min(p.KnownCommitted, p.LastIndex)
	for i := p.KnownCommitted + 1; i <= p.LastIndex; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return p, fmt.Errorf("cluster: recover quorum: read log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand {
			p.UncertainCommands++
		}
	}

	// A member that answers may still be running: with it, this node may
	// not have lost the quorum at all, and a recovery would make two.
	running := 1
	for _, s := range conf.Servers {
		if s.ID == raft.ServerID(n.cfg.ID) {
			continue
		}
		c, err := net.DialTimeout("tcp", string(s.Address), recoverProbeTimeout)
		if err != nil {
			continue
		}
		_ = c.Close()
		p.Answering = append(p.Answering, string(s.ID))
		if s.Suffrage == raft.Voter {
			running++
		}
	}
	if voters := otherVoters + 1; 2*running > voters {
		return p, fmt.Errorf("%w: %s answer on their raft addresses: with this node they are %d of %d voters, a quorum; "+
			"the cluster can still decide: start this node normally, and replace lost members with 'baton cluster remove' and 'join'",
			ErrRecoveryRefused, strings.Join(p.Answering, ", "), running, voters)
	}
	return p, nil
}

// recoverQuorum plans the recovery, has Config.RecoverQuorum confirm it,
// and rewrites the raft state into a one-member cluster of this node.
func (n *Node) recoverQuorum(rc *raft.Config, logs raft.LogStore, stable raft.StableStore) error {
	plan, err := n.planQuorumRecovery(logs, stable)
	if err != nil {
		return err
	}
	if err := n.cfg.RecoverQuorum(plan); err != nil {
		return err
	}
	n.log.Warn("recovering quorum: this node becomes the only member", "dropped", peerIDs(plan.Dropped),
		"last_index", plan.LastIndex, "known_committed", plan.KnownCommitted, "uncertain_entries", plan.Uncertain)
	conf := raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(plan.Self.ID), Address: raft.ServerAddress(plan.Self.Address), Suffrage: raft.Voter}}}
	if plan.StateAheadOfLog {
		err = n.recoverKeepingState(rc, logs, plan, conf)
	} else {
		err = raft.RecoverCluster(rc, n.fsm, logs, stable, n.snaps, n.trans, conf)
	}
	if err != nil {
		return fmt.Errorf("cluster: recover quorum: %w", err)
	}
	n.log.Warn("quorum recovered: this node is the only member; add others with 'baton cluster join'", "applied_index", n.fsm.AppliedIndex())
	return nil
}

// recoverKeepingState is raft.RecoverCluster for a node whose FSM had
// applied past the end of its log and snapshots (plan.StateAheadOfLog).
// RecoverCluster would restore the newest snapshot, rolling the FSM (and its
// WAL) back to it and losing entries this node had applied as committed, or,
// with no snapshot to restore, replay the log into an FSM that skips it and
// then store a snapshot claiming the log's last index for the state of a
// later one: raft would append new entries from there and the FSM would skip
// them as applied. So the FSM's state is stored as it is, at the index it
// holds, with the one-member configuration, and the log is emptied, as
// RecoverCluster does: raft then starts after that index, the FSM holding
// exactly what the snapshot does (NoSnapshotRestoreOnStart). The stable
// store's current term is kept.
func (n *Node) recoverKeepingState(rc *raft.Config, logs raft.LogStore, plan QuorumRecoveryPlan, conf raft.Configuration) error {
	if err := raft.ValidateConfig(rc); err != nil {
		return err
	}
	snap, err := n.fsm.Snapshot()
	if err != nil {
		return fmt.Errorf("snapshot the FSM: %w", err)
	}
	defer snap.Release()
	index := n.fsm.AppliedIndex()
	if index != plan.KnownCommitted {
		return fmt.Errorf("the FSM holds index %d, the plan %d", index, plan.KnownCommitted)
	}
	// The term of the entry at index is lost with the log's tail. Any term
	// from the latest known one (the log's or the snapshot's) up to the
	// current one is consistent: raft compares it only with the snapshots
	// it sends new members, which carry it, and the election that follows
	// moves to a later term.
	term := plan.LastTerm
	if term == 0 {
		return fmt.Errorf("no term known for index %d", index)
	}
	// Configuration index 1, as RecoverCluster: the log it could conflict
	// with is deleted below.
	sink, err := n.snaps.Create(raft.SnapshotVersionMax, index, term, conf, 1, n.trans)
	if err != nil {
		return fmt.Errorf("create snapshot: %w", err)
	}
	// Persist closes the sink, or cancels it on failure.
	if err := snap.Persist(sink); err != nil {
		return fmt.Errorf("persist snapshot at index %d: %w", index, err)
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("read the log's first index: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("read the log's last index: %w", err)
	}
	if last > 0 {
		if err := logs.DeleteRange(first, last); err != nil {
			return fmt.Errorf("log compaction failed: %w", err)
		}
	}
	return nil
}

func peerIDs(ps []Peer) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.ID)
	}
	return strings.Join(s, ", ")
}
