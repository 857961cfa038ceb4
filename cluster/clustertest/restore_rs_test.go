package clustertest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/cluster/regionserver"
	"github.com/baton-dev/baton/internal/testwait"
)

// Region servers that outlive their masters are reconciled with a cluster
// restored in the masters' place (same addresses) from a snapshot older
// than what they lived through: regions were moved after the save, and
// the old cluster went through elections after it, so its terms are above
// the restored cluster's. Every region ends open exactly once and OPEN
// where the restored masters record it, and no region is open on two
// servers at any moment sampled on the way.
//
// keep: the region servers still hold their regions when the restored
// cluster starts (a self-fence period longer than the switch), so they
// learn of the new cluster from its answers; otherwise they have fenced
// themselves and learn of it at registration.
//
// newcomer: the regions moved after the save go to a fourth server that
// registered after it, which the restored state does not know at all: it
// proves nothing to the restored masters, which hold their dispatch for a
// self-fence period (cluster.RestoredKey) so that it has closed them (at
// the restored masters' first answer) or fenced itself before any region
// it hosts is reopened elsewhere.
func TestRestoreReconcilesRegionServers(t *testing.T) {
	for _, c := range []struct{ keep, newcomer bool }{{true, false}, {false, false}, {true, true}} {
		t.Run(fmt.Sprintf("regions_kept=%v,newcomer=%v", c.keep, c.newcomer), func(t *testing.T) { testRestoreReconcile(t, c.keep, c.newcomer) })
	}
}

func testRestoreReconcile(t *testing.T, keep, newcomer bool) {
	const table, nRegions = "t", 12
	slowLeases := func(_ int, c *domain.Config) {
		if keep {
			// Self-fence after 3 × 1 s: longer than the switch takes.
			c.HeartbeatInterval = time.Second
			c.ServerLease = lease.Config{SoftLimit: 4 * time.Second, HardLimit: 8 * time.Second, MonitorInterval: 50 * time.Millisecond}
		}
	}
	old := clustertest.New(t, clustertest.Config{TCP: true, Domain: slowLeases})
	addrs := old.AdminAddrs()

	// Region servers of their own, not the cluster's: they must outlive it.
	rss := map[string]*regionserver.Server{}
	startRS := func(id string) {
		log := hclog.NewNullLogger()
		if testing.Verbose() {
			log = hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Info, Output: os.Stderr})
		}
		s, err := regionserver.New(regionserver.Config{ID: id, GRPCAddr: "127.0.0.1:0", Masters: addrs,
			RPCTimeout: time.Second, MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
			OpLatency: 5 * time.Millisecond, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = s.Stop(ctx)
		})
		rss[id] = s
	}
	for i := range 3 {
		startRS(fmt.Sprintf("rs%d", i+1))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, s := range rss {
		if _, err := s.WaitRegistered(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cl := old.Client()
	id, err := cl.CreateTable(ctx, "", table, nRegions, "")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := cl.Wait(ctx, id); err != nil || p.GetState() != "SUCCESS" {
		t.Fatalf("create table: %v %v", p.GetState(), err)
	}
	var oldID string
	testwait.For(t, 20*time.Second, "the old cluster's id known to every region server", func() bool {
		v, _ := old.Leader().Node().FSM().Get(cluster.ClusterIDKey)
		oldID = string(v)
		for _, s := range rss {
			if oldID == "" || s.ClusterID() != oldID {
				return false
			}
		}
		return true
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

	// After the save: elections, then moves under the newer terms, so that
	// the servers' reality and terms are past the snapshot's.
	for i := range 3 {
		li, _ := old.WaitLeader()
		old.TransferLeadership((li + 1 + i%2) % 3)
	}
	regions, err := cl.ListRegions(ctx, "default:"+table)
	if err != nil {
		t.Fatal(err)
	}
	if newcomer {
		startRS("rs4")
		if _, err := rss["rs4"].WaitRegistered(ctx); err != nil {
			t.Fatal(err)
		}
		// Known to every master (a move names it, and the master asked
		// may check it in its own copy of the state).
		testwait.For(t, 20*time.Second, "rs4 in every old master's state", func() bool {
			for _, m := range old.Masters() {
				if _, ok := m.Node().FSM().Get(domain.ServerKey("rs4")); !ok {
					return false
				}
			}
			return true
		})
	}
	moved := 0
	for _, rg := range regions[:4] {
		to := "rs1"
		if rg.GetServer() == "rs1" {
			to = "rs2"
		}
		if newcomer {
			to = "rs4"
		}
		id, err := cl.MoveRegion(ctx, rg.GetName(), to, "")
		if err != nil {
			t.Fatal(err)
		}
		if p, err := cl.Wait(ctx, id); err != nil || p.GetState() != "SUCCESS" {
			t.Fatalf("move %s: %v %v", rg.GetName(), p.GetState(), err)
		}
		moved++
	}
	var highest uint64
	for _, s := range rss {
		highest = max(highest, s.HighestTerm())
	}
	cl.Close()

	// Sample every server from now on: never one region on two servers.
	var (
		smu     sync.Mutex
		doubles []string
		samples int
	)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		// A sample every millisecond: the rate of the check, not a wait for
		// a condition.
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			where := map[string]string{}
			for sid, s := range rss {
				for _, h := range s.Regions() {
					if other, ok := where[h.GetRegion()]; ok {
						smu.Lock()
						doubles = append(doubles, fmt.Sprintf("%s on %s and %s", h.GetRegion(), other, sid))
						smu.Unlock()
					}
					where[h.GetRegion()] = sid
				}
			}
			smu.Lock()
			samples++
			smu.Unlock()
		}
	}()
	defer func() { close(stop); <-sampled }()

	old.Close()
	if !keep {
		testwait.For(t, 20*time.Second, "every region server fenced itself", func() bool {
			for _, s := range rss {
				if s.StartCode() != 0 || len(s.Regions()) != 0 {
					return false
				}
			}
			return true
		})
	}
	restored := clustertest.New(t, clustertest.Config{TCP: true, AdminAddrs: addrs, Domain: slowLeases,
		Node: func(_ int, c *cluster.Config) {
			if _, err := cluster.RestoreDataDir(cluster.RestoreConfig{File: file, DataDir: c.DataDir, ID: c.ID, Peers: c.Peers}); err != nil {
				t.Fatalf("restore %s: %v", c.ID, err)
			}
		}})
	if term := restored.Leader().Node().Raft().CurrentTerm(); term >= highest {
		t.Logf("the restored cluster's term %d is not below the servers' %d: the term reset is not exercised", term, highest)
	}
	rcl := restored.Client()
	defer rcl.Close()
	restored.WaitForNil("every region OPEN once, where the restored masters record it", func() error {
		rs, err := rcl.ListRegions(ctx, "default:"+table)
		if err != nil {
			return err
		}
		hosted := map[string][]string{}
		for sid, s := range rss {
			for _, h := range s.Regions() {
				hosted[h.GetRegion()] = append(hosted[h.GetRegion()], sid)
			}
		}
		if len(rs) != nRegions {
			return fmt.Errorf("%d regions listed, want %d", len(rs), nRegions)
		}
		for _, rg := range rs {
			on := hosted[rg.GetName()]
			sort.Strings(on)
			if rg.GetState() != "OPEN" || len(on) != 1 || on[0] != rg.GetServer() {
				return fmt.Errorf("%s %s on %q (proc %d), hosted on %v", rg.GetName(), rg.GetState(), rg.GetServer(), rg.GetProcId(), on)
			}
		}
		return nil
	})
	var newID string
	restored.WaitForNil("every region server registered with the restored cluster", func() error {
		v, _ := restored.Leader().Node().FSM().Get(cluster.ClusterIDKey)
		newID = string(v)
		for sid, s := range rss {
			if newID == "" || s.ClusterID() != newID {
				return fmt.Errorf("%s knows cluster %q, the restored one is %q", sid, s.ClusterID(), newID)
			}
		}
		return nil
	})
	if newID == oldID {
		t.Fatalf("the restored cluster kept the old id %q", oldID)
	}
	// The hold over, its mark goes: a later leader does not hold again.
	restored.WaitFor("the restore mark deleted after the hold", func() bool {
		_, marked := restored.Leader().Node().FSM().Get(cluster.RestoredKey)
		return !marked
	})
	smu.Lock()
	defer smu.Unlock()
	if len(doubles) > 0 {
		t.Fatalf("regions open on two servers at once (%d samples): %v", samples, doubles)
	}
	t.Logf("%d regions moved after the save, servers' term %d, %d samples, no region on two servers", moved, highest, samples)
}
