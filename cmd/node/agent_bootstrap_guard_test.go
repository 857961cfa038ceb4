package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// fakePeers answers the guard's questions from a script: per address, the
// answer of each attempt (the last repeated); an address without one
// never answers (a pod not up: the question times out).
type fakePeers struct {
	mu      sync.Mutex
	script  map[string][]*adminpb.ClusterStatusResponse
	asked   map[string]int
	refused map[string]bool // answers Unavailable at once (connection refused)
}

func (f *fakePeers) ask(ctx context.Context, addr string) (*adminpb.ClusterStatusResponse, error) {
	f.mu.Lock()
	n := f.asked[addr]
	f.asked[addr]++
	answers, refused := f.script[addr], f.refused[addr]
	f.mu.Unlock()
	if refused {
		return nil, status.Error(codes.Unavailable, "connection refused")
	}
	if len(answers) == 0 {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return answers[min(n, len(answers)-1)], nil
}

// TestBootstrapGuardDecision: the guard joins at once when a member names
// a leader; waits within the bound while members answer without one; and
// at the bound joins if a cluster ran (a cluster id, a commit, a leader
// it named), else bootstraps (a fresh install: nobody answers, or only
// members as new as this one).
func TestBootstrapGuardDecision(t *testing.T) {
	follower := func(id, leader string) *adminpb.ClusterStatusResponse {
		return &adminpb.ClusterStatusResponse{NodeId: id, State: "Follower", LeaderId: leader, ClusterId: "c-1", CommitIndex: 42}
	}
	fresh := func(id string) *adminpb.ClusterStatusResponse {
		return &adminpb.ClusterStatusResponse{NodeId: id, State: "Follower"}
	}
	for _, tc := range []struct {
		name     string
		script   map[string][]*adminpb.ClusterStatusResponse
		refused  []string
		wantJoin bool
		// wantTook: fake time the decision took (the bound: 5 s).
		wantTook time.Duration
	}{
		{name: "nobody answers: a fresh install bootstraps", wantJoin: false, wantTook: guardBound},
		{name: "refused at once: still asked until the bound", refused: []string{"m-1:7070", "m-2:7070"}, wantJoin: false, wantTook: guardBound},
		{name: "one names a leader: join at once", script: map[string][]*adminpb.ClusterStatusResponse{"m-2:7070": {follower("m-2", "m-1")}},
			wantJoin: true, wantTook: 0},
		{name: "no leader at first, then one: join", script: map[string][]*adminpb.ClusterStatusResponse{
			"m-1:7070": {follower("m-1", ""), follower("m-1", ""), follower("m-1", "m-2")}}, refused: []string{"m-2:7070"},
			wantJoin: true, wantTook: guardFirstDelay + 2*guardFirstDelay},
		{name: "a cluster that ran, never a leader within the bound: join", script: map[string][]*adminpb.ClusterStatusResponse{
			"m-1:7070": {follower("m-1", "")}},
			wantJoin: true, wantTook: guardBound},
		{name: "they remember this member leading: join, at the bound", script: map[string][]*adminpb.ClusterStatusResponse{
			"m-1:7070": {follower("m-1", "m-0")}, "m-2:7070": {follower("m-2", "m-0")}},
			wantJoin: true, wantTook: guardBound},
		{name: "only members as new as this one: bootstrap", script: map[string][]*adminpb.ClusterStatusResponse{
			"m-1:7070": {fresh("m-1")}, "m-2:7070": {fresh("m-2")}},
			wantJoin: false, wantTook: guardBound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakePeers{script: tc.script, asked: map[string]int{}, refused: map[string]bool{}}
				for _, a := range tc.refused {
					f.refused[a] = true
				}
				g := bootstrapGuard{self: "m-0", addrs: []string{"m-1:7070", "m-2:7070"}, ask: f.ask, logger: hclog.NewNullLogger()}
				start := time.Now()
				join, answers := g.decide(t.Context())
				took := time.Since(start)
				if join != tc.wantJoin || took != tc.wantTook {
					t.Errorf("join %v after %v; want %v after %v (answers %v)", join, took, tc.wantJoin, tc.wantTook, answers)
				}
				if len(answers) != 2 {
					t.Errorf("answers %v: want one per member", answers)
				}
				if tc.wantTook == guardBound && (f.asked["m-1:7070"] < 3 || f.asked["m-2:7070"] < 3) {
					t.Errorf("asked %v within the bound: want every member asked a few times", f.asked)
				}
			})
		})
	}
}

// TestBootstrapGuardLogs: the decision is logged, with each member's
// answer, and a stop asked during the guard fails the start rather than
// bootstrapping.
func TestBootstrapGuardLogs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf strings.Builder
		f := &fakePeers{asked: map[string]int{}, refused: map[string]bool{"m-2:7070": true},
			script: map[string][]*adminpb.ClusterStatusResponse{"m-1:7070": {{NodeId: "m-1", State: "Follower", LeaderId: "m-2", ClusterId: "c-1", CommitIndex: 9}}}}
		g := bootstrapGuard{self: "m-0", addrs: []string{"m-1:7070", "m-2:7070"}, ask: f.ask, logger: hclog.New(&hclog.LoggerOptions{Output: &buf})}
		boot, err := g.beforeBootstrap(t.Context())
		if err != nil || boot {
			t.Fatalf("beforeBootstrap = %v, %v; want false (join), nil", boot, err)
		}
		for _, want := range []string{"joining it instead of bootstrapping", "m-1:7070: m-1 follower, leader m-2, cluster id c-1, commit index 9", "m-2:7070: no answer"} {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("log %q lacks %q", buf.String(), want)
			}
		}
		// The members are asked at once and m-1's leader ends the asking:
		// m-2's refusal is logged if it came first, else that it was not
		// asked to the end. Either way the log says why it has no answer.
		if !strings.Contains(buf.String(), "connection refused") && !strings.Contains(buf.String(), "not asked to the end") {
			t.Errorf("log %q says neither m-2's refusal nor that it was not asked to the end", buf.String())
		}

		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		g.addrs = []string{"m-3:7070"} // never answers
		if boot, err := g.beforeBootstrap(ctx); boot || !errors.Is(err, context.Canceled) {
			t.Errorf("stopped during the guard: %v, %v; want false and context.Canceled", boot, err)
		}
	})
}

// identityAdmin answers ClusterStatus with the identity of its caller.
type identityAdmin struct {
	adminpb.UnimplementedAdminServer
}

func (identityAdmin) ClusterStatus(ctx context.Context, _ *adminpb.ClusterStatusRequest) (*adminpb.ClusterStatusResponse, error) {
	id, _ := security.CallerOf(ctx)
	return &adminpb.ClusterStatusResponse{NodeId: "m-1", LeaderId: id.String()}, nil
}

// TestBootstrapGuardTLS: the guard asks with the agent's own certificate,
// which a master's policy admits to ClusterStatus.
func TestBootstrapGuardTLS(t *testing.T) {
	pki, err := security.NewTestPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srvCreds := pki.MustCredentials(security.Identity{Role: security.RoleMaster, ID: "m-1"})
	gs := grpc.NewServer(security.MasterPolicy().ServerOptions(srvCreds)...)
	adminpb.RegisterAdminServer(gs, identityAdmin{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(l) }()
	t.Cleanup(gs.Stop)

	tlsc := &agentTLS{creds: pki.MustCredentials(security.Identity{Role: security.RoleMaster, ID: "m-0"})}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := grpcStatusAsker(tlsc.dialTo(security.RoleMaster))(ctx, l.Addr().String())
	if err != nil {
		t.Fatalf("ClusterStatus with the master's certificate: %v", err)
	}
	if got, want := st.GetLeaderId(), "baton://master/m-0"; got != want {
		t.Errorf("the member saw the caller %q; want %q (the agent's own identity)", got, want)
	}
	// Without a certificate, the member answers nothing: it is no answer.
	if _, err := grpcStatusAsker(nil)(ctx, l.Addr().String()); err == nil {
		t.Errorf("plaintext question to a TLS member answered; want an error")
	}
}
