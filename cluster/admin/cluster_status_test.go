package admin

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TestClusterStatusQuorumCount: with members asked, a voter whose admin
// address is registered but does not answer counts against the quorum; one
// that has not registered an address yet (just started) cannot be asked
// and does not.
func TestClusterStatusQuorumCount(t *testing.T) {
	dead := testnet.DeadAddr(t)
	peers := func(ids ...string) []cluster.PeerStatus {
		var ps []cluster.PeerStatus
		for _, id := range ids {
			ps = append(ps, cluster.PeerStatus{ID: id, Address: "raft-" + id, Suffrage: "Voter"})
		}
		return ps
	}
	for _, tc := range []struct {
		name                      string
		peers                     []cluster.PeerStatus
		registered                []string // members whose admin address is the dead one
		reachable, unknown, voter uint32
		quorum                    bool
		state                     string // of the answering master, m0
		leader                    string // the leader m0 hears from, just now
	}{
		{name: "a follower hearing from its leader", peers: peers("m0", "m1", "m2"), state: "Follower", leader: "m1", reachable: 1, unknown: 2, voter: 3, quorum: true},
		{name: "others not registered yet", peers: peers("m0", "m1", "m2"), state: "Leader", reachable: 1, unknown: 2, voter: 3, quorum: true},
		// Members not asked are only taken for up when a leader answered:
		// a lone candidate whose peers never started has no quorum.
		{name: "others never seen, no leader", peers: peers("m0", "m1", "m2"), state: "Candidate", reachable: 1, unknown: 2, voter: 3, quorum: false},
		{name: "one dead, one not registered", peers: peers("m0", "m1", "m2"), state: "Leader", registered: []string{"m1"}, reachable: 1, unknown: 1, voter: 3, quorum: true},
		{name: "both dead", peers: peers("m0", "m1", "m2"), registered: []string{"m1", "m2"}, reachable: 1, voter: 3, quorum: false},
		{name: "alone", peers: peers("m0"), reachable: 1, voter: 1, quorum: true},
		{name: "a nonvoter does not count", peers: append(peers("m0", "m1"), cluster.PeerStatus{ID: "m2", Suffrage: "Nonvoter"}), registered: []string{"m1", "m2"}, reachable: 1, voter: 2, quorum: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := map[string][]byte{}
			for _, id := range tc.registered {
				kv[cluster.AdminAddrKey(id)] = []byte(dead)
			}
			b := &fakeBackend{id: "m0", procsErr: cluster.ErrNotLeader, kv: kv, peers: tc.peers, state: tc.state}
			if tc.state == "Leader" {
				b.leaderID = "m0"
			}
			if tc.leader != "" {
				b.leaderID, b.contact = tc.leader, time.Now()
			}
			s, err := New(b, Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Stop(context.Background())
			st, err := s.ClusterStatus(context.Background(), &adminpb.ClusterStatusRequest{Members: true})
			if err != nil {
				t.Fatal(err)
			}
			if !st.GetMembersProbed() || st.GetVoters() != tc.voter || st.GetVotersReachable() != tc.reachable || st.GetVotersUnknown() != tc.unknown || st.GetQuorum() != tc.quorum {
				t.Errorf("voters %d, reachable %d, unknown %d, quorum %v; want %d, %d, %d, %v",
					st.GetVoters(), st.GetVotersReachable(), st.GetVotersUnknown(), st.GetQuorum(), tc.voter, tc.reachable, tc.unknown, tc.quorum)
			}
			for _, p := range st.GetPeers() {
				if p.GetId() == "m0" {
					if !p.GetReachable() || p.GetStatus().GetNodeId() != "m0" || p.GetStatus().GetPid() == 0 {
						t.Errorf("self: %v", p)
					}
				} else if p.GetReachable() || p.GetError() == "" {
					t.Errorf("%s: reachable %v, error %q", p.GetId(), p.GetReachable(), p.GetError())
				}
			}
		})
	}
}

// A member probe leaves the caller time to be answered: it takes half of
// what the caller's deadline leaves when that is less than its own bound.
func TestProbeBudgetFitsTheCallersDeadline(t *testing.T) {
	now := time.Unix(1000, 0)
	if got := probeBudget(context.Background(), now); got != memberProbeTimeout {
		t.Fatalf("no deadline: %v, want %v", got, memberProbeTimeout)
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(400*time.Millisecond))
	defer cancel()
	if got := probeBudget(ctx, now); got != 200*time.Millisecond {
		t.Fatalf("400ms left: %v, want 200ms", got)
	}
	ctx2, cancel2 := context.WithDeadline(context.Background(), now.Add(time.Minute))
	defer cancel2()
	if got := probeBudget(ctx2, now); got != memberProbeTimeout {
		t.Fatalf("a minute left: %v, want %v", got, memberProbeTimeout)
	}
	ctx3, cancel3 := context.WithDeadline(context.Background(), now.Add(-time.Second))
	defer cancel3()
	if got := probeBudget(ctx3, now); got <= 0 {
		t.Fatalf("deadline passed: %v, want a positive bound", got)
	}
}
