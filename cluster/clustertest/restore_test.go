package clustertest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
)

// A cluster's snapshot, saved through the admin API as 'baton snapshot
// save' does, restored into three new members' empty directories
// (cluster.RestoreDataDir), which then start as agents do, --peers and
// all: every namespace, table, region and procedure is there, a sleep
// procedure in flight at the save finishes, and the cluster has a new id.
func TestRestoreFromSavedSnapshot(t *testing.T) {
	old := clustertest.New(t, clustertest.Config{TCP: true})
	old.SeedNamespaces([]string{"ns1", "ns2"})
	regions := old.SeedTable("ns1:t", domain.TableDisabled, 20, 0, func(int) domain.Region { return domain.Region{State: domain.RegionClosed} })
	cl := old.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done, err := cl.Submit(ctx, diag.TypeSleep, map[string]string{"steps": "1", "delay": "1ms"}, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Wait(ctx, done); err != nil {
		t.Fatal(err)
	}
	inflight, err := cl.Submit(ctx, diag.TypeSleep, map[string]string{"steps": "20", "delay": "100ms"}, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var oldID string
	testwait.For(t, 20*time.Second, "the old cluster's id", func() bool {
		v, _ := old.Leader().Node().FSM().Get(cluster.ClusterIDKey)
		oldID = string(v)
		return oldID != ""
	})
	file := filepath.Join(t.TempDir(), "snap.baton")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SnapshotSave(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if p, err := cl.Get(ctx, inflight); err != nil || p.GetState() == "SUCCESS" {
		t.Fatalf("the sleep procedure finished before the save (%v, %v): lengthen it", p.GetState(), err)
	}
	cl.Close()
	old.Close()

	restored := clustertest.New(t, clustertest.Config{TCP: true, Node: func(i int, c *cluster.Config) {
		// c.DataDir is a new, empty directory; c.Peers the new members.
		if _, err := cluster.RestoreDataDir(cluster.RestoreConfig{File: file, DataDir: c.DataDir, ID: c.ID, Peers: c.Peers}); err != nil {
			t.Fatalf("restore %s: %v", c.ID, err)
		}
	}})
	cl = restored.Client()
	defer cl.Close()
	for _, id := range []uint64{done, inflight} {
		p, err := cl.Wait(ctx, id)
		if err != nil || p.GetState() != "SUCCESS" {
			t.Fatalf("procedure %d after the restore: %v, %v", id, p.GetState(), err)
		}
	}
	nss, err := cl.ListNamespaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(nss) != "[default ns1 ns2]" && fmt.Sprint(nss) != "[ns1 ns2]" {
		t.Fatalf("namespaces %v", nss)
	}
	rs, err := cl.ListRegions(ctx, "ns1:t")
	if err != nil || len(rs) != len(regions) {
		t.Fatalf("regions of ns1:t: %d (%v), want %d", len(rs), err, len(regions))
	}
	var newID string
	restored.WaitForNil("a new cluster id on every member", func() error {
		for _, m := range restored.Masters() {
			v, _ := m.Node().FSM().Get(cluster.ClusterIDKey)
			if string(v) == "" || string(v) == oldID || (newID != "" && string(v) != newID) {
				return fmt.Errorf("%s holds cluster id %q (old %q, others %q)", m.ID, v, oldID, newID)
			}
			newID = string(v)
		}
		return nil
	})
	// The members' records are the new members' own, registered anew.
	restored.WaitForNil("each member's admin address registered", func() error {
		for _, m := range restored.Masters() {
			if v, _ := restored.Leader().Node().FSM().Get(cluster.AdminAddrKey(m.ID)); string(v) != m.AdminAddr() {
				return fmt.Errorf("%s registered at %q, runs at %s", m.ID, v, m.AdminAddr())
			}
		}
		return nil
	})
}
