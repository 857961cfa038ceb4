package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// catchUp judges a follower by what the leader's replication requests
// said: the leader's commit index only counts if learned in this term and
// recently; a snapshot arriving after them is still being installed.
func TestCatchUpJudgesTheLeadersRequests(t *testing.T) {
	n := &Node{cfg: Config{HeartbeatTimeout: 300 * time.Millisecond, ReadyMaxLag: 10}}
	now := time.Unix(1000, 0)
	heard := followState{term: 4, leader: "m1", commit: 100, at: now.Add(-100 * time.Millisecond)}
	snapshot := heard
	snapshot.snapTerm, snapshot.snapIndex, snapshot.snapAt = 4, 5000, now.Add(-50*time.Millisecond)
	stale := heard
	stale.at = now.Add(-2 * time.Second)
	for _, tc := range []struct {
		name    string
		term    uint64
		applied uint64
		f       followState
		ok      bool
		reason  string
	}{
		{"caught up", 4, 100, heard, true, ""},
		{"within the lag", 4, 90, heard, true, ""},
		{"behind", 4, 89, heard, false, "11 entries behind leader m1's commit index 100 (applied 89; ready within 10"},
		{"ahead of what was heard", 4, 120, heard, true, ""},
		{"another term", 5, 100, heard, false, "no log replicated from the leader in term 5 yet"},
		{"nothing heard", 4, 0, followState{}, false, "no log replicated from the leader in term 4 yet"},
		{"stale", 4, 100, stale, false, "nothing replicated from leader m1 for 2s"},
		{"installing a snapshot", 4, 100, snapshot, false, "installing a snapshot from the leader (up to index 5000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := n.catchUp(tc.term, tc.applied, tc.f, now)
			if got.CaughtUp != tc.ok || !strings.Contains(got.Reason, tc.reason) || (tc.ok && got.Reason != "") {
				t.Fatalf("catchUp: %+v, want caught up %v, reason containing %q", got, tc.ok, tc.reason)
			}
		})
	}
}

// The relay notes the leader's commit index from AppendEntries and a
// snapshot from InstallSnapshot; a heartbeat says nothing of the log and
// an older term does not overwrite a newer.
func TestContactTrackerObservesReplication(t *testing.T) {
	_, c := newContactTracker(nil)
	now := time.Unix(1000, 0)
	c.observe(&raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("m1")}, Term: 3, PrevLogEntry: 9, LeaderCommitIndex: 9}, now)
	c.observe(&raft.AppendEntriesRequest{Term: 3}, now.Add(time.Second)) // heartbeat
	c.observe(&raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("m0")}, Term: 2, PrevLogEntry: 20, LeaderCommitIndex: 20}, now.Add(time.Second))
	f := c.followed()
	if f.term != 3 || f.leader != "m1" || f.commit != 9 || !f.at.Equal(now) {
		t.Fatalf("followed %+v, want term 3, m1, commit 9 at %v", f, now)
	}
	c.observe(&raft.InstallSnapshotRequest{Term: 3, LastLogIndex: 50}, now.Add(2*time.Second))
	if f := c.followed(); f.snapTerm != 3 || f.snapIndex != 50 {
		t.Fatalf("followed %+v, want a snapshot to 50 in term 3", f)
	}
}
