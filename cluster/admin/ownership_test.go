package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// ownershipCluster is three masters over mutual TLS enforcing access
// control, with admins alice and carol and operator bob.
func ownershipCluster(t *testing.T) (*clustertest.Cluster, *security.TestPKI) {
	t.Helper()
	pki, err := security.NewTestPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// SteadyLeader: the tests call "through a standby" one call after the
	// other, which a leadership change under load would make the leader.
	c := clustertest.New(t, clustertest.Config{Masters: 3, PKI: pki, SteadyLeader: true, Grants: map[string]security.Permission{
		"alice": security.PermAdmin, "carol": security.PermAdmin, "bob": security.PermOperate,
	}})
	c.WaitLeader()
	return c, pki
}

// callAs is an admin client of master i alone (no leader following: a
// standby forwards), calling as client name.
func callAs(t *testing.T, c *clustertest.Cluster, pki *security.TestPKI, i int, name string) adminpb.AdminClient {
	t.Helper()
	creds := pki.MustCredentials(security.Identity{Role: security.RoleClient, ID: name})
	cc, err := grpc.NewClient(c.Master(i).AdminAddr(), creds.DialOption(security.RoleMaster))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return adminpb.NewAdminClient(cc)
}

func wantRefusal(t *testing.T, what string, err error, says ...string) {
	t.Helper()
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("%s: %v; want PERMISSION_DENIED", what, err)
	}
	for _, s := range says {
		if !strings.Contains(status.Convert(err).Message(), s) {
			t.Fatalf("%s: %q does not say %q", what, status.Convert(err).Message(), s)
		}
	}
}

// TestLocksAndProceduresBelongToTheirCaller: with access control on, a
// lock's heartbeat and release, and a procedure's pause, resume, abort and
// ack, are the identity's that acquired or submitted it, whichever master
// its calls reach (a standby forwards them for the caller, not as itself):
// an operator may not touch an admin's, nor use force; another admin may
// with force only, and the audit trail shows the force.
func TestLocksAndProceduresBelongToTheirCaller(t *testing.T) {
	c, pki := ownershipCluster(t)
	li, _ := c.WaitLeader()
	standby := (li + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := callAs(t, c, pki, standby, "alice")
	bob := callAs(t, c, pki, standby, "bob")
	carol := callAs(t, c, pki, li, "carol")

	lk, err := alice.AcquireLock(ctx, &adminpb.AcquireLockRequest{Kind: "namespace", Names: []string{"owned"}, Exclusive: true, Holder: "bob", LeaseMs: 60_000})
	if err != nil || lk.GetState() != "ACQUIRED" {
		t.Fatalf("alice acquires through a standby: %v, %v", lk, err)
	}
	lock := &adminpb.LockRef{LockId: lk.GetLockId()}
	// The holder label says bob; the lock is alice's all the same.
	_, err = bob.LockHeartbeat(ctx, lock)
	wantRefusal(t, "bob heartbeats alice's lock", err, "lock", "belongs to client/alice", "--force")
	_, err = bob.ReleaseLock(ctx, lock)
	wantRefusal(t, "bob releases alice's lock", err, "belongs to client/alice", "--force")
	_, err = bob.ReleaseLock(ctx, &adminpb.LockRef{LockId: lk.GetLockId(), Force: true})
	wantRefusal(t, "bob forces the release of alice's lock", err, "--force needs permission admin", "client/bob holds permission operate")
	_, err = carol.ReleaseLock(ctx, lock)
	wantRefusal(t, "carol releases alice's lock without force", err, "belongs to client/alice")
	if r, err := alice.LockHeartbeat(ctx, lock); err != nil || r.GetState() != "ACQUIRED" {
		t.Fatalf("alice heartbeats her lock through a standby: %v, %v", r, err)
	}

	sub, err := alice.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "1000", "delay": "20ms"}, Owner: "bob"})
	if err != nil {
		t.Fatalf("alice submits through a standby: %v", err)
	}
	proc := &adminpb.ProcedureRef{Id: sub.GetId()}
	if p, err := carol.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: sub.GetId()}); err != nil || p.GetSubmittedBy() != "client/alice" || p.GetOwner() != "bob" {
		t.Fatalf("alice's procedure: %v, %v; want submitted by client/alice, owner label bob", p, err)
	}
	for verb, call := range map[string]func(context.Context, *adminpb.ProcedureRef, ...grpc.CallOption) (*adminpb.Procedure, error){
		"pauses": bob.PauseProcedure, "resumes": bob.ResumeProcedure, "acks": bob.AckResult,
	} {
		_, err := call(ctx, proc)
		wantRefusal(t, "bob "+verb+" alice's procedure", err, "procedure", "belongs to client/alice")
		_, err = call(ctx, &adminpb.ProcedureRef{Id: sub.GetId(), Force: true})
		wantRefusal(t, "bob forces that", err, "--force needs permission admin")
	}
	_, err = carol.AbortProcedure(ctx, proc)
	wantRefusal(t, "carol aborts alice's procedure without force", err, "belongs to client/alice", "--force")
	_, err = carol.PauseProcedure(ctx, proc)
	wantRefusal(t, "carol pauses alice's procedure without force", err, "belongs to client/alice")

	// bob's own are his.
	own, err := bob.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "1000", "delay": "20ms"}})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := bob.PauseProcedure(ctx, &adminpb.ProcedureRef{Id: own.GetId()}); err != nil || !p.GetPaused() {
		t.Fatalf("bob pauses his own: %v, %v", p, err)
	}
	if _, err := bob.ResumeProcedure(ctx, &adminpb.ProcedureRef{Id: own.GetId()}); err != nil {
		t.Fatalf("bob resumes his own: %v", err)
	}

	// An admin with force may; the owner may without.
	if p, err := carol.PauseProcedure(ctx, &adminpb.ProcedureRef{Id: sub.GetId(), Force: true}); err != nil || !p.GetPaused() {
		t.Fatalf("carol forces a pause: %v, %v", p, err)
	}
	if _, err := alice.ResumeProcedure(ctx, proc); err != nil {
		t.Fatalf("alice resumes her own: %v", err)
	}
	if _, err := alice.AbortProcedure(ctx, proc); err != nil {
		t.Fatalf("alice aborts her own: %v", err)
	}
	testwait.For(t, 30*time.Second, "alice's procedure rolled back", func() bool {
		p, err := alice.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: sub.GetId()})
		return err == nil && p.GetState() == "ROLLEDBACK"
	})
	_, err = bob.AckResult(ctx, proc)
	wantRefusal(t, "bob acks alice's finished procedure", err, "belongs to client/alice")
	if _, err := alice.AckResult(ctx, proc); err != nil {
		t.Fatalf("alice acks her own: %v", err)
	}
	if r, err := carol.ReleaseLock(ctx, &adminpb.LockRef{LockId: lk.GetLockId(), Force: true}); err != nil || r.GetState() != "RELEASED" {
		t.Fatalf("carol forces the release of alice's lock: %v, %v", r, err)
	}

	var forced *adminpb.AuditRecord
	testwait.For(t, 10*time.Second, "the forced release in the audit trail", func() bool {
		r, err := carol.ListAudit(ctx, &adminpb.ListAuditRequest{Method: "ReleaseLock", Principal: "client/carol", NewestFirst: true})
		if err != nil || len(r.GetRecords()) == 0 {
			return false
		}
		forced = r.GetRecords()[0]
		return forced.GetCode() == "OK"
	})
	if !strings.Contains(forced.GetArgs(), `"force":true`) {
		t.Fatalf("the forced release's record: %v; want force in its arguments", forced)
	}
}

// TestNoOnesProcedureIsAnyonesToPause: a procedure with no recorded
// submitter (one the cluster submitted itself, or one written by 0.1.0,
// which had no such field) is no one's: an operator pauses and resumes it
// as before owners were recorded.
func TestNoOnesProcedureIsAnyonesToPause(t *testing.T) {
	c, pki := ownershipCluster(t)
	li, _ := c.WaitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bob := callAs(t, c, pki, (li+1)%3, "bob")
	id := c.Submit(&diag.Sleep{Steps: 1000, Delay: 20 * time.Millisecond}, "")
	if p, err := bob.PauseProcedure(ctx, &adminpb.ProcedureRef{Id: id}); err != nil || !p.GetPaused() || p.GetSubmittedBy() != "" {
		t.Fatalf("bob pauses no one's procedure: %v, %v", p, err)
	}
	if _, err := bob.ResumeProcedure(ctx, &adminpb.ProcedureRef{Id: id}); err != nil {
		t.Fatalf("bob resumes it: %v", err)
	}
}
