package integration

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
)

// TestRecoverQuorum is docs/operations.md's "Quorum lost for good" with
// real processes: two of three masters are killed and their data
// directories deleted. `baton agent --recover-quorum` on the survivor
// without --yes prints the plan (the members dropped, the log's last
// index) and exits 2, changing nothing (a second dry run prints the same
// plan); with --yes it serves alone: every procedure it had is there,
// the finished ones SUCCESS and the ones in flight finish. Then a
// member with the same id and an empty directory (n2) and one with a new
// id (n4) are started without --peers and added with 'baton cluster
// join': the cluster has three voters again, both catch up, and a new
// procedure succeeds.
func TestRecoverQuorum(t *testing.T) {
	ctx, c, leader := leadingCluster(t, 3, 3*time.Minute)
	cl := c.Client()
	var done, inflight []uint64
	for i := range 10 {
		id, _, err := submitRetrying(ctx, cl, "sleep", map[string]string{"steps": "2", "delay": "10ms"}, fmt.Sprintf("rq-done-%d", i))
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		if p, err := cl.Wait(ctx, id); err != nil || p.GetState() != client.StateSuccess {
			t.Fatalf("procedure %d: %v, %v", id, p.GetState(), err)
		}
		done = append(done, id)
	}
	for i := range 5 {
		id, _, err := submitRetrying(ctx, cl, "sleep", map[string]string{"steps": "20", "delay": "200ms"}, fmt.Sprintf("rq-inflight-%d", i))
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		inflight = append(inflight, id)
	}
	// The survivor is a follower that holds every submission.
	survivor := c.Followers(leader)[0]
	lst, err := c.Status(ctx, leader)
	if err != nil {
		t.Fatal(err)
	}
	for {
		st, err := c.Status(ctx, survivor)
		if err == nil && st.FSMIndex >= lst.CommitIndex {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never applied index %d: %v", survivor, lst.CommitIndex, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	var lost []string
	for _, n := range c.Nodes {
		c.Kill(n.ID)
		if n.ID != survivor {
			lost = append(lost, n.ID)
			if err := os.RemoveAll(n.DataDir); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := c.Node(survivor)

	// Without --yes: the plan, exit 2, twice the same.
	var plans []string
	for range 2 {
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		code, stdout, stderr := runCLI(t, rctx, append(c.Args(survivor), "--recover-quorum")...)
		cancel()
		expectExit(t, "agent --recover-quorum without --yes", code, 2, stdout+stderr)
		if !strings.Contains(stderr, "add --yes") {
			t.Fatalf("no hint to add --yes:\n%s", stderr)
		}
		for _, want := range append([]string{"quorum recovery of " + survivor, "members dropped:", "this node's log:", "local WAL:", "keeps:", "may be lost:"}, lost...) {
			if !strings.Contains(stdout, want) {
				t.Fatalf("the plan lacks %q:\n%s", want, stdout)
			}
		}
		plans = append(plans, stdout)
	}
	if plans[0] != plans[1] {
		t.Fatalf("a dry run changed something: the plans differ:\n%s\n---\n%s", plans[0], plans[1])
	}
	t.Logf("plan:\n%s", plans[0])

	c.RestartArgs(survivor, "--recover-quorum", "--yes")
	if l := c.WaitLeader(ctx); l != survivor {
		t.Fatalf("leader %s after recovery, want %s", l, survivor)
	}
	sc, err := client.New([]string{s.GRPCAddr}, client.WithCallTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	for _, id := range append(done, inflight...) {
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		p, err := sc.Wait(wctx, id)
		cancel()
		if err != nil || p.GetState() != client.StateSuccess {
			t.Fatalf("procedure %d after recovery: %v, %v", id, p.GetState(), err)
		}
	}

	// Replacements: n2's id on an empty directory, and a new id.
	replaced := lost[0]
	c.Node(replaced).Joiner = true
	c.Restart(replaced)
	fresh := c.AddNode("n4")
	for _, n := range []string{replaced, fresh.ID} {
		m := c.Node(n)
		code, stdout, stderr := runCLI(t, ctx, "cluster", "join", "--id", n, "--raft-addr", m.RaftAddr, "--admin-addr", m.GRPCAddr, "--addr", s.GRPCAddr)
		expectExit(t, "cluster join "+n, code, 0, stdout+stderr)
	}
	st, err := sc.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range st.GetPeers() {
		ids = append(ids, p.GetId())
	}
	slices.Sort(ids)
	if want := []string{survivor, replaced, fresh.ID}; !slices.Equal(ids, slices.Sorted(slices.Values(want))) {
		t.Fatalf("members %v, want %v", ids, want)
	}
	id, _, err := submitRetrying(ctx, sc, "sleep", map[string]string{"steps": "2", "delay": "10ms"}, "rq-after")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := sc.Wait(ctx, id); err != nil || p.GetState() != client.StateSuccess {
		t.Fatalf("procedure after the joins: %v, %v", p.GetState(), err)
	}
	ls, err := c.Status(ctx, survivor)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{replaced, fresh.ID} {
		for {
			st, err := c.Status(ctx, n)
			if err == nil && st.FSMIndex >= ls.CommitIndex {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s never caught up to index %d: %v", n, ls.CommitIndex, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}
