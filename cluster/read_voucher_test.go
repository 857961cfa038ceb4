package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestVouchedReadNeedsNoRound: in a cluster of three, a follower's word
// that it is in the leader's term makes a quorum with the leader, and the
// read is served without a round; a word that names another term, a node
// that is not a follower voter, or the leader itself counts for nothing,
// and the read runs its round as before.
func TestVouchedReadNeedsNoRound(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3, tweak: steadyTimings})
	li, _ := c.leader()
	l := c.nodes[li]
	follower := c.nodes[(li+1)%3]
	idx := putKey(t, l, "k/acked", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	term := l.Raft().CurrentTerm()
	rounds, _ := l.ReadRounds()
	for range 10 {
		ri, err := l.LinearizableReadVouched(ctx, Voucher{ID: follower.ID(), Term: term})
		if err != nil {
			t.Fatal(err)
		}
		if !ri.Linearizable || ri.AppliedIndex < idx {
			t.Fatalf("vouched read %+v: want linearizable at index >= %d", ri, idx)
		}
	}
	if now, _ := l.ReadRounds(); now != rounds {
		t.Fatalf("%d rounds for 10 vouched reads, want none", now-rounds)
	}
	if v := l.VouchedReads(); v != 10 {
		t.Fatalf("VouchedReads = %d, want 10", v)
	}
	for name, v := range map[string]Voucher{
		"an earlier term": {ID: follower.ID(), Term: term - 1},
		"a later term":    {ID: follower.ID(), Term: term + 1},
		"no member":       {ID: "nobody", Term: term},
		"the leader":      {ID: l.ID(), Term: term},
	} {
		before, _ := l.ReadRounds()
		if _, err := l.LinearizableReadVouched(ctx, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if now, _ := l.ReadRounds(); now == before {
			t.Errorf("%s: the read ran no round", name)
		}
	}
	if v := l.VouchedReads(); v != 10 {
		t.Fatalf("VouchedReads = %d after reads whose word counts for nothing, want 10", v)
	}
}

// TestVouchedReadOfFiveStillNeedsAQuorum: among five voters the leader and
// the voucher are two, not a quorum: cut off from the other three (which
// elect a leader of their own and commit a write), the leader's vouched
// read fails rather than answer without that write.
func TestVouchedReadOfFiveStillNeedsAQuorum(t *testing.T) {
	// m0 keeps leading, and m1 following it, for the test.
	c := newTestCluster(t, clusterOpts{n: 5, tweak: timingsBy(2, 5*time.Second, 500*time.Millisecond)})
	old, voucher := c.leaderOnM0(), c.nodes[1]
	term := old.Raft().CurrentTerm()
	c.mesh.Partition(0, 1) // {m0, m1} | {m2, m3, m4}
	ni := c.leaderAmong(2, 5)
	idx := putKey(t, c.nodes[ni], "k/after", "2")
	if old.Raft().State() != raft.Leader || voucher.Raft().CurrentTerm() != term {
		t.Skipf("timing: m0 %v, m1 in term %d (m0's %d)", old.Raft().State(), voucher.Raft().CurrentTerm(), term)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ri, err := old.LinearizableReadVouched(ctx, Voucher{ID: voucher.ID(), Term: term})
	if err == nil {
		_, has := old.FSM().Get("k/after")
		t.Fatalf("cut-off m0 served %+v on m1's word; has k/after (index %d): %v", ri, idx, has)
	}
	t.Logf("m0's vouched read: %v", err)
}

// TestVouchedReadOfADeposedLeaderFails: a leader of three cut off from
// both followers still believes it leads (long timeouts); the followers
// elect one of themselves and commit a write. A follower's word now names
// the new term, which counts for nothing with the old leader: its read
// runs rounds, which fail, and it never answers without the write.
func TestVouchedReadOfADeposedLeaderFails(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3, tweak: timingsBy(1, 5*time.Second, 500*time.Millisecond)})
	old := c.leaderOnM0()
	c.isolate(0)
	ni := c.leaderAmong(1, 3)
	idx := putKey(t, c.nodes[ni], "k/after", "2")
	if old.Raft().State() != raft.Leader {
		t.Skipf("timing: m0 already %v", old.Raft().State())
	}
	follower := c.nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ri, err := old.LinearizableReadVouched(ctx, Voucher{ID: follower.ID(), Term: follower.Raft().CurrentTerm()})
	if err == nil {
		_, has := old.FSM().Get("k/after")
		t.Fatalf("deposed m0 served %+v; has k/after (index %d): %v", ri, idx, has)
	}
	t.Logf("deposed m0's vouched read: %v", err)
}
