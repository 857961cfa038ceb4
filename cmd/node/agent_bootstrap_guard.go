package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-dev/baton/proto/adminpb"
)

// The bootstrap guard's bounds: a first start of a derived-peers member
// spends at most guardBound asking the others (a fresh install pays it
// once, while nobody answers), each question at most guardAskTimeout.
const (
	guardBound      = 5 * time.Second
	guardAskTimeout = time.Second
	guardFirstDelay = 250 * time.Millisecond
	guardMaxDelay   = 2 * time.Second
)

// statusAsker asks the master at addr for its own view (ClusterStatus,
// without members).
type statusAsker func(ctx context.Context, addr string) (*adminpb.ClusterStatusResponse, error)

// bootstrapGuard decides whether a derived-peers member (--initial-cluster-size,
// ordinal < N) that starts with no Raft state may bootstrap. Bootstrapping
// is right only at a fresh install; a member whose volume was lost while
// its StatefulSet's cluster runs, or new pods of a wrongly rendered N,
// would bootstrap a configuration of their own, and enough of them would
// elect a leader of it and overwrite the real members' logs (their first
// entries share index and term 1). So it asks the other derived members
// first, as Consul's retry-join does: one that knows a leader, or whose
// cluster has run, means join instead.
type bootstrapGuard struct {
	self   string   // this member's id
	addrs  []string // the other derived members' admin addresses
	ask    statusAsker
	bound  time.Duration // 0: guardBound
	logger hclog.Logger
}

// peerAnswer is one member's answer to the guard (or why none came).
type peerAnswer struct {
	addr string
	st   *adminpb.ClusterStatusResponse
	err  error
}

func (a peerAnswer) String() string {
	if a.err != nil {
		return a.addr + ": no answer (" + a.err.Error() + ")"
	}
	leader := a.st.GetLeaderId()
	if leader == "" {
		leader = "none"
	}
	cid := a.st.GetClusterId()
	if cid == "" {
		cid = "none"
	}
	return fmt.Sprintf("%s: %s %s, leader %s, cluster id %s, commit index %d, %d members",
		a.addr, a.st.GetNodeId(), strings.ToLower(a.st.GetState()), leader, cid, a.st.GetCommitIndex(), len(a.st.GetPeers()))
}

// leads reports whether the answer names a leader to join through: one
// other than ourselves (a member's memory of us leading before our data
// was lost names nobody who answers now).
func (a peerAnswer) leads(self string) bool {
	l := a.st.GetLeaderId()
	return a.err == nil && l != "" && l != self
}

// ran reports whether the answer shows a cluster that has run: a leader
// known, a cluster id written (by a leader, at cluster version 2), or an
// entry committed (a leader's first entry at least). A member bootstrapped
// a moment ago and still waiting for votes shows none of these.
func (a peerAnswer) ran() bool {
	return a.err == nil && (a.st.GetLeaderId() != "" || a.st.GetClusterId() != "" || a.st.GetCommitIndex() > 0)
}

// decide asks every member, again with a doubling delay while none names
// a leader, until one does (join) or the bound ends. Then it joins if any
// answer showed a cluster that ran, and bootstraps otherwise: nobody
// answered, or only members as new as this one, which bootstrap the same
// configuration. It returns the last answer of each member.
func (g bootstrapGuard) decide(ctx context.Context) (join bool, answers []peerAnswer) {
	bound := g.bound
	if bound <= 0 {
		bound = guardBound
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	ran := false
	for delay := guardFirstDelay; ; delay = min(2*delay, guardMaxDelay) {
		answers = g.askAll(ctx)
		for _, a := range answers {
			if a.leads(g.self) {
				return true, answers
			}
			ran = ran || a.ran()
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ran, answers
		case <-t.C:
		}
	}
}

// askAll asks every member at once, each within guardAskTimeout, and
// returns when all have answered or one names a leader (the others'
// questions are then dropped, and said so).
func (g bootstrapGuard) askAll(ctx context.Context) []peerAnswer {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		i int
		a peerAnswer
	}
	got := make(chan result, len(g.addrs))
	out := make([]peerAnswer, len(g.addrs))
	for i, addr := range g.addrs {
		out[i] = peerAnswer{addr: addr, err: errors.New("not asked to the end: another member named a leader")}
		go func() {
			actx, cancel := context.WithTimeout(ctx, guardAskTimeout)
			defer cancel()
			st, err := g.ask(actx, addr)
			got <- result{i, peerAnswer{addr: addr, st: st, err: err}}
		}()
	}
	for range g.addrs {
		r := <-got
		out[r.i] = r.a
		if r.a.leads(g.self) {
			break
		}
	}
	return out
}

// beforeBootstrap is cluster.Config.BeforeBootstrap for the guard: it
// decides, logs which way it went with every member's answer, and on
// join leaves the node to joinCluster.
func (g bootstrapGuard) beforeBootstrap(ctx context.Context) (bool, error) {
	join, answers := g.decide(ctx)
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("asking the other members whether a cluster runs: %w", err)
	}
	said := make([]string, len(answers))
	for i, a := range answers {
		said[i] = a.String()
	}
	if join {
		g.logger.Warn("no raft state here, but the other members' cluster runs: joining it instead of bootstrapping (this member's data was lost or is new)",
			"answers", said)
		return false, nil
	}
	g.logger.Info("no raft state here and no other member has a running cluster: bootstrapping (a fresh install)", "answers", said)
	return true, nil
}

// grpcStatusAsker asks over gRPC with opts (the agent's own TLS identity:
// a master's certificate may call ClusterStatus, security.MasterPolicy).
func grpcStatusAsker(opts []grpc.DialOption) statusAsker {
	return func(ctx context.Context, addr string) (*adminpb.ClusterStatusResponse, error) {
		cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
		if err != nil {
			return nil, err
		}
		defer cc.Close()
		return adminpb.NewAdminClient(cc).ClusterStatus(ctx, &adminpb.ClusterStatusRequest{})
	}
}
