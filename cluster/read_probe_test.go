package cluster

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Faults of a read round's probe (probeQuorum). (Written by a reviewer of
// the change; all held.)

// holeTransport blocks the AppendEntries to its blackholed targets until
// release (or 5 s, like a transport timeout).
type holeTransport struct {
	*raft.InmemTransport
	mu      sync.Mutex
	holes   map[raft.ServerAddress]bool
	release chan struct{}
	calls   atomic.Int64
}

func (r *holeTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	r.calls.Add(1)
	r.mu.Lock()
	hole := r.holes[target]
	r.mu.Unlock()
	if hole {
		select {
		case <-r.release:
		case <-time.After(5 * time.Second):
		}
		return errors.New("blackholed")
	}
	return r.InmemTransport.AppendEntries(id, target, args, resp)
}

func (r *holeTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func newHoleCluster(t *testing.T, n int, tweak func(int, *Config)) (*testCluster, []*holeTransport) {
	t.Helper()
	trs := make([]*holeTransport, n)
	c := newTestCluster(t, clusterOpts{n: n, tweak: tweak, wrap: func(i int, tr *raft.InmemTransport) raft.Transport {
		trs[i] = &holeTransport{InmemTransport: tr, holes: map[raft.ServerAddress]bool{}, release: make(chan struct{})}
		return trs[i]
	}})
	t.Cleanup(func() {
		for _, tr := range trs {
			select {
			case <-tr.release:
			default:
				close(tr.release)
			}
		}
	})
	return c, trs
}

// probedReads serves k linearizable reads on n, and says their mean time
// and how many rounds fell back to raft's VerifyLeader.
func probedReads(t *testing.T, n *Node, k int) (mean time.Duration, verifies int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var vs atomic.Int64
	verify := n.reads.verify
	n.reads.verify = func() error { vs.Add(1); return verify() }
	defer func() { n.reads.verify = verify }()
	start := time.Now()
	for range k {
		if _, err := n.LinearizableRead(ctx); err != nil {
			t.Fatalf("read: %v", err)
		}
	}
	return time.Since(start) / time.Duration(k), vs.Load()
}

// A blackholed follower (requests hang until a transport timeout): reads
// go on, and goroutines do not grow with the number of reads.
func TestReadProbeBlackholedFollowerLeaksNoGoroutines(t *testing.T) {
	c, trs := newHoleCluster(t, 3, steadyTimings)
	li, _ := c.leader()
	l := c.nodes[li]
	putKey(t, l, "k/a", "a")
	probedReads(t, l, 5)
	// Hole the follower that acked last.
	f1, f2 := (li+1)%3, (li+2)%3
	_, _, a1 := l.contact.progress(raft.ServerID(c.nodes[f1].ID()), 0)
	_, _, a2 := l.contact.progress(raft.ServerID(c.nodes[f2].ID()), 0)
	hole := f1
	if a2.After(a1) {
		hole = f2
	}
	trs[li].mu.Lock()
	trs[li].holes[c.trans[hole].LocalAddr()] = true
	trs[li].mu.Unlock()
	g0 := runtime.NumGoroutine()
	mean, v := probedReads(t, l, 300)
	g1 := runtime.NumGoroutine()
	t.Logf("blackholed most recent follower: 300 reads, mean %v, %d fell back; goroutines %d -> %d", mean, v, g0, g1)
	if g1-g0 > 20 {
		t.Errorf("goroutines grew by %d over 300 reads", g1-g0)
	}
}

// Five voters, two followers cut off: reads go on.
func TestReadProbeFiveNodesTwoDown(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 5, tweak: steadyTimings})
	li, _ := c.leader()
	l := c.nodes[li]
	idx := putKey(t, l, "k/a", "a")
	c.isolate((li + 1) % 5)
	c.isolate((li + 2) % 5)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 50 {
		ri, err := l.LinearizableRead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ri.AppliedIndex < idx {
			t.Fatalf("read at %d misses %d", ri.AppliedIndex, idx)
		}
	}
	r0, _ := l.ReadRounds()
	if _, fb := probedReads(t, l, 20); 2*fb >= 20 {
		t.Errorf("%d of 20 reads fell back to raft's round with three of five voters answering", fb)
	}
	r, _ := l.ReadRounds()
	t.Logf("rounds %d (%d before the counted reads)", r, r0)
	// Three down: no quorum; reads must fail, not hang.
	c.isolate((li + 3) % 5)
	start := time.Now()
	if _, err := l.LinearizableRead(ctx); err == nil {
		t.Fatal("a leader with 2 of 5 served a linearizable read")
	} else {
		t.Logf("3 of 5 down: %v after %v", err, time.Since(start))
	}
}

// A single voter needs no probe: its reads are served at once.
func TestReadProbeSingleNode(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 1})
	li, _ := c.leader()
	l := c.nodes[li]
	idx := putKey(t, l, "k/a", "a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ri, err := l.LinearizableRead(ctx)
	if err != nil || ri.AppliedIndex < idx {
		t.Fatalf("%+v %v", ri, err)
	}
	if _, fb := probedReads(t, l, 5); fb != 0 {
		t.Errorf("%d of 5 reads of a single voter fell back to raft's round", fb)
	}
}

// A non-voter among the peers: the probe asks only voters; a cut-off
// non-voter changes nothing, a cut-off last voter fails the read.
func TestReadProbeAsksVotersOnly(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3, tweak: steadyTimings})
	li, _ := c.leader()
	l := c.nodes[li]
	nv, v := (li+1)%3, (li+2)%3
	if err := l.Raft().DemoteVoter(raft.ServerID(c.nodes[nv].ID()), 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	idx := putKey(t, l, "k/a", "a")
	c.isolate(nv)
	mean, fb := probedReads(t, l, 20)
	t.Logf("non-voter cut off: mean %v, %d fell back", mean, fb)
	if fb >= 10 {
		t.Errorf("%d of 20 reads fell back to raft's round with only a non-voter cut off", fb)
	}
	_ = idx
	c.reconnect(nv)
	c.isolate(v)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.LinearizableRead(ctx); err == nil {
		t.Fatal("served a read with the only other voter cut off")
	}
}

// The configuration grows between the probe and the check: the read
// must still end.
func TestReadProbeConfigurationGrowsAfterIt(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 3, tweak: steadyTimings})
	li, _ := c.leader()
	l := c.nodes[li]
	probe := l.reads.probe
	var once sync.Once
	l.reads.probe = func() error {
		err := probe()
		once.Do(func() {
			if e := l.Raft().AddVoter("ghost", "ghost-addr", 0, 5*time.Second).Error(); e != nil {
				t.Errorf("add ghost: %v", e)
			}
		})
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	ri, err := l.LinearizableRead(ctx)
	t.Logf("read with a voter added after the probe: %+v %v in %v", ri, err, time.Since(start))
	if err != nil {
		t.Fatal(err)
	}
}

// Five voters: the old leader m0 (long lease) keeps only m1; m2, m3, m4
// elect a new leader that writes. Then m0's link to m2 (which knows the
// new term) comes back, m1 still in the old term. m0's read must fail.
func TestReadProbeDeposedLeaderFiveNodes(t *testing.T) {
	c := newTestCluster(t, clusterOpts{n: 5, tweak: func(i int, cfg *Config) {
		if i == 0 {
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 5*time.Second, 5*time.Second, 5*time.Second
		} else if i == 1 {
			// m1 never campaigns within the test.
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 20*time.Second, 20*time.Second, 20*time.Second
		} else {
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
		}
	}})
	li, _ := c.leader()
	if err := c.leadOn(li, 0); err != nil {
		t.Skipf("transfer: %v", err)
	}
	old := c.nodes[0]
	putKey(t, old, "k/before", "1")
	term := old.Raft().CurrentTerm()
	// {m0, m1} | {m2, m3, m4}, except m1 also cut from the others.
	c.mesh.Partition(0, 1)
	for j := 2; j < 5; j++ {
		c.trans[1].Disconnect(c.trans[j].LocalAddr())
		c.trans[j].Disconnect(c.trans[1].LocalAddr())
	}
	ni := c.leaderAmong(2, 5)
	idx := putKey(t, c.nodes[ni], "k/after", "2")
	if old.Raft().State() != raft.Leader || c.nodes[1].Raft().CurrentTerm() != term {
		t.Skipf("timing: m0 %v, m1 term %d", old.Raft().State(), c.nodes[1].Raft().CurrentTerm())
	}
	// m0 <-> m2 back (m2 in the new term).
	c.trans[0].Connect(c.trans[2].LocalAddr(), c.trans[2])
	c.trans[2].Connect(c.trans[0].LocalAddr(), c.trans[0])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ri, err := old.LinearizableRead(ctx)
	if err == nil {
		_, has := old.FSM().Get("k/after")
		t.Fatalf("deposed m0 served %+v; has k/after (index %d): %v", ri, idx, has)
	}
	t.Logf("deposed m0's read: %v", err)
}
