package integration

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// The in-process clusters below (cluster/clustertest) run cluster.Node
// directly, for what the agent does not let a test control: the network
// between nodes (raft's in-memory transport can partition them) and Raft's
// snapshot settings.

// stepLog records, across the nodes of an in-process cluster, which node
// ran which step of a probe procedure, and when.
type stepLog struct {
	mu    sync.Mutex
	steps []stepRun
}

type stepRun struct {
	node string
	id   uint64
	step int
	at   time.Time
}

func (l *stepLog) add(r stepRun) {
	l.mu.Lock()
	l.steps = append(l.steps, r)
	l.mu.Unlock()
}

func (l *stepLog) runs() []stepRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]stepRun(nil), l.steps...)
}

// probeEnv is a node's Env: its id and the shared step log.
type probeEnv struct {
	node string
	log  *stepLog
}

// probe is a sleep that also logs, in its node's Env, every step it runs:
// which node dispatched work when.
type probe struct {
	procedure.Base
	Steps int
	Delay time.Duration
	Done  int
}

func (p *probe) Execute(ctx *procedure.Context) (procedure.Step, error) {
	if p.Done >= p.Steps {
		return procedure.Done(), nil
	}
	if env, ok := ctx.Env.(*probeEnv); ok {
		env.log.add(stepRun{node: env.node, id: ctx.ID(), step: p.Done, at: time.Now()})
	}
	if err := diag.RecordEffect(ctx, p.Done, 1); err != nil {
		return procedure.Step{}, err
	}
	p.Done++
	return procedure.Suspend(procedure.Timeout(p.Delay)), nil
}

func (p *probe) Rollback(ctx *procedure.Context) error {
	if p.Done > 0 {
		p.Done--
		return diag.RecordEffect(ctx, p.Done, -1)
	}
	return nil
}

// newIPCluster starts n masters without the domain (clustertest.Config's
// NoDomain), whose procedures log their steps to the returned log. tcp
// selects raft's TCP transport on loopback with the real bolt and file
// stores (as the agent uses); otherwise the in-memory transport and
// stores, which can partition. tweak adjusts each node's configuration.
func newIPCluster(t *testing.T, n int, tcp bool, tweak func(*cluster.Config)) (*clustertest.Cluster, *stepLog) {
	t.Helper()
	log := &stepLog{}
	c := clustertest.New(t, clustertest.Config{
		Masters:   n,
		TCP:       tcp,
		NoDomain:  true,
		FaultSeed: faultSeed(t),
		Register: func(reg *procedure.Registry) error {
			return reg.Register("probe", 1, func() procedure.Procedure { return &probe{} })
		},
		Env: func(id string) any { return &probeEnv{node: id, log: log} },
		Node: func(_ int, cfg *cluster.Config) {
			cfg.Workers = 4
			if tweak != nil {
				tweak(cfg)
			}
		},
	})
	return c, log
}

// submitN submits n procedures built by mk on x.
func submitN(t *testing.T, x *procedure.Executor, n int, mk func() procedure.Procedure) []uint64 {
	t.Helper()
	var ids []uint64
	for range n {
		id, err := x.Submit(mk(), procedure.SubmitOptions{})
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		ids = append(ids, id)
	}
	return ids
}

// waitSuccess waits on x until every id is SUCCESS.
func waitSuccess(t *testing.T, x *procedure.Executor, ids []uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range ids {
		info, err := x.Wait(ctx, id)
		if err != nil {
			t.Fatalf("wait %d: %v", id, err)
		}
		if info.State != procedure.Success {
			t.Fatalf("procedure %d ended %v (%s), want SUCCESS", id, info.State, info.Error)
		}
	}
}

func sleepProc(steps int, delay time.Duration) func() procedure.Procedure {
	return func() procedure.Procedure { return &diag.Sleep{Steps: steps, Delay: delay} }
}

// fsmState is what a node's FSM holds: domain entries and procedure
// records.
func fsmState(f *raftfsm.FSM) (map[string]string, map[uint64][]byte) {
	v := f.View()
	dom := map[string]string{}
	v.Scan("", func(k string, val []byte) bool {
		dom[k] = string(val)
		return true
	})
	procs := map[uint64][]byte{}
	_ = v.Procs(func(p store.Proc) error {
		procs[p.ID] = append([]byte(nil), p.Data...)
		return nil
	})
	return dom, procs
}

// sameFSMs fails t unless every running node's FSM holds the same domain
// entries and procedure records.
func sameFSMs(t *testing.T, c *clustertest.Cluster) {
	t.Helper()
	var refDom map[string]string
	var refProcs map[uint64][]byte
	refID := ""
	for _, m := range c.Masters() {
		n := m.Node()
		if n == nil {
			continue
		}
		dom, procs := fsmState(n.FSM())
		if refDom == nil {
			refDom, refProcs, refID = dom, procs, n.ID()
			continue
		}
		if !maps.Equal(dom, refDom) {
			t.Errorf("domain state of %s (%d keys) differs from %s's (%d keys)", n.ID(), len(dom), refID, len(refDom))
		}
		if !maps.EqualFunc(procs, refProcs, bytes.Equal) {
			t.Errorf("procedure records of %s (%d) differ from %s's (%d)", n.ID(), len(procs), refID, len(refProcs))
		}
	}
}

// allAt reports whether every running node's FSM has applied exactly
// what ref's has.
func allAt(c *clustertest.Cluster, ref *cluster.Node) bool {
	for _, m := range c.Masters() {
		if n := m.Node(); n != nil && n.FSM().AppliedIndex() != ref.FSM().AppliedIndex() {
			return false
		}
	}
	return true
}

// caughtUp reports whether node n follows ref and has applied all ref has.
func caughtUp(n, ref *cluster.Node) bool {
	id, _ := n.Leader()
	return id == ref.ID() && n.FSM().AppliedIndex() >= ref.FSM().AppliedIndex()
}

// TestLaggingNodeCatchesUpFromSnapshot runs three nodes on raft's TCP
// transport with bolt stores (the agent's setup) and tiny snapshot
// settings (threshold 32 entries, 16 trailing logs), which the agent does
// not expose. A follower is crashed (Node.Kill) after it applied some
// work; the others commit far more than the trailing logs and snapshot, so
// the Raft log no longer reaches the follower's WAL index. Restarted, the
// follower must catch up by installing the leader's snapshot (its log
// says "Installed remote snapshot"), end at the leader's applied index,
// and hold the same domain state and procedure records as the others.
func TestLaggingNodeCatchesUpFromSnapshot(t *testing.T) {
	c, _ := newIPCluster(t, 3, true, func(cfg *cluster.Config) {
		// One leader throughout: the test submits on it and reasons about
		// which logs it compacted. At 50 ms, a loaded machine loses the
		// leader's lease now and then over TCP.
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
		cfg.SnapshotThreshold = 32
		cfg.TrailingLogs = 16
		cfg.SnapshotInterval = 100 * time.Millisecond
	})
	li, x := c.WaitLeader()
	first := submitN(t, x, 10, sleepProc(3, 5*time.Millisecond))
	waitSuccess(t, x, first)
	fi := (li + 1) % 3
	fm := c.Master(fi)
	f := fm.Node()
	testwait.For(t, 10*time.Second, "the follower to apply the first batch", func() bool { return caughtUp(f, c.Master(li).Node()) })
	w := f.FSM().WALIndex()
	// Its raft log may run ahead of its WAL (entries stored, not yet
	// applied): the leader's compaction must pass that too, or the
	// follower catches up from the log after all.
	reach := max(w, f.Raft().LastIndex())
	c.Kill(fi)

	// Far more entries than the trailing logs, one procedure at a time so
	// that group commit cannot fold them into a few entries.
	var more []uint64
	for range 40 {
		ids := submitN(t, x, 1, sleepProc(2, 0))
		waitSuccess(t, x, ids)
		more = append(more, ids...)
	}
	// Whichever of the two leads when the follower is back, its log must
	// no longer reach the follower's index: each has a snapshot far enough
	// past it that compaction dropped the entries after w.
	for _, i := range []int{li, (li + 2) % 3} {
		m := c.Master(i)
		n := m.Node()
		testwait.For(t, 10*time.Second, m.ID+"'s log to be compacted past the follower's index", func() bool {
			if err := n.Raft().Snapshot().Error(); err != nil && !strings.Contains(err.Error(), "nothing new to snapshot") {
				t.Fatalf("snapshot on %s: %v", m.ID, err)
			}
			si, err := strconv.ParseUint(n.Raft().Stats()["last_snapshot_index"], 10, 64)
			return err == nil && si > reach+16+1
		})
	}
	lead := c.Master(li).Node()
	t.Logf("follower %s down at WAL index %d; leader at %d, its last snapshot at %s", fm.ID, w, lead.FSM().AppliedIndex(), lead.Raft().Stats()["last_snapshot_index"])

	f = c.Restart(fi).Node()
	if got := f.FSM().LoadedIndex(); got != w {
		t.Errorf("restarted follower loaded WAL index %d, want %d", got, w)
	}
	testwait.For(t, 15*time.Second, "the lagging follower to catch up", func() bool { return caughtUp(f, lead) })
	// raft logs the install once the FSM's Restore has returned, so the
	// line can come a moment after the follower's index says caught up.
	if !testwait.Until(10*time.Second, func() bool { return strings.Contains(fm.Log(), "Installed remote snapshot") }) {
		t.Errorf("%s caught up without installing a snapshot; the test did not leave it behind far enough", fm.ID)
	}
	for _, id := range append(append([]uint64{}, first...), more...) {
		if _, ok := f.FSM().Proc(id); !ok {
			t.Errorf("caught-up follower lacks procedure %d", id)
		}
	}
	// Quiesce, then compare every FSM.
	testwait.For(t, 10*time.Second, "all FSMs at the leader's index", func() bool { return allAt(c, lead) })
	sameFSMs(t, c)
	dom, _ := fsmState(f.FSM())
	for _, id := range more {
		for s := range 2 {
			if v := dom[diag.EffectKey(id, s)]; v != "1" {
				t.Errorf("caught-up follower: effect %s = %q, want \"1\"", diag.EffectKey(id, s), v)
			}
		}
	}
}

// TestPartitionedLeaderStopsDispatching cuts the leader off from the other
// two nodes (raft's in-memory transport) while probe procedures run. It
// asserts that the old leader steps down and stops its executor within a
// few lease timeouts, that from then on it dispatches no step (the probe
// log shows none started on it), accepts no submission and can commit
// nothing (its Raft refuses writes and its FSM's applied index stays put);
// that the majority elects a new leader which finishes every procedure,
// each step's effect applied exactly once; and that after healing the old
// leader follows and holds the same state as the others.
func TestPartitionedLeaderStopsDispatching(t *testing.T) {
	c, steps := newIPCluster(t, 3, false, nil)
	li, x := c.WaitLeader()
	const nsteps = 6
	ids := submitN(t, x, 20, func() procedure.Procedure { return &probe{Steps: nsteps, Delay: 20 * time.Millisecond} })
	old := c.Master(li).Node()
	// Cut it off mid-flight: every procedure started, none finished.
	testwait.For(t, 10*time.Second, "every probe to run its first step on the leader", func() bool {
		started := map[uint64]bool{}
		for _, r := range steps.runs() {
			if r.node == old.ID() {
				started[r.id] = true
			}
		}
		return len(started) == len(ids)
	})
	start := time.Now()
	c.Partition(li)
	testwait.For(t, 5*time.Second, "the partitioned leader to step down and stop its executor", func() bool {
		_, err := old.Executor()
		return !old.IsLeader() && !old.Status().Executor && errors.Is(err, cluster.ErrNotLeader)
	})
	stopped := time.Now()
	frozen := old.FSM().AppliedIndex()
	t.Logf("partitioned leader %s stopped its executor %v after the partition", old.ID(), stopped.Sub(start).Round(time.Millisecond))

	if _, err := x.Submit(&probe{Steps: 1}, procedure.SubmitOptions{}); err == nil {
		t.Error("the deposed leader's executor accepted a submission")
	}
	if err := old.Raft().Apply(raftfsm.EncodeNoop(), time.Second).Error(); !errors.Is(err, raft.ErrNotLeader) {
		t.Errorf("the deposed leader's raft Apply: %v, want raft.ErrNotLeader", err)
	}

	nl, x2 := c.WaitLeader(li)
	waitSuccess(t, x2, ids)
	extra := submitN(t, x2, 5, func() procedure.Procedure { return &probe{Steps: 2, Delay: time.Millisecond} })
	waitSuccess(t, x2, extra)
	lead := c.Master(nl).Node()
	t.Logf("%s leads and finished the work", lead.ID())

	if got := old.FSM().AppliedIndex(); got != frozen {
		t.Errorf("the isolated node's FSM moved from %d to %d", frozen, got)
	}
	for _, r := range steps.runs() {
		if r.node == old.ID() && r.at.After(stopped) {
			t.Errorf("the deposed leader %s ran step %d of procedure %d %v after its executor stopped", old.ID(), r.step, r.id, r.at.Sub(stopped))
		}
	}
	dom, _ := fsmState(lead.FSM())
	for _, id := range ids {
		for s := range nsteps {
			if v := dom[diag.EffectKey(id, s)]; v != "1" {
				t.Errorf("effect %s = %q on the new leader, want \"1\"", diag.EffectKey(id, s), v)
			}
		}
	}

	c.Heal(li)
	testwait.For(t, 10*time.Second, "the old leader to follow the new one", func() bool { return caughtUp(old, lead) })
	testwait.For(t, 10*time.Second, "all FSMs at the leader's index", func() bool { return allAt(c, lead) })
	sameFSMs(t, c)
}
