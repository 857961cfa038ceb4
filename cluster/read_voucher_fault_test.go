package cluster

// Faults of a vouched read (Voucher). (Written by a reviewer of the
// change; all held.)

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/testwait"
)

// vouchedNeedsRound runs one vouched read on l and says whether it ran a
// round (ReadRounds grew) and whether VouchedReads grew.
func vouchedNeedsRound(t *testing.T, l *Node, v Voucher) (round, vouched bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r0, _ := l.ReadRounds()
	v0 := l.VouchedReads()
	if _, err := l.LinearizableReadVouched(ctx, v); err != nil {
		t.Fatalf("vouched read %+v: %v", v, err)
	}
	r1, _ := l.ReadRounds()
	return r1 != r0, l.VouchedReads() != v0
}

// TestVouchedReadOfANonvoterCountsForNothing: a follower demoted to
// non-voter is still in the configuration; its word must not count.
func TestVouchedReadOfANonvoterCountsForNothing(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3, tweak: steadyTimings})
	li, _ := c.leader()
	l := c.nodes[li]
	nv := c.nodes[(li+1)%3]
	if err := l.Raft().DemoteVoter(raft.ServerID(nv.ID()), 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	term := l.Raft().CurrentTerm()
	if round, vouched := vouchedNeedsRound(t, l, Voucher{ID: nv.ID(), Term: term}); !round || vouched {
		t.Fatalf("a non-voter's word: round %v, counted as vouched %v; want a round", round, vouched)
	}
	// The remaining voter still vouches.
	v := c.nodes[(li+2)%3]
	if round, vouched := vouchedNeedsRound(t, l, Voucher{ID: v.ID(), Term: term}); round || !vouched {
		t.Fatalf("the other voter's word: round %v, vouched %v; want no round", round, vouched)
	}
}

// TestVouchedReadOfARemovedVoterCountsForNothing: a removed voter's word
// counts for nothing; of the two voters left, the other's word is a
// quorum with the leader (2 of 2).
func TestVouchedReadOfARemovedVoterCountsForNothing(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3, tweak: steadyTimings})
	li, _ := c.leader()
	l := c.nodes[li]
	gone, stays := c.nodes[(li+1)%3], c.nodes[(li+2)%3]
	if err := l.Raft().RemoveServer(raft.ServerID(gone.ID()), 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	term := l.Raft().CurrentTerm()
	if round, vouched := vouchedNeedsRound(t, l, Voucher{ID: gone.ID(), Term: term}); !round || vouched {
		t.Fatalf("a removed voter's word: round %v, vouched %v; want a round", round, vouched)
	}
	if round, vouched := vouchedNeedsRound(t, l, Voucher{ID: stays.ID(), Term: term}); round || !vouched {
		t.Fatalf("two voters, the other's word: round %v, vouched %v; want no round", round, vouched)
	}
	// Cut off from the only other voter: the voucher's word alone is
	// still a quorum (it said it was in T after the read arrived), but a
	// read without it must fail.
	c.isolate(li)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := l.LinearizableRead(ctx); err == nil {
		t.Fatal("two voters, cut off: an unvouched read was served")
	}
}

// TestVouchedReadOfFourVotersNeedsAThird: of four voters, the leader and
// the voucher are two, not a quorum (2*2 > 4 is false): cut off with the
// voucher from the other two, the read fails.
func TestVouchedReadOfFourVotersNeedsAThird(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 4, tweak: timingsBy(2, 5*time.Second, 500*time.Millisecond)})
	l, v := c.leaderOnM0(), c.nodes[1]
	term := l.Raft().CurrentTerm()
	// Connected, the read needs one more answer and gets it.
	if round, vouched := vouchedNeedsRound(t, l, Voucher{ID: v.ID(), Term: term}); vouched {
		t.Fatalf("four voters: vouched without a third (round %v)", round)
	}
	c.mesh.Partition(0, 1) // {m0, m1} | {m2, m3}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if l.Raft().State() != raft.Leader || v.Raft().CurrentTerm() != term {
		t.Skipf("timing: m0 %v, m1 in %d", l.Raft().State(), v.Raft().CurrentTerm())
	}
	before := l.VouchedReads()
	if ri, err := l.LinearizableReadVouched(ctx, Voucher{ID: v.ID(), Term: term}); err == nil {
		t.Fatalf("four voters, two cut off: served %+v on one voucher", ri)
	}
	if l.VouchedReads() != before {
		t.Fatal("VouchedReads grew for a failed read")
	}
}

// TestVouchedReadAfterReelection: the leader hands over and takes the
// leadership back: a follower's word of the first term names a term this
// leader no longer leads and counts for nothing; its word of the new term
// counts.
func TestVouchedReadAfterReelection(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3, tweak: steadyTimings})
	li, _ := c.leader()
	l := c.nodes[li]
	f := (li + 1) % 3
	t1 := l.Raft().CurrentTerm()
	if err := c.leadOn(li, f); err != nil {
		t.Skipf("transfer: %v", err)
	}
	idx := putKey(t, c.nodes[f], "k/between", "1")
	if err := c.leadOn(f, li); err != nil {
		t.Skipf("transfer back: %v", err)
	}
	t2 := l.Raft().CurrentTerm()
	if t2 <= t1 {
		t.Fatalf("term %d after re-election, was %d", t2, t1)
	}
	if round, vouched := vouchedNeedsRound(t, l, Voucher{ID: c.nodes[f].ID(), Term: t1}); !round || vouched {
		t.Fatalf("word of the earlier term %d (now %d): round %v, vouched %v", t1, t2, round, vouched)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ri, err := l.LinearizableReadVouched(ctx, Voucher{ID: c.nodes[f].ID(), Term: c.nodes[f].Raft().CurrentTerm()})
	if err != nil || ri.AppliedIndex < idx {
		t.Fatalf("word of the new term: %+v %v, want index >= %d", ri, err, idx)
	}
	if _, ok := l.FSM().Get("k/between"); !ok {
		t.Fatal("re-elected leader's vouched read misses the other term's write")
	}
}

// TestVouchedReadOfALeavingLeader: a leader removing itself no longer
// votes (selfVotes 0): until the removal commits, the voucher of one of
// the two voters left is not a quorum of them. Cut off from both, the
// leader's vouched read fails.
func TestVouchedReadOfALeavingLeader(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3, tweak: func(i int, cfg *Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 5*time.Second, 5*time.Second, 5*time.Second
	}})
	li, _ := c.leader()
	l := c.nodes[li]
	v := c.nodes[(li+1)%3]
	term := l.Raft().CurrentTerm()
	c.isolate(li)
	go func() { _ = l.Raft().RemoveServer(raft.ServerID(l.ID()), 0, 3*time.Second).Error() }()
	testwait.For(t, 5*time.Second, "the leader's latest configuration without it", func() bool {
		_, self, err := l.voters()
		return err == nil && self == 0
	})
	if l.Raft().State() != raft.Leader || l.Raft().CurrentTerm() != term {
		t.Skipf("timing: %v in %d", l.Raft().State(), l.Raft().CurrentTerm())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if ri, err := l.LinearizableReadVouched(ctx, Voucher{ID: v.ID(), Term: term}); err == nil {
		t.Fatalf("a leaving leader, cut off, served %+v on one of two voters' word", ri)
	}
}
