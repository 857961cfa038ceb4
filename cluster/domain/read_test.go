package domain_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TestReadsThroughACutOffLeader: a leader whose raft links fail while
// clients still reach its admin API never answers a default read from its
// own state once a new leader may have written: the read is forwarded or
// refused. A stale read is answered from its state and says how stale.
func TestReadsThroughACutOffLeader(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	li := h.leaderIndex()
	old := h.masters[li]
	h.mustSucceed(h.submit(mustNS(t, "before"), ""), 10*time.Second)

	h.isolateRaft(li)
	// The new leader writes; the cut-off one cannot know.
	var nl *masterNode
	testwait.For(t, 15*time.Second, "a leader among the others", func() bool {
		for i, m := range h.masters {
			if _, err := m.node.Executor(); i != li && err == nil {
				nl = m
				return true
			}
		}
		return false
	})
	x, _ := nl.node.Executor()
	id, err := x.Submit(mustNS(t, "after"), procedure.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := x.Wait(ctx, id); err != nil || info.State != procedure.Success {
		t.Fatalf("create through the new leader: %+v, %v", info, err)
	}

	for range 5 {
		r, err := old.client.ListNamespaces(ctx, &adminpb.ListNamespacesRequest{})
		if err == nil && !slices.Contains(r.GetNamespaces(), "after") {
			t.Fatalf("the cut-off leader answered %v (read %v) without the acknowledged namespace", r.GetNamespaces(), r.GetRead())
		}
		if err != nil && status.Code(err) != codes.Unavailable {
			t.Fatalf("the cut-off leader's read failed with %v, want UNAVAILABLE", err)
		}
		if _, err := old.client.GetNamespace(ctx, &adminpb.GetNamespaceRequest{Name: "after"}); err != nil && status.Code(err) != codes.Unavailable {
			t.Fatalf("the cut-off leader's get failed with %v, want UNAVAILABLE (or the namespace)", err)
		}
	}
	r, err := old.client.ListNamespaces(ctx, &adminpb.ListNamespacesRequest{Consistency: adminpb.Consistency_STALE})
	if err != nil {
		t.Fatalf("stale read of the cut-off node: %v", err)
	}
	ri := r.GetRead()
	if ri.GetConsistency() != adminpb.Consistency_STALE || ri.GetServedBy() != old.id || ri.GetRaftState() == "Leader" ||
		!slices.Contains(r.GetNamespaces(), "before") || slices.Contains(r.GetNamespaces(), "after") {
		t.Fatalf("stale read of the cut-off node: %v, %v", r.GetNamespaces(), ri)
	}

	h.healRaft(li)
	testwait.For(t, 15*time.Second, "the healed node to forward a linearizable read to the leader", func() bool {
		r, err := old.client.ListNamespaces(ctx, &adminpb.ListNamespacesRequest{})
		return err == nil && r.GetRead().GetServedBy() != old.id
	})
	r, err = old.client.ListNamespaces(ctx, &adminpb.ListNamespacesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ri := r.GetRead(); !slices.Contains(r.GetNamespaces(), "after") || ri.GetConsistency() != adminpb.Consistency_LINEARIZABLE || ri.GetRaftState() != "Leader" {
		t.Fatalf("read forwarded by the healed node: %v, %v", r.GetNamespaces(), ri)
	}
}

// TestFailedPreconditionsCarryTheirCode: a domain procedure refused by its
// precondition ends ROLLEDBACK with the code a caller can branch on.
func TestFailedPreconditionsCarryTheirCode(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := h.masters[(h.leaderIndex()+1)%len(h.masters)].client
	testwait.For(t, 5*time.Second, "the standby to know the leader's admin address", func() bool {
		_, err := c.ListNamespaces(ctx, &adminpb.ListNamespacesRequest{})
		return err == nil
	})
	run := func(call func() (*adminpb.SubmitProcedureResponse, error)) *adminpb.Procedure {
		t.Helper()
		r, err := call()
		if err != nil {
			t.Fatal(err)
		}
		h.wait(r.GetId(), 10*time.Second)
		p, err := c.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: r.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ns := func(create bool, name string) func() (*adminpb.SubmitProcedureResponse, error) {
		return func() (*adminpb.SubmitProcedureResponse, error) {
			if create {
				return c.CreateNamespace(ctx, &adminpb.NamespaceRequest{Name: name})
			}
			return c.DeleteNamespace(ctx, &adminpb.NamespaceRequest{Name: name})
		}
	}
	if p := run(ns(true, "n1")); p.GetState() != "SUCCESS" || p.GetErrorCode() != "" {
		t.Fatalf("create: %v", p)
	}
	for _, tc := range []struct {
		what string
		call func() (*adminpb.SubmitProcedureResponse, error)
		want string
	}{
		{"create an existing namespace", ns(true, "n1"), procedure.CodeAlreadyExists},
		{"delete a missing namespace", ns(false, "nosuch"), procedure.CodeNotFound},
		{"create a table in a missing namespace", func() (*adminpb.SubmitProcedureResponse, error) {
			return c.CreateTable(ctx, &adminpb.CreateTableRequest{Namespace: "nosuch", Name: "t"})
		}, procedure.CodeNotFound},
		{"delete a missing table", func() (*adminpb.SubmitProcedureResponse, error) {
			return c.DeleteTable(ctx, &adminpb.TableRequest{Name: "nosuch"})
		}, procedure.CodeNotFound},
	} {
		p := run(tc.call)
		if p.GetState() != "ROLLEDBACK" || p.GetErrorCode() != tc.want {
			t.Errorf("%s: %s, error code %q (%s), want ROLLEDBACK with %s", tc.what, p.GetState(), p.GetErrorCode(), p.GetError(), tc.want)
		}
	}
	if _, err := c.GetNamespace(ctx, &adminpb.GetNamespaceRequest{Name: "nosuch"}); status.Code(err) != codes.NotFound {
		t.Errorf("get a missing namespace: %v, want NOT_FOUND", err)
	}
	got, err := c.GetNamespace(ctx, &adminpb.GetNamespaceRequest{Name: "n1"})
	if err != nil || got.GetName() != "n1" || got.GetRead().GetConsistency() != adminpb.Consistency_LINEARIZABLE {
		t.Errorf("get n1: %v, %v", got, err)
	}
	if _, err := c.ListProcedures(ctx, &adminpb.ListProceduresRequest{Consistency: adminpb.Consistency(7)}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("unknown consistency: %v, want INVALID_ARGUMENT", err)
	}
	// A stale read of procedures on a standby comes from its own FSM.
	testwait.For(t, 10*time.Second, "the standby's stale list to hold the rolled back procedures", func() bool {
		r, err := c.ListProcedures(ctx, &adminpb.ListProceduresRequest{Consistency: adminpb.Consistency_STALE, State: "ROLLEDBACK"})
		if err != nil || r.GetRead().GetServedBy() == "" || r.GetRead().GetRaftState() != "Follower" {
			return false
		}
		n := 0
		for _, p := range r.GetProcedures() {
			if p.GetErrorCode() != "" {
				n++
			}
		}
		return n == 4
	})
}

func mustNS(t *testing.T, name string) procedure.Procedure {
	t.Helper()
	p, err := domain.NewCreateNamespace(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
