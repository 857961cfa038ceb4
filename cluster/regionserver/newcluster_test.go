package regionserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/rspb"
)

// TestNewClusterIDDropsRegionsAndTerms: a cluster restored from a snapshot
// answers with a new cluster id, in a term below the one the server saw
// of the old cluster, knowing the server by the start code it had at the
// save. The server refuses the new leader's batch naming the old start
// code as a wrong start code, never a stale term (which would depose the
// new leader), closes every region at the heartbeat that names the new
// id, forgets the old terms, and registers afresh, saying which start code
// it gave up; the new leader's batches are then admitted.
func TestNewClusterIDDropsRegionsAndTerms(t *testing.T) {
	fc, addrs := newFakeCluster(t, 1, 3_600_000)
	fc.setClusterID("old")
	fc.mu.Lock()
	fc.term = 9
	fc.mu.Unlock()
	cfg := testConfig(addrs...)
	cfg.HeartbeatInterval = fastHeartbeats
	s, sc := startServer(t, cfg)
	testwait.For(t, 5*time.Second, "the old cluster's id learned", func() bool { return s.ClusterID() == "old" })
	if _, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 9, StartCode: sc, ClusterId: "old", Ops: ops(opOpen, "a", "b")}); err != nil {
		t.Fatal(err)
	}

	// The restored cluster knew the server under an earlier start code,
	// and has not written its new id yet: its answers name none.
	fc.restore("", 4, 100, map[string]uint64{"rs1": sc - 1})
	_, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 4, StartCode: sc, Ops: ops(opOpen, "c")})
	if msg := status.Convert(err).Message(); err == nil || msg != fmt.Sprintf(`wrong start code %d: the batch is from cluster "", this server's is "old"`, sc) {
		t.Fatalf("the restored leader's batch: %v, want refused as a wrong start code (not a stale term)", err)
	}
	wantRefusal(t, err, rspb.ReasonClusterIDMismatch, map[string]string{
		rspb.MetaServerTerm: "9", rspb.MetaServerStartCode: fmt.Sprint(sc), rspb.MetaServerClusterID: "old"})
	testwait.For(t, 5*time.Second, "registered with the restored cluster", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.startCode != 0 && s.startCode != sc && s.clusterID == ""
	})
	if got := hostedNames(s); len(got) != 0 {
		t.Fatalf("hosting %v after moving to the restored cluster, want nothing", got)
	}
	if hi := s.HighestTerm(); hi != 4 {
		t.Fatalf("highest term %d, want the restored cluster's 4", hi)
	}
	regs, _, _ := fc.snapshot()
	if last := regs[len(regs)-1].req; last.GetDroppedStartCode() != sc || len(last.GetRegions()) != 0 {
		t.Fatalf("registration with the restored cluster: dropped %d regions %v, want dropped %d and none", last.GetDroppedStartCode(), last.GetRegions(), sc)
	}
	sc2 := s.StartCode()
	if _, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 4, StartCode: sc2, Ops: ops(opOpen, "c")}); err != nil {
		t.Fatalf("the restored leader's batch after registering: %v", err)
	}

	// Its leader writes the new id: learned as it comes, nothing closed.
	fc.setClusterID("new")
	testwait.For(t, 5*time.Second, "the new id learned", func() bool { return s.ClusterID() == "new" })
	if got := hostedNames(s); len(got) != 1 || s.StartCode() != sc2 {
		t.Fatalf("hosting %v under %d after learning the new id, want [c] under %d", got, s.StartCode(), sc2)
	}
	// A batch of the old cluster, late: refused, whatever its term.
	_, err = s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 9, StartCode: sc2, ClusterId: "old", Ops: ops(opClose, "c")})
	if msg := status.Convert(err).Message(); err == nil || msg != fmt.Sprintf(`wrong start code %d: the batch is from cluster "old", this server's is "new"`, sc2) {
		t.Fatalf("a batch of the old cluster: %v, want refused as another cluster's", err)
	}
	wantRefusal(t, err, rspb.ReasonClusterIDMismatch, map[string]string{
		rspb.MetaServerTerm: "4", rspb.MetaServerStartCode: fmt.Sprint(sc2), rspb.MetaServerClusterID: "new"})
	if got := hostedNames(s); len(got) != 1 {
		t.Fatalf("hosting %v, want [c]", got)
	}
}

// TestFirstClusterIDIsLearned: a server registered with a cluster that
// had no id yet (its version below 2) learns the id when the cluster
// writes one, and keeps its regions.
func TestFirstClusterIDIsLearned(t *testing.T) {
	fc, addrs := newFakeCluster(t, 1, 3_600_000)
	cfg := testConfig(addrs...)
	cfg.HeartbeatInterval = fastHeartbeats
	s, sc := startServer(t, cfg)
	if _, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 1, StartCode: sc, Ops: ops(opOpen, "a")}); err != nil {
		t.Fatal(err)
	}
	fc.setClusterID("x")
	testwait.For(t, 5*time.Second, "the id learned", func() bool { return s.ClusterID() == "x" })
	if got := hostedNames(s); len(got) != 1 || s.StartCode() != sc {
		t.Fatalf("hosting %v under %d, want [a] under %d", got, s.StartCode(), sc)
	}
}
