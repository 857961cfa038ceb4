//go:build unix

package cluster

import (
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A node's files are private whatever the umask: raft's snapshots, which
// raft's store writes 0755 and 0644 less the umask, as much as the WAL
// and the raft log.
func TestNodeFilesArePrivateWhateverTheUmask(t *testing.T) {
	// Process-wide: a test running beside this one writes files looser
	// than it would, which no test checks but this one.
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	c := newTestCluster(t, clusterOpts{n: 1, tcp: true})
	_, x := c.leader()
	c.waitAllSuccess(submit(t, x, 3, 2, 0), 2)
	if err := c.nodes[0].Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	snapshots := 0
	err := filepath.WalkDir(c.cfgs[0].DataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, "state.bin") {
			snapshots++
		}
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v, open to group or others", path, info.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if snapshots == 0 {
		t.Fatal("no snapshot in the data directory")
	}
}
