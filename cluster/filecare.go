package cluster

import (
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/cluster/filecare"
)

// The node's files on disk are looked after by cluster/filecare, at start
// (NewNode): the checks of raft.db and the snapshots, the compaction of
// raft.db, the private modes. What needs raft running stays here.

// ErrDamaged is wrapped by NewNode's error when a file of the node's data
// directory is damaged in a way it cannot recover from by itself.
var ErrDamaged = filecare.ErrDamaged

// DefaultRaftLogCompactBytes is Config.RaftLogCompactBytes's default.
const DefaultRaftLogCompactBytes = 64 << 20

// checkSnapshots sets damaged snapshots aside, or refuses the start, before
// raft meets them (filecare.CheckSnapshots); takeSnapshot asks for a
// snapshot to replace a damaged newest one as soon as raft runs. A snapshot
// store given in Config is the embedder's to check.
func (n *Node) checkSnapshots(logs raft.LogStore) (takeSnapshot bool, err error) {
	if n.cfg.SnapshotStore != nil {
		return false, nil
	}
	return filecare.CheckSnapshots(n.cfg.DataDir, n.snaps, logs, n.fsm.LoadedIndex(), n.log)
}

// replaceSnapshot takes a snapshot as soon as raft has something new to
// put in it, retrying until it succeeds or the node shuts down (see
// checkSnapshots).
func (n *Node) replaceSnapshot() {
	for {
		err := n.raft.Snapshot().Error()
		if err == nil {
			n.log.Info("took a snapshot to replace the damaged one")
			return
		}
		n.log.Debug("snapshot to replace the damaged one not taken yet", "error", err)
		select {
		case <-n.shutdownCh:
			return
		case <-time.After(time.Second):
		}
	}
}
