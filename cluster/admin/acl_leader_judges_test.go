package admin

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"

	"github.com/baton-dev/baton/cluster"
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
	logs := make([]*heldLogs, 3)
	sc := startSecureClusterConf(t, 3, Access{InitialGrants: map[string]security.Permission{"ops": security.PermAdmin}}, func(i int, c *cluster.Config) {
		logs[i] = &heldLogs{LogStore: c.LogStore}
		c.LogStore = logs[i]
	})
	li := converged(t, sc.nodes)
	standby := (li + 1) % 3
	ctx := t.Context()
	ops := sc.as(li, "ops", "")
	waitBound(t, ctx, ops, "admin")
	reader := sc.as(standby, "reader", "")
	if _, err := reader.ListProcedures(ctx, &adminpb.ListProceduresRequest{}); err == nil {
		t.Fatal("a client bound to nothing listed procedures")
	}

	logs[standby].gate.Lock()
	held := true
	release := func() {
		if held {
			held = false
			logs[standby].gate.Unlock()
		}
	}
	t.Cleanup(release)

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

// TestStandbyJudgesAStreamOnTheLeadersGrants: a stream at a standby whose
// copy of the grants lacks one the leader acknowledged is not refused on
// that copy. The standby learns the leader's applied index, waits to
// apply it, and judges the stream again: reader's watch is served once
// the standby caught up, what reader may still not do is refused after
// the same catch-up, and a standby that cannot catch up within
// catchUpWait refuses on its own copy rather than hang.
func TestStandbyJudgesAStreamOnTheLeadersGrants(t *testing.T) {
	logs := make([]*heldLogs, 3)
	sc := startSecureClusterConf(t, 3, Access{InitialGrants: map[string]security.Permission{"ops": security.PermAdmin}}, func(i int, c *cluster.Config) {
		logs[i] = &heldLogs{LogStore: c.LogStore}
		c.LogStore = logs[i]
	})
	li := converged(t, sc.nodes)
	standby := (li + 1) % 3
	ctx := t.Context()
	ops := sc.as(li, "ops", "")
	waitBound(t, ctx, ops, "admin")
	sub, err := ops.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan uint64, 4)
	hook := func(index uint64) { waiting <- index }
	sc.nodes[standby].srv.catchingUp.Store(&hook)
	hold := func() (release func()) {
		logs[standby].gate.Lock()
		var once sync.Once
		release = func() { once.Do(logs[standby].gate.Unlock) }
		t.Cleanup(release)
		return release
	}
	watchFirst := func(c adminpb.AdminClient) <-chan error {
		done := make(chan error, 1)
		go func() {
			ws, err := c.WatchProcedure(ctx, &adminpb.WatchProcedureRequest{Id: sub.GetId()})
			if err == nil {
				_, err = ws.Recv()
			}
			done <- err
		}()
		return done
	}

	release := hold()
	if _, err := ops.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "reader", Permission: "read"}); err != nil {
		t.Fatalf("grant reader: %v", err)
	}
	if p := sc.nodes[standby].srv.acl.ClientPrincipal("reader"); p.Perm != security.PermNone {
		t.Fatalf("the held standby already binds reader to %s: the test holds nothing", p.Perm)
	}
	reader := sc.as(standby, "reader", "")
	done := watchFirst(reader)
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("reader's watch at the held standby answered before it caught up with the leader: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("reader's watch at the held standby neither answered nor waited to catch up")
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("reader's watch at the standby, after the grant was acknowledged: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("reader's watch at the standby never answered once it could catch up")
	}

	// What the grant does not allow is refused, once caught up.
	ss, err := reader.SnapshotSave(ctx, &adminpb.SnapshotSaveRequest{})
	if err == nil {
		_, err = ss.Recv()
	}
	wantCode(t, "reader's snapshot save at the standby", err, codes.PermissionDenied)
	select {
	case <-waiting:
	default:
		t.Error("reader's snapshot save was refused without catching up with the leader")
	}

	// A standby that cannot catch up refuses on its own copy, after
	// catchUpWait at most.
	release = hold()
	if _, err := ops.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "late", Permission: "read"}); err != nil {
		t.Fatalf("grant late: %v", err)
	}
	err = <-watchFirst(sc.as(standby, "late", ""))
	wantCode(t, "late's watch at a standby that cannot catch up", err, codes.PermissionDenied)
	release()
}
