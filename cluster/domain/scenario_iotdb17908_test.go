package domain_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/rspb"
)

// TestScenarioIOTDB17908StaleOpenAnswerConfirmsNothing replays IoTDB
// #17908 (a ConfigNode leader change during a remote wait read as
// success). The old leader dispatched a region open; leadership changed;
// the new leader's resumed procedure waited for the open's result, and a
// late answer belonging to the previous term's dispatch (or a delayed,
// duplicated report) arrived and was taken as the answer to the new
// term's wait, although the open it spoke of had been fenced or undone
// since: the procedure recorded the region open where it was not.
//
// Baton fences the dispatcher's answers by construction: a term's waits
// (services.waits, remote_wait.go) and its dispatcher belong to that
// term's leader services, which the term's end stops; the dispatcher's
// Stop cancels the call in flight and runs no callback after it returns,
// and a new term (on this node or another) starts an empty table of waits
// of its own. Within a term, deliver matches an answer to the wait of
// exactly that procedure, incarnation, region and kind. And a region
// server's ReportTransition answers no wait at all (rsservice.go): a
// report carries neither term nor attempt, so an OPEN report may belong to
// an earlier open of the same region on the same incarnation, closed since.
//
// Two phases, each on a three-master cluster with a leader change during
// the wait, each checking at every poll that whenever the leader records
// the region OPEN on the target, the target hosts it (by its own answer):
//
//  1. The previous term's answer. A move's open reaches the target, which
//     opens the region, but its answer is held back (rpcfault DelayAnswer);
//     meanwhile the region closes on the server by itself (so that answer
//     is no longer true) and leadership is transferred. The new term's
//     open is held back too (DelayRequest). The new leader must record
//     OPEN only from its own open's answer.
//  2. A stale report. The region was opened on the target once (its
//     report of that open, OPEN on that incarnation, held back), then
//     moved away, then moved back to the target with the open held back
//     (DelayRequest), leadership transferred during the wait, and the new
//     leader's open on the wire. The held-back report then arrives at the
//     new leader. It must not complete the move.
//
// Phase 2 found a defect: ReportTransition handed an OPEN report on the
// region's recorded incarnation to the procedure waiting for that open,
// on the theory that it could not mislead (rsservice.go). It made the new
// leader record the move done while the target did not host the region:
// "phase 2: region default:t,00000,1 recorded OPEN on rs2 (proc 0) but rs2
// hosts [] — confirmed by something other than its own open". Fixed: no report
// answers a wait; the dispatcher's per-op result, which comes once for
// that very send, does. Reintroducing the defect — the OPEN branch of
// ReportTransition calling s.deliver again — makes this test fail with
// that message. Phase 1's defect (an answer of the previous term
// delivered to the new term's wait) cannot be reintroduced by a small
// edit: the waits and the dispatcher are objects of one term's services,
// on one node, and the old dispatcher's stop cancels the held answer;
// the phase asserts the property that would break.
func TestScenarioIOTDB17908StaleOpenAnswerConfirmsNothing(t *testing.T) {
	h := newHarness(t, harnessOpts{servers: 2})
	h.mustSucceed(h.createTable("", "t", 1), 20*time.Second)
	h.checkTableOpen("default:t", 1)
	var region string
	domain.ScanRegions(h.reader(), func(name string, _ domain.Region) bool { region = name; return false })
	rg, _, _ := domain.GetRegion(h.reader(), region)
	home := rg.Server
	target := "rs1"
	if home == target {
		target = "rs2"
	}
	ref := domain.ServerRef{ID: target, StartCode: h.rs(target).StartCode()}

	// opensOf says whether c is a batch to the target carrying the
	// region's open, and its term.
	opensOf := func(c rpcfault.Call) (uint64, bool) {
		req, ok := c.Request.(*rspb.BatchRequest)
		if !ok || req.GetServerId() != ref.ID || req.GetStartCode() != ref.StartCode {
			return 0, false
		}
		return req.GetTerm(), slices.ContainsFunc(req.GetOps(), func(op *rspb.RegionOp) bool {
			return op.GetKind() == rspb.OpKind_OP_KIND_OPEN && op.GetRegion() == region
		})
	}
	hostsIt := func() bool {
		resp, err := h.rs(target).ListRegions(context.Background(), nil)
		if err != nil {
			return false
		}
		return slices.ContainsFunc(resp.GetRegions(), func(r *rspb.HostedRegion) bool { return r.GetRegion() == region })
	}
	// confirmed waits for the region recorded OPEN on the target, failing
	// if it ever is while the target does not host it.
	confirmed := func(phase string) {
		t.Helper()
		testwait.For(t, 20*time.Second, phase+": the move onto "+target+" to end", func() bool {
			rg, ok, err := domain.GetRegion(h.reader(), region)
			if err != nil || !ok || rg.State != domain.RegionOpen || rg.Server != target {
				return false
			}
			if !hostsIt() {
				t.Fatalf("%s: region %s recorded OPEN on %s (proc %d) but %s hosts %v — confirmed by something other than its own open",
					phase, region, target, rg.ProcID, target, h.hosted()[region])
			}
			return rg.ProcID == 0
		})
		h.checkTableOpen("default:t", 1)
	}
	moveTo := func(to string) uint64 {
		t.Helper()
		lm, _ := h.leader()
		p, err := lm.dom.MoveRegionProcedure(region, to)
		if err != nil {
			t.Fatal(err)
		}
		return h.submit(p, "")
	}
	transfer := func() {
		t.Helper()
		h.c.TransferLeadership((h.leaderIndex() + 1) % len(h.masters))
	}

	// isOld remembers the term of the first open of the region sent to
	// the target after reset: the old term's, the leader's before the
	// transfer. Batches are held back or lost by their term: the old
	// term's for as long as it lasts (each lost after 1.5 s, within the
	// dispatcher's 2 s call timeout, so it retries without giving the
	// server up), the new term's as each phase says.
	var (
		mu      sync.Mutex
		oldTerm uint64
	)
	reset := func() { mu.Lock(); oldTerm = 0; mu.Unlock() }
	isOld := func(c rpcfault.Call) bool {
		term, ok := opensOf(c)
		mu.Lock()
		defer mu.Unlock()
		if ok && oldTerm == 0 {
			oldTerm = term
		}
		return ok && term == oldTerm
	}
	isNew := func(c rpcfault.Call) bool {
		term, ok := opensOf(c)
		mu.Lock()
		defer mu.Unlock()
		return ok && oldTerm != 0 && term > oldTerm
	}
	batch := []string{rspb.RegionServer_ExecuteBatch_FullMethodName}

	// Phase 1: the previous term's answer, held back while it turned false.
	oldAnswer := h.faults.MustAdd(rpcfault.Rule{Name: "old term's open answer late", Methods: batch,
		Fault: rpcfault.DelayAnswer, Delay: 5 * time.Second, Times: 1, When: isOld})
	oldRetries := h.faults.MustAdd(rpcfault.Rule{Name: "old term's open retried, lost", Methods: batch,
		Fault: rpcfault.DropRequest, Delay: 1500 * time.Millisecond, When: isOld})
	newOpen := h.faults.MustAdd(rpcfault.Rule{Name: "new term's open lost once", Methods: batch,
		Fault: rpcfault.DropRequest, Delay: time.Second, Times: 1, When: isNew})
	move := moveTo(target)
	testwait.For(t, 10*time.Second, "phase 1: the region opened on "+target+", its answer held back", func() bool {
		return oldAnswer.Fired() == 1 && hostsIt()
	})
	if err := h.rs(target).CloseRegion(context.Background(), region); err != nil {
		t.Fatal(err)
	}
	transfer()
	confirmed("phase 1")
	h.mustSucceed(move, 20*time.Second)
	if newOpen.Fired() == 0 {
		t.Fatal("phase 1: the new term sent no open of its own: the phase did not test what it meant to")
	}
	for _, r := range []*rpcfault.Handle{oldAnswer, oldRetries, newOpen} {
		r.Remove()
	}

	// Phase 2: a stale report. The target's report of the open just
	// confirmed, held back in the network.
	stale := &rspb.ReportTransitionRequest{ServerId: ref.ID, StartCode: ref.StartCode, Region: region, State: "OPEN"}
	h.mustSucceed(moveTo(home), 20*time.Second)
	if hostsIt() {
		t.Fatalf("phase 2: %s still hosts %s after the move away", target, region)
	}
	reset()
	oldLost := h.faults.MustAdd(rpcfault.Rule{Name: "old term's open lost", Methods: batch,
		Fault: rpcfault.DropRequest, Delay: 1500 * time.Millisecond, When: isOld})
	newLost := h.faults.MustAdd(rpcfault.Rule{Name: "new term's open lost twice", Methods: batch,
		Fault: rpcfault.DropRequest, Delay: 1500 * time.Millisecond, Times: 2, When: isNew})
	move = moveTo(target)
	testwait.For(t, 10*time.Second, "phase 2: the old leader's open to "+target+" on the wire", func() bool { return oldLost.Fired() > 0 })
	transfer()
	// The new leader's resumed move has armed its wait (before sending) once
	// its own open is on the wire.
	testwait.For(t, 10*time.Second, "phase 2: the new leader's open on the wire", func() bool { return newLost.Fired() > 0 })
	li := h.leaderIndex()
	rg, _, _ = domain.GetRegion(h.reader(), region)
	if rg.State != domain.RegionOpening || rg.Server != target || rg.ProcID != move {
		t.Fatalf("phase 2: region %s recorded %+v before the stale report, want OPENING on %s by %d", region, rg, target, move)
	}
	if _, err := rspb.NewMasterClient(h.masters[li].cc).ReportTransition(context.Background(), stale); err != nil {
		t.Fatalf("phase 2: the stale report: %v", err)
	}
	confirmed("phase 2")
	h.mustSucceed(move, 20*time.Second)
	if n := newLost.Fired(); n != 2 {
		t.Errorf("phase 2: the move ended after %d of the new term's opens were lost, want 2: it must wait for the third, the first to get through", n)
	}
	oldLost.Remove()
	newLost.Remove()
	h.checkNoDoubles()
}
