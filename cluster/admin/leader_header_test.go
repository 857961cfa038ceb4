package admin

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
)

// A standby that forwards a call names the leader in the answer's header
// (adminpb.LeaderHeader). A client that was given the leader's address
// sends its next calls there, unforwarded, after a unary call and after a
// watch alike; one that knows the standby alone keeps calling it, and its
// calls keep being forwarded.
func TestClientMovesToTheLeaderAForwardNamed(t *testing.T) {
	t.Parallel()
	leader := &fakeLeader{state: client.StateSuccess}
	leaderAddr := startLeader(t, leader)
	s, b := standby(t, leaderAddr, Config{})
	_, self := serve(t, s, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	both, err := client.New([]string{self, leaderAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer both.Close()
	if _, err := both.Get(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if got := both.Leader(); got != leaderAddr {
		t.Fatalf("after a forwarded call the client calls %s, want the leader %s", got, leaderAddr)
	}
	if _, err := both.Get(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if f, d := leader.forwarded.Load(), leader.direct.Load(); f != 1 || d != 1 {
		t.Fatalf("the leader got %d forwarded and %d direct calls, want 1 and 1", f, d)
	}

	watcher, err := client.New([]string{self, leaderAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	p, err := watcher.Wait(ctx, 7)
	if err != nil || p.GetState() != client.StateSuccess {
		t.Fatalf("watch: %v, %v", p, err)
	}
	if got := watcher.Leader(); got != leaderAddr {
		t.Fatalf("after a forwarded watch the client calls %s, want the leader %s", got, leaderAddr)
	}

	alone, err := client.New([]string{self})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	for range 2 {
		if _, err := alone.Get(ctx, 7); err != nil {
			t.Fatal(err)
		}
	}
	if got := alone.Leader(); got != self {
		t.Fatalf("a client given the standby alone calls %s, want %s", got, self)
	}
	if f := leader.forwarded.Load(); f != 3 {
		t.Fatalf("the leader got %d forwarded calls, want 3 (one, then the lone client's two)", f)
	}
}

// The header is the leader's address as the forwarding standby knows it.
func TestForwardedAnswerNamesTheLeader(t *testing.T) {
	t.Parallel()
	leaderAddr := startLeader(t, &fakeLeader{state: client.StateSuccess})
	s, b := standby(t, leaderAddr, Config{})
	api, _ := serve(t, s, b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var header metadata.MD
	if _, err := api.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: 7}, grpc.Header(&header)); err != nil {
		t.Fatal(err)
	}
	if got := header.Get(adminpb.LeaderHeader); len(got) != 1 || got[0] != leaderAddr {
		t.Fatalf("header %s = %q, want [%s]", adminpb.LeaderHeader, got, leaderAddr)
	}
}
