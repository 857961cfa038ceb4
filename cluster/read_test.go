package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/raftfsm"
)

// putKey commits one domain key through node n's raft (n must lead).
func putKey(t *testing.T, n *Node, key, val string) uint64 {
	t.Helper()
	data, err := raftfsm.EncodeProcBatch(raftfsm.Write{Mutations: []raftfsm.Mutation{raftfsm.Put(key, []byte(val))}})
	if err != nil {
		t.Fatal(err)
	}
	f := n.Raft().Apply(data, 5*time.Second)
	if err := f.Error(); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return f.Index()
}

// TestLinearizableReadOfACutOffLeaderFails: a leader cut off from its
// peers may still believe it leads; its linearizable reads must fail (and
// be sent to the new leader) rather than answer from a state that misses
// the new leader's writes. Stale reads are still served, and say so.
func TestLinearizableReadOfACutOffLeaderFails(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3})
	li, _ := c.leader()
	old := c.nodes[li]
	putKey(t, old, "k/before", "1")

	c.isolate(li)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Right after the cut, before it noticed: the quorum round cannot
	// succeed.
	if ri, err := old.LinearizableRead(ctx); err == nil {
		t.Fatalf("cut-off leader served a linearizable read: %+v", ri)
	} else if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("cut-off leader's read failed with %v, want an error wrapping ErrNotLeader", err)
	}

	ni, _ := c.leader(li)
	idx := putKey(t, c.nodes[ni], "k/after", "2")
	ri, err := c.nodes[ni].LinearizableRead(ctx)
	if err != nil {
		t.Fatalf("new leader's read: %v", err)
	}
	if !ri.Linearizable || ri.ServedBy != c.nodes[ni].ID() || ri.AppliedIndex < idx {
		t.Fatalf("read info %+v: want linearizable, served by %s, at index >= %d", ri, c.nodes[ni].ID(), idx)
	}
	if _, ok := c.nodes[ni].FSM().Get("k/after"); !ok {
		t.Fatal("the new leader's linearizable read misses its own acknowledged write")
	}

	st := old.ReadState()
	if st.Linearizable || st.ServedBy != old.ID() || st.AppliedIndex >= idx {
		t.Fatalf("cut-off node's stale read state %+v: want stale, by %s, before index %d", st, old.ID(), idx)
	}
	if _, err := old.LinearizableRead(ctx); err == nil {
		t.Fatal("cut-off node served a linearizable read after a new leader wrote")
	}
	c.reconnect(li)
}

// TestLinearizableReadReachesAnIndexOnlyABarrierHolds: the FSM never sees
// raft's barrier and no-op entries, so a commit index that ends on one is
// reached by the FSM only with the next command; the read commits one
// itself rather than wait for a write that may never come.
func TestLinearizableReadReachesAnIndexOnlyABarrierHolds(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3})
	li, _ := c.leader()
	n := c.nodes[li]
	if err := n.Raft().Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	ci := n.Raft().CommitIndex()
	if n.FSM().AppliedIndex() >= ci {
		t.Fatalf("the FSM is at %d, the barrier's commit index %d: the test needs the FSM behind", n.FSM().AppliedIndex(), ci)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ri, err := n.LinearizableRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ri.AppliedIndex < ci {
		t.Fatalf("read at index %d, before the commit index %d at its arrival", ri.AppliedIndex, ci)
	}
}

// TestLinearizableReadOnAFollowerSaysWhereTheLeaderIs: followers never
// answer a linearizable read; the error names the leader.
func TestLinearizableReadOnAFollowerSaysWhereTheLeaderIs(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3})
	li, _ := c.leader()
	fi := (li + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.nodes[fi].LinearizableRead(ctx)
	var nle *NotLeaderError
	if !errors.As(err, &nle) || nle.LeaderID != c.nodes[li].ID() {
		t.Fatalf("follower's read: %v, want a NotLeaderError naming %s", err, c.nodes[li].ID())
	}
	testwait.For(t, 10*time.Second, "the follower to hear from the leader", func() bool {
		st := c.nodes[fi].ReadState()
		return st.LeaderContactAge >= 0 && st.RaftState == "Follower"
	})
}

// TestReadRoundsStartAfterTheReadArrives: a read that arrives while a
// round is in flight never takes that round's answer (it may have been
// decided before the read arrived); it shares the next one with every
// other read that arrived meanwhile.
func TestReadRoundsStartAfterTheReadArrives(t *testing.T) {
	release := make(chan error)
	var rounds atomic.Int32
	started := make(chan int32, 16)
	rc := &readConfirmer{verify: func() error {
		started <- rounds.Add(1)
		return <-release
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	first := make(chan error, 1)
	go func() { first <- rc.confirm(ctx) }()
	if r := <-started; r != 1 {
		t.Fatalf("round %d started, want 1", r)
	}
	// Round 1 is in flight; these arrive after it started.
	const later = 16
	var wg sync.WaitGroup
	errs := make([]error, later)
	for i := range later {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = rc.confirm(ctx) }()
	}
	testwait.For(t, 10*time.Second, "the later reads to join the next round", func() bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return rc.next != nil && rc.next.waiters == later
	})
	// Round 1 says "deposed" (it may have been decided before the later
	// reads arrived): only the first read may see it.
	release <- fmt.Errorf("round 1: %w", errLostRound)
	if err := <-first; !errors.Is(err, errLostRound) {
		t.Fatalf("first read: %v, want round 1's answer", err)
	}
	if r := <-started; r != 2 {
		t.Fatalf("round %d started, want 2", r)
	}
	release <- nil
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("later read %d: %v, want round 2's answer (nil)", i, err)
		}
	}
	if n := rounds.Load(); n != 2 {
		t.Errorf("%d rounds for 17 reads, want 2", n)
	}
}

var errLostRound = errors.New("lost round")
