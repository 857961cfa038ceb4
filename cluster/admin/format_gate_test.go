package admin_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// recordFieldNums are the top-level field numbers of a stored procedure
// record (procedure/record.go).
func recordFieldNums(t *testing.T, data []byte) []protowire.Number {
	t.Helper()
	var out []protowire.Number
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			t.Fatalf("bad record: %v", protowire.ParseError(n))
		}
		data = data[n:]
		m := protowire.ConsumeFieldValue(num, typ, data)
		if m < 0 {
			t.Fatalf("bad record: field %d: %v", num, protowire.ParseError(m))
		}
		data = data[m:]
		out = append(out, num)
	}
	return out
}

// submitFanout runs a fanout with two children, submitted for client/ops,
// to its end on the leader, and returns its id and stored record.
func submitFanout(t *testing.T, c *clustertest.Cluster) []byte {
	t.Helper()
	li, x := c.WaitLeader()
	id, err := x.Submit(&diag.Fanout{Children: 2, Steps: 1}, procedure.SubmitOptions{Owner: "test", Submitter: "client/ops"})
	if err != nil {
		t.Fatal(err)
	}
	if info := c.Wait(id, 20*time.Second); info.State != procedure.Success {
		t.Fatalf("fanout ended %s (%s)", info.State, info.Error)
	}
	data, ok := c.Master(li).Node().FSM().Proc(id)
	if !ok {
		t.Fatalf("fanout %d not stored", id)
	}
	return data
}

// TestFormat2WritesWaitForTheLastUpgrade: with a member at format 1 the
// cluster version is 1, and no master writes what format 2 added: a
// revocation and a token's ttl are refused FAILED_PRECONDITION (on a
// standby too) naming both versions, a token without a ttl is made as
// 0.1.0 made one, a finished root's record carries neither child
// summaries (113) nor submitter (114), and a removal leaves no mark (its
// retry is NOT_FOUND, as on 0.1.0). Once the last member runs this
// binary, each is written.
func TestFormat2WritesWaitForTheLastUpgrade(t *testing.T) {
	c := versionCluster(t, 2)
	waitReports(t, c, map[string]version.Format{"m1": version.MaxFormat, "m2": version.MaxFormat, "m3": version.Format1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	li, _ := c.WaitLeader()
	leader := c.Master(li).Admin()
	refused := func(what string, err error, says string) {
		t.Helper()
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("%s at cluster version 1: %v, want FAILED_PRECONDITION", what, err)
		}
		for _, s := range []string{"needs the cluster version at format 2 (0.2.0), and it is format 1 (0.1.0)", "finish the upgrade", says} {
			if !strings.Contains(status.Convert(err).Message(), s) {
				t.Errorf("%s: %q does not say %q", what, status.Convert(err).Message(), s)
			}
		}
	}

	if _, err := leader.AclGrant(ctx, &adminpb.AclGrantRequest{Client: "reader", Permission: "read"}); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{li, (li + 1) % 3} {
		_, err := c.Master(i).Admin().AclRevoke(ctx, &adminpb.AclRevokeRequest{Client: "reader"})
		refused("acl revoke on "+c.Master(i).ID, err, "--acl-initial-grants")
		_, err = c.Master(i).Admin().AclCreateToken(ctx, &adminpb.AclCreateTokenRequest{Name: "ci", Permission: "operate", TtlMs: 60_000})
		refused("a token with a ttl on "+c.Master(i).ID, err, "without a ttl")
	}
	n := c.Master(li).Node()
	if _, ok := n.FSM().Get(access.CertPrefix + "reader"); !ok {
		t.Fatal("a refused revocation unbound the client")
	}
	tok, err := leader.AclCreateToken(ctx, &adminpb.AclCreateTokenRequest{Name: "ci", Permission: "operate"})
	if err != nil {
		t.Fatal(err)
	}
	// Read from the member that led when the test began: under load the
	// leadership may have moved and the create been served elsewhere, so
	// wait for this member to apply it.
	var v []byte
	testwait.For(t, 20*time.Second, "the token's record on "+c.Master(li).ID, func() bool {
		var ok bool
		v, ok = n.FSM().Get(access.TokenPrefix + tok.GetToken().GetAccessor())
		return ok
	})
	var e map[string]any
	if err := json.Unmarshal(v, &e); err != nil || e["expires_ms"] != nil {
		t.Fatalf("a token without a ttl: %s (%v)", v, err)
	}

	got := recordFieldNums(t, submitFanout(t, c))
	if slices.Contains(got, 113) || slices.Contains(got, 114) {
		t.Fatalf("a root finished at cluster version 1 has fields %v: 113 or 114", got)
	}

	// The current member that does not lead goes; m3 (format 1) stays.
	gone := 1
	if li == 1 {
		gone = 0
	}
	goneID := c.Master(gone).ID
	c.Kill(gone)
	if _, err := c.Master(li).Admin().RemovePeer(ctx, &adminpb.RemovePeerRequest{Id: goneID}); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.FSM().Get(admin.RemovedKey(goneID)); ok {
		t.Fatal("a removal at cluster version 1 left its mark")
	}
	_, err = c.Master(li).Admin().RemovePeer(ctx, &adminpb.RemovePeerRequest{Id: goneID})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("the retry of a removal at cluster version 1: %v, want NOT_FOUND (no mark)", err)
	}

	c.RestartAs(2, version.Build{})
	c.WaitForNil("cluster version 2 on the leader", func() error {
		if f := c.Leader().Node().ClusterFormat(); f != version.Format2 {
			return status.Errorf(codes.Unavailable, "cluster version %d", f)
		}
		return nil
	})
	leader = c.Leader().Admin()
	if _, err := leader.AclRevoke(ctx, &adminpb.AclRevokeRequest{Client: "reader"}); err != nil {
		t.Fatalf("acl revoke at cluster version 2: %v", err)
	}
	if _, ok := c.Leader().Node().FSM().Get(access.RevokedPrefix + "reader"); !ok {
		t.Fatal("no revocation recorded at cluster version 2")
	}
	if tok, err := leader.AclCreateToken(ctx, &adminpb.AclCreateTokenRequest{Name: "ci2", Permission: "operate", TtlMs: 60_000}); err != nil || tok.GetToken().GetExpiresUnixMs() == 0 {
		t.Fatalf("a token with a ttl at cluster version 2: %v, %v", tok, err)
	}
	got = recordFieldNums(t, submitFanout(t, c))
	if !slices.Contains(got, 113) || !slices.Contains(got, 114) {
		t.Fatalf("a root finished at cluster version 2 has fields %v: want 113 and 114", got)
	}
}

// TestFormat2WriteWaitsForTheRaise: a write of what format 2 added, made
// while the cluster version is still 1 but about to rise (a new cluster in
// its first second, or here the last member's upgrade under way), waits
// for the raise and is then made, instead of being refused: the README's
// token with a ttl comes right after the cluster forms.
func TestFormat2WriteWaitsForTheRaise(t *testing.T) {
	c := versionCluster(t, 2)
	waitReports(t, c, map[string]version.Format{"m3": version.Format1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	li, _ := c.WaitLeader()
	if li == 2 {
		c.TransferLeadership(0) // m3 is the one restarted
		li = 0
	}
	made := make(chan error, 1)
	go func() {
		tok, err := c.Master(li).Admin().AclCreateToken(ctx, &adminpb.AclCreateTokenRequest{Name: "ci", Permission: "operate", TtlMs: 60_000})
		if err == nil && tok.GetToken().GetExpiresUnixMs() == 0 {
			err = status.Errorf(codes.Internal, "made without its expiry: %v", tok)
		}
		made <- err
	}()
	c.RestartAs(2, version.Build{})
	if err := <-made; err != nil {
		t.Fatalf("a token with a ttl asked for just before the raise: %v", err)
	}
}
