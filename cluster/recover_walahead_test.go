package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/testwait"
)

// After a recovery that kept a state ahead of the log (the review tests
// above), the node goes on as any other: what it writes next survives a
// plain restart, and a new member that joins gets the whole state (raft
// sends it the snapshot written at the WAL's index, then the entries
// after it).
func TestRecoverQuorumWALAheadOfLogThenRestartAndJoin(t *testing.T) {
	for _, snapshot := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%v", snapshot), func(t *testing.T) {
			c, s, n, plan, done := recoverSurvivorWithLostLogTail(t, snapshot, 6)
			if !plan.StateAheadOfLog || plan.Uncertain != 0 || plan.KnownCommitted <= plan.LastIndex {
				t.Fatalf("plan %+v, want the state ahead of the log", plan)
			}
			if plan.WALIndex != plan.KnownCommitted || plan.Keeps() != plan.WALIndex || (plan.SnapshotIndex > 0) != snapshot {
				t.Fatalf("plan %+v: want the WAL's index kept, a snapshot %v", plan, snapshot)
			}
			checkPlanIndexes(t, plan)
			if got := n.Raft().LastIndex(); got < plan.KnownCommitted {
				t.Fatalf("raft's last index %d after the recovery, want at least the kept state's %d", got, plan.KnownCommitted)
			}
			if li, _ := c.leader(); li != s {
				t.Fatalf("leader %d, want %d", li, s)
			}
			_, x := c.leader()
			after := submit(t, x, 5, 2, 0)
			c.waitAllSuccess(after, 2)
			all := append(done, after...)

			if err := n.Kill(); err != nil {
				t.Fatal(err)
			}
			c.nodes[s] = nil
			n = c.restart(s)
			if li, _ := c.leader(); li != s {
				t.Fatalf("leader %d after the restart, want %d", li, s)
			}
			if err := n.Raft().Barrier(5 * time.Second).Error(); err != nil {
				t.Fatal(err)
			}
			for _, id := range all {
				if _, ok := n.FSM().Proc(id); !ok {
					t.Fatalf("procedure %d lost across the restart", id)
				}
			}

			// A fresh member, wired to the survivor alone (the stops
			// disconnected every transport).
			jaddr, jtr := raft.NewInmemTransport("")
			c.trans[s].Connect(jaddr, jtr)
			jtr.Connect(c.trans[s].LocalAddr(), c.trans[s])
			jc := fastConfig(t, "j", c.rec)
			jc.Transport = jtr
			jc.LogStore = raft.NewInmemStore()
			jc.StableStore = jc.LogStore.(raft.StableStore)
			jc.SnapshotStore = raft.NewInmemSnapshotStore()
			j, err := NewNode(jc)
			if err != nil {
				t.Fatalf("new member: %v", err)
			}
			c.nodes, c.cfgs = append(c.nodes, j), append(c.cfgs, jc)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = n.Join(ctx, jc.ID, string(jaddr))
			cancel()
			if err != nil {
				t.Fatalf("join: %v", err)
			}
			_, x = c.leader()
			last := submit(t, x, 3, 2, 0)
			c.waitAllSuccess(last, 2)
			testwait.For(t, 15*time.Second, "the new member to catch up", func() bool {
				return j.FSM().AppliedIndex() >= n.FSM().AppliedIndex()
			})
			for _, id := range append(all, last...) {
				if _, ok := j.FSM().Proc(id); !ok {
					t.Fatalf("the new member lacks procedure %d", id)
				}
			}
		})
	}
}

// checkPlanIndexes fails t unless the plan's text gives the log's last
// index, the local WAL's and the newest snapshot's, and what recovery
// keeps: what an operator compares among survivors.
func checkPlanIndexes(t *testing.T, plan QuorumRecoveryPlan) {
	t.Helper()
	snap := "no snapshot"
	if plan.SnapshotIndex > 0 {
		snap = fmt.Sprintf("newest snapshot at index %d", plan.SnapshotIndex)
	}
	text := plan.String()
	for _, want := range []string{
		fmt.Sprintf("  this node's log:   up to index %d (term %d)", plan.LastIndex, plan.LastTerm),
		fmt.Sprintf("  local WAL:         applied up to index %d; %s\n", plan.WALIndex, snap),
		fmt.Sprintf("  keeps:             up to index %d, the higher of the log's and the WAL's", max(plan.LastIndex, plan.WALIndex)),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the plan lacks %q:\n%s", want, text)
		}
	}
}
