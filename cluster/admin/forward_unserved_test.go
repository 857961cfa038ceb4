package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/proto/adminpb"
)

// steppedDown is a master the standby still takes for the leader that no
// longer leads: it refuses what it is forwarded as a master newer than
// 0.1.0 does (the refusal marked unserved, unless old) for its first
// refuse calls, then serves (it leads again). RemovePeer it always
// refuses.
type steppedDown struct {
	fakeLeader
	refuse   int32
	old      bool   // answers as 0.1.0: no unserved mark
	onRefuse func() // run as it refuses
	asked    atomic.Int32
	audits   atomic.Int32 // records AppendAudit committed
	removes  atomic.Int32 // RemovePeer calls
}

func (l *steppedDown) refusal() error {
	if l.onRefuse != nil {
		l.onRefuse()
	}
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

func (l *steppedDown) RemovePeer(ctx context.Context, req *adminpb.RemovePeerRequest) (*adminpb.ClusterStatusResponse, error) {
	l.removes.Add(1)
	return nil, l.refusal()
}

func (l *steppedDown) AppendAudit(ctx context.Context, req *adminpb.AppendAuditRequest) (*adminpb.AppendAuditResponse, error) {
	if l.asked.Add(1) <= l.refuse {
		return nil, l.refusal()
	}
	l.audits.Add(int32(len(req.GetRecords())))
	return &adminpb.AppendAuditResponse{}, nil
}

// TestClientCallRefusedUnservedIsNotSentAgain: a client's call a standby
// forwards to a master that no longer leads, refused there marked as
// unserved, is answered with that refusal at once, as before the mark:
// the refusing master recorded its refusal (one record per attempt, were
// it sent again), and the client, told the leader, decides. The answer is
// relayed without the mark: the standby does not vouch for it.
func TestClientCallRefusedUnservedIsNotSentAgain(t *testing.T) {
	t.Parallel()
	for _, old := range []bool{false, true} {
		l := &steppedDown{refuse: 1 << 30, old: old}
		s, b := standby(t, serveFake(t, l, &l.fakeLeader), Config{LeaderHold: 10 * time.Second})
		cl, _ := serve(t, s, b)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := cl.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep"})
		cancel()
		wantUnavailable(t, err, "m2", "", "not forwarding again")
		if n := l.asked.Load(); n != 1 || Unserved(err) {
			t.Fatalf("0.1.0 %v: the master was asked %d times, answer marked %v; want once, unmarked", old, n, Unserved(err))
		}
	}
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
	// A 0.1.0 master's refusal is final, as it was: it cannot be told
	// from a deposed leader's answer to a write that may commit.
	old := &steppedDown{refuse: 1 << 30, old: true}
	s, _ = standby(t, serveFake(t, old, &old.fakeLeader), Config{})
	if err := s.sendAudit(recs); status.Code(err) != codes.Unavailable || old.asked.Load() != 1 {
		t.Fatalf("sendAudit to a 0.1.0 master that does not lead: %v after %d tries; want UNAVAILABLE after one", err, old.asked.Load())
	}
}

// TestStandbyAuditRecordNotSentAgainOnceItLeads: a standby whose records
// were refused unserved, and which is elected meanwhile, stops sending
// (it forwards nothing to itself) and answers ErrLeading at once, for its
// trail to write them as the leader's.
func TestStandbyAuditRecordNotSentAgainOnceItLeads(t *testing.T) {
	t.Parallel()
	l := &steppedDown{refuse: 1 << 30}
	s, b := standby(t, serveFake(t, l, &l.fakeLeader), Config{})
	l.onRefuse = func() { b.setLeader("m0", "") }
	err := s.sendAudit([]*adminpb.AuditRecord{{Method: "SnapshotSave", Principal: "client/carol", Code: codes.OK.String()}})
	if !errors.Is(err, access.ErrLeading) || !strings.Contains(err.Error(), "not forwarding again") || l.asked.Load() != 1 {
		t.Fatalf("sendAudit once this node leads: %v after %d tries; want ErrLeading with the refusal, after one", err, l.asked.Load())
	}
}

// lostJoin is a backend whose Join fails as cluster.Node's does when raft
// answers ErrLeadershipLost: the entry may still commit, but the error
// wraps ErrNotLeader.
type lostJoin struct {
	*fakeBackend
	joins atomic.Int32
}

func (b *lostJoin) Join(ctx context.Context, id, addr string, _ bool) error {
	b.joins.Add(1)
	return fmt.Errorf("cluster: join %q: %w", id, &cluster.NotLeaderError{LeaderID: "m2"})
}

// TestUnservedOnlyWhereNothingWasDone: a forwarded AddPeer whose join was
// proposed before the node learned it had lost the leadership
// (orForward) is refused unmarked; a forwarded SubmitProcedure refused
// before anything ran (onLeader) is marked.
func TestUnservedOnlyWhereNothingWasDone(t *testing.T) {
	fb := &fakeBackend{id: "m1", leaderID: "m2", procsErr: &cluster.NotLeaderError{LeaderID: "m2"}, kv: map[string][]byte{}}
	b := &lostJoin{fakeBackend: fb}
	s, err := New(b, Config{LeaderHold: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(forwardedKey, "m0"))
	_, err = s.AddPeer(ctx, &adminpb.AddPeerRequest{Id: "m9", RaftAddress: "10.0.0.9:7001"})
	if b.joins.Load() != 1 || status.Code(err) != codes.Unavailable || Unserved(err) {
		t.Fatalf("AddPeer: %d joins proposed, answered %v (marked %v); want one, UNAVAILABLE, unmarked", b.joins.Load(), err, Unserved(err))
	}
	_, err = s.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep"})
	if !Unserved(err) {
		t.Fatalf("SubmitProcedure: %v, want it marked unserved", err)
	}
}

// handsOver is a leader whose RemovePeer of itself hands the leadership
// to m2 (at addr) and answers NotLeader, as cluster.Node.RemovePeer does.
type handsOver struct {
	*fakeBackend
	addr      string
	transfers atomic.Int32
}

func (b *handsOver) RemovePeer(ctx context.Context, id string) error {
	if b.IsLeader() && id == b.id {
		b.transfers.Add(1)
		b.setLeader("m2", b.addr)
	}
	return b.notLeader()
}

// TestRelayedRefusalLosesTheMark: a standby forwards RemovePeer(m1) to
// the leader m1, which hands its leadership over (it acted) and passes
// the call on; m2, not serving yet, refuses it marked unserved. m1 relays
// that refusal to the standby without the mark: m1 did something.
func TestRelayedRefusalLosesTheMark(t *testing.T) {
	l := &steppedDown{refuse: 1 << 30}
	lAddr := serveFake(t, l, &l.fakeLeader)
	fb := &fakeBackend{id: "m1", leaderID: "m1", kv: map[string][]byte{},
		peers: []cluster.PeerStatus{{ID: "m1", Address: "127.0.0.1:2"}, {ID: "m2", Address: "127.0.0.1:3"}}}
	b := &handsOver{fakeBackend: fb, addr: lAddr}
	s, err := New(b, Config{LeaderHold: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(forwardedKey, "m0"))
	_, err = s.RemovePeer(ctx, &adminpb.RemovePeerRequest{Id: "m1"})
	if b.transfers.Load() != 1 || l.removes.Load() == 0 || status.Code(err) != codes.Unavailable || Unserved(err) {
		t.Fatalf("%d handovers, %d calls passed on, answer %v (marked %v); want one, at least one, UNAVAILABLE unmarked",
			b.transfers.Load(), l.removes.Load(), err, Unserved(err))
	}
	if _, ok := LeaderHintOf(err); !ok {
		t.Fatalf("the relayed refusal lost its hint: %v", err)
	}
}

// TestUnservedReadsOnlyTheMark: Unserved is false for an UNAVAILABLE with
// or without a hint and for no error, true once markUnserved added the
// mark, which keeps the status's code, message and hint. (Which answers
// of a master carry the mark: TestUnavailable, TestUnservedOnlyWhereNothingWasDone.)
func TestUnservedReadsOnlyTheMark(t *testing.T) {
	if Unserved(status.Error(codes.Unavailable, "x")) || Unserved(Unavailable("x", "m1", "")) || Unserved(nil) {
		t.Fatal("Unserved without the mark")
	}
	if err := markUnserved(Unavailable("x", "m1", "a:1")); !Unserved(err) || status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "x") {
		t.Fatalf("marked: %v", err)
	} else if h, ok := LeaderHintOf(err); !ok || h.GetLeaderId() != "m1" || h.GetLeaderAdminAddress() != "a:1" {
		t.Fatalf("the mark lost the hint: %v", h)
	}
}
