package cluster

import (
	"bytes"
	"context"
	"fmt"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/raftfsm"
)

// Build is what this node's binary is (Config.Build with its defaults):
// what it reports to the leader.
func (n *Node) Build() version.Build { return n.cfg.Build }

// ClusterFormat is the cluster version the local replicated state holds:
// the format level every member reads (version.Format1 until the leader
// raises it, or if the record cannot be read, which errs on the side of
// writing nothing newer). It is the version.Gate writers of newer formats
// ask; a standby reads the same value as the leader once it has applied
// the raise.
func (n *Node) ClusterFormat() version.Format {
	v, ok := n.fsm.Get(ClusterFormatKey)
	if !ok {
		return version.Format1
	}
	// Asked on every procedure record the executor writes: the record is
	// decoded again only when its bytes change (a raise), not per write.
	if m := n.formatMemo.Load(); m != nil && bytes.Equal(m.raw, v) {
		return m.format
	}
	f, err := version.DecodeClusterFormat(v)
	if err != nil {
		return version.Format1
	}
	n.formatMemo.Store(&formatMemo{raw: bytes.Clone(v), format: f})
	return f
}

// formatMemo is the last cluster version record ClusterFormat decoded.
type formatMemo struct {
	raw    []byte
	format version.Format
}

// ReadClusterFormat reads the committed cluster version through get (a
// replicated state's Get): version.Format1 when none is committed; also
// with an error wrapping version.ErrBadRecord when the record cannot be
// read.
func ReadClusterFormat(get func(string) ([]byte, bool)) (version.Format, error) {
	v, ok := get(ClusterFormatKey)
	if !ok {
		return version.Format1, nil
	}
	f, err := version.DecodeClusterFormat(v)
	if err != nil {
		return version.Format1, err
	}
	return f, nil
}

// ReadReport is the one reader of node id's committed report of its
// binary, read through get (a replicated state's Get). Whatever reads a
// report goes through it, so that every reader means the same by a
// missing or corrupt one:
//   - No report (a 0.1.0 member, which sends none, or one taken back to
//     it): the zero Build, nil. Its version is unknown ("") and it says no
//     level (0); it counts as version.Format1.
//   - A report that cannot be read: the zero Build too, with an error
//     wrapping version.ErrBadRecord. It counts as version.Format1 as well
//     (docs/upgrades.md): nothing newer is written on its say-so.
//
// A level of 0 means "none said" as on the wire (RegisterNode, a member's
// status from 0.1.0), so a caller shows the Build as it is and counts it
// as b.Counted().
func ReadReport(get func(string) ([]byte, bool), id string) (version.Build, error) {
	v, ok := get(VersionKey(id))
	if !ok {
		return version.Build{}, nil
	}
	b, err := version.DecodeReport(v)
	if err != nil {
		return version.Build{}, fmt.Errorf("node %s: %w", id, err)
	}
	return b, nil
}

// checkClusterFormat refuses a start whose local state holds a cluster
// version this binary cannot read: it would misread what members wrote at
// that level. A record that cannot be read is let through with a warning
// (counted as version.Format1, so this node writes nothing newer), since
// refusing would stop every member alike.
func (n *Node) checkClusterFormat() error {
	f, err := ReadClusterFormat(n.fsm.Get)
	if err != nil {
		n.log.Warn("the cluster version's record cannot be read; counting it as format 1", "error", err)
		return nil
	}
	return n.unreadableErr(f)
}

// unreadableErr is why this binary cannot run on cluster version f, naming
// both; nil if it reads f.
func (n *Node) unreadableErr(f version.Format) error {
	if err := version.CheckReadable(f, n.cfg.Build.MaxFormat); err != nil {
		return fmt.Errorf("cluster: refusing to start %s (%s): %w", n.cfg.ID, n.cfg.Build.Version, err)
	}
	return nil
}

// watchClusterFormat makes every cluster version the FSM applies, or a
// snapshot installs, pass through noteClusterFormat.
func (n *Node) watchClusterFormat() {
	n.fsm.Observe(&raftfsm.PutObserver{
		Prefixes: []string{ClusterFormatKey},
		Put: func(key string, v []byte) {
			if key == ClusterFormatKey {
				n.noteClusterFormat(v)
			}
		},
		Restored: func() {
			if v, ok := n.fsm.Get(ClusterFormatKey); ok {
				n.noteClusterFormat(v)
			}
		},
	})
}

// noteClusterFormat stops the node, as etcd stops a member that applies a
// cluster version above its own, when the cluster version v is above this
// binary's MaxFormat. The start check (checkClusterFormat) sees only the
// local WAL's state, and entries replayed from the raft log after it, or a
// member that joins after the raise, bring in what this binary would
// misread: procedure states and records written at that level. Tolerating
// it as a member not ready would still let it win an election and lead.
// Called from the FSM's apply (it must not block).
func (n *Node) noteClusterFormat(v []byte) {
	f, err := version.DecodeClusterFormat(v)
	if err != nil || n.unreadableErr(f) == nil {
		return // a record that cannot be read counts as format 1
	}
	n.unreadableOnce.Do(func() {
		n.unreadableAt.Store(uint32(f))
		close(n.unreadable)
	})
}

// cannotRead is the error of a cluster version applied that this binary
// cannot read, nil while none is: such a node neither leads nor runs.
func (n *Node) cannotRead() error {
	select {
	case <-n.unreadable:
		return n.unreadableErr(version.Format(n.unreadableAt.Load()))
	default:
		return nil
	}
}

// stopOnUnreadable shuts the node down once it applied a cluster version
// it cannot read, with the start check's error: the agent exits with it.
func (n *Node) stopOnUnreadable() {
	select {
	case <-n.unreadable:
	case <-n.shutdownCh:
		return
	}
	err := n.cannotRead()
	n.log.Error("stopping: the cluster version applied is one this binary cannot read", "error", err)
	n.failErr = err
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RevokeTimeout)
	defer cancel()
	if serr := n.Shutdown(ctx); serr != nil {
		n.log.Warn("shutdown after an unreadable cluster version", "error", serr)
	}
	close(n.failed)
}

// Failed is closed once the node has stopped on its own: it applied a
// cluster version its binary cannot read (FailErr says which). A process
// running the node is to exit with FailErr.
func (n *Node) Failed() <-chan struct{} { return n.failed }

// FailErr is why the node stopped on its own (Failed), naming the cluster
// version and this binary's; nil until then.
func (n *Node) FailErr() error {
	select {
	case <-n.failed:
		return n.failErr
	default:
		return nil
	}
}
