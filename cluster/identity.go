package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/fsutil"
)

// nodeIDFile records, in a data directory, the id of the node it belongs
// to. Nothing in raft's own state names the local server (the stable store
// keeps the term and the vote, the log the configuration of every member),
// so a directory started with another --id would otherwise come up as a
// stranger to its own cluster, waiting forever for a vote or a leader
// that never calls.
const nodeIDFile = "node-id"

// ErrWrongNode is returned by NewNode for a data directory that belongs
// to another node.
var ErrWrongNode = errors.New("cluster: the data directory belongs to another node")

// checkNodeID refuses dir if it records another node's id. A directory
// that records none is either fresh or from before the file existed: the
// latter is judged by its raft configuration (latest, as its log and
// snapshots hold it), which must name id as a member, and not give id's
// raft address to another. Then id is recorded.
func checkNodeID(dir, id, raftAddr string, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) error {
	path := filepath.Join(dir, nodeIDFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if got := strings.TrimSpace(string(b)); got != id {
			return fmt.Errorf("%w: %s was created by node %q (recorded in %s), but this node's id is %q: start it with --id %s, or give this node a data directory of its own",
				ErrWrongNode, dir, got, path, id, got)
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("cluster: read node id: %w", err)
	}
	if conf, ok, err := latestConfiguration(logs, stable, snaps); err != nil {
		return fmt.Errorf("cluster: read the raft configuration of %s: %w", dir, err)
	} else if ok {
		var ids []string
		member := false
		for _, s := range conf.Servers {
			ids = append(ids, string(s.ID))
			if string(s.ID) == id {
				member = true
			} else if raftAddr != "" && string(s.Address) == raftAddr {
				return fmt.Errorf("%w: %s holds the raft state of a cluster in which %s is node %q, but this node's id is %q: start it with --id %s",
					ErrWrongNode, dir, raftAddr, s.ID, id, s.ID)
			}
		}
		if !member && len(ids) > 0 {
			return fmt.Errorf("%w: %s holds the raft state of a cluster whose members are %s, not %q: start it with one of those ids, or give this node a data directory of its own",
				ErrWrongNode, dir, strings.Join(ids, ", "), id)
		}
	}
	// Written whole or not at all: a torn file would refuse every later
	// start under the right id.
	if err := fsutil.WriteFileAtomic(path, []byte(id+"\n"), fsutil.PrivateFileMode); err != nil {
		return fmt.Errorf("cluster: record node id: %w", err)
	}
	return nil
}

// latestConfiguration is the newest raft configuration the stores hold:
// the last configuration entry of the log, else the newest snapshot's. ok
// is false for stores with no raft state.
func latestConfiguration(logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) (raft.Configuration, bool, error) {
	has, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil || !has {
		return raft.Configuration{}, false, err
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return raft.Configuration{}, false, err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return raft.Configuration{}, false, err
	}
	for i := last; i >= first && i > 0; i-- {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue
			}
			return raft.Configuration{}, false, err
		}
		if l.Type == raft.LogConfiguration {
			return raft.DecodeConfiguration(l.Data), true, nil
		}
	}
	metas, err := snaps.List()
	if err != nil {
		return raft.Configuration{}, false, err
	}
	if len(metas) > 0 {
		return metas[0].Configuration, true, nil
	}
	return raft.Configuration{}, false, nil
}
