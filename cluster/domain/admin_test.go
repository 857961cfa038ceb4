package domain_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/rspb"
)

// The admin API's domain calls, asked of a standby: changes are forwarded
// to the leader (with their nonce), reads answered from the standby's FSM,
// ListServers forwarded for the leader's leases, ServerRegions from the
// region server itself. The Master service on a standby points region
// servers at the leader.
func TestAdminDomainAPI(t *testing.T) {
	h := newHarness(t, harnessOpts{servers: 3})
	li := h.leaderIndex()
	sb := h.masters[(li+1)%len(h.masters)]
	c := sb.client
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The standby learns the leader's admin address before it can forward.
	testwait.For(t, 5*time.Second, "the standby to know the leader's admin address", func() bool {
		_, err := c.ListServers(ctx, &adminpb.ListServersRequest{})
		return err == nil
	})

	r, err := c.CreateNamespace(ctx, &adminpb.NamespaceRequest{Name: "ns1", Nonce: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	h.mustSucceed(r.GetId(), 10*time.Second)

	req := &adminpb.CreateTableRequest{Namespace: "ns1", Name: "t", Regions: 4, Nonce: "c1"}
	r, err = c.CreateTable(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.CreateTable(ctx, req)
	if err != nil || again.GetId() != r.GetId() {
		t.Fatalf("retried create: id %d, %v; want %d", again.GetId(), err, r.GetId())
	}
	h.mustSucceed(r.GetId(), 20*time.Second)
	h.checkTableOpen("ns1:t", 4)

	if _, err := c.CreateTable(ctx, &adminpb.CreateTableRequest{Name: "bad name"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("create with a bad name: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := c.DescribeTable(ctx, &adminpb.TableRequest{Namespace: "ns1", Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("describe a missing table: %v, want NOT_FOUND", err)
	}

	// Reads from the standby's FSM (it may lag a little).
	var tbl *adminpb.Table
	testwait.For(t, 5*time.Second, "the standby's FSM to show the table enabled", func() bool {
		tbl, err = c.DescribeTable(ctx, &adminpb.TableRequest{Namespace: "ns1", Name: "t"})
		return err == nil && tbl.GetState() == domain.TableEnabled
	})
	if len(tbl.GetRegions()) != 4 {
		t.Fatalf("describe: %v", tbl)
	}
	for _, rg := range tbl.GetRegions() {
		if rg.GetState() != domain.RegionOpen || rg.GetServer() == "" || rg.GetTable() != "ns1:t" {
			t.Errorf("describe: region %v", rg)
		}
	}
	nss, err := c.ListNamespaces(ctx, &adminpb.ListNamespacesRequest{})
	if err != nil || !slices.Equal(nss.GetNamespaces(), []string{"default", "ns1"}) {
		t.Errorf("namespaces %v, %v", nss.GetNamespaces(), err)
	}
	tables, err := c.ListTables(ctx, &adminpb.ListTablesRequest{Namespace: "ns1"})
	if err != nil || len(tables.GetTables()) != 1 || tables.GetTables()[0].GetName() != "t" {
		t.Errorf("tables %v, %v", tables, err)
	}
	regions, err := c.ListRegions(ctx, &adminpb.ListRegionsRequest{Table: "ns1:t"})
	if err != nil || len(regions.GetRegions()) != 4 {
		t.Errorf("regions %v, %v", regions, err)
	}

	servers, err := c.ListServers(ctx, &adminpb.ListServersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, s := range servers.GetServers() {
		if s.GetLeaseState() != "live" || s.GetStartCode() == 0 || s.GetAddress() == "" {
			t.Errorf("server %v", s)
		}
		total += int(s.GetRegionCount())
	}
	if len(servers.GetServers()) != 3 || total != 4 {
		t.Errorf("servers %v (regions %d)", servers.GetServers(), total)
	}
	for _, s := range servers.GetServers() {
		sr, err := c.ServerRegions(ctx, &adminpb.ServerRegionsRequest{Server: s.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(sr.Assigned)
		if !slices.Equal(sr.GetHosted(), sr.GetAssigned()) || len(sr.GetHosted()) != int(s.GetRegionCount()) {
			t.Errorf("server %s hosts %v, assigned %v", s.GetId(), sr.GetHosted(), sr.GetAssigned())
		}
	}

	// Move and balance through the API.
	mr, err := c.MoveRegion(ctx, &adminpb.MoveRegionRequest{Region: tbl.GetRegions()[0].GetName(), Nonce: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	h.mustSucceed(mr.GetId(), 10*time.Second)
	br, err := c.Balance(ctx, &adminpb.BalanceRequest{Nonce: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	h.mustSucceed(br.GetId(), 10*time.Second)
	h.checkTableOpen("ns1:t", 4)

	// The Master service on a standby: UNAVAILABLE, with the leader's
	// admin address.
	lm, _ := h.leader()
	_, err = rspb.NewMasterClient(sb.cc).Heartbeat(ctx, &rspb.HeartbeatRequest{ServerId: "rs1"})
	if hint, ok := admin.LeaderHintOf(err); status.Code(err) != codes.Unavailable || !ok || hint.GetLeaderAdminAddress() != lm.addr {
		t.Errorf("heartbeat at a standby: %v (hint %v), want UNAVAILABLE naming %s", err, hint, lm.addr)
	}
	// At the leader, an unknown incarnation is told it expired.
	hb, err := rspb.NewMasterClient(lm.cc).Heartbeat(ctx, &rspb.HeartbeatRequest{ServerId: "rs1", StartCode: 12345})
	if err != nil || !hb.GetExpired() {
		t.Errorf("heartbeat of a stale start code: %v, %v; want expired", hb, err)
	}

	// Disable and delete through the API.
	dr, err := c.DisableTable(ctx, &adminpb.TableRequest{Namespace: "ns1", Name: "t", Nonce: "d1"})
	if err != nil {
		t.Fatal(err)
	}
	h.mustSucceed(dr.GetId(), 10*time.Second)
	dr, err = c.DeleteTable(ctx, &adminpb.TableRequest{Namespace: "ns1", Name: "t", Nonce: "d2"})
	if err != nil {
		t.Fatal(err)
	}
	h.mustSucceed(dr.GetId(), 10*time.Second)
	h.checkTableGone("ns1:t")
	dr, err = c.DeleteNamespace(ctx, &adminpb.NamespaceRequest{Name: "ns1", Nonce: "d3"})
	if err != nil {
		t.Fatal(err)
	}
	h.mustSucceed(dr.GetId(), 10*time.Second)
}

// External locks: a held table lock keeps a disable out until released;
// a lock whose holder stops heartbeating expires and lets the next one in.
func TestExternalLocks(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 1, domain: func(c *domain.Config) { c.LockLease = time.Second }})
	h.mustSucceed(h.createTable("", "t", 2), 10*time.Second)
	lm, x := h.leader()
	c := lm.client
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	l1, err := c.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "table", Names: []string{"t"}, Exclusive: true, Holder: "test", Nonce: "l1"})
	if err != nil || l1.GetState() != domain.LockAcquired {
		t.Fatalf("acquire: %v, %v", l1, err)
	}
	if l1.GetLeaseTimeoutMs() != 1000 {
		t.Errorf("lease timeout %d ms, want 1000", l1.GetLeaseTimeoutMs())
	}
	p, _ := domain.NewDisableTable("", "t")
	dis := h.submit(p, "")
	// Heartbeat past the lease, every 100 ms as a holder does (the ticker
	// paces the holder, it waits for no state): the lock holds, the
	// disable waits.
	beat := time.NewTicker(100 * time.Millisecond)
	defer beat.Stop()
	for range 15 {
		hb, err := c.LockHeartbeat(ctx, &adminpb.LockRef{LockId: l1.GetLockId()})
		if err != nil || hb.GetState() != domain.LockAcquired {
			t.Fatalf("heartbeat: %v, %v", hb, err)
		}
		<-beat.C
	}
	testwait.For(t, 10*time.Second, "the disable to wait for the lock", func() bool {
		w, _ := x.Why(dis)
		return w.Reason == "waiting for lock"
	})
	rel, err := c.ReleaseLock(ctx, &adminpb.LockRef{LockId: l1.GetLockId()})
	if err != nil || rel.GetState() != domain.LockReleased {
		t.Fatalf("release: %v, %v", rel, err)
	}
	h.mustSucceed(dis, 10*time.Second)
	if _, ok, _ := domain.ReaderGet(h.reader(), domain.LockKey(l1.GetLockId())); ok {
		t.Error("lock record left after release")
	}

	// Two exclusive locks on a namespace: the second waits; the first's
	// holder goes silent, its lease expires, the second gets the lock.
	a, err := c.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: []string{"default"}, Exclusive: true, Nonce: "a"})
	if err != nil || a.GetState() != domain.LockAcquired {
		t.Fatalf("acquire a: %v, %v", a, err)
	}
	b, err := c.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: []string{"default"}, Exclusive: true, Nonce: "b"})
	if err != nil || b.GetState() != domain.LockWaiting {
		t.Fatalf("acquire b: %v, %v", b, err)
	}
	testwait.For(t, 10*time.Second, "b to get the lock once a expired", func() bool {
		hb, err := c.LockHeartbeat(ctx, &adminpb.LockRef{LockId: b.GetLockId()})
		return err == nil && hb.GetState() == domain.LockAcquired
	})
	ha, err := c.LockHeartbeat(ctx, &adminpb.LockRef{LockId: a.GetLockId()})
	if err != nil || ha.GetState() != domain.LockExpired {
		t.Errorf("a after expiry: %v, %v", ha, err)
	}
	if info, _ := x.Get(a.GetLockId()); info.State != procedure.Success || string(info.Result) != domain.LockExpired {
		t.Errorf("lock procedure a: %v %q", info.State, info.Result)
	}
	if _, err := c.LockHeartbeat(ctx, &adminpb.LockRef{LockId: 999999}); status.Code(err) != codes.NotFound {
		t.Errorf("heartbeat of an unknown lock: %v, want NOT_FOUND", err)
	}
	if _, err := c.ReleaseLock(ctx, &adminpb.LockRef{LockId: b.GetLockId()}); err != nil {
		t.Fatal(err)
	}
}

// A held lock survives a leader failover: the new leader re-takes its locks
// (held for life), grants its lease afresh, and the holder's heartbeats and
// release work there.
func TestLockSurvivesFailover(t *testing.T) {
	h := newHarness(t, harnessOpts{servers: 1, domain: func(c *domain.Config) { c.LockLease = 2 * time.Second }})
	h.mustSucceed(h.createTable("", "t", 1), 10*time.Second)
	li := h.leaderIndex()
	other := h.masters[(li+1)%len(h.masters)]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := h.masters[li].client.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "table", Names: []string{"default:t"}, Exclusive: true, Nonce: "l"})
	if err != nil || l.GetState() != domain.LockAcquired {
		t.Fatalf("acquire: %v, %v", l, err)
	}
	h.killMaster(li)
	h.leader()
	testwait.For(t, 10*time.Second, "a heartbeat at the new leader", func() bool {
		hb, err := other.client.LockHeartbeat(ctx, &adminpb.LockRef{LockId: l.GetLockId()})
		return err == nil && hb.GetState() == domain.LockAcquired
	})
	// Still exclusive: a disable waits for it.
	p, _ := domain.NewDisableTable("", "t")
	dis := h.submit(p, "")
	_, x := h.leader()
	testwait.For(t, 10*time.Second, "the disable to wait for the lock", func() bool {
		w, _ := x.Why(dis)
		return w.Reason == "waiting for lock"
	})
	rel, err := other.client.ReleaseLock(ctx, &adminpb.LockRef{LockId: l.GetLockId()})
	if err != nil || rel.GetState() != domain.LockReleased {
		t.Fatalf("release: %v, %v", rel, err)
	}
	h.mustSucceed(dis, 10*time.Second)
}

// A lock asks for its own lease: a holder that goes away without releasing
// blocks the work behind it for that lease, not the cluster's long
// default. A heartbeat may restate it, and a new leader learns it from the
// lock's procedure even if the holder never comes back.
func TestLockOwnLease(t *testing.T) {
	h := newHarness(t, harnessOpts{servers: 1, domain: func(c *domain.Config) { c.LockLease = time.Hour }})
	lm, _ := h.leader()
	c := lm.client
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, ms := range []int64{500, 2 * 3600 * 1000, -1} {
		_, err := c.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: []string{"default"}, LeaseMs: ms})
		// A negative length is refused before the lock's own bounds, as
		// every *_ms field out of what a duration holds.
		want := "want between 1s and 1h0m0s"
		if ms < 0 {
			want = "lease_ms -1"
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("lease %d ms: %v, want INVALID_ARGUMENT", ms, err)
		}
	}
	a, err := c.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: []string{"default"}, Exclusive: true, Holder: "goes away", LeaseMs: 1000})
	if err != nil || a.GetState() != domain.LockAcquired || a.GetLeaseTimeoutMs() != 1000 {
		t.Fatalf("acquire a: %v, %v", a, err)
	}
	b, err := c.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: []string{"default"}, Exclusive: true, Holder: "stays"})
	if err != nil || b.GetState() != domain.LockWaiting || b.GetLeaseTimeoutMs() != time.Hour.Milliseconds() {
		t.Fatalf("acquire b: %v, %v", b, err)
	}
	// a's holder never heartbeats: a expires after its own second, and b
	// is granted, long before the cluster's hour.
	testwait.For(t, 20*time.Second, "b granted once a's own lease ran out", func() bool {
		hb, err := c.LockHeartbeat(ctx, &adminpb.LockRef{LockId: b.GetLockId()})
		return err == nil && hb.GetState() == domain.LockAcquired
	})
	// a's end is its own write, shown once committed, which may come a
	// moment after b's grant; asked of the leader of the moment.
	testwait.ForNil(t, 20*time.Second, "a ended EXPIRED", func() error {
		_, x := h.leader()
		if info, _ := x.Get(a.GetLockId()); string(info.Result) != domain.LockExpired {
			return fmt.Errorf("a: %v %q, want EXPIRED", info.State, info.Result)
		}
		return nil
	})
	// b restates its lease: 1.5 s is rounded up to the next step.
	hb, err := c.LockHeartbeat(ctx, &adminpb.LockRef{LockId: b.GetLockId(), LeaseMs: 1500})
	if err != nil || hb.GetLeaseTimeoutMs() != 2000 {
		t.Fatalf("restated heartbeat: %v, %v", hb, err)
	}
	if _, err := c.LockHeartbeat(ctx, &adminpb.LockRef{LockId: b.GetLockId(), LeaseMs: 10}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("heartbeat restating 10 ms: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := c.ReleaseLock(ctx, &adminpb.LockRef{LockId: b.GetLockId()}); err != nil {
		t.Fatal(err)
	}

	// A lock of 2 s whose holder dies with the leader: the new leader
	// grants it the default (an hour) as a grace to find it, then its
	// procedure's next step restates 2 s, and it expires.
	l, err := c.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: []string{"default"}, Exclusive: true, LeaseMs: 2000})
	if err != nil || l.GetState() != domain.LockAcquired {
		t.Fatalf("acquire: %v, %v", l, err)
	}
	h.killMaster(h.leaderIndex())
	testwait.For(t, 30*time.Second, "the lock expired on the new leader", func() bool {
		_, x2 := h.leader() // of the moment: a loaded machine may elect more than once
		info, err := x2.Get(l.GetLockId())
		return err == nil && string(info.Result) == domain.LockExpired
	})
}
