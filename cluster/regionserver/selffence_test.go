package regionserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/rspb"
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
	testwait.For(t, 5*time.Second, "the loop waiting for the first heartbeat", func() bool { return clk.Pending() == 1 })
	clk.Advance(time.Second)
	testwait.For(t, 5*time.Second, "the first heartbeat at the master", func() bool { return heartbeats() == 1 })
	clk.Advance(1500 * time.Millisecond)
	release()
	testwait.For(t, 5*time.Second, "the loop waiting for the second heartbeat", func() bool { return clk.Pending() == 1 })
	if got := hostedNames(s); len(got) != 1 {
		t.Fatalf("hosted %v at t0+2.5s, want [a]", got)
	}

	// Nothing renews after that (the next heartbeat, sent at t0+3.5s, is
	// never answered): at t0+4s the region is gone, for any reader.
	release = fc.holdHeartbeats()
	defer release()
	clk.Advance(time.Second)
	testwait.For(t, 5*time.Second, "the second heartbeat at the master", func() bool { return heartbeats() == 2 })
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

// TestAttemptGivenUpNeverAppliesAfterANewerOne: a master that gave up on
// an attempt (it timed out) and sent newer ones must not see the old one
// apply afterwards: an open still in its latency when a newer attempt
// closed the region would reopen it behind the master's back, and one
// arriving after a newer attempt was admitted is refused outright.
func TestAttemptGivenUpNeverAppliesAfterANewerOne(t *testing.T) {
	s, sc, clk := startWithLatency(t, time.Unix(1_700_000_000, 0), time.Second)
	testwait.For(t, 5*time.Second, "the heartbeat timer", func() bool { return clk.Pending() == 1 })
	batch := func(seq uint64, o []*rspb.RegionOp) *rspb.BatchRequest {
		return &rspb.BatchRequest{Term: 1, StartCode: sc, Seq: seq, Ops: o}
	}

	type out struct {
		resp *rspb.BatchResponse
		err  error
	}
	old := make(chan out, 1)
	go func() {
		r, err := s.ExecuteBatch(context.Background(), batch(1, ops(opOpen, "r1")))
		old <- out{r, err}
	}()
	testwait.For(t, 5*time.Second, "the old open in its latency", func() bool { return clk.Pending() == 2 })
	// The master gave attempt 1 up and sent attempt 2 (a close of r1
	// would queue behind the open on r1's lock, and the open must then not
	// apply first: the same check refuses it either way).
	second := make(chan out, 1)
	go func() {
		r, err := s.ExecuteBatch(context.Background(), batch(2, ops(opOpen, "r2")))
		second <- out{r, err}
	}()
	testwait.For(t, 5*time.Second, "attempt 2 in its latency", func() bool { return clk.Pending() == 3 })
	clk.Advance(time.Second)
	if o := <-second; o.err != nil || !o.resp.GetResults()[0].GetOk() {
		t.Fatalf("attempt 2: %v %v", o.resp, o.err)
	}
	o := <-old
	if o.err != nil {
		t.Fatal(o.err)
	}
	if r := o.resp.GetResults()[0]; r.GetOk() || !strings.Contains(r.GetError(), "stale attempt 1") {
		t.Fatalf("the old open's result %v: want refused as a stale attempt", r)
	}
	if got := hostedNames(s); len(got) != 1 || got[0] != "r2" {
		t.Fatalf("hosted %v, want only r2: the old attempt applied behind a newer one", got)
	}
	if _, err := s.ExecuteBatch(context.Background(), batch(1, ops(opOpen, "r3"))); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("attempt 1 arriving late: %v, want FAILED_PRECONDITION", err)
	}
	// A new term starts its own order (a no-op close: no latency to wait).
	if _, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 2, StartCode: sc, Seq: 1, Ops: ops(opClose, "r3")}); err != nil {
		t.Fatalf("term 2, attempt 1: %v", err)
	}
}
