package cluster

import (
	"fmt"

	"github.com/baton-dev/baton/internal/version"
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
	f, _ := ReadClusterFormat(n.fsm.Get)
	return f
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

// ReadReport reads node id's report of its binary through get:
// version.Unreported when it has none (a 0.1.0 member), also with an
// error when its record cannot be read.
func ReadReport(get func(string) ([]byte, bool), id string) (version.Build, error) {
	v, ok := get(VersionKey(id))
	if !ok {
		return version.Unreported, nil
	}
	b, err := version.DecodeReport(v)
	if err != nil {
		return version.Unreported, fmt.Errorf("node %s: %w", id, err)
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
	if err := version.CheckReadable(f, n.cfg.Build.MaxFormat); err != nil {
		return fmt.Errorf("cluster: refusing to start %s (%s): %w", n.cfg.ID, n.cfg.Build.Version, err)
	}
	return nil
}
