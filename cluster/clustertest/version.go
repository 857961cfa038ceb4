package clustertest

import (
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/version"
)

// RestartAs restarts master i (see Restart) as a binary of build b: a
// lower MaxFormat stands in for an older release (its report and its start
// check use it), the zero Build for this one. Later restarts keep it. Fails
// the test on error (test goroutine only).
func (c *Cluster) RestartAs(i int, b version.Build) *Master {
	c.t.Helper()
	m := c.masters[i]
	m.kill()
	m.cfg.Build = b
	return c.Restart(i)
}

// StartAs is RestartAs that returns the start's error instead of failing
// the test: for a start that is to be refused.
func (c *Cluster) StartAs(i int, b version.Build) error {
	m := c.masters[i]
	m.kill()
	m.cfg.Build = b
	if c.mesh != nil {
		c.mesh.Restore(i)
	}
	return m.start()
}

// Wipe kills master i and gives it empty storage, on the in-memory
// transport: its next start (Restart, RestartAs) is a new machine's under
// the same id and addresses, which bootstraps the cluster's first
// configuration and waits to be added (a removed member's replacement).
func (c *Cluster) Wipe(i int) {
	c.t.Helper()
	c.needInmem("Wipe")
	m := c.masters[i]
	m.kill()
	m.cfg.DataDir = c.t.TempDir()
	ls := raft.NewInmemStore()
	m.cfg.LogStore, m.cfg.StableStore = ls, ls
	m.cfg.SnapshotStore = raft.NewInmemSnapshotStore()
}

// Secret is the masters' cluster secret ("" with NoClusterSecret): a test
// that calls a masters-only method as another master (or an older
// release's) would sends it (security.ClusterSecretKey).
func (c *Cluster) Secret() string { return c.secret }

// waitClusterFormat waits until every master holds the cluster version its
// masters' builds allow (the lowest MaxFormat of them), which the leader
// raises once each has registered: a test then starts where a cluster of
// upgraded members runs, writing what that version allows, unless it holds
// a master at an older build on purpose (Config.Node setting Build).
func (c *Cluster) waitClusterFormat() {
	c.t.Helper()
	want := version.MaxFormat
	for _, m := range c.masters {
		if f := m.cfg.Build.MaxFormat; f != 0 && f < want {
			want = f
		}
	}
	c.WaitForNil(fmt.Sprintf("cluster version %d on every master", want), func() error {
		for _, m := range c.masters {
			if n := m.Node(); n != nil && n.ClusterFormat() < want {
				return fmt.Errorf("%s holds %d", m.ID, n.ClusterFormat())
			}
		}
		return nil
	})
}

// FailErr is why the master's node stopped on its own (cluster.Node.Failed:
// it applied a cluster version its binary cannot read), nil while it runs
// or if it was stopped otherwise. The master's node stays as it stopped
// until the test kills or restarts it.
func (m *Master) FailErr() error {
	if n := m.Node(); n != nil {
		return n.FailErr()
	}
	return nil
}
