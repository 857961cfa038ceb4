package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/security"
)

// The faults of access control and the audit trail: a client forging what
// only masters say, refusals flooding the trail, a clock far ahead, a
// write that commits after its writer gave up, a leader dying under
// calls.

func waitBound(t *testing.T, ctx context.Context, c adminpb.AdminClient, perm string) {
	t.Helper()
	testwait.For(t, 10*time.Second, "bound "+perm, func() bool {
		r, err := c.WhoAmI(ctx, &adminpb.WhoAmIRequest{})
		return err == nil && r.GetPermission() == perm
	})
}

// TestNoPrincipalSpoofing: a client sending what only masters may say
// (a forwarded principal, the console's user, a forwarding mark, a
// browser's address) is judged, and recorded, as itself.
func TestNoPrincipalSpoofing(t *testing.T) {
	sc, ctx, li, standby := startSecureTrio(t, Access{InitialGrants: map[string]security.Permission{"ops": security.PermAdmin, "reader": security.PermRead}}, 30*time.Second)
	for _, i := range []int{li, standby} {
		reader := sc.as(i, "reader", "")
		waitBound(t, ctx, reader, "read")
		for _, kv := range [][]string{
			{principalKey, "client/ops"},
			{principalKey, "anonymous"},
			{security.OnBehalfKey, "baton://client/ops"},
			{security.OnBehalfKey, "baton://master/m0"},
			{forwardedKey, "m0", principalKey, "client/ops"},
			{"authorization", "Bearer garbage", "authorization", "Bearer garbage2"},
		} {
			c := metadata.AppendToOutgoingContext(ctx, kv...)
			who, err := reader.WhoAmI(c, &adminpb.WhoAmIRequest{})
			if err == nil && (who.GetPrincipal() != "client/reader" || who.GetPermission() != "read") {
				t.Errorf("node %d %v: whoami %v", i, kv, who)
			}
			_, err = reader.SubmitProcedure(c, &adminpb.SubmitProcedureRequest{Type: "sleep"})
			// A client's forwarding mark makes a standby refuse to
			// forward: it hurts only that client.
			if c := status.Code(err); c != codes.PermissionDenied && c != codes.Unauthenticated && !(c == codes.Unavailable && strings.Contains(err.Error(), "not forwarding")) {
				t.Errorf("node %d %v: a reader's submit: %v", i, kv, err)
			}
		}
	}
	ops := sc.as(li, "ops", "")
	fctx := metadata.AppendToOutgoingContext(ctx, forwardedKey, "m-ghost", peerKey, "203.0.113.66:4444")
	if _, err := ops.SubmitProcedure(fctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	for _, r := range auditOf(t, ctx, ops) {
		if r.GetVia() == "m-ghost" || r.GetPeer() == "203.0.113.66:4444" {
			t.Errorf("record %s of %s %s: via %q, peer %q taken from a client's metadata", r.GetId(), r.GetPrincipal(), r.GetMethod(), r.GetVia(), r.GetPeer())
		}
		if r.GetPrincipal() != "client/reader" && r.GetPrincipal() != "client/ops" {
			t.Errorf("record %s names %s", r.GetId(), r.GetPrincipal())
		}
	}
}

// TestRefusalsCannotFloodTheTrail: refusals are kept apart within their
// own bound, so a certificate holding nothing cannot push the records of
// served calls out by being refused.
func TestRefusalsCannotFloodTheTrail(t *testing.T) {
	sc, ctx, ops := startSecureOne(t, Access{AuditMaxRecords: 20, InitialGrants: map[string]security.Permission{"ops": security.PermAdmin}})
	if _, err := ops.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "mallory", Permission: "admin"}); err != nil {
		t.Fatal(err)
	}
	stranger := sc.as(0, "nobody", "")
	for range 50 {
		_, err := stranger.DeleteTable(ctx, &adminpb.TableRequest{Name: "x"})
		wantCode(t, "an unbound certificate deletes", err, codes.PermissionDenied)
	}
	recs := auditOf(t, ctx, ops)
	grants, refusals := 0, 0
	for _, r := range recs {
		switch {
		case r.GetMethod() == "AclGrant":
			grants++
		case r.GetRefused():
			refusals++
		}
	}
	if grants != 1 || refusals == 0 || refusals > 2 {
		t.Fatalf("after 50 refusals with a bound of 20: %d grant records (want 1), %d refusals kept (want 1-2, a tenth of the bound)\n%s", grants, refusals, auditText(recs))
	}
	// The two spaces page as one, in order.
	paged := auditIDs(listAudit(t, ctx, ops, &adminpb.ListAuditRequest{PageSize: 1}))
	if len(paged) != len(recs) {
		t.Fatalf("paged one at a time: %v; at once %d records", paged, len(recs))
	}
	for i := range recs {
		if paged[i] != recs[i].GetId() {
			t.Fatalf("page order %v differs from %s", paged, auditText(recs))
		}
	}
	// And newest first, two at a time: the same, backwards.
	back := auditIDs(listAudit(t, ctx, ops, &adminpb.ListAuditRequest{PageSize: 2, NewestFirst: true}))
	slices.Reverse(back)
	if !slices.Equal(back, paged) {
		t.Fatalf("newest first, reversed: %v; oldest first: %v", back, paged)
	}
	if _, err := ops.ListAudit(ctx, &adminpb.ListAuditRequest{PageToken: adminpb.EncodePageToken(access.PageToken, "x"), NewestFirst: true}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an oldest-first token in a newest-first listing: %v", err)
	}
}

// TestRetentionByTheLeadersClock: age is counted from when the leader
// wrote a record, by its clock, not from the time a standby stamped on
// it: a standby whose clock runs a day ahead holds nothing up.
func TestRetentionByTheLeadersClock(t *testing.T) {
	clk := clock.NewManual(time.Now())
	sc, ctx, ops := startSecureOne(t, Access{AuditRetention: time.Hour, Clock: clk, InitialGrants: map[string]security.Permission{"ops": security.PermAdmin}})
	s := sc.nodes[0].srv
	if _, err := s.AppendAudit(ctx, &adminpb.AppendAuditRequest{Records: []*adminpb.AuditRecord{{Method: "DeleteTable", Principal: "client/x", AtUnixMs: clk.Now().Add(24 * time.Hour).UnixMilli(), Node: "m-skewed"}}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := ops.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(auditOf(t, ctx, ops)); n != 4 {
		t.Fatalf("%d records before the retention passed, want 4", n)
	}
	clk.Advance(3 * time.Hour)
	if err := s.audit.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if recs := auditOf(t, ctx, ops); len(recs) != 0 {
		t.Fatalf("after 3h with a 1h retention:\n%s", auditText(recs))
	}
}

// TestOneRecordPerCallAcrossFailover: calls through a standby while the
// leader dies are each answered and recorded exactly once.
func TestOneRecordPerCallAcrossFailover(t *testing.T) {
	sc, ctx, li, standby := startSecureTrio(t, Access{InitialGrants: map[string]security.Permission{"ops": security.PermAdmin}}, 60*time.Second)
	ops := sc.as(standby, "ops", "")
	waitBound(t, ctx, ops, "admin")
	sc.nodes[li].node.Kill()
	sc.nodes[li].srv.Stop(ctx)
	answered := map[int]bool{}
	for i := range 10 {
		_, err := ops.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}, Nonce: fmt.Sprintf("n%d", i), Owner: "t"})
		answered[i] = err == nil
	}
	recs := auditOf(t, ctx, ops)
	for i := range 10 {
		n := 0
		for _, r := range recs {
			if r.GetMethod() == "SubmitProcedure" && strings.Contains(r.GetArgs(), fmt.Sprintf(`"n%d"`, i)) {
				n++
			}
		}
		if n != 1 || !answered[i] {
			t.Errorf("submit n%d: answered %v, %d records; trail:\n%s", i, answered[i], n, auditText(recs))
		}
	}
}

// lyingBackend commits a mutation and then says it failed, once: a write
// whose commit came after its writer's deadline.
type lyingBackend struct {
	nodeBackend
	lie bool
}

func (b *lyingBackend) Mutate(ctx context.Context, muts []raftfsm.Mutation) error {
	err := b.nodeBackend.Mutate(ctx, muts)
	if err == nil && b.lie {
		b.lie = false
		return context.DeadlineExceeded
	}
	return err
}

// TestBootstrapTokenToldDespiteALateCommit: the bootstrap token's write
// commits but its writer hears a failure; the token is still told, once,
// and recorded as told. A leader finding a token another master made and
// never recorded as told replaces it (its secret is lost) and tells its
// own.
func TestBootstrapTokenToldDespiteALateCommit(t *testing.T) {
	nodes := startCluster(t, 1)
	converged(t, nodes)
	b := &lyingBackend{nodeBackend: NodeBackend(nodes[0].node).(nodeBackend), lie: true}
	var told []string
	s, err := New(b, Config{Access: &Access{Enforce: true, OnBootstrap: func(tok string) { told = append(told, tok) }}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s.bootstrapACL(context.Background())
	}
	var rec access.BootRecord
	if v, ok := b.DomainGet(access.BootKey); !ok || mustUnmarshal(t, v, &rec) != nil || !rec.Announced {
		t.Fatalf("bootstrap record %+v after three ticks: want announced", rec)
	}
	if len(told) != 1 {
		t.Fatalf("%d tokens told, want 1", len(told))
	}
	acc, _, _ := security.ParseToken(told[0])
	if acc != rec.Accessor {
		t.Fatalf("told %s, recorded %s", acc, rec.Accessor)
	}
	if _, err := s.acl.TokenPrincipal(told[0]); err != nil {
		t.Fatalf("the told token: %v", err)
	}

	// Another master's unannounced token: replaced by this leader's.
	if err := b.Mutate(context.Background(), []raftfsm.Mutation{raftfsm.Put(access.BootKey, access.MustJSON(access.BootRecord{Accessor: acc, By: "m9"}))}); err != nil {
		t.Fatal(err)
	}
	var told2 []string
	s2, err := New(b, Config{Access: &Access{Enforce: true, OnBootstrap: func(tok string) { told2 = append(told2, tok) }}})
	if err != nil {
		t.Fatal(err)
	}
	s2.bootstrapACL(context.Background())
	if len(told2) != 1 || told2[0] == told[0] {
		t.Fatalf("a new leader finding an untold token told %d", len(told2))
	}
	if _, err := s2.acl.TokenPrincipal(told[0]); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("the replaced token still works: %v", err)
	}
}

func mustUnmarshal(t *testing.T, b []byte, v any) error {
	t.Helper()
	return json.Unmarshal(b, v)
}

// TestAuditOutcomes: a started record is not pruned before its outcome
// is written over it; an outcome that is a refusal (the rate limit,
// after the record was started) moves the record to the refusals; the
// records metric counts calls, not writes.
func TestAuditOutcomes(t *testing.T) {
	sc, ctx, _ := startSecureOne(t, Access{AuditMaxRecords: 3, InitialGrants: map[string]security.Permission{"ops": security.PermAdmin}})
	s := sc.nodes[0].srv
	started := &adminpb.AuditRecord{Method: "CreateTable", Principal: "client/slow", Code: access.AuditPending}
	if err := s.audit.Wait(s.audit.Start(started)); err != nil {
		t.Fatal(err)
	}
	limited := &adminpb.AuditRecord{Method: "SubmitProcedure", Principal: "client/eager", Code: access.AuditPending}
	if err := s.audit.Wait(s.audit.Start(limited)); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		if err := s.audit.Append(ctx, &adminpb.AuditRecord{Method: "SubmitProcedure", Principal: "client/other", Code: "OK"}); err != nil {
			t.Fatal(err)
		}
	}
	has := func(id string) (served, refused bool) {
		_, served = s.b.DomainGet(access.AuditPrefix + strings.TrimPrefix(mustKey(t, id), access.AuditPrefix))
		_, refused = s.b.DomainGet(access.RefusedPrefix + strings.TrimPrefix(mustKey(t, id), access.AuditPrefix))
		return
	}
	if served, _ := has(started.GetId()); !served {
		t.Fatal("a started record was pruned before its outcome")
	}
	outcome := &adminpb.AuditRecord{Id: limited.GetId(), Method: "SubmitProcedure", Principal: "client/eager", Code: "ResourceExhausted", Refused: true}
	if err := s.audit.Append(ctx, outcome); err != nil {
		t.Fatal(err)
	}
	if served, refused := has(limited.GetId()); served || !refused {
		t.Fatalf("a rate-limited call's record: in the served calls %v, in the refusals %v; want moved to the refusals", served, refused)
	}
	done := &adminpb.AuditRecord{Id: started.GetId(), Method: "CreateTable", Principal: "client/slow", Code: "OK"}
	if err := s.audit.Append(ctx, done); err != nil {
		t.Fatal(err)
	}
	if err := s.audit.Commit(nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	s.b.(domainScanner).DomainScan(access.AuditPrefix, func(string, []byte) bool { n++; return true })
	if n > 3 {
		t.Fatalf("%d served records once the outcome is in, bound 3", n)
	}
	if v := counterValue(t, sc.regs[0], "baton_audit_records_total", nil); v != 8 {
		t.Fatalf("baton_audit_records_total = %v after 8 records (and 2 outcomes), want 8", v)
	}
}

func mustKey(t *testing.T, id string) string {
	t.Helper()
	k, ok := access.AuditKeyOf(id)
	if !ok {
		t.Fatalf("record id %q", id)
	}
	return k
}
