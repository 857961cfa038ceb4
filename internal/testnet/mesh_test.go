package testnet

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func reaches(t *testing.T, from, to *raft.InmemTransport) bool {
	t.Helper()
	var resp raft.RequestVoteResponse
	done := make(chan error, 1)
	go func() {
		done <- from.RequestVote("", to.LocalAddr(), &raft.RequestVoteRequest{}, &resp)
	}()
	select {
	case rpc := <-to.Consumer():
		rpc.Respond(&raft.RequestVoteResponse{Granted: true}, nil)
		return <-done == nil
	case err := <-done:
		return err == nil
	case <-time.After(10 * time.Second):
		t.Fatal("an RPC between in-memory transports neither arrived nor failed")
		return false
	}
}

// newMesh is a mesh of n new in-memory transports, and those.
func newMesh(n int) ([]*raft.InmemTransport, *Mesh) {
	var trans []*raft.InmemTransport
	for range n {
		_, tr := raft.NewInmemTransport("")
		trans = append(trans, tr)
	}
	return trans, NewMesh(trans...)
}

func TestMeshPartitionsAndHeals(t *testing.T) {
	trans, m := newMesh(3)
	if !reaches(t, trans[0], trans[2]) || !m.Connected(0, 2) {
		t.Fatal("a new mesh is not connected all to all")
	}
	m.Partition(0, 1)
	if reaches(t, trans[0], trans[2]) || reaches(t, trans[2], trans[1]) {
		t.Fatal("a partition left a link across it")
	}
	if !reaches(t, trans[0], trans[1]) || !reaches(t, trans[1], trans[0]) {
		t.Fatal("a partition cut a link inside its group")
	}
	m.Heal(2)
	if !reaches(t, trans[2], trans[0]) || !reaches(t, trans[1], trans[2]) || !m.Connected(0, 2) {
		t.Fatal("Heal(2) left one of 2's links cut")
	}
}

// A transport closed by its raft's shutdown reaches no one; Restore gives
// it back the links the mesh holds up, and only those.
func TestMeshRestoresAClosedTransport(t *testing.T) {
	trans, m := newMesh(3)
	m.Partition(2)
	if err := trans[0].Close(); err != nil {
		t.Fatal(err)
	}
	if reaches(t, trans[0], trans[1]) {
		t.Fatal("a closed transport still reaches its peers")
	}
	m.Restore(0)
	if !reaches(t, trans[0], trans[1]) {
		t.Fatal("Restore left a link the mesh holds up cut")
	}
	if reaches(t, trans[0], trans[2]) {
		t.Fatal("Restore healed a link the test cut")
	}
}
