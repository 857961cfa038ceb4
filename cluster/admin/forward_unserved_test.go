package admin

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// steppedDown is a master the standby still takes for the leader that no
// longer leads: it refuses what it is forwarded as a master newer than
// 0.1.0 does (the refusal marked unserved, unless old) for its first
// refuse calls, then serves (it leads again).
type steppedDown struct {
	fakeLeader
	refuse int32
	old    bool // answers as 0.1.0: no unserved mark
	asked  atomic.Int32
	audits atomic.Int32 // records AppendAudit committed
}

func (l *steppedDown) refusal() error {
	err := Unavailable("admin: this node is not the leader (forwarded call; not forwarding again)", "m2", "")
	if l.old {
		return err
	}
	return markUnserved(err)
}

func (l *steppedDown) SubmitProcedure(ctx context.Context, req *adminpb.SubmitProcedureRequest) (*adminpb.SubmitProcedureResponse, error) {
	if l.asked.Add(1) <= l.refuse {
		return nil, l.refusal()
	}
	return &adminpb.SubmitProcedureResponse{Id: 42}, nil
}

func (l *steppedDown) AppendAudit(ctx context.Context, req *adminpb.AppendAuditRequest) (*adminpb.AppendAuditResponse, error) {
	if l.asked.Add(1) <= l.refuse {
		return nil, l.refusal()
	}
	l.audits.Add(int32(len(req.GetRecords())))
	return &adminpb.AppendAuditResponse{}, nil
}

// TestForwardRefusedUnservedIsSentAgain: a standby forwards to the master
// it takes for the leader, which stepped down a moment before and refuses
// the call as not the leader, having done nothing of it. The standby holds
// the call and sends it again, as it would a call it could not send: it
// is served once the master leads again. A refusal without the mark (a
// 0.1.0 master's) stays final, as before: the standby cannot tell it from
// a deposed leader's answer to a call it may have committed.
func TestForwardRefusedUnservedIsSentAgain(t *testing.T) {
	t.Parallel()
	submit := func(t *testing.T, l *steppedDown, hold time.Duration) (*adminpb.SubmitProcedureResponse, error) {
		s, b := standby(t, serveFake(t, l, &l.fakeLeader), Config{LeaderHold: hold})
		cl, _ := serve(t, s, b)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return cl.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep"})
	}
	t.Run("sent again once it leads", func(t *testing.T) {
		t.Parallel()
		l := &steppedDown{refuse: 2}
		resp, err := submit(t, l, 10*time.Second)
		if err != nil || resp.GetId() != 42 {
			t.Fatalf("submit through the standby: %v %v, want procedure 42", resp, err)
		}
		if n := l.asked.Load(); n != 3 {
			t.Fatalf("the master was asked %d times, want 3 (two refusals, then served)", n)
		}
	})
	t.Run("the hold ends", func(t *testing.T) {
		t.Parallel()
		l := &steppedDown{refuse: 1 << 30}
		_, err := submit(t, l, 300*time.Millisecond)
		wantUnavailable(t, err, "m2", "", "not forwarding again")
		if n := l.asked.Load(); n < 2 {
			t.Fatalf("the master was asked %d times in the hold, want it sent again", n)
		}
	})
	t.Run("a 0.1.0 master's refusal is final", func(t *testing.T) {
		t.Parallel()
		l := &steppedDown{refuse: 1 << 30, old: true}
		_, err := submit(t, l, 10*time.Second)
		wantUnavailable(t, err, "m2", "", "not forwarding again")
		if n := l.asked.Load(); n != 1 {
			t.Fatalf("the master was asked %d times, want once", n)
		}
	})
}

// TestStandbyAuditRecordSentAgainAfterUnservedRefusal: a standby's own
// audit records (of a call it served, such as a deposed leader's snapshot
// save) go to the master it takes for the leader; refused there unserved,
// they are sent again within access.WriteTimeout and committed once,
// instead of being lost (CI on 14f2dc3, TestSnapshotSaveAcrossALeaderChange:
// "audit record not committed ... not forwarding again").
func TestStandbyAuditRecordSentAgainAfterUnservedRefusal(t *testing.T) {
	t.Parallel()
	l := &steppedDown{refuse: 3}
	s, _ := standby(t, serveFake(t, l, &l.fakeLeader), Config{})
	recs := []*adminpb.AuditRecord{{Method: "SnapshotSave", Principal: "client/carol", Code: codes.OK.String()}}
	if err := s.sendAudit(recs); err != nil {
		t.Fatalf("sendAudit: %v", err)
	}
	if n, got := l.asked.Load(), l.audits.Load(); n != 4 || got != 1 {
		t.Fatalf("asked %d times, %d records committed; want 4 (three refusals), one record", n, got)
	}
}

// TestUnservedMarkOnlyOnForwardedRefusal: the refusal a master sends for a
// call forwarded to it while it does not lead carries the unserved mark;
// its other UNAVAILABLE answers (no leader known, establishing) do not,
// nor does a plain status.
func TestUnservedMarkOnlyOnForwardedRefusal(t *testing.T) {
	if Unserved(status.Error(codes.Unavailable, "x")) || Unserved(Unavailable("x", "m1", "")) || Unserved(nil) {
		t.Fatal("Unserved without the mark")
	}
	if err := markUnserved(Unavailable("x", "m1", "a:1")); !Unserved(err) || status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "x") {
		t.Fatalf("marked: %v", err)
	} else if h, ok := LeaderHintOf(err); !ok || h.GetLeaderId() != "m1" || h.GetLeaderAdminAddress() != "a:1" {
		t.Fatalf("the mark lost the hint: %v", h)
	}
}
