package client_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/testwait"
)

// mustSucceed waits for procedure id and fails the test unless it
// succeeded.
func mustSucceed(t *testing.T, c *client.Client, id uint64, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Wait(ctx(t), id)
	if err != nil || p.State != client.StateSuccess {
		t.Fatalf("procedure %d: %v %v", id, p, err)
	}
}

// TestDomainSubmissionsReuseTheirNonce: every call that starts a
// procedure, retried after a refused attempt and after a lost reply, sends
// one generated nonce throughout and starts one procedure; the same nonce
// later returns the same id.
func TestDomainSubmissionsReuseTheirNonce(t *testing.T) {
	// One cluster for every case, each on names of its own.
	fc := clustertest.New(t, clustertest.Config{Masters: 1, RegionServers: 2})
	c := newClient(t, fc.AdminAddrs())
	for i, tc := range []struct {
		method string
		call   func(c *client.Client, nonce string) (uint64, error)
	}{
		{"CreateNamespace", func(c *client.Client, n string) (uint64, error) { return c.CreateNamespace(ctx(t), "ns1", n) }},
		{"DeleteNamespace", func(c *client.Client, n string) (uint64, error) { return c.DeleteNamespace(ctx(t), "ns1", n) }},
		{"CreateTable", func(c *client.Client, n string) (uint64, error) { return c.CreateTable(ctx(t), "", "t2", 3, n) }},
		{"DeleteTable", func(c *client.Client, n string) (uint64, error) { return c.DeleteTable(ctx(t), "", "t1_2", n) }},
		{"EnableTable", func(c *client.Client, n string) (uint64, error) { return c.EnableTable(ctx(t), "", "t1_3", n) }},
		{"DisableTable", func(c *client.Client, n string) (uint64, error) { return c.DisableTable(ctx(t), "", "t1_4", n) }},
		{"MoveRegion", func(c *client.Client, n string) (uint64, error) {
			tb, err := c.DescribeTable(ctx(t), "", "t1_5")
			if err != nil {
				return 0, err
			}
			return c.MoveRegion(ctx(t), tb.Regions[0].Name, "", n)
		}},
		{"Balance", func(c *client.Client, n string) (uint64, error) { return c.Balance(ctx(t), n) }},
	} {
		t.Run(tc.method, func(t *testing.T) {
			id0, err := c.CreateTable(ctx(t), "", fmt.Sprintf("t1_%d", i), 2, "")
			mustSucceed(t, c, id0, err)
			procs := func() int {
				all, err := c.ListAll(ctx(t), client.ListOptions{RootsOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				return len(all)
			}
			before := procs()

			blip := fc.Faults().MustAdd(rpcfault.Rule{Name: "blip", Methods: []string{method(tc.method)}, Fault: rpcfault.DropRequest, Times: 1})
			calls := record(fc, tc.method)
			lost := fc.Faults().MustAdd(rpcfault.Rule{Name: "lost", Methods: []string{method(tc.method)}, Fault: rpcfault.DropAnswer, Times: 1})
			t.Cleanup(func() { blip.Remove(); lost.Remove() })
			id, err := tc.call(c, "")
			if err != nil {
				t.Fatal(err)
			}
			// The request lost is not recorded; the lost reply and the
			// retry are.
			var nonces []string
			for _, m := range calls() {
				nonces = append(nonces, m.(interface{ GetNonce() string }).GetNonce())
			}
			if len(nonces) != 2 || nonces[0] == "" || nonces[0] != nonces[1] {
				t.Fatalf("nonces %q, want one generated nonce sent twice", nonces)
			}
			if n := procs() - before; n != 1 {
				t.Fatalf("%d procedures started, want 1", n)
			}
			again, err := tc.call(c, nonces[0])
			if err != nil || again != id {
				t.Fatalf("again with the nonce: %d %v, want %d", again, err, id)
			}
		})
	}
}

func TestDomainLifecycle(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 3, RegionServers: 2})
	fc.TransferLeadership(2)
	c := newClient(t, fc.AdminAddrs()[:1]) // a standby: it forwards to the leader

	id, err := c.CreateNamespace(ctx(t), "ns1", "")
	mustSucceed(t, c, id, err)
	if ns, err := c.ListNamespaces(ctx(t)); err != nil || !slices.Equal(ns, []string{"default", "ns1"}) {
		t.Fatalf("ListNamespaces: %v %v", ns, err)
	}
	id, err = c.CreateTable(ctx(t), "ns1", "t", 4, "")
	mustSucceed(t, c, id, err)
	tb, err := c.DescribeTable(ctx(t), "ns1", "t")
	if err != nil || tb.State != "ENABLED" || len(tb.Regions) != 4 {
		t.Fatalf("DescribeTable: %v %v", tb, err)
	}
	for _, r := range tb.Regions {
		if r.State != "OPEN" || r.Server == "" || r.Table != "ns1:t" {
			t.Fatalf("region %v", r)
		}
	}
	if ts, err := c.ListTables(ctx(t), "ns1"); err != nil || len(ts) != 1 {
		t.Fatalf("ListTables: %v %v", ts, err)
	}
	if rs, err := c.ListRegions(ctx(t), "ns1:t"); err != nil || len(rs) != 4 {
		t.Fatalf("ListRegions: %v %v", rs, err)
	}

	// Move a region to the other server: the servers' counts follow.
	r0 := tb.Regions[0]
	to := map[string]string{"rs1": "rs2", "rs2": "rs1"}[r0.Server]
	id, err = c.MoveRegion(ctx(t), r0.Name, to, "")
	mustSucceed(t, c, id, err)
	sr, err := c.ServerRegions(ctx(t), to)
	if err != nil || !slices.Contains(sr.Hosted, r0.Name) || !slices.Contains(sr.Assigned, r0.Name) {
		t.Fatalf("ServerRegions(%s): %v %v", to, sr, err)
	}
	servers, err := c.ListServers(ctx(t))
	if err != nil || len(servers) != 2 || servers[0].RegionCount+servers[1].RegionCount != 4 {
		t.Fatalf("ListServers: %v %v", servers, err)
	}
	// The leader changed: a server is unconfirmed until its first
	// heartbeat to the new one.
	testwait.ForNil(t, 10*time.Second, "rs1 live to the new leader", func() error {
		servers, err := c.ListServers(ctx(t))
		if err != nil || servers[0].LeaseState != client.LeaseLive || servers[0].StartCode == 0 {
			return fmt.Errorf("server %v, %v", servers, err)
		}
		return nil
	})
	id, err = c.Balance(ctx(t), "")
	mustSucceed(t, c, id, err)
	servers, _ = c.ListServers(ctx(t))
	if servers[0].RegionCount != 2 || servers[1].RegionCount != 2 {
		t.Fatalf("after Balance: %v", servers)
	}

	// Delete needs a disabled table; the namespace, no tables.
	for _, step := range []struct {
		call  func() (uint64, error)
		state string
	}{
		{func() (uint64, error) { return c.DeleteNamespace(ctx(t), "ns1", "") }, client.StateRolledBack},
		{func() (uint64, error) { return c.DeleteTable(ctx(t), "ns1", "t", "") }, client.StateRolledBack},
		{func() (uint64, error) { return c.DisableTable(ctx(t), "ns1", "t", "") }, client.StateSuccess},
		{func() (uint64, error) { return c.EnableTable(ctx(t), "ns1", "t", "") }, client.StateSuccess},
		{func() (uint64, error) { return c.DisableTable(ctx(t), "ns1", "t", "") }, client.StateSuccess},
		{func() (uint64, error) { return c.DeleteTable(ctx(t), "ns1", "t", "") }, client.StateSuccess},
		{func() (uint64, error) { return c.DeleteNamespace(ctx(t), "ns1", "") }, client.StateSuccess},
	} {
		id, err := step.call()
		if err != nil {
			t.Fatal(err)
		}
		if p, err := c.Wait(ctx(t), id); err != nil || p.State != step.state {
			t.Fatalf("procedure %d: %v %v, want %s", id, p, err, step.state)
		}
	}
	if _, err := c.DescribeTable(ctx(t), "ns1", "t"); status.Code(err) != codes.NotFound {
		t.Fatalf("DescribeTable after delete: %v", err)
	}
}

// empty is the error of a listing, or one if it lists something.
func empty[T any](l []T, err error) error {
	if err == nil && len(l) != 0 {
		return fmt.Errorf("listed %v", l)
	}
	return err
}

func TestDomainErrorsKeepTheirCode(t *testing.T) {
	fc := start(t, 1)
	c := newClient(t, fc.AdminAddrs())
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"describe unknown table", func() error { _, err := c.DescribeTable(ctx(t), "", "nope"); return err }, codes.NotFound},
		// The real master lists nothing, without an error, for an unknown
		// table or namespace.
		{"regions of unknown table", func() error { return empty(c.ListRegions(ctx(t), "nope")) }, codes.OK},
		{"tables of unknown namespace", func() error { return empty(c.ListTables(ctx(t), "nope")) }, codes.OK},
		{"too many regions (checked here)", func() error { _, err := c.CreateTable(ctx(t), "", "t", client.MaxRegions+1, ""); return err }, codes.InvalidArgument},
		{"negative regions (checked here)", func() error { _, err := c.CreateTable(ctx(t), "", "t", -1, ""); return err }, codes.InvalidArgument},
		// The real master takes "-t" as a table name (the fake refused
		// it): the submission is accepted.
		{"bad table name", func() error { _, err := c.CreateTable(ctx(t), "", "-t", 1, ""); return err }, codes.OK},
		{"move unknown region", func() error { _, err := c.MoveRegion(ctx(t), "x", "", ""); return err }, codes.NotFound},
		{"regions of unknown server", func() error { _, err := c.ServerRegions(ctx(t), "rs9"); return err }, codes.NotFound},
		{"bad lock kind", func() error {
			_, err := c.AcquireLock(ctx(t), "row", []string{"x"}, false, "me", "", "")
			return err
		}, codes.InvalidArgument},
		{"heartbeat unknown lock", func() error { _, err := c.LockHeartbeat(ctx(t), 999); return err }, codes.NotFound},
		{"release unknown lock", func() error { _, err := c.ReleaseLock(ctx(t), 999); return err }, codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); status.Code(err) != tc.code {
				t.Fatalf("%v, want %v", err, tc.code)
			}
		})
	}
}
