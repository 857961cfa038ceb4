package admin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/metadata"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// old is a build standing in for a 0.1.0 binary: it reports format 1.
var old = version.Build{Version: "0.1.0-standin", MaxFormat: version.Format1}

// versionCluster is a three-master cluster whose masters listed in olds
// run the stand-in for an old binary.
func versionCluster(t *testing.T, olds ...int) *clustertest.Cluster {
	t.Helper()
	// A steady leader: these tests read the state of the member that led
	// when they began, and a 2-core machine under CI load moves raft's test
	// timings' leadership about (TestFormat2WritesWaitForTheLastUpgrade).
	return clustertest.New(t, clustertest.Config{NoDomain: true, SteadyLeader: true, Node: func(i int, c *cluster.Config) {
		for _, o := range olds {
			if i == o {
				c.Build = old
			}
		}
	}})
}

// waitClusterFormat waits until every running master's replicated state
// (standbys' too) holds the cluster version want.
func waitClusterFormat(t *testing.T, c *clustertest.Cluster, want version.Format) {
	t.Helper()
	c.WaitForNil(fmt.Sprintf("cluster version %d on every running master", want), func() error {
		for _, m := range c.Masters() {
			if n := m.Node(); n != nil && n.ClusterFormat() != want {
				return fmt.Errorf("%s holds %d", m.ID, n.ClusterFormat())
			}
		}
		return nil
	})
}

// waitReports waits until the leader's state holds a report of each
// master, with the level its build says.
func waitReports(t *testing.T, c *clustertest.Cluster, want map[string]version.Format) {
	t.Helper()
	c.WaitForNil("every member's report committed", func() error {
		n := c.Leader().Node()
		for id, f := range want {
			if _, ok := n.FSM().Get(cluster.VersionKey(id)); !ok {
				return fmt.Errorf("no report of %s", id)
			}
			b, err := cluster.ReadReport(n.FSM().Get, id)
			if err != nil || b.MaxFormat != f {
				return fmt.Errorf("%s's report: %+v (%v), want format %d", id, b, err, f)
			}
		}
		return nil
	})
}

func statusOf(t *testing.T, m *clustertest.Master) *adminpb.ClusterStatusResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := m.Admin().ClusterStatus(ctx, &adminpb.ClusterStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// The cluster version reaches this binary's level once every member has
// reported it; a standby reads the same, the status shows each member's
// binary, and a failover keeps it.
func TestClusterVersionRisesWhenAllReport(t *testing.T) {
	c := versionCluster(t)
	waitClusterFormat(t, c, version.MaxFormat)
	li, _ := c.WaitLeader()
	standby := c.Master((li + 1) % 3)
	st := statusOf(t, standby)
	if st.GetClusterFormat() != uint32(version.MaxFormat) || st.GetVersion() != version.Dev || st.GetMaxFormat() != uint32(version.MaxFormat) {
		t.Fatalf("standby %s: cluster_format %d, version %q, max_format %d", standby.ID, st.GetClusterFormat(), st.GetVersion(), st.GetMaxFormat())
	}
	for _, p := range st.GetPeers() {
		if p.GetVersion() != version.Dev || p.GetMaxFormat() != uint32(version.MaxFormat) {
			t.Errorf("peer %s: version %q, max_format %d", p.GetId(), p.GetVersion(), p.GetMaxFormat())
		}
	}
	if got := value(t, standby.Metrics(), "baton_cluster_format", nil); got != float64(version.MaxFormat) {
		t.Errorf("baton_cluster_format = %v on %s", got, standby.ID)
	}
	if got := value(t, standby.Metrics(), "baton_build_info", map[string]string{"version": version.Dev, "max_format": "2"}); got != 1 {
		t.Errorf("baton_build_info{version=%q} = %v on %s", version.Dev, got, standby.ID)
	}
	c.Kill(li)
	nl, _ := c.WaitLeader(li)
	if got := c.Master(nl).Node().ClusterFormat(); got != version.MaxFormat {
		t.Fatalf("after failover the new leader %s holds cluster version %d", c.Master(nl).ID, got)
	}
	c.Restart(li)
	waitClusterFormat(t, c, version.MaxFormat)
}

// A member that reports format 1 holds the cluster version at 1; it rises
// once that member upgrades (restarts as this binary).
func TestClusterVersionHeldUntilTheLastUpgrade(t *testing.T) {
	c := versionCluster(t, 2)
	waitReports(t, c, map[string]version.Format{"m1": version.MaxFormat, "m2": version.MaxFormat, "m3": version.Format1})
	// Each report commits with the raise it allows, so with all three in
	// the state, the version they make is there too.
	for _, m := range c.Masters() {
		if got := m.Node().ClusterFormat(); got != version.Format1 {
			t.Fatalf("%s: cluster version %d with a member at 1", m.ID, got)
		}
	}
	if p := peerOf(statusOf(t, c.Leader()), "m3"); p.GetVersion() != old.Version || p.GetMaxFormat() != 1 {
		t.Fatalf("m3 shown as %q format %d", p.GetVersion(), p.GetMaxFormat())
	}
	c.RestartAs(2, version.Build{})
	waitClusterFormat(t, c, version.MaxFormat)
}

// Removing the member that held the cluster version back lets it rise; a
// member at 1 that joins later does not lower it: it stops once it applies
// it, naming both versions, and its next start is refused until it runs a
// binary that reads the cluster version.
func TestClusterVersionAfterRemovalAndALateOldJoin(t *testing.T) {
	c := versionCluster(t, 2)
	waitReports(t, c, map[string]version.Format{"m1": version.MaxFormat, "m2": version.MaxFormat, "m3": version.Format1})
	c.Kill(2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leader := c.Leader()
	if _, err := leader.Admin().RemovePeer(ctx, &adminpb.RemovePeerRequest{Id: "m3"}); err != nil {
		t.Fatal(err)
	}
	waitClusterFormat(t, c, version.MaxFormat)
	if _, ok := leader.Node().FSM().Get(cluster.VersionKey("m3")); ok {
		t.Fatal("a removed member's report stays")
	}

	// A new machine with an old binary joins under the same id.
	c.Wipe(2)
	m3 := c.RestartAs(2, old)
	if _, err := leader.Admin().AddPeer(ctx, &adminpb.AddPeerRequest{Id: "m3", RaftAddress: m3.Node().Addr(), AdminAddress: m3.AdminAddr()}); err != nil {
		t.Fatal(err)
	}
	waitClusterFormat(t, c, version.MaxFormat) // m3 applied it too; never lowered
	c.WaitForNil("m3 stopped, naming both versions", func() error {
		err := m3.FailErr()
		if err == nil || !strings.Contains(err.Error(), "format 2 (0.2.0)") || !strings.Contains(err.Error(), "format 1 (0.1.0) at most") {
			return fmt.Errorf("m3's node: %v", err)
		}
		return nil
	})
	if got := c.Leader().Node().ClusterFormat(); got != version.MaxFormat {
		t.Fatalf("cluster version lowered to %d", got)
	}

	// Its next start, as the old binary, is refused; as this one it runs.
	err := c.StartAs(2, old)
	if err == nil || !strings.Contains(err.Error(), "format 2 (0.2.0)") || !strings.Contains(err.Error(), "format 1 (0.1.0) at most") {
		t.Fatalf("old binary's start on a cluster at 2: %v", err)
	}
	c.RestartAs(2, version.Build{})
	waitReports(t, c, map[string]version.Format{"m1": version.MaxFormat, "m2": version.MaxFormat, "m3": version.MaxFormat})
}

// A member whose binary cannot read the committed cluster version refuses
// to start, naming both; one with a newer level (an unknown future format)
// committed stands for a downgrade past a raise. The members run a binary
// of that newer level: one that cannot read it stops once it applies it.
func TestStartRefusedBelowTheClusterVersion(t *testing.T) {
	future := version.MaxFormat + 1
	newer := version.Build{Version: "9.9.9", MaxFormat: future}
	c := clustertest.New(t, clustertest.Config{NoDomain: true, Node: func(_ int, cfg *cluster.Config) { cfg.Build = newer }})
	c.SeedRecord(cluster.ClusterFormatKey, version.EncodeClusterFormat(future))
	waitClusterFormat(t, c, future)
	li, _ := c.WaitLeader()
	i := (li + 1) % 3
	err := c.StartAs(i, version.Build{})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("format %d", future)) || !strings.Contains(err.Error(), version.MaxFormat.String()) {
		t.Fatalf("start with cluster version %d committed: %v", future, err)
	}
	if c.Master(i).Running() {
		t.Fatal("the refused master runs")
	}
	// A binary that reads it starts.
	c.RestartAs(i, newer)
}

// A 0.1.0 member (or one relayed by a 0.1.0 standby) registers without a
// report: the call succeeds, the member counts as format 1 (shown without
// a version) and the cluster version is not lowered; back on this binary
// it reports again.
func TestRegisterWithoutAReport(t *testing.T) {
	c := versionCluster(t)
	waitClusterFormat(t, c, version.MaxFormat)
	li, _ := c.WaitLeader()
	oi := (li + 1) % 3
	c.Kill(oi)
	via := c.Master((li + 2) % 3) // a standby relays it
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A master's call, as one carries the cluster secret.
	ctx = metadata.AppendToOutgoingContext(ctx, security.ClusterSecretKey, c.Secret())
	if _, err := via.Admin().RegisterNode(ctx, &adminpb.RegisterNodeRequest{Id: c.Master(oi).ID, AdminAddress: c.Master(oi).AdminAddr()}); err != nil {
		t.Fatalf("RegisterNode without a report: %v", err)
	}
	if b, err := cluster.ReadReport(c.Master(li).Node().FSM().Get, c.Master(oi).ID); err != nil || b != (version.Build{}) {
		t.Fatalf("report after a 0.1.0 registration: %+v, %v", b, err)
	}
	if p := peerOf(statusOf(t, c.Master(li)), c.Master(oi).ID); p.GetVersion() != "" || p.GetMaxFormat() != 0 {
		t.Fatalf("shown as %q format %d", p.GetVersion(), p.GetMaxFormat())
	}
	if got := c.Master(li).Node().ClusterFormat(); got != version.MaxFormat {
		t.Fatalf("cluster version lowered to %d", got)
	}
	c.Restart(oi)
	waitReports(t, c, map[string]version.Format{c.Master(oi).ID: version.MaxFormat})
}

func peerOf(st *adminpb.ClusterStatusResponse, id string) *adminpb.Peer {
	for _, p := range st.GetPeers() {
		if p.GetId() == id {
			return p
		}
	}
	return nil
}

// A cluster version record that cannot be read counts as format 1: a
// master still starts on it (refusing would stop every member alike), and
// the leader writes a good one over it.
func TestCorruptClusterVersionRecord(t *testing.T) {
	c := versionCluster(t)
	waitClusterFormat(t, c, version.MaxFormat)
	c.SeedRecord(cluster.ClusterFormatKey, []byte("\x00not json"))
	li, _ := c.WaitLeader()
	c.Restart((li + 1) % 3)
	c.WaitForNil("a good cluster version record again, on every master", func() error {
		for _, m := range c.Masters() {
			v, _ := m.Node().FSM().Get(cluster.ClusterFormatKey)
			if f, err := version.DecodeClusterFormat(v); err != nil || f != version.MaxFormat {
				return fmt.Errorf("%s: %d, %v", m.ID, f, err)
			}
		}
		return nil
	})
}

// A report outlives the binary that made it: a member taken back to an
// old binary on the same address may never register again (0.1.0
// registers only when its address changes). Before a raise the leader asks
// every member what it runs now, so a stale report of 2 from a member
// running 1 does not raise the cluster version.
func TestStaleReportDoesNotRaise(t *testing.T) {
	c := clustertest.New(t, clustertest.Config{NoDomain: true, LogLevel: hclog.Debug, Node: func(i int, cfg *cluster.Config) {
		if i == 2 {
			cfg.Build = old
		}
	}})
	waitReports(t, c, map[string]version.Format{"m1": version.MaxFormat, "m2": version.MaxFormat, "m3": version.Format1})
	// m3 cannot correct its report while the stale one is in place.
	drop := c.Faults().MustAdd(rpcfault.Rule{Methods: []string{"/baton.admin.v1.Admin/RegisterNode"}, Fault: rpcfault.DropRequest})
	li, _ := c.WaitLeader()
	if li == 2 { // a leader trusts its own binary, not its report: asked is another's
		c.TransferLeadership(0)
		li, _ = c.WaitLeader()
	}
	c.SeedRecord(cluster.VersionKey("m3"), version.EncodeReport(version.Current("")))
	c.WaitFor("the leader to ask m3 and keep the cluster version", func() bool {
		return strings.Contains(c.Master(li).Log(), `m3 runs \"0.1.0-standin\", format 1 (0.1.0) at most`)
	})
	for _, m := range c.Masters() {
		if got := m.Node().ClusterFormat(); got != version.Format1 {
			t.Fatalf("%s: cluster version %d on a stale report", m.ID, got)
		}
	}
	drop.Remove()
	waitReports(t, c, map[string]version.Format{"m3": version.Format1})
}
