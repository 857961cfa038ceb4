package domain_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/rspb"
)

// Review: maintenance mode is committed first and applied to the
// dispatcher after. A caller that goes away while the commit is under way
// (Ctrl-C, --timeout: the admin API passes the client's context down to
// the act) gets an error, yet the entry commits: the replicated state says
// off while this leader's dispatcher stays paused. The operator's retry is
// a no-op ("already off") that does not re-apply it, so every region
// procedure waits for a maintenance mode that is over, until the next
// leader.
func TestReviewMaintenanceOffWhoseCallerLeftKeepsDispatchPaused(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2})
	cl := h.c.Client()
	h.mustSucceed(h.createTable("", "t", 1), 20*time.Second)
	region, _ := onlyRegion(t, h, "default:t")

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

// Review: the converse. "maintenance on" whose caller left mid-commit is
// on in the replicated state (submissions are refused, status says on)
// while the leader's dispatcher still sends: a region repair, which goes
// through in maintenance mode, closes its region at once.
func TestReviewMaintenanceOnWhoseCallerLeftDoesNotPauseDispatch(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2})
	cl := h.c.Client()
	h.mustSucceed(h.createTable("", "t", 1), 20*time.Second)
	region, _ := onlyRegion(t, h, "default:t")

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

// Review: bad inputs. Nothing bounds the names and the reason a repair
// call takes: a refusal for a region that does not exist is recorded,
// argument and all, in the replicated log (megabytes per call, kept for
// ever; the region name is in it twice, in args and in the message), and
// three such calls make 'cluster repairs' fail for good: a page of records
// no longer fits in a gRPC message.
func TestReviewRepairBadInputs(t *testing.T) {
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

}

// Review: rs recover --override of a live server whose heartbeats (and
// their answers) are late: a renewal granted before the expiry but heard
// by the server after it must not let it serve past the moment its
// regions open elsewhere.
func TestReviewRecoverOverrideWithLateHeartbeats(t *testing.T) {
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

// Review: unassign --override, then assign --override, taking over a
// move whose open to rs2 is in flight, its answers late (past the call
// timeout, so the dispatcher sends it again) and sometimes delivered twice:
// the bypassed move's open must never land after the close that the
// override sent, and the region is never open on two servers.
func TestReviewOverrideTakesOverAMoveWithALateOpen(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2})
	cl := h.c.Client()
	h.mustSucceed(h.createTable("", "t", 1), 20*time.Second)
	region, rg := onlyRegion(t, h, "default:t")
	from, to := rg.Server, "rs2"
	if from == "rs2" {
		to = "rs1"
	}
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
	h.c.WaitFor("the move OPENING on "+to, func() bool {
		_, rg := onlyRegion(t, h, "default:t")
		return rg.State == domain.RegionOpening && rg.Server == to && rg.ProcID == move
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

// Review: a submission's retry with its nonce is answered with the
// procedure the first attempt started; in maintenance mode it is refused
// instead ("new procedures are refused"), though the procedure exists and
// will run once the mode ends. A client whose answer was lost (the
// client retries with the same nonce) is told its work was refused, and
// submits it again later under a new nonce: it runs twice.
func TestReviewMaintenanceRefusesTheRetryOfASubmissionThatGotThrough(t *testing.T) {
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
}
