package admin

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// secureCluster is a cluster of masters speaking mutual TLS and enforcing
// access control, with a way to call any of them as any client.
type secureCluster struct {
	t     *testing.T
	pki   *security.TestPKI
	nodes []*testNode
	regs  []*prometheus.Registry

	mu    sync.Mutex
	boots []string // bootstrap tokens told, by any master
	conns []*grpc.ClientConn
}

func startSecureCluster(t *testing.T, n int, access Access) *secureCluster {
	t.Helper()
	return startSecureClusterConf(t, n, access, nil)
}

// startSecureClusterConf is startSecureCluster with node i's cluster
// config adjusted by conf (if not nil).
func startSecureClusterConf(t *testing.T, n int, access Access, conf func(i int, c *cluster.Config)) *secureCluster {
	t.Helper()
	return startSecureClusterOn(t, n, access, conf, NodeBackend)
}

// asAgent is the backend a baton agent builds its server on: the node's,
// wrapped for the domain (cmd/node/agent.go), whose embedded Backend
// hides what it does not pass through.
func asAgent(n *cluster.Node) Backend { return WithDomain(NodeBackend(n), &stubDomain{}) }

// startSecureClusterOn is startSecureClusterConf with each server built
// on backend(node).
func startSecureClusterOn(t *testing.T, n int, access Access, conf func(i int, c *cluster.Config), backend func(*cluster.Node) Backend) *secureCluster {
	t.Helper()
	pki, err := security.NewTestPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sc := &secureCluster{t: t, pki: pki}
	ops := pki.MustCredentials(security.Identity{Role: security.RoleClient, ID: "ops"})
	// The secure tests name the leader and a standby (who served, who
	// recorded): a steady leader.
	sc.nodes = startClusterConf(t, n, steadyRaftTimeout, func(i int, id string, cfg *Config) grpc.DialOption {
		creds := pki.MustCredentials(security.Identity{Role: security.RoleMaster, ID: id})
		reg := prometheus.NewRegistry()
		sc.regs = append(sc.regs, reg)
		a := access
		a.Enforce = true
		a.Metrics = reg
		if a.AuditFile != nil { // a directory: each master its own file
			f := *a.AuditFile
			f.Path = filepath.Join(f.Path, id+".jsonl")
			a.AuditFile = &f
		}
		a.OnBootstrap = func(tok string) {
			sc.mu.Lock()
			defer sc.mu.Unlock()
			sc.boots = append(sc.boots, tok)
		}
		cfg.Access = &a
		cfg.ServerOptions = security.MasterPolicyFor(a.ClientAuth, MasterOnlyMethods()...).ServerOptions(creds)
		cfg.DialOptions = []grpc.DialOption{creds.DialOption(security.RoleMaster)}
		return ops.DialOption(security.RoleMaster)
	}, func(_ int, n *cluster.Node) Backend { return backend(n) }, conf)
	t.Cleanup(func() {
		for _, c := range sc.conns {
			c.Close()
		}
	})
	return sc
}

// startSecureTrio starts a secure three-node cluster under a and waits for
// its leader: the leader's index, a standby's, and a context of d for the
// test's calls.
func startSecureTrio(t *testing.T, a Access, d time.Duration) (sc *secureCluster, ctx context.Context, li, standby int) {
	t.Helper()
	return startSecureTrioOn(t, a, d, NodeBackend)
}

// startSecureTrioOn is startSecureTrio with each server built on
// backend(node).
func startSecureTrioOn(t *testing.T, a Access, d time.Duration, backend func(*cluster.Node) Backend) (sc *secureCluster, ctx context.Context, li, standby int) {
	t.Helper()
	sc = startSecureClusterOn(t, 3, a, nil, backend)
	li = converged(t, sc.nodes)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return sc, ctx, li, (li + 1) % 3
}

// startSecureOne starts a secure one-node cluster under a, which must grant
// ops admin, and returns it with a context for the test's calls and ops's
// client once the grant is bound.
func startSecureOne(t *testing.T, a Access) (*secureCluster, context.Context, adminpb.AdminClient) {
	t.Helper()
	sc := startSecureCluster(t, 1, a)
	converged(t, sc.nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	ops := sc.as(0, "ops", "")
	waitBound(t, ctx, ops, "admin")
	return sc, ctx, ops
}

// MasterPolicy is the identity policy's server options for creds.
func MasterPolicy(creds *security.Credentials) []grpc.ServerOption {
	return security.MasterPolicy().ServerOptions(creds)
}

// as is an admin client of node i calling as client name, with token if
// not empty.
func (sc *secureCluster) as(i int, name, token string) adminpb.AdminClient {
	sc.t.Helper()
	return sc.dial(i, sc.pki.MustCredentials(security.Identity{Role: security.RoleClient, ID: name}), token)
}

// dial is an admin client of node i with creds, and token if not empty.
func (sc *secureCluster) dial(i int, creds *security.Credentials, token string) adminpb.AdminClient {
	sc.t.Helper()
	opts := []grpc.DialOption{creds.DialOption(security.RoleMaster)}
	if token != "" {
		opts = append(opts, security.TokenDialOption(token))
	}
	cc, err := grpc.NewClient(sc.nodes[i].addr, opts...)
	if err != nil {
		sc.t.Fatal(err)
	}
	sc.mu.Lock()
	sc.conns = append(sc.conns, cc)
	sc.mu.Unlock()
	return adminpb.NewAdminClient(cc)
}

func wantCode(t *testing.T, what string, err error, code codes.Code, says ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v; want %v", what, err, code)
	}
	for _, s := range says {
		if !strings.Contains(status.Convert(err).Message(), s) {
			t.Fatalf("%s: %q does not say %q", what, status.Convert(err).Message(), s)
		}
	}
}

// auditOf lists the whole audit trail through c, once no record is
// PENDING (an outcome is written over its record just after the answer).
func auditOf(t *testing.T, ctx context.Context, c adminpb.AdminClient) []*adminpb.AuditRecord {
	t.Helper()
	var out []*adminpb.AuditRecord
	testwait.For(t, 10*time.Second, "every audit record's outcome written", func() bool {
		out = listAudit(t, ctx, c, &adminpb.ListAuditRequest{PageSize: 2})
		for _, r := range out {
			if r.GetCode() == access.AuditPending {
				return false
			}
		}
		return true
	})
	return out
}

// listAudit lists the whole audit trail a page at a time, each page as
// req asks (its size, its order) from the token the last one gave.
func listAudit(t *testing.T, ctx context.Context, c adminpb.AdminClient, req *adminpb.ListAuditRequest) []*adminpb.AuditRecord {
	t.Helper()
	var out []*adminpb.AuditRecord
	for {
		r, err := c.ListAudit(ctx, req)
		if err != nil {
			t.Fatalf("list audit: %v", err)
		}
		out = append(out, r.GetRecords()...)
		if req.PageToken = r.GetNextPageToken(); req.PageToken == "" {
			return out
		}
	}
}

// auditIDs is the ids of recs, in their order.
func auditIDs(recs []*adminpb.AuditRecord) []string {
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.GetId()
	}
	return ids
}

// TestAccessControlAcrossStandbysAndFailover runs every kind of caller
// against a leader and its standbys: each is refused what its permission
// does not cover, with the permission named; every call that changes
// state is recorded once, where it was served, refusals included; and
// the records and grants survive the leader's death.
func TestAccessControlAcrossStandbysAndFailover(t *testing.T) {
	sc, ctx, li, standby := startSecureTrio(t, Access{InitialGrants: map[string]security.Permission{"ops": security.PermAdmin}}, 60*time.Second)

	// The initial grant lands at the first leadership.
	ops := sc.as(standby, "ops", "")
	testwait.For(t, 10*time.Second, "ops bound to admin", func() bool {
		r, err := ops.WhoAmI(ctx, &adminpb.WhoAmIRequest{})
		return err == nil && r.GetPermission() == "admin" && r.GetPrincipal() == "client/ops" && r.GetEnforced()
	})
	testwait.For(t, 10*time.Second, "the bootstrap token told", func() bool {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		return len(sc.boots) > 0
	})

	for name, perm := range map[string]string{"reader": "read", "operator": "operate"} {
		if _, err := ops.AclGrant(ctx, &adminpb.AclGrantRequest{Client: name, Permission: perm}); err != nil {
			t.Fatalf("grant %s %s through a standby: %v", name, perm, err)
		}
	}
	reader, operator, stranger := sc.as(standby, "reader", ""), sc.as(standby, "operator", ""), sc.as(li, "stranger", "")

	// read: reads yes, changes no.
	if _, err := reader.ListProcedures(ctx, &adminpb.ListProceduresRequest{}); err != nil {
		t.Fatalf("reader lists: %v", err)
	}
	_, err := reader.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "1"}})
	wantCode(t, "reader submits", err, codes.PermissionDenied, "needs permission operate", "client/reader holds permission read")
	// none: nothing at all, not even reads.
	_, err = stranger.ClusterStatus(ctx, &adminpb.ClusterStatusRequest{})
	wantCode(t, "stranger reads", err, codes.PermissionDenied, "needs permission read", "client/stranger holds no permission")
	// operate: submit yes, abort no.
	sub, err := operator.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "2", "delay": "10ms"}, Nonce: "acl-1", Owner: "t"})
	if err != nil {
		t.Fatalf("operator submits through a standby: %v", err)
	}
	_, err = operator.AbortProcedure(ctx, &adminpb.ProcedureRef{Id: sub.GetId()})
	wantCode(t, "operator aborts", err, codes.PermissionDenied, "needs permission admin")
	// Masters' own methods stay theirs, whatever a client holds.
	_, err = ops.RegisterNode(ctx, &adminpb.RegisterNodeRequest{Id: "m0", AdminAddress: "10.9.9.9:1"})
	wantCode(t, "a client registers a master's address", err, codes.PermissionDenied, "only by masters")
	_, err = ops.AppendAudit(ctx, &adminpb.AppendAuditRequest{Records: []*adminpb.AuditRecord{{Method: "DeleteTable", Principal: "client/someone-else"}}})
	wantCode(t, "a client forges an audit record", err, codes.PermissionDenied, "only by masters")

	// A token speaks for its holder, whatever certificate carries it;
	// deleted, it is refused as unknown.
	tr, err := ops.AclCreateToken(ctx, &adminpb.AclCreateTokenRequest{Name: "ci", Permission: "operate"})
	if err != nil {
		t.Fatalf("create token: %v", err)
	}
	ci := sc.as(standby, "stranger", tr.GetSecret())
	who, err := ci.WhoAmI(ctx, &adminpb.WhoAmIRequest{})
	if err != nil || who.GetPrincipal() != "token/"+tr.GetToken().GetAccessor() || who.GetPermission() != "operate" || who.GetName() != "ci" {
		t.Fatalf("whoami with the token: %v, %v", who, err)
	}
	ciSub, err := ci.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "2", "delay": "10ms"}})
	if err != nil {
		t.Fatalf("token with operate submits: %v", err)
	}
	_, pauseErr := ci.PauseProcedure(ctx, &adminpb.ProcedureRef{Id: ciSub.GetId()})
	if c := status.Code(pauseErr); c == codes.PermissionDenied || c == codes.Unauthenticated {
		t.Fatalf("token with operate pauses its procedure: %v", pauseErr)
	}
	// Not the certificate's: the token submitted it.
	_, err = ci.PauseProcedure(ctx, &adminpb.ProcedureRef{Id: sub.GetId()})
	wantCode(t, "token pauses the operator's procedure", err, codes.PermissionDenied, "belongs to client/operator")
	forged := sc.as(li, "stranger", "bt_"+tr.GetToken().GetAccessor()+"_"+strings.Repeat("A", 43))
	_, err = forged.ListProcedures(ctx, &adminpb.ListProceduresRequest{})
	wantCode(t, "a token with the right accessor and a wrong secret", err, codes.Unauthenticated, "not recognized")
	if r, err := ops.AclDeleteToken(ctx, &adminpb.AclDeleteTokenRequest{Accessor: tr.GetToken().GetAccessor()}); err != nil || !r.GetExisted() {
		t.Fatalf("delete token: %v, %v", r, err)
	}
	testwait.For(t, 10*time.Second, "the deleted token refused on the standby", func() bool {
		_, err := ci.ListProcedures(ctx, &adminpb.ListProceduresRequest{})
		return status.Code(err) == codes.Unauthenticated
	})

	// The audit trail: each call that changes state once, at the node
	// that served or refused it.
	recs := auditOf(t, ctx, ops)
	count := func(principal, method, code string) int {
		n := 0
		for _, r := range recs {
			if r.GetPrincipal() == principal && r.GetMethod() == method && r.GetCode() == code {
				n++
			}
		}
		return n
	}
	leaderID, standbyID := sc.nodes[li].node.ID(), sc.nodes[standby].node.ID()
	for _, w := range []struct {
		principal, method, code string
	}{
		{"client/ops", "AclGrant", "OK"},
		{"client/reader", "SubmitProcedure", "PermissionDenied"},
		{"client/operator", "SubmitProcedure", "OK"},
		{"client/operator", "AbortProcedure", "PermissionDenied"},
		{"client/ops", "AclCreateToken", "OK"},
		{"token/" + tr.GetToken().GetAccessor(), "PauseProcedure", status.Code(pauseErr).String()},
		{"client/ops", "AclDeleteToken", "OK"},
	} {
		want := 1
		if w.method == "AclGrant" {
			want = 2
		}
		if got := count(w.principal, w.method, w.code); got != want {
			t.Errorf("audit: %d records of %s %s %s, want %d; trail:\n%s", got, w.principal, w.method, w.code, want, auditText(recs))
		}
	}
	// A served read is not recorded; a refused one is, as every refusal.
	if count("client/reader", "ListProcedures", "OK") != 0 {
		t.Errorf("served reads recorded:\n%s", auditText(recs))
	}
	if count("client/stranger", "ClusterStatus", "PermissionDenied") != 1 {
		t.Errorf("the stranger's refused read is not recorded once:\n%s", auditText(recs))
	}
	for _, r := range recs {
		switch {
		case r.GetPrincipal() == "client/operator" && r.GetMethod() == "SubmitProcedure":
			// Served by the leader for the standby that forwarded it.
			if r.GetNode() != leaderID || r.GetVia() != standbyID || len(r.GetProcIds()) != 1 || r.GetProcIds()[0] != sub.GetId() || !strings.Contains(r.GetArgs(), `"sleep"`) || len(r.GetArgsDigest()) != 64 {
				t.Errorf("submit's record: %v; want node %s via %s, proc %d, args and digest", r, leaderID, standbyID, sub.GetId())
			}
		case r.GetPrincipal() == "client/reader" && r.GetMethod() == "SubmitProcedure":
			// Refused by the leader the standby it reached asked (the
			// standby's copy of the grants may lag the leader's).
			if r.GetNode() != leaderID || r.GetVia() != standbyID || !strings.Contains(r.GetMessage(), "needs permission operate") {
				t.Errorf("refused submit's record: %v; want node %s via %s and the refusal", r, leaderID, standbyID)
			}
		}
		if strings.Contains(r.GetArgs(), "bt_") {
			t.Errorf("a record holds a token: %v", r)
		}
	}
	for i, want := range map[int]float64{li: 1, standby: 0} {
		if v := counterValue(t, sc.regs[i], "baton_acl_denied_total", map[string]string{"method": "SubmitProcedure", "needed": "operate", "code": "PermissionDenied"}); v != want {
			t.Errorf("node %d's baton_acl_denied_total{SubmitProcedure,operate} = %v, want %v (the leader judged the refusal)", i, v, want)
		}
	}

	// The leader dies: a new one has every grant and record.
	sc.nodes[li].node.Kill()
	var alive []*testNode
	for i, n := range sc.nodes {
		if i != li {
			alive = append(alive, n)
		}
	}
	testwait.For(t, 20*time.Second, "a new leader", func() bool {
		for _, n := range alive {
			if _, err := n.node.Executor(); err == nil {
				return true
			}
		}
		return false
	})
	after := auditOf(t, ctx, ops)
	if len(after) < len(recs) {
		t.Fatalf("after the failover %d records, before %d", len(after), len(recs))
	}
	for i := range recs {
		if after[i].GetId() != recs[i].GetId() {
			t.Fatalf("record %d: %s after the failover, %s before", i, after[i].GetId(), recs[i].GetId())
		}
	}
	if _, err := reader.ListProcedures(ctx, &adminpb.ListProceduresRequest{}); err != nil {
		t.Fatalf("reader after the failover: %v", err)
	}
	// The new leader's records come after the old one's.
	if _, err := operator.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}}); err != nil {
		t.Fatalf("operator after the failover: %v", err)
	}
	last := auditOf(t, ctx, ops)
	if n := len(last); n != len(after)+1 || last[n-1].GetMethod() != "SubmitProcedure" || last[n-1].GetNode() == leaderID {
		t.Fatalf("after a submit under the new leader: %d records (was %d), last %v", len(last), len(after), last[len(last)-1])
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if len(sc.boots) != 1 {
		t.Fatalf("%d bootstrap tokens told, want exactly 1", len(sc.boots))
	}
}

func auditText(recs []*adminpb.AuditRecord) string {
	var b strings.Builder
	for _, r := range recs {
		b.WriteString(r.GetId() + " " + r.GetPrincipal() + " " + r.GetMethod() + " " + r.GetCode() + " node=" + r.GetNode() + " via=" + r.GetVia() + "\n")
	}
	return b.String()
}

// counterValue is the value of counter name with labels in g's series.
func counterValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
