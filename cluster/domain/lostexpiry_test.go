package domain_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/rspb"
)

// A server the dispatcher gave up on is told "expired" at its next
// heartbeat, and its crash procedure is submitted in the same breath. If
// that answer is lost, the server goes on serving until it fences itself:
// its regions must not be reopened elsewhere before that (or before it
// registers again), or they are open on two servers meanwhile.
func TestLostExpiryAnswerNeverOpensARegionTwice(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, domain: func(c *domain.Config) {
		c.Dispatch.MaxFailures = 3
		c.FenceMargin = 200 * time.Millisecond
	}})
	h.mustSucceed(h.createTable("", "t", 6), 20*time.Second)
	before := h.checkTableOpen("default:t", 6)
	if before["rs2"] == 0 {
		t.Fatalf("rs2 holds no region: %v", before)
	}
	rs2 := h.rs("rs2")
	sc := rs2.StartCode()

	// Every "expired" answer to rs2's old incarnation is lost, and the
	// masters cannot reach it any more.
	lost := h.dropExpiredAnswers(domain.ServerRef{"rs2", sc})
	unreachable := h.unreachable(rs2.Addr())

	checkDoubles := h.watchDoubles()
	// A move off rs2 needs a close there: the dispatcher fails, gives up
	// and revokes rs2's lease.
	var region string
	domain.ScanRegions(h.reader(), func(name string, rg domain.Region) bool {
		if rg.Server == "rs2" {
			region = name
		}
		return region == ""
	})
	lm, _ := h.leader()
	p, err := lm.dom.MoveRegionProcedure(region, "rs1")
	if err != nil {
		t.Fatal(err)
	}
	move := h.submit(p, "")
	testwait.For(t, 20*time.Second, "an expired answer to rs2 to be lost (the dispatcher gives it up)", func() bool {
		return lost.Fired() > 0
	})
	unreachable.Remove() // reachable again: the system may converge
	h.mustSucceed(move, 30*time.Second)
	testwait.For(t, 30*time.Second, "every region open on exactly one server", func() bool {
		return len(h.placementProblems()) == 0
	})
	checkDoubles()
}

// dropExpiredAnswers loses every "expired" heartbeat answer to incarnation
// ref, and returns the rule's handle.
func (h *harness) dropExpiredAnswers(ref domain.ServerRef) *rpcfault.Handle {
	h.t.Helper()
	lost, err := h.faults.Add(rpcfault.Rule{
		Name:    "expired answer lost",
		Methods: []string{rspb.Master_Heartbeat_FullMethodName},
		Fault:   rpcfault.DropAnswer,
		When: func(c rpcfault.Call) bool {
			req, ok := c.Request.(*rspb.HeartbeatRequest)
			return ok && req.GetServerId() == ref.ID && req.GetStartCode() == ref.StartCode
		},
		WhenAnswer: func(_ rpcfault.Call, resp any, err error) bool {
			hb, ok := resp.(*rspb.HeartbeatResponse)
			return err == nil && ok && hb.GetExpired()
		},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return lost
}

// unreachable loses every batch the masters send to the region server at
// addr, and returns the rule's handle.
func (h *harness) unreachable(addr string) *rpcfault.Handle {
	h.t.Helper()
	rule, err := h.faults.Add(rpcfault.Rule{
		Name:    addr + " unreachable",
		Methods: []string{rspb.RegionServer_ExecuteBatch_FullMethodName},
		Fault:   rpcfault.DropRequest,
		When:    func(c rpcfault.Call) bool { return c.Peer == addr },
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return rule
}

// A registration proves that an earlier incarnation serves nothing only
// when the registering process says it gave that incarnation up: a late
// copy of an earlier RegisterServer request (or another process under the
// same id) commits a newer start code while the incarnation still serves.
func TestRegistrationThatDroppedNothingIsNoProof(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, domain: func(c *domain.Config) {
		c.FenceMargin = 200 * time.Millisecond
	}})
	h.mustSucceed(h.createTable("", "t", 6), 20*time.Second)
	h.checkTableOpen("default:t", 6)
	rs2 := h.rs("rs2")
	sc := rs2.StartCode()
	lost := h.dropExpiredAnswers(domain.ServerRef{"rs2", sc})

	checkDoubles := h.watchDoubles()
	lm, _ := h.leader()
	// The first RegisterServer rs2 ever sent, arriving late: it names no
	// dropped incarnation.
	late := &rspb.RegisterServerRequest{ServerId: "rs2", Address: rs2.Addr()}
	resp, err := domain.RegisterServer(context.Background(), lm.dom, late)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("late registration committed start code %d over the serving %d", resp.GetStartCode(), sc)
	testwait.For(t, 10*time.Second, "rs2 to fence itself", func() bool { return rs2.StartCode() != sc })
	testwait.For(t, 30*time.Second, "every region open on exactly one server", func() bool {
		return len(h.placementProblems()) == 0
	})
	checkDoubles()
	if lost.Fired() == 0 {
		t.Fatal("no expired answer to rs2 was lost: the scenario did not happen")
	}
}

// A registration renews like a heartbeat (the server counts its self-fence
// from the moment it sent it): a server that registered long after the
// leader took over, whose heartbeats then never got through, is not
// proven gone before its registration plus the self-fence bound.
func TestRegistrationCountsAsARenewal(t *testing.T) {
	const hb = 300 * time.Millisecond // self-fence 900 ms
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, domain: func(c *domain.Config) {
		c.ServerLease = lease.Config{SoftLimit: 3 * hb, HardLimit: 10 * hb, MonitorInterval: 50 * time.Millisecond}
		c.HeartbeatInterval = hb
		c.Dispatch.MaxFailures = 3
		c.FenceMargin = 100 * time.Millisecond
	}})
	h.mustSucceed(h.createTable("", "t", 4), 20*time.Second)
	lm, _ := h.leader()
	svc := lm.dom.Services()
	// Registered well after the leader's services started (the case the
	// leader's start time alone would get wrong).
	testwait.For(t, 10*time.Second, "two self-fence periods since the leader took over", func() bool {
		return time.Since(svc.StartedAt()) > 2*(3*hb+100*time.Millisecond)
	})
	if _, err := h.faults.Add(rpcfault.Rule{
		Name:    "rs3's heartbeats lost",
		Methods: []string{rspb.Master_Heartbeat_FullMethodName},
		Fault:   rpcfault.DropRequest,
		When: func(c rpcfault.Call) bool {
			req, ok := c.Request.(*rspb.HeartbeatRequest)
			return ok && req.GetServerId() == "rs3" && !svc.Revoked(domain.ServerRef{ID: "rs3", StartCode: req.GetStartCode()})
		},
	}); err != nil {
		t.Fatal(err)
	}
	rs3 := h.startRS("rs3", 0, 0)
	lost := h.dropExpiredAnswers(domain.ServerRef{"rs3", rs3.StartCode()})

	checkDoubles := h.watchDoubles()
	var region string
	domain.ScanRegions(h.reader(), func(name string, _ domain.Region) bool { region = name; return false })
	p, err := lm.dom.MoveRegionProcedure(region, "rs3")
	if err != nil {
		t.Fatal(err)
	}
	h.mustSucceed(h.submit(p, ""), 10*time.Second)
	unreachable := h.unreachable(rs3.Addr())
	if p, err = lm.dom.MoveRegionProcedure(region, "rs1"); err != nil {
		t.Fatal(err)
	}
	move := h.submit(p, "")
	testwait.For(t, 10*time.Second, "an expired answer to rs3 to be lost", func() bool { return lost.Fired() > 0 })
	unreachable.Remove()
	h.mustSucceed(move, 20*time.Second)
	testwait.For(t, 30*time.Second, "every region open on exactly one server", func() bool {
		return len(h.placementProblems()) == 0
	})
	checkDoubles()
}
