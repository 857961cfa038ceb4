package domain_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/raftfsm"
)

// The repair kit is tested through the admin API, as an operator's tools
// reach it (the CLI's own tests are in cmd/node).

func rctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var operator = client.RepairOptions{Caller: "ann@console:1"}

func withOverride(o client.RepairOptions) client.RepairOptions { o.Override = true; return o }
func dryRun(o client.RepairOptions) client.RepairOptions       { o.DryRun = true; return o }

// wantRefused checks that err is a status with code, whose message says
// each of says.
func wantRefused(t *testing.T, err error, code codes.Code, says ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("error %v, want %v", err, code)
	}
	for _, s := range says {
		if !strings.Contains(status.Convert(err).Message(), s) {
			t.Errorf("message %q does not say %q", status.Convert(err).Message(), s)
		}
	}
}

// onlyRegion returns the one region of table.
func onlyRegion(t *testing.T, h *harness, table string) (string, domain.Region) {
	t.Helper()
	var name string
	var region domain.Region
	domain.ScanRegions(h.reader(), func(n string, rg domain.Region) bool {
		if rg.Table == table {
			name, region = n, rg
		}
		return true
	})
	if name == "" {
		t.Fatalf("no region of %s", table)
	}
	return name, region
}

// oneRegionTable creates table t of one region and returns the region and
// the server it opened on.
func oneRegionTable(t *testing.T, h *harness) (region, server string) {
	t.Helper()
	h.mustSucceed(h.createTable("", "t", 1), 20*time.Second)
	region, rg := onlyRegion(t, h, "default:t")
	return region, rg.Server
}

// sampleDoubles asks every region server what it hosts, every few
// milliseconds until the test ends, and returns a check that fails the
// test if a region was ever open on two servers at once.
func sampleDoubles(t *testing.T, h *harness) func() {
	var mu sync.Mutex
	var doubles []string
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			for r, srvs := range h.hostedQuiet() {
				if len(srvs) > 1 {
					mu.Lock()
					doubles = append(doubles, r+" on "+strings.Join(srvs, ", "))
					mu.Unlock()
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() {
		t.Helper()
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, d := range doubles {
			t.Errorf("region open on two servers at once: %s", d)
		}
	}
}

// repairs lists the repair records by action, in order.
func repairs(t *testing.T, cl *client.Client) []*adminpb.RepairRecord {
	t.Helper()
	recs, err := cl.ListRepairs(rctx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// wantRecords checks that recs, in order, are the actions with the
// outcomes given ("region assign refused", ...), each naming the caller.
func wantRecords(t *testing.T, recs []*adminpb.RepairRecord, want ...string) {
	t.Helper()
	var got []string
	for _, r := range recs {
		got = append(got, r.GetAction()+" "+r.GetOutcome())
		if r.GetCaller() != operator.Caller || r.GetPeer() == "" || r.GetNode() == "" || r.GetSeq() == 0 ||
			time.Since(time.UnixMilli(r.GetAtUnixMs())).Abs() > time.Minute {
			t.Errorf("record %v: caller, peer, node, seq missing, or its time not now", r)
		}
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("repair records:\n got %s\nwant %s", strings.Join(got, "; "), strings.Join(want, "; "))
	}
}

// A region whose move is stuck (its open fails, and a move retries until
// done) stays in transition for as long as the failure lasts. Assign
// refuses it without override, the guarded bypass refuses its procedure
// (it holds the region's lock), cancel cannot take it (it cannot roll
// back); assign with override bypasses it and opens the region where asked,
// closing it first where it may have been opened: it ends OPEN on exactly
// one server, and was never open on two.
func TestRepairAssignOverrideTakesOverAStuckRegionProcedure(t *testing.T) {
	var stuck atomic.Bool
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, domain: func(c *domain.Config) {
		c.FailPoint = func(point string) error {
			if point == "region.open" && stuck.Load() {
				return errors.New("injected: the open fails")
			}
			return nil
		}
	}})
	cl := h.c.Client()
	region, from := oneRegionTable(t, h)
	to := otherThan(from, "rs1", "rs2")
	checkDoubles := sampleDoubles(t, h)

	stuck.Store(true)
	move, err := cl.MoveRegion(rctx(t), region, to, "")
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 20*time.Second, "the move stuck OPENING on "+to, func() bool {
		_, rg := onlyRegion(t, h, "default:t")
		_, x := h.leader()
		w, err := x.Why(move)
		return rg.State == domain.RegionOpening && rg.Server == to && rg.ProcID == move && err == nil && w.Reason == "retrying after an error"
	})

	_, err = cl.AssignRegion(rctx(t), region, from, "", operator)
	wantRefused(t, err, codes.FailedPrecondition, "in transition", "OPENING on "+to, "procedure", "--override")
	_, err = cl.BypassProcedure(rctx(t), move, false, operator)
	wantRefused(t, err, codes.FailedPrecondition, "holds its locks", "region "+region, "--override")
	c, err := cl.CancelProcedures(rctx(t), client.CancelFilter{Type: domain.TypeTransitRegionState}, operator)
	if err != nil || len(c.GetCancelled()) != 0 || len(c.GetSkipped()) != 1 || c.GetSkipped()[0].GetProcedure().GetId() != move ||
		!strings.Contains(c.GetSkipped()[0].GetReason(), "cannot roll back") {
		t.Fatalf("cancel of the stuck move: %v, %v; want it skipped, saying it cannot roll back", c, err)
	}

	plan, err := cl.AssignRegion(rctx(t), region, from, "", dryRun(withOverride(operator)))
	if err != nil || !plan.GetDryRun() || plan.GetRecord() != 0 || len(plan.GetProcIds()) != 0 ||
		!strings.Contains(plan.GetSummary(), "bypass procedure") || !strings.Contains(plan.GetSummary(), "open region "+region+" on "+from) {
		t.Fatalf("dry run: %v, %v", plan, err)
	}
	if _, x := h.leader(); func() bool { i, _ := x.Get(move); return i.Bypassed }() {
		t.Fatal("the dry run bypassed the move")
	}

	res, err := cl.AssignRegion(rctx(t), region, from, "", withOverride(operator))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.GetBypassed()) != 1 || res.GetBypassed()[0] != move || len(res.GetProcIds()) != 1 || res.GetRecord() == 0 {
		t.Fatalf("assign --override: %v", res)
	}
	stuck.Store(false)
	if info := h.mustSucceed(res.GetProcIds()[0], 20*time.Second); info.State != procedure.Success {
		t.Fatalf("assign ended %v", info.State)
	}
	if info := h.wait(move, 10*time.Second); info.State != procedure.Success || !info.Bypassed {
		t.Fatalf("the stuck move ended %v (bypassed %v), want SUCCESS bypassed", info.State, info.Bypassed)
	}
	h.checkTableOpen("default:t", 1)
	if _, rg := onlyRegion(t, h, "default:t"); rg.Server != from {
		t.Errorf("region open on %s, want %s, where it was assigned", rg.Server, from)
	}
	checkDoubles()
	wantRecords(t, repairs(t, cl), "region assign refused", "proc bypass refused", "proc cancel done", "region assign done")
}

// A region recorded OPENING on a server that died, whose procedure is
// long gone, is stuck: nothing will finish it. Assign refuses it without
// override; with override the region opens on a live server once the dead
// one has certainly stopped serving, and exactly there.
func TestRepairAssignOverrideRepairsARegionStuckOpeningOnADeadServer(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 3})
	cl := h.c.Client()
	create := h.createTable("", "t", 1)
	h.mustSucceed(create, 20*time.Second)
	region, _ := onlyRegion(t, h, "default:t")
	closed, err := cl.UnassignRegion(rctx(t), region, "", operator)
	if err != nil {
		t.Fatal(err)
	}
	h.mustSucceed(closed.GetProcIds()[0], 20*time.Second)
	if hosts := h.hosted()[region]; len(hosts) != 0 {
		t.Fatalf("region still hosted by %v after unassign", hosts)
	}

	dead := h.rs("rs3")
	ref := domain.ServerRef{ID: "rs3", StartCode: dead.StartCode()}
	h.stopRS("rs3")
	_, x := h.leader()
	testwait.For(t, 20*time.Second, "rs3's crash procedure to end", func() bool {
		scps := x.List(procedure.Filter{Type: domain.TypeServerCrash})
		for _, p := range scps {
			if !p.State.Terminal() {
				return false
			}
		}
		return len(scps) > 0
	})
	// What a procedure that died half way leaves: OPENING on the dead
	// incarnation, moved by a procedure that is over.
	lm, _ := h.leader()
	stuck := domain.Region{Table: "default:t", State: domain.RegionOpening, Server: ref.ID, StartCode: ref.StartCode, ProcID: create}
	if err := lm.dom.Services().Commit(rctx(t), raftfsm.Put(domain.RegionKey(region), domain.MustJSON(stuck))); err != nil {
		t.Fatal(err)
	}

	_, err = cl.AssignRegion(rctx(t), region, "", "", operator)
	wantRefused(t, err, codes.FailedPrecondition, "in transition", "OPENING on "+ref.String()+" (a dead server)", "nothing will finish it", "--override")
	res, err := cl.AssignRegion(rctx(t), region, "", "", withOverride(operator))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.GetBypassed()) != 0 || len(res.GetProcIds()) != 1 {
		t.Fatalf("assign --override: %v (nothing to bypass: its procedure is over)", res)
	}
	h.mustSucceed(res.GetProcIds()[0], 20*time.Second)
	h.checkTableOpen("default:t", 1)
	wantRecords(t, repairs(t, cl), "region unassign done", "region assign refused", "region assign done")
}

// Maintenance mode pauses dispatch and refuses new submissions, says so
// where the operator looks (the waiting procedure, the refusal, the
// gauge), survives the loss of the leader, and once off lets the waiting
// work finish.
func TestRepairMaintenanceModePausesDispatchAcrossAFailover(t *testing.T) {
	regs := make([]*prometheus.Registry, 3)
	c := clustertest.New(t, clustertest.Config{Masters: 3, Domain: func(i int, d *domain.Config) {
		regs[i] = prometheus.NewRegistry()
		d.Metrics = regs[i]
	}})
	cl := c.Client()
	var batches atomic.Int64
	rule := c.Faults().MustAdd(rpcfault.Rule{Name: "count batches", Methods: []string{"/baton.rs.v1.RegionServer/ExecuteBatch"}, Fault: rpcfault.DropRequest,
		When: func(call rpcfault.Call) bool {
			if call.Side == rpcfault.Client {
				batches.Add(1)
			}
			return false
		}})
	t.Cleanup(rule.Remove)
	gauge := func(i int) float64 {
		mfs, err := regs[i].Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "baton_maintenance_mode" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("master %d: no baton_maintenance_mode", i)
		return 0
	}

	// A create with no region server to open on waits; maintenance mode
	// comes on meanwhile; then a server registers.
	create, err := cl.CreateTable(rctx(t), "", "t", 2, "")
	if err != nil {
		t.Fatal(err)
	}
	held, err := cl.AcquireLock(rctx(t), client.LockNamespace, []string{"default"}, false, "ann", "", "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := cl.SetMaintenance(rctx(t), true, "replacing rs1's disk", operator)
	if err != nil || !res.GetMaintenance().GetOn() || res.GetMaintenance().GetReason() != "replacing rs1's disk" ||
		!strings.Contains(res.GetMaintenance().GetBy(), operator.Caller) || res.GetRecord() == 0 {
		t.Fatalf("maintenance on: %v, %v", res, err)
	}
	c.StartRegionServer("rs1")
	waitsForMaintenance := func(what string) {
		c.WaitForNil(what, func() error {
			p, err := cl.Get(rctx(t), create)
			if err != nil {
				return err
			}
			if !strings.Contains(p.GetWaitingFor(), "maintenance mode: dispatch paused") {
				return errors.New("create waiting for: " + p.GetWaitingFor())
			}
			return nil
		})
	}
	waitsForMaintenance("the create to wait for maintenance mode")
	refused := func() {
		t.Helper()
		_, err := cl.Submit(rctx(t), "sleep", nil, "", "", 0)
		wantRefused(t, err, codes.FailedPrecondition, "cluster in maintenance mode", "replacing rs1's disk", "maintenance off")
		_, err = cl.CreateNamespace(rctx(t), "ns1", "")
		wantRefused(t, err, codes.FailedPrecondition, "cluster in maintenance mode")
		_, err = cl.AcquireLock(rctx(t), client.LockTable, []string{"default:t"}, true, "ann", "", "")
		wantRefused(t, err, codes.FailedPrecondition, "cluster in maintenance mode")
	}
	refused()
	// Repairs and lock releases are not submissions.
	if _, err := cl.CancelProcedures(rctx(t), client.CancelFilter{Type: "sleep"}, dryRun(operator)); err != nil {
		t.Errorf("a repair call in maintenance mode: %v", err)
	}
	if lk, err := cl.ReleaseLock(rctx(t), held.GetLockId()); err != nil || lk.GetState() != client.LockReleased {
		t.Errorf("a lock release in maintenance mode: %v, %v", lk, err)
	}
	for i, m := range c.Masters() {
		c.WaitFor("the gauge on", func() bool { return gauge(i) == 1 })
		st := admin.StatusOf(admin.WithDomain(admin.NodeBackend(m.Node()), m.Domain()))
		if st.Maintenance == nil || !st.Maintenance.On || st.Maintenance.Reason != "replacing rs1's disk" || st.Maintenance.Since == nil {
			t.Errorf("%s's /status maintenance: %+v", m.ID, st.Maintenance)
		}
	}

	li, _ := c.WaitLeader()
	c.Kill(li)
	c.WaitLeader(li)
	refused()
	waitsForMaintenance("the create to wait for maintenance mode under the new leader")
	if m, err := cl.GetMaintenance(rctx(t)); err != nil || !m.GetOn() {
		t.Fatalf("maintenance after the failover: %v, %v", m, err)
	}
	if n := batches.Load(); n != 0 {
		t.Fatalf("%d region server batches sent in maintenance mode", n)
	}

	if _, err := cl.SetMaintenance(rctx(t), false, "", operator); err != nil {
		t.Fatal(err)
	}
	if p := c.MustSucceed(create, 20*time.Second); p.State != procedure.Success {
		t.Fatalf("create ended %v", p.State)
	}
	if _, err := cl.Submit(rctx(t), "sleep", nil, "", "", 0); err != nil {
		t.Fatalf("a submission after maintenance mode: %v", err)
	}
	for i := range regs {
		if i != li {
			c.WaitFor("the gauge off", func() bool { return gauge(i) == 0 })
		}
	}
	wantRecords(t, repairs(t, cl), "maintenance on done", "maintenance off done")
}

// Cancel aborts exactly the unfinished roots that match its filter, and
// nothing on a dry run; a bad filter is refused as invalid.
func TestRepairCancelByFilter(t *testing.T) {
	c := clustertest.New(t, clustertest.Config{Masters: 1})
	cl := c.Client()
	submit := func(typ, owner string, args map[string]string) uint64 {
		id, err := cl.Submit(rctx(t), typ, args, "", owner, 0)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	long := map[string]string{"steps": "2", "delay": "1h"}
	a1, a2 := submit("sleep", "a", long), submit("sleep", "a", long)
	b := submit("sleep", "b", long)
	fan := submit("fanout", "a", map[string]string{"children": "2", "steps": "1", "delay": "1h"})
	done := submit("sleep", "a", map[string]string{"steps": "0"})
	c.MustSucceed(done, 10*time.Second)

	for _, tc := range []struct {
		f    client.CancelFilter
		says string
	}{
		{client.CancelFilter{}, "no filter"},
		{client.CancelFilter{State: "DONE"}, "unknown state"},
		{client.CancelFilter{State: "success"}, "only unfinished procedures"},
		{client.CancelFilter{Owner: "a", OlderThan: -time.Second}, "negative"},
	} {
		_, err := cl.CancelProcedures(rctx(t), tc.f, operator)
		wantRefused(t, err, codes.InvalidArgument, tc.says)
	}

	ids := func(ps []*adminpb.Procedure) []uint64 {
		var out []uint64
		for _, p := range ps {
			out = append(out, p.GetId())
		}
		return out
	}
	f := client.CancelFilter{Type: "sleep", Owner: "a"}
	plan, err := cl.CancelProcedures(rctx(t), f, dryRun(operator))
	if err != nil || !plan.GetDryRun() || !equalIDs(ids(plan.GetCancelled()), a1, a2) || plan.GetRecord() != 0 {
		t.Fatalf("dry run: %v, %v; want %d and %d listed", plan, err, a1, a2)
	}
	for _, id := range []uint64{a1, a2} {
		if p, _ := cl.Get(rctx(t), id); p.GetAbortRequested() {
			t.Fatalf("the dry run aborted %d", id)
		}
	}
	res, err := cl.CancelProcedures(rctx(t), f, operator)
	if err != nil || !equalIDs(ids(res.GetCancelled()), a1, a2) || len(res.GetSkipped()) != 0 || res.GetRecord() == 0 {
		t.Fatalf("cancel: %v, %v", res, err)
	}
	for _, id := range []uint64{a1, a2} {
		if p := c.Wait(id, 10*time.Second); p.State != procedure.RolledBack {
			t.Fatalf("cancelled %d ended %v", id, p.State)
		}
	}
	for _, id := range []uint64{b, fan} {
		if p, err := cl.Get(rctx(t), id); err != nil || p.GetAbortRequested() || p.GetState() == "ROLLEDBACK" {
			t.Fatalf("%d, not matching, was touched: %v, %v", id, p, err)
		}
	}

	// An age that nothing reaches matches nothing; the owner's own does.
	none, err := cl.CancelProcedures(rctx(t), client.CancelFilter{Owner: "b", OlderThan: time.Hour}, operator)
	if err != nil || len(none.GetCancelled()) != 0 {
		t.Fatalf("cancel older than an hour: %v, %v", none, err)
	}
	res, err = cl.CancelProcedures(rctx(t), client.CancelFilter{Owner: "b", State: "waiting_timeout", OlderThan: time.Millisecond}, operator)
	if err != nil || !equalIDs(ids(res.GetCancelled()), b) {
		t.Fatalf("cancel b: %v, %v", res, err)
	}
	// A cancelled root rolls back its children.
	res, err = cl.CancelProcedures(rctx(t), client.CancelFilter{Type: "fanout"}, operator)
	if err != nil || !equalIDs(ids(res.GetCancelled()), fan) {
		t.Fatalf("cancel fanout: %v, %v", res, err)
	}
	if p := c.Wait(fan, 10*time.Second); p.State != procedure.RolledBack {
		t.Fatalf("fanout ended %v", p.State)
	}
	wantRecords(t, repairs(t, cl), "proc cancel done", "proc cancel done", "proc cancel done", "proc cancel done")
}

// A cancel confirmed with the ids (or the highest id) its dry run listed
// cancels those and no procedure submitted between the dry run and the
// confirmation, although the filter matches it by then.
func TestRepairCancelBoundToItsDryRun(t *testing.T) {
	c := clustertest.New(t, clustertest.Config{Masters: 1})
	cl := c.Client()
	submit := func() uint64 {
		id, err := cl.Submit(rctx(t), "sleep", map[string]string{"steps": "2", "delay": "1h"}, "", "batch", 0)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	ids := func(ps []*adminpb.Procedure) []uint64 {
		var out []uint64
		for _, p := range ps {
			out = append(out, p.GetId())
		}
		return out
	}
	untouched := func(id uint64) {
		t.Helper()
		if p, err := cl.Get(rctx(t), id); err != nil || p.GetAbortRequested() || p.GetState() == "ROLLEDBACK" {
			t.Fatalf("%d, submitted after the dry run, was cancelled: %v, %v", id, p, err)
		}
	}

	_, err := cl.CancelProcedures(rctx(t), client.CancelFilter{MaxID: 100}, operator)
	wantRefused(t, err, codes.InvalidArgument, "no filter")

	shown := submit()
	f := client.CancelFilter{Owner: "batch"}
	plan, err := cl.CancelProcedures(rctx(t), f, dryRun(operator))
	if err != nil || !equalIDs(ids(plan.GetCancelled()), shown) {
		t.Fatalf("dry run: %v, %v; want %d listed", plan, err, shown)
	}
	unseen := submit()
	f.IDs = ids(plan.GetCancelled())
	res, err := cl.CancelProcedures(rctx(t), f, operator)
	if err != nil || !equalIDs(ids(res.GetCancelled()), shown) {
		t.Fatalf("cancel bound to the ids shown: %v, %v; want %d alone", res, err, shown)
	}
	untouched(unseen)
	recs := repairs(t, cl)
	if args := recs[len(recs)-1].GetArgs(); args["ids"] != strconv.FormatUint(shown, 10) || args["owner"] != "batch" {
		t.Fatalf("the record's arguments: %v", args)
	}
	if p := c.Wait(shown, 10*time.Second); p.State != procedure.RolledBack {
		t.Fatalf("cancelled %d ended %v", shown, p.State)
	}

	// The same with the highest id the dry run listed.
	plan, err = cl.CancelProcedures(rctx(t), client.CancelFilter{Owner: "batch"}, dryRun(operator))
	if err != nil || !equalIDs(ids(plan.GetCancelled()), unseen) {
		t.Fatalf("second dry run: %v, %v; want %d listed", plan, err, unseen)
	}
	later := submit()
	res, err = cl.CancelProcedures(rctx(t), client.CancelFilter{Owner: "batch", MaxID: unseen}, operator)
	if err != nil || !equalIDs(ids(res.GetCancelled()), unseen) {
		t.Fatalf("cancel bound to max id %d: %v, %v", unseen, res, err)
	}
	untouched(later)
	if p := c.Wait(unseen, 10*time.Second); p.State != procedure.RolledBack {
		t.Fatalf("cancelled %d ended %v", unseen, p.State)
	}

	// Ids are a filter of their own; those that finished or never were
	// are not there to cancel.
	res, err = cl.CancelProcedures(rctx(t), client.CancelFilter{IDs: []uint64{shown, later, 999}}, operator)
	if err != nil || !equalIDs(ids(res.GetCancelled()), later) {
		t.Fatalf("cancel by ids alone: %v, %v; want %d", res, err, later)
	}
	for _, id := range []uint64{unseen, later} {
		if p := c.Wait(id, 10*time.Second); p.State != procedure.RolledBack {
			t.Fatalf("cancelled %d ended %v", id, p.State)
		}
	}
}

func equalIDs(got []uint64, want ...uint64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// blocking runs a step that does not return until released: a procedure
// that is running.
type blocking struct {
	procedure.Base
	Done bool
}

// release lets the blocking procedures' steps return (one test at a
// time uses it).
var release chan struct{}

func (p *blocking) Execute(ctx *procedure.Context) (procedure.Step, error) {
	if p.Done {
		return procedure.Done(), nil
	}
	select {
	case <-release:
	case <-ctx.Done():
		return procedure.Step{}, ctx.Err()
	}
	p.Done = true
	return procedure.More(), nil
}

func (p *blocking) Rollback(*procedure.Context) error { return nil }

// The guarded bypass refuses what would break the procedure's own
// guarantees unless told to (a running step), asks for --recursive where
// children would be left behind, and bypasses what merely waits.
func TestRepairBypassGuards(t *testing.T) {
	release = make(chan struct{})
	c := clustertest.New(t, clustertest.Config{Masters: 1, Register: func(r *procedure.Registry) error {
		return r.Register("blocking", 1, func() procedure.Procedure { return &blocking{} })
	}})
	cl := c.Client()
	_, x := c.WaitLeader()
	running := c.Submit(&blocking{}, "")
	testwait.For(t, 10*time.Second, "the blocking procedure running", func() bool {
		w, err := x.Why(running)
		return err == nil && w.Reason == "running"
	})
	_, err := cl.BypassProcedure(rctx(t), running, false, operator)
	wantRefused(t, err, codes.FailedPrecondition, "is running a step", "--override")
	res, err := cl.BypassProcedure(rctx(t), running, false, withOverride(operator))
	if err != nil || len(res.GetBypassed()) != 1 {
		t.Fatalf("bypass --override of a running procedure: %v, %v", res, err)
	}
	close(release)
	if p := c.Wait(running, 10*time.Second); p.State != procedure.Success || !p.Bypassed {
		t.Fatalf("bypassed running procedure ended %v (bypassed %v)", p.State, p.Bypassed)
	}

	sleeping, err := cl.Submit(rctx(t), "sleep", map[string]string{"steps": "3", "delay": "1h"}, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	fan, err := cl.Submit(rctx(t), "fanout", map[string]string{"children": "2", "steps": "1", "delay": "1h"}, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	// The children must be asleep, not still in their first step: a running
	// step is refused for its own reason (checked above), whatever --recursive says.
	c.WaitFor("the fanout's children asleep", func() bool {
		w, err := x.Why(fan)
		if err != nil || len(w.Children) != 2 {
			return false
		}
		for _, id := range w.Children {
			if cw, err := x.Why(id); err != nil || cw.Reason != "waiting for timer" {
				return false
			}
		}
		return true
	})
	c.WaitFor("the sleeping procedure asleep", func() bool {
		w, err := x.Why(sleeping)
		return err == nil && w.Reason == "waiting for timer"
	})
	_, err = cl.BypassProcedure(rctx(t), fan, false, operator)
	wantRefused(t, err, codes.FailedPrecondition, "unfinished children", "--recursive")
	if res, err := cl.BypassProcedure(rctx(t), fan, true, operator); err != nil || len(res.GetBypassed()) != 3 {
		t.Fatalf("bypass --recursive: %v, %v", res, err)
	}
	if _, err := cl.BypassProcedure(rctx(t), sleeping, false, operator); err != nil {
		t.Fatalf("bypass of a sleeping procedure: %v", err)
	}
	for _, id := range []uint64{sleeping, fan} {
		if p := c.Wait(id, 10*time.Second); p.State != procedure.Success || !p.Bypassed {
			t.Fatalf("%d ended %v (bypassed %v)", id, p.State, p.Bypassed)
		}
	}
	_, err = cl.BypassProcedure(rctx(t), 999999, false, operator)
	wantRefused(t, err, codes.NotFound)
	// A retry of a bypass that went through is no error.
	if res, err := cl.BypassProcedure(rctx(t), sleeping, false, operator); err != nil || !strings.Contains(res.GetSummary(), "was bypassed") {
		t.Fatalf("bypass again: %v, %v", res, err)
	}
	done, _ := cl.Submit(rctx(t), "sleep", map[string]string{"steps": "0"}, "", "", 0)
	c.MustSucceed(done, 10*time.Second)
	_, err = cl.BypassProcedure(rctx(t), done, false, operator)
	wantRefused(t, err, codes.FailedPrecondition, "already SUCCESS")
	wantRecords(t, repairs(t, cl), "proc bypass refused", "proc bypass done", "proc bypass refused", "proc bypass done",
		"proc bypass done", "proc bypass refused", "proc bypass done", "proc bypass refused")
}

// Recovering a live server is refused unless overridden; overridden, the
// server is fenced first and its regions move only once it has stopped
// serving them: never open on two servers, all open at the end.
func TestRepairRecoverServer(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2})
	cl := h.c.Client()
	h.mustSucceed(h.createTable("", "t", 4), 20*time.Second)
	before := h.checkTableOpen("default:t", 4)
	checkDoubles := sampleDoubles(t, h)

	_, err := cl.RecoverServer(rctx(t), "rs9", operator)
	wantRefused(t, err, codes.NotFound, "rs9")
	_, err = cl.RecoverServer(rctx(t), "rs1", operator)
	wantRefused(t, err, codes.FailedPrecondition, "is live", "would open them twice", "--override")
	plan, err := cl.RecoverServer(rctx(t), "rs1", dryRun(withOverride(operator)))
	if err != nil || !strings.Contains(plan.GetSummary(), "expire the live rs1/") {
		t.Fatalf("dry run: %v, %v", plan, err)
	}
	old := h.rs("rs1").StartCode()
	res, err := cl.RecoverServer(rctx(t), "rs1", withOverride(operator))
	if err != nil || len(res.GetProcIds()) != 1 {
		t.Fatalf("recover --override: %v, %v", res, err)
	}
	h.mustSucceed(res.GetProcIds()[0], 30*time.Second)
	after := h.checkTableOpen("default:t", 4)
	if rg, _ := onlyRegionOn(h, "rs1", old); rg != "" {
		t.Errorf("region %s still recorded on the recovered incarnation", rg)
	}
	checkDoubles()
	t.Logf("regions per server before %v, after %v", before, after)
	wantRecords(t, repairs(t, cl), "rs recover refused", "rs recover refused", "rs recover done")
}

// otherThan is want, or alt if want is from: where to move a region that
// is on from.
func otherThan(from, want, alt string) string {
	if from == want {
		return alt
	}
	return want
}

// onlyRegionOn names a region recorded on incarnation id/sc, "" if none.
func onlyRegionOn(h *harness, id string, sc uint64) (string, domain.Region) {
	var name string
	var region domain.Region
	domain.ScanRegions(h.reader(), func(n string, rg domain.Region) bool {
		if rg.OnServer(domain.ServerRef{ID: id, StartCode: sc}) {
			name, region = n, rg
			return false
		}
		return true
	})
	return name, region
}

// Maintenance mode's end whose caller goes away while it is written
// (Ctrl-C, --timeout: the admin API passes the client's context down)
// still resumes this leader's dispatch: the dispatcher follows the
// replicated state, not the call. And the operator's retry, "already
// off", re-applies it. Otherwise every region procedure would wait for a
// maintenance mode that is over, until the next leader.
func TestRepairMaintenanceOffWhoseCallerLeftResumesDispatch(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2})
	cl := h.c.Client()
	region, _ := oneRegionTable(t, h)

	if _, err := cl.SetMaintenance(rctx(t), true, "review", operator); err != nil {
		t.Fatal(err)
	}
	lm, _ := h.leader()
	gone, cancel := context.WithCancel(context.Background())
	cancel() // the caller left while "off" was being committed
	_, err := lm.dom.SetMaintenance(gone, false, "", catalog.RepairOptions{Caller: catalog.Caller{Name: operator.Caller, Peer: "test"}})
	t.Logf("maintenance off, caller gone: %v", err)
	h.c.WaitFor("maintenance off in the replicated state", func() bool {
		m, err := lm.dom.Maintenance()
		return err == nil && !m.On
	})
	// The operator tries again, as the error invites.
	res, err := cl.SetMaintenance(rctx(t), false, "", operator)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("retry: %s", res.GetSummary())

	un, err := cl.UnassignRegion(rctx(t), region, "", operator)
	if err != nil {
		t.Fatal(err)
	}
	info := h.wait(un.GetProcIds()[0], 20*time.Second)
	if info.State != procedure.Success {
		_, x := h.leader()
		w, _ := x.Why(un.GetProcIds()[0])
		t.Fatalf("unassign after maintenance off ended %v; waiting for %q (%s): dispatch is still paused", info.State, w.Reason, w.Note)
	}
	for _, r := range repairs(t, cl) {
		if r.GetAction() == "maintenance off" && r.GetOutcome() == domain.RepairFailed && !strings.Contains(r.GetResult(), "took effect") {
			t.Errorf("record %d says maintenance off failed (%s), but it took effect", r.GetSeq(), r.GetResult())
		}
	}
}

// The converse: "maintenance on" whose caller left mid-write, on in the
// replicated state, pauses the leader's dispatch too: a region repair,
// which goes through in maintenance mode, waits for its end instead of
// closing its region at once.
func TestRepairMaintenanceOnWhoseCallerLeftPausesDispatch(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2})
	cl := h.c.Client()
	region, _ := oneRegionTable(t, h)

	lm, x := h.leader()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := lm.dom.SetMaintenance(gone, true, "review", catalog.RepairOptions{Caller: catalog.Caller{Name: operator.Caller, Peer: "test"}})
	t.Logf("maintenance on, caller gone: %v", err)
	h.c.WaitFor("maintenance on in the replicated state", func() bool {
		m, err := lm.dom.Maintenance()
		return err == nil && m.On
	})
	if res, err := cl.SetMaintenance(rctx(t), true, "review", operator); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("retry: %s", res.GetSummary())
	}
	un, err := cl.UnassignRegion(rctx(t), region, "", operator)
	if err != nil {
		t.Fatal(err)
	}
	id := un.GetProcIds()[0]
	var ended *procedure.State
	h.c.WaitFor("the unassign to wait for maintenance mode (or to end)", func() bool {
		w, err := x.Why(id)
		if err != nil {
			return false
		}
		if w.State.Terminal() {
			s := w.State
			ended = &s
			return true
		}
		return strings.Contains(w.Note, catalog.MaintenanceNote)
	})
	if ended != nil {
		t.Fatalf("maintenance mode is on (%v), yet the unassign was dispatched and ended %v; hosted now: %v", func() bool { m, _ := lm.dom.Maintenance(); return m.On }(), *ended, h.hosted()[region])
	}
}

// Bad inputs: the names and the reason a repair call takes are bounded,
// and so is what a record keeps. Unbounded, a refusal for a region that
// does not exist would be recorded, argument and all, in the replicated
// log (megabytes per call; the region name is in it twice, in args and in
// the message), and three such calls would make 'cluster repairs' fail
// for good: a page of records would no longer fit in a gRPC message.
func TestRepairBadInputs(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 1})
	cl := h.c.Client()
	huge := strings.Repeat("r", 1<<20)
	_, err := cl.AssignRegion(rctx(t), huge, "", "", operator)
	if status.Code(err) != codes.InvalidArgument && status.Code(err) != codes.NotFound {
		t.Errorf("assign of a 1 MiB region name: %v, want INVALID_ARGUMENT", status.Code(err))
	}
	_, err = cl.CancelProcedures(rctx(t), client.CancelFilter{Owner: huge}, operator)
	t.Logf("cancel --owner <1 MiB>: %v", status.Code(err))
	_, err = cl.UnassignRegion(rctx(t), huge, "", operator)
	t.Logf("unassign of a 1 MiB region name: %v", status.Code(err))
	// Each field is refused, naming itself and its limit, before the
	// handler runs (reqlimit).
	_, err = cl.RecoverServer(rctx(t), huge, operator)
	wantRefused(t, err, codes.InvalidArgument, "server", "at most")
	_, err = cl.SetMaintenance(rctx(t), true, huge, operator)
	wantRefused(t, err, codes.InvalidArgument, "reason", "at most")
	_, err = cl.AssignRegion(rctx(t), "default:t,00000,1", huge, "", operator)
	wantRefused(t, err, codes.InvalidArgument, "server", "at most")
	// The caller's name is bounded too now; a name within bounds is
	// still looked up, and its refusal recorded.
	_, err = cl.AssignRegion(rctx(t), "default:t,00000,1", "", "", client.RepairOptions{Caller: huge})
	wantRefused(t, err, codes.InvalidArgument, "caller", "at most")
	long := strings.Repeat("x", domain.MaxRegionNameLen)
	_, err = cl.AssignRegion(rctx(t), long, "", "", client.RepairOptions{Caller: strings.Repeat("c", 200)})
	wantRefused(t, err, codes.NotFound)
	// The audit trail must stay readable: a page of such records is over
	// gRPC's 4 MiB message limit.
	recs, err := cl.ListRepairs(rctx(t), 0)
	if err != nil {
		t.Fatalf("cluster repairs after three calls with a 1 MiB name: %v", status.Code(err))
	}
	for _, r := range recs {
		if n := len(r.String()); n > 64<<10 {
			t.Errorf("repair record %d (%s %s) is %d bytes: a name is not bounded before it is recorded", r.GetSeq(), r.GetAction(), r.GetOutcome(), n)
		}
	}
	if len(recs) != 1 || recs[0].GetArgs()["region"] != long || len(recs[0].GetCaller()) > 2<<10 {
		t.Errorf("records %v: want the one refusal of the in-bounds name, its caller cut", len(recs))
	}
}

// rs recover --override of a live server whose heartbeats (and their
// answers) are late: a renewal granted before the expiry but heard by the
// server after it must not let it serve past the moment its regions open
// elsewhere.
func TestRepairRecoverOverrideWithLateHeartbeats(t *testing.T) {
	for _, f := range []rpcfault.Fault{rpcfault.DelayAnswer, rpcfault.DelayRequest} {
		t.Run(f.String(), func(t *testing.T) {
			h := newHarness(t, harnessOpts{masters: 1, servers: 2})
			cl := h.c.Client()
			h.mustSucceed(h.createTable("", "t", 6), 20*time.Second)
			h.checkTableOpen("default:t", 6)
			checkDoubles := sampleDoubles(t, h)
			rule := h.c.Faults().MustAdd(rpcfault.Rule{Name: "late rs1 heartbeats", Methods: []string{"/baton.rs.v1.Master/Heartbeat"},
				Fault: f, Delay: testHeartbeat, DelayMax: 4 * testHeartbeat, Probability: 0.8,
				When: func(c rpcfault.Call) bool {
					r, ok := c.Request.(*rspb.HeartbeatRequest)
					return ok && r.GetServerId() == "rs1"
				}})
			h.c.WaitFor("a late heartbeat", func() bool { return rule.Fired() > 0 })
			res, err := cl.RecoverServer(rctx(t), "rs1", withOverride(operator))
			if err != nil || len(res.GetProcIds()) != 1 {
				t.Fatalf("recover --override: %v, %v", res, err)
			}
			h.mustSucceed(res.GetProcIds()[0], 30*time.Second)
			rule.Remove()
			h.c.WaitForNil("the table open", func() error {
				if p, _ := h.tableOpenProblems("default:t", 6); len(p) > 0 {
					return errors.New(strings.Join(p, "; "))
				}
				return nil
			})
			checkDoubles()
		})
	}
}

// Unassign --override, then assign --override, taking over a move whose open to rs2 is in flight, its answers late (past the call
// timeout, so the dispatcher sends it again) and sometimes delivered twice:
// the bypassed move's open must never land after the close that the
// override sent, and the region is never open on two servers.
func TestRepairOverrideTakesOverAMoveWithALateOpen(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2})
	cl := h.c.Client()
	region, from := oneRegionTable(t, h)
	to := otherThan(from, "rs2", "rs1")
	checkDoubles := sampleDoubles(t, h)
	toTarget := func(c rpcfault.Call) bool {
		r, ok := c.Request.(*rspb.BatchRequest)
		return ok && r.GetServerId() == to && c.Side == rpcfault.Client
	}
	late := h.c.Faults().MustAdd(rpcfault.Rule{Name: "late answers from " + to, Methods: []string{"/baton.rs.v1.RegionServer/ExecuteBatch"},
		Fault: rpcfault.DelayAnswer, Delay: time.Second, DelayMax: 3 * time.Second, Probability: 0.5, When: toTarget})
	twice := h.c.Faults().MustAdd(rpcfault.Rule{Name: "twice to " + to, Methods: []string{"/baton.rs.v1.RegionServer/ExecuteBatch"},
		Fault: rpcfault.Duplicate, When: toTarget})
	defer late.Remove()
	defer twice.Remove()

	move, err := cl.MoveRegion(rctx(t), region, to, "")
	if err != nil {
		t.Fatal(err)
	}
	// The move's OPENING lasts while its open is answered: one to three
	// seconds when the answer is late, a few milliseconds when it is not
	// (half the draws), which a poll can miss. The move having finished
	// open on its target is as good a start: the override below then
	// finds nothing to bypass, which it says.
	h.c.WaitFor("the move OPENING on "+to+", or done there", func() bool {
		_, rg := onlyRegion(t, h, "default:t")
		return rg.Server == to && (rg.State == domain.RegionOpening && rg.ProcID == move || rg.State == domain.RegionOpen && rg.ProcID == 0)
	})
	un, err := cl.UnassignRegion(rctx(t), region, "", withOverride(operator))
	if err != nil {
		t.Fatal(err)
	}
	if len(un.GetBypassed()) != 1 || un.GetBypassed()[0] != move {
		t.Logf("unassign --override bypassed %v (the move may have finished first)", un.GetBypassed())
	}
	h.mustSucceed(un.GetProcIds()[0], 30*time.Second)
	as, err := cl.AssignRegion(rctx(t), region, from, "", withOverride(operator))
	if err != nil {
		t.Fatal(err)
	}
	h.mustSucceed(as.GetProcIds()[0], 30*time.Second)
	late.Remove()
	twice.Remove()
	t.Logf("late answers %d, duplicated batches %d", late.Fired(), twice.Fired())
	h.c.WaitForNil("the region open on "+from+" only", func() error {
		hosts := h.hosted()[region]
		if len(hosts) != 1 || hosts[0] != from {
			return errors.New("hosted on " + strings.Join(hosts, ", "))
		}
		return nil
	})
	checkDoubles()
}

// A submission's retry with its nonce is answered with the procedure the
// first attempt started, in maintenance mode too: the procedure exists and
// will run once the mode ends. Refused, a client whose answer was lost
// (it retries with the same nonce) would be told its work was refused,
// and submit it again later under a new nonce: it would run twice. The
// same for a lock acquire. New work is still refused.
func TestRepairMaintenanceAnswersTheRetryOfASubmissionThatGotThrough(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 1})
	cl := h.c.Client()
	args := map[string]string{"steps": "2", "delay": "1h"}
	id, err := cl.Submit(rctx(t), "sleep", args, "nightly-42", "nightly", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SetMaintenance(rctx(t), true, "review", operator); err != nil {
		t.Fatal(err)
	}
	again, err := cl.Submit(rctx(t), "sleep", args, "nightly-42", "nightly", 0)
	if err != nil || again != id {
		t.Fatalf("retry of submission %d with its nonce in maintenance mode: id %d, %v; want %d (it exists and will run)", id, again, err, id)
	}
	_, err = cl.Submit(rctx(t), "sleep", args, "nightly-43", "nightly", 0)
	wantRefused(t, err, codes.FailedPrecondition, catalog.MaintenanceRefusal)
	_, err = cl.Submit(rctx(t), "sleep", args, "nightly-42", "someone else", 0)
	wantRefused(t, err, codes.FailedPrecondition, catalog.MaintenanceRefusal)
}

// The same for a lock: the retry of an acquire that got through before
// maintenance mode gets its lock back; a new acquire is refused.
func TestRepairMaintenanceAnswersTheRetryOfALockAcquire(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 1})
	cl := h.c.Client()
	lk, err := cl.AcquireLock(rctx(t), client.LockNamespace, []string{"default"}, false, "ann", "", "acquire-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SetMaintenance(rctx(t), true, "review", operator); err != nil {
		t.Fatal(err)
	}
	again, err := cl.AcquireLock(rctx(t), client.LockNamespace, []string{"default"}, false, "ann", "", "acquire-1")
	if err != nil || again.GetLockId() != lk.GetLockId() {
		t.Fatalf("retry of acquire %d with its nonce in maintenance mode: %v, %v", lk.GetLockId(), again, err)
	}
	_, err = cl.AcquireLock(rctx(t), client.LockNamespace, []string{"default"}, false, "ann", "", "acquire-2")
	wantRefused(t, err, codes.FailedPrecondition, catalog.MaintenanceRefusal)
}
