package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// checkNodeID refuses dir if it records another node's id, and records id
// in it if it records none (a fresh directory, or one from before the file
// existed).
func checkNodeID(dir, id string) error {
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
	// Written whole or not at all: a torn file would refuse every later
	// start under the right id.
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("cluster: record node id: %w", err)
	}
	_, err = f.WriteString(id + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("cluster: record node id: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
