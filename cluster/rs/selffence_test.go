package rs

import (
	"context"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/rspb"
	"github.com/baton-dev/baton/internal/clock"
)

// TestSelfFenceCountsFromTheRenewingSend: the self-fence period runs from
// the moment the renewing heartbeat was sent, not from its (late) answer,
// is capped at three of the intervals the master told, and is enforced on
// every read even while no heartbeat runs. The masters count on all three
// before they reassign a fenced server's regions.
func TestSelfFenceCountsFromTheRenewingSend(t *testing.T) {
	fc, addrs := newFakeCluster(t, 1, 1000) // told interval 1 s: fence after 3 s
	t0 := time.Unix(1_700_000_000, 0)
	clk := clock.NewManual(t0)
	cfg := testConfig(addrs...)
	cfg.Clock = clk
	cfg.RPCTimeout = time.Minute     // one attempt per heartbeat: its answer is only delayed
	cfg.SelfFenceAfter = time.Minute // capped at 3 × the master's interval
	s, sc := startServer(t, cfg)     // registration sent at t0
	if _, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 1, StartCode: sc, Ops: ops(opOpen, "a")}); err != nil {
		t.Fatal(err)
	}
	heartbeats := func() int { _, hbs, _ := fc.snapshot(); return len(hbs) }

	// A heartbeat sent at t0+1s is answered at t0+2.5s: it renews from
	// t0+1s, so the server serves until t0+4s.
	release := fc.holdHeartbeats()
	eventually(t, 5*time.Second, "the loop waiting for the first heartbeat", func() bool { return clk.Pending() == 1 })
	clk.Advance(time.Second)
	eventually(t, 5*time.Second, "the first heartbeat at the master", func() bool { return heartbeats() == 1 })
	clk.Advance(1500 * time.Millisecond)
	release()
	eventually(t, 5*time.Second, "the loop waiting for the second heartbeat", func() bool { return clk.Pending() == 1 })
	if got := hostedNames(s); len(got) != 1 {
		t.Fatalf("hosted %v at t0+2.5s, want [a]", got)
	}

	// Nothing renews after that (the next heartbeat, sent at t0+3.5s, is
	// never answered): at t0+4s the region is gone, for any reader.
	release = fc.holdHeartbeats()
	defer release()
	clk.Advance(time.Second)
	eventually(t, 5*time.Second, "the second heartbeat at the master", func() bool { return heartbeats() == 2 })
	clk.Advance(499 * time.Millisecond)
	if got := hostedNames(s); len(got) != 1 {
		t.Fatalf("hosted %v at t0+3.999s, want [a]", got)
	}
	clk.Advance(time.Millisecond)
	resp, err := s.ListRegions(context.Background(), &rspb.ListRegionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetRegions()) != 0 || resp.GetStartCode() != 0 {
		t.Fatalf("at t0+4s the server still answers regions %v under start code %d; want none, unregistered", resp.GetRegions(), resp.GetStartCode())
	}
	if _, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 1, StartCode: sc, Ops: ops(opOpen, "b")}); err == nil {
		t.Fatal("a batch for the fenced registration was admitted")
	}
}
