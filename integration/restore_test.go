package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
)

// TestSnapshotRestore is docs/operations.md's "Restore" with real
// processes: a snapshot saved with the CLI from a running three-master
// cluster; every master killed and its data directory deleted; 'baton
// snapshot restore' into each (a second time into a restored one is
// refused); the agents restarted with their usual flags: every procedure
// is there, the ones in flight at the save finish.
func TestSnapshotRestore(t *testing.T) {
	ctx, c, leader := leadingCluster(t, 3, 3*time.Minute)
	cl := c.Client()
	var ids []uint64
	for i := range 5 {
		id, _, err := submitRetrying(ctx, cl, "sleep", map[string]string{"steps": "2", "delay": "10ms"}, fmt.Sprintf("rs-done-%d", i))
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		if p, err := cl.Wait(ctx, id); err != nil || p.GetState() != client.StateSuccess {
			t.Fatalf("procedure %d: %v, %v", id, p.GetState(), err)
		}
		ids = append(ids, id)
	}
	inflight, _, err := submitRetrying(ctx, cl, "sleep", map[string]string{"steps": "20", "delay": "200ms"}, "rs-inflight")
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, inflight)
	file := filepath.Join(t.TempDir(), "snap.baton")
	code, stdout, stderr := runCLI(t, ctx, "snapshot", "save", file, "--addr", c.Node(leader).GRPCAddr)
	expectExit(t, "snapshot save", code, 0, stdout+stderr)

	var peers []string
	for _, n := range c.Nodes {
		peers = append(peers, n.ID+"="+n.RaftAddr)
	}
	for _, n := range c.Nodes {
		c.Kill(n.ID)
		if err := os.RemoveAll(n.DataDir); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.Nodes {
		code, stdout, stderr := runCLI(t, ctx, "snapshot", "restore", file, "--data-dir", n.DataDir, "--id", n.ID, "--peers", strings.Join(peers, ","))
		expectExit(t, "snapshot restore "+n.ID, code, 0, stdout+stderr)
	}
	n0 := c.Nodes[0]
	code, stdout, stderr = runCLI(t, ctx, "snapshot", "restore", file, "--data-dir", n0.DataDir, "--id", n0.ID, "--peers", strings.Join(peers, ","))
	expectExit(t, "snapshot restore into a restored directory", code, 1, stdout+stderr)
	for _, n := range c.Nodes {
		c.Restart(n.ID)
	}
	c.WaitLeader(ctx)
	rc := c.Client()
	for _, id := range ids {
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		p, err := rc.Wait(wctx, id)
		cancel()
		if err != nil || p.GetState() != client.StateSuccess {
			t.Fatalf("procedure %d after the restore: %v, %v", id, p.GetState(), err)
		}
	}
}
