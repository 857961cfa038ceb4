package admin

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/proto/adminpb"
)

// refusingBackend is a leader whose membership changes are refused for
// want of a quorum (cluster.Node.RemovePeer's ErrNoQuorum).
type refusingBackend struct{ *fakeBackend }

func (refusingBackend) RemovePeer(context.Context, string) error { return cluster.ErrNoQuorum }

// TestRefusedRemovalLeavesNoMark: the leader marks a member removed
// before asking Raft to remove it (so a removal committed with its answer
// lost reads as one on retry). A removal refused before anything changed
// must take its mark back: the member is still one, and a later retry
// after it left by other means must not be told it was removed by this.
func TestRefusedRemovalLeavesNoMark(t *testing.T) {
	peers := []cluster.PeerStatus{{ID: "m0", Suffrage: "Voter"}, {ID: "m1", Suffrage: "Voter"}, {ID: "m2", Suffrage: "Voter"}}
	b := refusingBackend{&fakeBackend{id: "m0", leaderID: "m0", state: "Leader", kv: map[string][]byte{}, peers: peers}}
	s, err := New(b, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	_, err = s.RemovePeer(context.Background(), &adminpb.RemovePeerRequest{Id: "m1"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("RemovePeer = %v, want the refusal (FAILED_PRECONDITION)", err)
	}
	if _, ok := b.DomainGet(RemovedKey("m1")); ok {
		t.Fatalf("a refused removal left m1 marked removed (%s)", RemovedKey("m1"))
	}
}
