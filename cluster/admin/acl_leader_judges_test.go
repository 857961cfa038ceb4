package admin

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// heldLogs is a log store whose writes wait while held: its node takes
// in no new entries, and so applies none, while the rest of the cluster
// commits without it.
type heldLogs struct {
	raft.LogStore
	gate sync.RWMutex
}

func (h *heldLogs) StoreLog(l *raft.Log) error {
	h.gate.RLock()
	defer h.gate.RUnlock()
	return h.LogStore.StoreLog(l)
}

func (h *heldLogs) StoreLogs(ls []*raft.Log) error {
	h.gate.RLock()
	defer h.gate.RUnlock()
	return h.LogStore.StoreLogs(ls)
}

// TestStandbyRefusesNoGrantTheLeaderAcknowledged: a grant or token the
// leader acknowledged holds at once on a standby that has not applied it
// (the standby asks the leader rather than refuse on its own copy); a
// refusal that stands is the leader's, recorded once.
func TestStandbyRefusesNoGrantTheLeaderAcknowledged(t *testing.T) {
	c := startStreamCatchUpCluster(t, Access{})
	sc, li, standby, ops := c.sc, c.li, c.standby, c.ops
	ctx := t.Context()
	reader := sc.as(standby, "reader", "")
	if _, err := reader.ListProcedures(ctx, &adminpb.ListProceduresRequest{}); err == nil {
		t.Fatal("a client bound to nothing listed procedures")
	}

	release := c.hold(t)

	if _, err := ops.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "reader", Permission: "read"}); err != nil {
		t.Fatalf("grant reader: %v", err)
	}
	tok, err := ops.AclCreateToken(ctx, &adminpb.AclCreateTokenRequest{Name: "ci", Permission: "operate"})
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	// The standby has applied neither: what follows is judged by the
	// leader, or not at all.
	standbyACL := sc.nodes[standby].srv.acl
	if p := standbyACL.ClientPrincipal("reader"); p.Perm != security.PermNone {
		t.Fatalf("the held standby already binds reader to %s: the test holds nothing", p.Perm)
	}
	if _, err := standbyACL.TokenPrincipal(tok.GetSecret()); err == nil {
		t.Fatal("the held standby already knows the new token: the test holds nothing")
	}

	for _, c := range []adminpb.Consistency{adminpb.Consistency_LINEARIZABLE, adminpb.Consistency_STALE} {
		if _, err := reader.ListProcedures(ctx, &adminpb.ListProceduresRequest{Consistency: c}); err != nil {
			t.Errorf("reader's %s list at the standby, after the grant was acknowledged: %v", c, err)
		}
	}
	ci := sc.dial(standby, sc.pki.MustCredentials(security.Identity{Role: security.RoleClient, ID: "nobody"}), tok.GetSecret())
	who, err := ci.WhoAmI(ctx, &adminpb.WhoAmIRequest{})
	if err != nil || who.GetPermission() != "operate" || !strings.HasPrefix(who.GetPrincipal(), "token/") {
		t.Errorf("whoami with the new token at the standby: %v, %v; want its token, operate", who, err)
	}
	sub, err := ci.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}})
	if err != nil {
		t.Errorf("submit with the new token at the standby: %v", err)
	}

	// What the grant does not allow is refused as before, by the leader.
	_, err = reader.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}})
	wantCode(t, "reader's submit at the standby", err, codes.PermissionDenied, "client/reader holds permission read")
	unknown, _, _, err := security.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	bogus := sc.dial(standby, sc.pki.MustCredentials(security.Identity{Role: security.RoleClient, ID: "nobody"}), unknown)
	_, err = bogus.ListProcedures(ctx, &adminpb.ListProceduresRequest{})
	wantCode(t, "a token no master knows, at the standby", err, codes.Unauthenticated, "not recognized")

	release()
	var refused, served int
	for _, r := range auditOf(t, ctx, ops) {
		switch {
		case r.GetPrincipal() == "client/reader" && r.GetMethod() == "SubmitProcedure":
			refused++
			if !r.GetRefused() || r.GetNode() != sc.nodes[li].node.ID() {
				t.Errorf("reader's submit recorded as %v by %s; want refused, by the leader %s", r.GetRefused(), r.GetNode(), sc.nodes[li].node.ID())
			}
		case r.GetMethod() == "SubmitProcedure" && strings.HasPrefix(r.GetPrincipal(), "token/"):
			served++
			if r.GetRefused() || sub == nil || len(r.GetProcIds()) != 1 || r.GetProcIds()[0] != sub.GetId() {
				t.Errorf("the token's submit recorded as %v", r)
			}
		}
	}
	if refused != 1 || served != 1 {
		t.Errorf("%d records of reader's refused submit and %d of the token's, want 1 each", refused, served)
	}
}

// catchUps counts a standby's catch-ups with the leader
// (caughtUp), and runs then, once, at the next one, before the
// standby waits to apply the leader's index: a held log store let go
// there is let go while the stream waits, never before it asked.
type catchUps struct {
	mu   sync.Mutex
	n    int
	then func()
}

func watchCatchUps(sc *secureCluster, i int) *catchUps {
	c := &catchUps{}
	hook := func(uint64) {
		c.mu.Lock()
		c.n++
		then := c.then
		c.then = nil
		c.mu.Unlock()
		if then != nil {
			then()
		}
	}
	sc.nodes[i].srv.catchingUp.Store(&hook)
	return c
}

func (c *catchUps) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *catchUps) atNext(f func()) {
	c.mu.Lock()
	c.then = f
	c.mu.Unlock()
}

// streamCatchUpCluster is three masters whose log stores a test can hold
// (heldLogs), ops an admin bound at the leader, a procedure to watch, and
// the standby's catch-ups counted: for the tests of what a standby behind
// the leader's grants answers.
type streamCatchUpCluster struct {
	sc          *secureCluster
	logs        []*heldLogs
	li, standby int
	ops         adminpb.AdminClient
	proc        uint64
	catchUps    *catchUps
	held        atomic.Bool // the standby's log store is held
}

func startStreamCatchUpCluster(t *testing.T, a Access) *streamCatchUpCluster {
	t.Helper()
	c := &streamCatchUpCluster{logs: make([]*heldLogs, 3)}
	if a.InitialGrants == nil {
		a.InitialGrants = map[string]security.Permission{"ops": security.PermAdmin}
	}
	// Built as the agent builds its servers: the catch-up must work
	// through the domain's wrapper.
	c.sc = startSecureClusterOn(t, 3, a, func(i int, cc *cluster.Config) {
		c.logs[i] = &heldLogs{LogStore: cc.LogStore}
		cc.LogStore = c.logs[i]
	}, asAgent)
	c.li = converged(t, c.sc.nodes)
	c.standby = (c.li + 1) % 3
	ctx := t.Context()
	c.ops = c.sc.as(c.li, "ops", "")
	waitBound(t, ctx, c.ops, "admin")
	sub, err := c.ops.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	c.proc = sub.GetId()
	c.catchUps = watchCatchUps(c.sc, c.standby)
	leader, standby := c.sc.nodes[c.li].node.FSM(), c.sc.nodes[c.standby].node.FSM()
	testwait.For(t, 30*time.Second, "the standby to apply what the leader has", func() bool {
		return standby.AppliedIndex() >= leader.AppliedIndex()
	})
	return c
}

// hold stops the standby's log store taking in entries until the
// returned release (also run at the test's end).
// A hold while one is in force fails the test rather than wait on it
// for ever: the release a catch-up was to make never came.
func (c *streamCatchUpCluster) hold(t *testing.T) (release func()) {
	t.Helper()
	if !c.held.CompareAndSwap(false, true) {
		t.Fatal("the standby is still held: no catch-up released the last hold")
	}
	c.logs[c.standby].gate.Lock()
	var once sync.Once
	release = func() {
		once.Do(func() {
			c.logs[c.standby].gate.Unlock()
			c.held.Store(false)
		})
	}
	t.Cleanup(release)
	return release
}

// watchFirst watches the procedure through cl until its first message.
func (c *streamCatchUpCluster) watchFirst(ctx context.Context, cl adminpb.AdminClient) error {
	ws, err := cl.WatchProcedure(ctx, &adminpb.WatchProcedureRequest{Id: c.proc})
	if err == nil {
		_, err = ws.Recv()
	}
	return err
}

// TestStandbyJudgesAStreamOnTheLeadersGrants: a stream at a standby whose
// copy of the grants lacks one the leader acknowledged is not refused on
// that copy. The standby learns the leader's applied index, waits to
// apply it, and judges the stream again: reader's watch is served once
// the standby caught up, and so is a watch with a token the leader made;
// what reader may still not do is refused after the same catch-up; and a
// standby that cannot catch up within catchUpWait refuses on its own copy
// rather than hang.
func TestStandbyJudgesAStreamOnTheLeadersGrants(t *testing.T) {
	c := startStreamCatchUpCluster(t, Access{})
	sc, standby := c.sc, c.standby
	ctx := t.Context()

	release := c.hold(t)
	if _, err := c.ops.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "reader", Permission: "read"}); err != nil {
		t.Fatalf("grant reader: %v", err)
	}
	tok, err := c.ops.AclCreateToken(ctx, &adminpb.AclCreateTokenRequest{Name: "w", Permission: "read"})
	if err != nil {
		t.Fatal(err)
	}
	if p := sc.nodes[standby].srv.acl.ClientPrincipal("reader"); p.Perm != security.PermNone {
		t.Fatalf("the held standby already binds reader to %s: the test holds nothing", p.Perm)
	}
	c.catchUps.atNext(release)
	reader := sc.as(standby, "reader", "")
	if err := c.watchFirst(ctx, reader); err != nil {
		t.Errorf("reader's watch at the standby, after the grant was acknowledged: %v", err)
	}
	if n := c.catchUps.count(); n != 1 {
		t.Errorf("%d catch-ups for reader's watch, want 1", n)
	}
	holder := sc.dial(standby, sc.pki.MustCredentials(security.Identity{Role: security.RoleClient, ID: "holder"}), tok.GetSecret())
	if err := c.watchFirst(ctx, holder); err != nil {
		t.Errorf("a watch at the standby with the token the leader made: %v", err)
	}

	// What the grant does not allow is refused, once caught up.
	before := c.catchUps.count()
	ss, err := reader.SnapshotSave(ctx, &adminpb.SnapshotSaveRequest{})
	if err == nil {
		_, err = ss.Recv()
	}
	wantCode(t, "reader's snapshot save at the standby", err, codes.PermissionDenied)
	if c.catchUps.count() != before+1 {
		t.Error("reader's snapshot save was refused without catching up with the leader")
	}

	// A standby that cannot catch up refuses on its own copy, after
	// catchUpWait at most.
	release = c.hold(t)
	if _, err := c.ops.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "late", Permission: "read"}); err != nil {
		t.Fatalf("grant late: %v", err)
	}
	err = c.watchFirst(ctx, sc.as(standby, "late", ""))
	wantCode(t, "late's watch at a standby that cannot catch up", err, codes.PermissionDenied)
	release()
}

// A stream caught up with the leader is judged again, not served because
// it caught up: a client the leader grants nothing is refused at the
// standby after one catch-up, counted and recorded once, and the
// catch-up read is the master's own (the leader records no refusal of it
// for the caller).
func TestStandbyStreamCaughtUpIsJudgedAgain(t *testing.T) {
	c := startStreamCatchUpCluster(t, Access{})
	ctx := t.Context()
	labels := map[string]string{"method": "WatchProcedure", "needed": "read", "code": "PermissionDenied"}
	before := counterValue(t, c.sc.regs[c.standby], "baton_acl_denied_total", labels)
	err := c.watchFirst(ctx, c.sc.as(c.standby, "nobody", ""))
	wantCode(t, "nobody's watch at the standby", err, codes.PermissionDenied)
	if n := c.catchUps.count(); n != 1 {
		t.Errorf("%d catch-ups for nobody's refused watch, want 1", n)
	}
	if d := counterValue(t, c.sc.regs[c.standby], "baton_acl_denied_total", labels) - before; d != 1 {
		t.Errorf("nobody's refused watch counted %v times at the standby, want 1", d)
	}
	var watchRefusals, listRefusals int
	for _, r := range auditOf(t, ctx, c.ops) {
		if r.GetPrincipal() != "client/nobody" || !r.GetRefused() {
			continue
		}
		switch r.GetMethod() {
		case "WatchProcedure":
			watchRefusals++
		case "ListProcedures":
			listRefusals++
		}
	}
	if watchRefusals != 1 || listRefusals != 0 {
		t.Errorf("client/nobody: %d refused watches recorded (want 1), %d refused ListProcedures (want 0: the catch-up read is the master's)", watchRefusals, listRefusals)
	}
}

// A refused stream is charged to the caller's limit before any catch-up,
// and one over the limit makes no leader read.
func TestStandbyStreamRefusalsAreChargedBeforeCatchingUp(t *testing.T) {
	c := startStreamCatchUpCluster(t, Access{ChangeLimit: RateLimit{Rate: MinSubmitRate, Burst: 2}})
	nobody := c.sc.as(c.standby, "nobody", "")
	var seen []codes.Code
	for range 4 {
		seen = append(seen, status.Code(c.watchFirst(t.Context(), nobody)))
	}
	want := []codes.Code{codes.PermissionDenied, codes.PermissionDenied, codes.ResourceExhausted, codes.ResourceExhausted}
	if !slices.Equal(seen, want) || c.catchUps.count() != 2 {
		t.Errorf("4 refused watches: codes %v (want %v), %d catch-ups (want 2)", seen, want, c.catchUps.count())
	}
}

// A stream the standby admits on its copy (a revocation it has not
// applied) and relays to the leader, which refuses it on its own grants,
// is recorded once, by the leader, and charged once, at the standby, where
// the call came in: with a burst of 3 (ops's three changes fit it too),
// three such refusals answer PERMISSION_DENIED, the fourth
// RESOURCE_EXHAUSTED.
func TestStandbyRelayedStreamRefusedByTheLeaderIsRecordedOnce(t *testing.T) {
	c := startStreamCatchUpCluster(t, Access{ChangeLimit: RateLimit{Rate: MinSubmitRate, Burst: 3}})
	ctx := t.Context()
	if _, err := c.ops.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "reader", Permission: "read"}); err != nil {
		t.Fatal(err)
	}
	reader := c.sc.as(c.standby, "reader", "")
	testwait.ForNil(t, 30*time.Second, "reader's watch at the standby", func() error { return c.watchFirst(ctx, reader) })
	c.hold(t)
	if _, err := c.ops.AclRevoke(ctx, &adminpb.AclRevokeRequest{Client: "reader"}); err != nil {
		t.Fatal(err)
	}
	var seen []codes.Code
	for range 4 {
		seen = append(seen, status.Code(c.watchFirst(ctx, reader)))
	}
	want := []codes.Code{codes.PermissionDenied, codes.PermissionDenied, codes.PermissionDenied, codes.ResourceExhausted}
	if !slices.Equal(seen, want) {
		t.Errorf("reader's watches at the standby after the revocation: %v, want %v", seen, want)
	}
	if n := c.catchUps.count(); n != 0 {
		t.Errorf("%d catch-ups: the standby admitted the watches, the leader refused them", n)
	}
	// Each watch reached the leader, which refused it and recorded it;
	// the standby records none of them again.
	leader := c.sc.nodes[c.li].node.ID()
	var refusals int
	for _, r := range auditOf(t, ctx, c.ops) {
		if r.GetPrincipal() != "client/reader" || r.GetMethod() != "WatchProcedure" || !r.GetRefused() {
			continue
		}
		refusals++
		if r.GetNode() != leader || r.GetCode() != codes.PermissionDenied.String() {
			t.Errorf("reader's refused watch recorded by %s with %s; want the leader %s, PermissionDenied", r.GetNode(), r.GetCode(), leader)
		}
	}
	if refusals != 4 {
		t.Errorf("reader's 4 watches refused by the leader recorded %d times, want 4", refusals)
	}
}

// A leadership transfer or a peer removal at a standby is not handed to
// the leader (its forward must outlive the leader it reaches), so a
// refusal of one that rests on the standby's copy of the grants waits
// for the standby to catch up with the leader, and the call is judged
// again: an admin the leader bound a moment ago is not refused there.
// What the caller may still not do is refused after the same catch-up.
func TestStandbyJudgesAMembershipCallOnTheLeadersGrants(t *testing.T) {
	c := startStreamCatchUpCluster(t, Access{})
	sc, standby := c.sc, c.standby
	ctx := t.Context()

	release := c.hold(t)
	if _, err := c.ops.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "newadmin", Permission: "admin"}); err != nil {
		t.Fatalf("grant newadmin: %v", err)
	}
	if _, err := c.ops.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "reader", Permission: "read"}); err != nil {
		t.Fatalf("grant reader: %v", err)
	}
	if p := sc.nodes[standby].srv.acl.ClientPrincipal("newadmin"); p.Perm != security.PermNone {
		t.Fatalf("the held standby already binds newadmin to %s: the test holds nothing", p.Perm)
	}
	c.catchUps.atNext(release)
	// Without an id the removal is refused as bad input, once judged
	// allowed: nothing is removed.
	_, err := sc.as(standby, "newadmin", "").RemovePeer(ctx, &adminpb.RemovePeerRequest{})
	wantCode(t, "newadmin's peer removal at the standby, after the grant was acknowledged", err, codes.InvalidArgument)
	if n := c.catchUps.count(); n != 1 {
		t.Errorf("%d catch-ups for newadmin's removal, want 1", n)
	}
	// A token the leader made a moment ago, unknown at the held standby,
	// is held once caught up: the removal is recorded once, as the
	// token's.
	release = c.hold(t)
	tok, err := c.ops.AclCreateToken(ctx, &adminpb.AclCreateTokenRequest{Name: "membership", Permission: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	c.catchUps.atNext(release)
	holder := sc.dial(standby, sc.pki.MustCredentials(security.Identity{Role: security.RoleClient, ID: "holder"}), tok.GetSecret())
	_, err = holder.RemovePeer(ctx, &adminpb.RemovePeerRequest{})
	wantCode(t, "a removal at the standby with the token the leader made", err, codes.InvalidArgument)
	var removals []*adminpb.AuditRecord
	for _, r := range auditOf(t, ctx, c.ops) {
		if r.GetMethod() == "RemovePeer" && r.GetName() == "membership" {
			removals = append(removals, r)
		}
	}
	if len(removals) != 1 || removals[0].GetRefused() {
		t.Errorf("the token's removal recorded as %v: want one record, not a refusal", removals)
	}
	_, err = sc.as(standby, "reader", "").TransferLeadership(ctx, &adminpb.TransferLeadershipRequest{To: "nosuch"})
	wantCode(t, "reader's leadership transfer at the standby", err, codes.PermissionDenied)
	if n := c.catchUps.count(); n != 3 {
		t.Errorf("%d catch-ups after reader's transfer, want 3: refused once caught up", n)
	}
}

// A membership call admitted once the standby caught up was charged to
// the caller's limit as a refusal: it is not charged again as a change.
// With a burst of 2 (ops's two changes fit it), newadmin spends one on a
// refusal before its grant; its removal after the grant is then judged
// (bad input, nothing removed), not refused as over its limit.
func TestStandbyMembershipCallCaughtUpIsChargedOnce(t *testing.T) {
	c := startStreamCatchUpCluster(t, Access{ChangeLimit: RateLimit{Rate: MinSubmitRate, Burst: 2}})
	ctx := t.Context()
	newadmin := c.sc.as(c.standby, "newadmin", "")
	_, err := newadmin.RemovePeer(ctx, &adminpb.RemovePeerRequest{})
	wantCode(t, "newadmin's removal before its grant", err, codes.PermissionDenied)
	release := c.hold(t)
	if _, err := c.ops.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "newadmin", Permission: "admin"}); err != nil {
		t.Fatalf("grant newadmin: %v", err)
	}
	c.catchUps.atNext(release)
	_, err = newadmin.RemovePeer(ctx, &adminpb.RemovePeerRequest{})
	wantCode(t, "newadmin's removal at the standby, admitted after a catch-up", err, codes.InvalidArgument)
}
