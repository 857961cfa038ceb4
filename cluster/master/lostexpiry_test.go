package master

import (
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/rspb"
	"github.com/baton-dev/baton/internal/rpcfault"
)

// A server the dispatcher gave up on is told "expired" at its next
// heartbeat, and its crash procedure is submitted in the same breath. If
// that answer is lost, the server goes on serving until it fences itself:
// its regions must not be reopened elsewhere before that (or before it
// registers again), or they are open on two servers meanwhile.
func TestLostExpiryAnswerNeverOpensARegionTwice(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, domain: func(c *Config) {
		c.Dispatch.MaxFailures = 3
		c.FenceMargin = 200 * time.Millisecond
	}})
	h.mustSucceed(h.createTable("", "t", 6), 20*time.Second)
	before := h.checkTableOpen("default:t", 6)
	if before["rs2"] == 0 {
		t.Fatalf("rs2 holds no region: %v", before)
	}
	rs2 := h.rss["rs2"]
	sc := rs2.StartCode()

	// Every "expired" answer to rs2's old incarnation is lost, and the
	// masters cannot reach it any more.
	lost, err := h.faults.Add(rpcfault.Rule{
		Name:    "expired answer lost",
		Methods: []string{rspb.Master_Heartbeat_FullMethodName},
		Fault:   rpcfault.DropAnswer,
		When: func(c rpcfault.Call) bool {
			req, ok := c.Request.(*rspb.HeartbeatRequest)
			return ok && req.GetServerId() == "rs2" && req.GetStartCode() == sc
		},
		WhenAnswer: func(_ rpcfault.Call, resp any, err error) bool {
			hb, ok := resp.(*rspb.HeartbeatResponse)
			return err == nil && ok && hb.GetExpired()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	unreachable, err := h.faults.Add(rpcfault.Rule{
		Name:    "rs2 unreachable",
		Methods: []string{rspb.RegionServer_ExecuteBatch_FullMethodName},
		Fault:   rpcfault.DropRequest,
		When:    func(c rpcfault.Call) bool { return c.Peer == rs2.Addr() },
	})
	if err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	doubles := h.watchDoubles(stop)
	// A move off rs2 needs a close there: the dispatcher fails, gives up
	// and revokes rs2's lease.
	var region string
	scanRegions(h.reader(), func(name string, rg Region) bool {
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
	waitUntil(t, 20*time.Second, "an expired answer to rs2 to be lost (the dispatcher gives it up)", func() bool {
		return lost.Fired() > 0
	})
	unreachable.Remove() // reachable again: the system may converge
	h.mustSucceed(move, 30*time.Second)
	waitUntil(t, 30*time.Second, "every region open on exactly one server", func() bool {
		return len(h.placementProblems()) == 0
	})
	close(stop)
	if bad := <-doubles; len(bad) > 0 {
		t.Fatalf("%d samples found a region open on two servers; the first: %v", len(bad), bad[:min(len(bad), 5)])
	}
}
