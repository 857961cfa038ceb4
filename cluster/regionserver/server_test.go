package regionserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/rspb"
)

const (
	opOpen  = rspb.OpKind_OP_KIND_OPEN
	opClose = rspb.OpKind_OP_KIND_CLOSE
)

// testConfig is a fast-moving Config against masters.
//
// Its self-fence deadline is long on purpose, and so must be the interval
// the fake masters tell (it caps the deadline at 3 of them): a loaded
// machine can take longer than 3 short intervals to reach a new leader,
// and the server then rightly fences itself and registers again under a
// new start code, which a test about failover or expiry would take for a
// bug. Tests that need quick heartbeats set fastHeartbeats against masters
// telling a long interval; those about the told interval or the self-fence
// run on a Manual clock.
func testConfig(masters ...string) Config {
	log := hclog.NewNullLogger()
	if testing.Verbose() {
		log = hclog.New(&hclog.LoggerOptions{Name: "rs", Level: hclog.Debug, Output: os.Stderr})
	}
	return Config{ID: "rs1", GRPCAddr: "127.0.0.1:0", Masters: masters, RPCTimeout: 500 * time.Millisecond,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, SelfFenceAfter: time.Minute, Logger: log}
}

// fastHeartbeats is a Config.HeartbeatInterval that keeps tests quick
// without shortening the self-fence deadline (see testConfig).
const fastHeartbeats = 10 * time.Millisecond

// startServer starts a Server with cfg, stops it at cleanup, and waits for
// its registration.
func startServer(t testing.TB, cfg Config) (*Server, uint64) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sc, err := s.WaitRegistered(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s, sc
}

func ops(kind rspb.OpKind, regions ...string) []*rspb.RegionOp {
	var out []*rspb.RegionOp
	for i, r := range regions {
		out = append(out, &rspb.RegionOp{Kind: kind, Region: r, Table: "t", ProcId: uint64(i + 1)})
	}
	return out
}

func hostedNames(s *Server) []string {
	var names []string
	for _, r := range s.Regions() {
		names = append(names, r.GetRegion())
	}
	return names
}

func TestConfigValidate(t *testing.T) {
	ok := Config{ID: "rs1", GRPCAddr: "10.0.0.5:16020", Masters: []string{"10.0.0.1:7070"}}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		err    string // substring; "" = valid
	}{
		{"valid", func(*Config) {}, ""},
		{"port 0 to listen", func(c *Config) { c.GRPCAddr = "127.0.0.1:0" }, ""},
		{"rate 1", func(c *Config) { c.FailureRate = 1 }, ""},
		{"no id", func(c *Config) { c.ID = " " }, "ID is required"},
		{"no addr", func(c *Config) { c.GRPCAddr = "" }, "GRPCAddr is required"},
		{"wildcard addr", func(c *Config) { c.GRPCAddr = "0.0.0.0:1" }, "not a wildcard"},
		{"empty host", func(c *Config) { c.GRPCAddr = ":1" }, "not a wildcard"},
		{"no port", func(c *Config) { c.GRPCAddr = "h" }, "want host:port"},
		{"no masters", func(c *Config) { c.Masters = []string{" ", ""} }, "at least one master"},
		{"master port 0", func(c *Config) { c.Masters = []string{"h:0"} }, "1..65535"},
		{"negative latency", func(c *Config) { c.OpLatency = -1 }, "OpLatency"},
		{"rate above 1", func(c *Config) { c.FailureRate = 1.5 }, "FailureRate"},
		{"negative rate", func(c *Config) { c.FailureRate = -0.1 }, "FailureRate"},
		{"negative interval", func(c *Config) { c.HeartbeatInterval = -time.Second }, "HeartbeatInterval"},
		{"negative parallelism", func(c *Config) { c.OpParallelism = -1 }, "OpParallelism"},
		{"backoff inverted", func(c *Config) { c.MinBackoff, c.MaxBackoff = time.Second, time.Millisecond }, "backoff"},
		{"http on a wildcard", func(c *Config) { c.HTTPAddr = "0.0.0.0:9080" }, ""},
		{"http port 0", func(c *Config) { c.HTTPAddr = "127.0.0.1:0" }, ""},
		{"http without port", func(c *Config) { c.HTTPAddr = "h" }, "HTTPAddr"},
		{"http bad port", func(c *Config) { c.HTTPAddr = "h:x" }, "HTTPAddr"},
		{"listen on a wildcard", func(c *Config) { c.ListenAddr = "0.0.0.0:16020" }, ""},
		{"listen without port", func(c *Config) { c.ListenAddr = "0.0.0.0" }, "ListenAddr"},
		{"every problem named", func(c *Config) { c.ID = ""; c.FailureRate = 2 }, "ID is required; FailureRate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.Validate()
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want ErrInvalidConfig containing %q", err, tc.err)
			}
			if _, nerr := New(c); !errors.Is(nerr, ErrInvalidConfig) {
				t.Fatalf("New accepted an invalid config: %v", nerr)
			}
		})
	}
}

// TestRegistration: the server finds the leader through a dead address
// and a standby's hint, registers with its address, adopts the master's
// interval and term, and heartbeats with its start code and region count.
//
// The master tells a 20 ms interval, so the server fences itself 60 ms
// after its last renewal: its time is a Manual clock, moved one interval
// per heartbeat, so that no stall of a loaded machine can make it do so.
func TestRegistration(t *testing.T) {
	fc, addrs := newFakeCluster(t, 2, 20)
	fc.setLeader(addrs[1]) // term 2; addrs[0] is now a standby hinting addrs[1]
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	cfg := testConfig(deadAddr(t), addrs[0])
	cfg.Clock = clk
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	// The pause after the dead address runs on clk.
	testwait.For(t, 5*time.Second, "the registration", func() bool {
		if s.StartCode() != 0 {
			return true
		}
		if clk.Pending() > 0 {
			clk.Advance(cfg.MinBackoff)
		}
		return false
	})
	sc, err := s.WaitRegistered(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	regs, _, _ := fc.snapshot()
	if len(regs) != 1 || regs[0].master != addrs[1] || regs[0].req.GetAddress() != s.Addr() || regs[0].req.GetServerId() != "rs1" || len(regs[0].req.GetRegions()) != 0 {
		t.Fatalf("registrations %+v, want one at %s with address %s and no regions", regs, addrs[1], s.Addr())
	}
	if got := s.HighestTerm(); got != 2 {
		t.Fatalf("highest term %d, want the master's 2", got)
	}
	if got := s.HeartbeatInterval(); got != 20*time.Millisecond {
		t.Fatalf("heartbeat interval %v, want the master's 20ms", got)
	}
	if s.StartCode() != sc || sc == 0 {
		t.Fatalf("start code %d, WaitRegistered said %d", s.StartCode(), sc)
	}
	if _, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 2, StartCode: sc, Ops: ops(opOpen, "a", "b")}); err != nil {
		t.Fatal(err)
	}
	_, before, _ := fc.snapshot()
	for i := 1; i <= 3; i++ {
		testwait.For(t, 5*time.Second, "the loop waiting for the next heartbeat", func() bool { return clk.Pending() == 1 })
		clk.Advance(20 * time.Millisecond)
		testwait.For(t, 5*time.Second, fmt.Sprintf("heartbeat %d after the batch", i), func() bool { _, hbs, _ := fc.snapshot(); return len(hbs) == len(before)+i })
	}
	_, hbs, _ := fc.snapshot()
	for i, h := range hbs {
		if h.master != addrs[1] || h.req.GetStartCode() != sc || (i >= len(before) && h.req.GetRegionCount() != 2) {
			t.Fatalf("heartbeat %d %+v: want start code %d at the leader (and two regions after the batch)", i, h, sc)
		}
	}
}

// TestHeartbeatIntervalOverride: Config.HeartbeatInterval beats the
// master's, and the heartbeats follow a Manual clock exactly.
func TestHeartbeatIntervalOverride(t *testing.T) {
	fc, addrs := newFakeCluster(t, 1, 60_000)
	clk := &countingClock{Manual: clock.NewManual(time.Unix(1_700_000_000, 0))}
	cfg := testConfig(addrs...)
	cfg.Clock, cfg.HeartbeatInterval = clk, 5*time.Second
	s, _ := startServer(t, cfg)
	if got := s.HeartbeatInterval(); got != 5*time.Second {
		t.Fatalf("interval %v, want the configured 5s", got)
	}
	for want := 1; want <= 3; want++ {
		testwait.For(t, 5*time.Second, "the loop waiting for the next heartbeat", func() bool { return clk.Pending() == 1 })
		fired := clk.fired.Load()
		clk.Advance(4 * time.Second)
		// Advance runs every callback that fell due before it returns: none
		// did, so the loop is still asleep and cannot have sent anything.
		if n := clk.fired.Load() - fired; n != 0 {
			t.Fatalf("%d timers fired 4s into a 5s interval", n)
		}
		if _, hbs, _ := fc.snapshot(); len(hbs) != want-1 {
			t.Fatalf("%d heartbeats after 4s of %d, want %d", len(hbs), want, want-1)
		}
		clk.Advance(time.Second)
		testwait.For(t, 5*time.Second, fmt.Sprintf("heartbeat %d", want), func() bool { _, hbs, _ := fc.snapshot(); return len(hbs) == want })
	}
}

// countingClock is a Manual clock that counts the callbacks it has run.
type countingClock struct {
	*clock.Manual
	fired atomic.Int64
}

func (c *countingClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.Manual.AfterFunc(d, func() { c.fired.Add(1); f() })
}

// TestExecuteBatch walks one server through a sequence of batches over
// gRPC: idempotent open and close, bad operations, and the fencing checks.
func TestExecuteBatch(t *testing.T) {
	fc, addrs := newFakeCluster(t, 1, 60_000)
	fc.setLeader(addrs[0]) // term 2
	s, sc := startServer(t, testConfig(addrs...))
	cl := rsClient(t, s.Addr())

	type res struct {
		region        string
		ok, already   bool
		errorContains string
	}
	for _, step := range []struct {
		name     string
		req      *rspb.BatchRequest
		code     codes.Code // of a refused batch
		msg      string     // its message (a 0.1.0 master reads it)
		reason   string     // its rspb.RefusalDomain detail's ("": none)
		meta     map[string]string
		want     []res
		hosted   []string
		highTerm uint64
	}{
		{name: "open two", req: &rspb.BatchRequest{Term: 2, StartCode: sc, ServerId: "rs1", Ops: ops(opOpen, "r1", "r2")},
			want: []res{{"r1", true, false, ""}, {"r2", true, false, ""}}, hosted: []string{"r1", "r2"}, highTerm: 2},
		{name: "open again is already", req: &rspb.BatchRequest{Term: 2, StartCode: sc, Ops: ops(opOpen, "r1", "r3")},
			want: []res{{"r1", true, true, ""}, {"r3", true, false, ""}}, hosted: []string{"r1", "r2", "r3"}, highTerm: 2},
		{name: "close", req: &rspb.BatchRequest{Term: 2, StartCode: sc, Ops: ops(opClose, "r2")},
			want: []res{{"r2", true, false, ""}}, hosted: []string{"r1", "r3"}, highTerm: 2},
		{name: "close of a region not hosted is already", req: &rspb.BatchRequest{Term: 2, StartCode: sc, Ops: ops(opClose, "r2", "nowhere")},
			want: []res{{"r2", true, true, ""}, {"nowhere", true, true, ""}}, hosted: []string{"r1", "r3"}, highTerm: 2},
		{name: "same region in order", req: &rspb.BatchRequest{Term: 2, StartCode: sc, Ops: append(ops(opOpen, "r4"), append(ops(opClose, "r4"), ops(opOpen, "r4")...)...)},
			want: []res{{"r4", true, false, ""}, {"r4", true, false, ""}, {"r4", true, false, ""}}, hosted: []string{"r1", "r3", "r4"}, highTerm: 2},
		{name: "bad operations", req: &rspb.BatchRequest{Term: 2, StartCode: sc, Ops: []*rspb.RegionOp{{Kind: opOpen}, {Region: "r9"}}},
			want: []res{{"", false, false, "empty region name"}, {"r9", false, false, "unknown operation kind"}}, hosted: []string{"r1", "r3", "r4"}, highTerm: 2},
		{name: "higher term is adopted", req: &rspb.BatchRequest{Term: 5, StartCode: sc, Ops: ops(opClose, "r4")},
			want: []res{{"r4", true, false, ""}}, hosted: []string{"r1", "r3"}, highTerm: 5},
		{name: "stale term refuses the whole batch", req: &rspb.BatchRequest{Term: 4, StartCode: sc, Ops: ops(opClose, "r1", "r3")},
			code: codes.FailedPrecondition, msg: "stale term 4: this server has seen term 5", hosted: []string{"r1", "r3"}, highTerm: 5,
			reason: rspb.ReasonStaleTerm, meta: map[string]string{rspb.MetaServerTerm: "5", rspb.MetaServerStartCode: fmt.Sprint(sc)}},
		{name: "wrong start code", req: &rspb.BatchRequest{Term: 5, StartCode: sc + 1, Ops: ops(opClose, "r1")},
			code: codes.FailedPrecondition, msg: fmt.Sprintf("wrong start code %d: this server's is %d", sc+1, sc), hosted: []string{"r1", "r3"}, highTerm: 5,
			reason: rspb.ReasonWrongStartCode, meta: map[string]string{rspb.MetaServerTerm: "5", rspb.MetaServerStartCode: fmt.Sprint(sc)}},
		{name: "wrong start code still raises the term", req: &rspb.BatchRequest{Term: 6, StartCode: sc - 1, Ops: ops(opOpen, "r7")},
			code: codes.FailedPrecondition, msg: fmt.Sprintf("wrong start code %d: this server's is %d", sc-1, sc), hosted: []string{"r1", "r3"}, highTerm: 6,
			reason: rspb.ReasonWrongStartCode, meta: map[string]string{rspb.MetaServerTerm: "6", rspb.MetaServerStartCode: fmt.Sprint(sc)}},
		// Not one the dispatcher tells apart from another refusal: no detail.
		{name: "other server", req: &rspb.BatchRequest{Term: 6, StartCode: sc, ServerId: "rs2", Ops: ops(opClose, "r1")},
			code: codes.FailedPrecondition, msg: `wrong server: this is "rs1", the batch is for "rs2"`, hosted: []string{"r1", "r3"}, highTerm: 6},
		{name: "empty batch", req: &rspb.BatchRequest{Term: 6, StartCode: sc}, hosted: []string{"r1", "r3"}, highTerm: 6},
	} {
		t.Run(step.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := cl.ExecuteBatch(ctx, step.req)
			if step.code != codes.OK {
				if st := status.Convert(err); st.Code() != step.code || st.Message() != step.msg {
					t.Fatalf("error %v, want %v %q", err, step.code, step.msg)
				}
				wantRefusal(t, err, step.reason, step.meta)
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.GetResults()) != len(step.want) {
					t.Fatalf("%d results, want %d", len(resp.GetResults()), len(step.want))
				}
				for i, w := range step.want {
					r := resp.GetResults()[i]
					if r.GetRegion() != w.region || r.GetOk() != w.ok || r.GetAlready() != w.already || !strings.Contains(r.GetError(), w.errorContains) ||
						r.GetProcId() != step.req.GetOps()[i].GetProcId() || r.GetKind() != step.req.GetOps()[i].GetKind() {
						t.Fatalf("result %d: %v, want %+v", i, r, w)
					}
				}
				if resp.GetHighestTerm() != step.highTerm {
					t.Fatalf("response highest term %d, want %d", resp.GetHighestTerm(), step.highTerm)
				}
			}
			if got := hostedNames(s); strings.Join(got, ",") != strings.Join(step.hosted, ",") {
				t.Fatalf("hosted %v, want %v", got, step.hosted)
			}
			if s.HighestTerm() != step.highTerm {
				t.Fatalf("highest term %d, want %d", s.HighestTerm(), step.highTerm)
			}
		})
	}
	lr, err := cl.ListRegions(context.Background(), &rspb.ListRegionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if lr.GetServerId() != "rs1" || lr.GetStartCode() != sc || len(lr.GetRegions()) != 2 || lr.GetRegions()[0].GetTable() != "t" || lr.GetRegions()[0].GetOpenedUnixMs() == 0 {
		t.Fatalf("ListRegions %v", lr)
	}
}

// TestExpiry: told its lease expired (expired = true, or NOT_FOUND), the
// server closes every region, registers again with none, and refuses the
// old start code.
func TestExpiry(t *testing.T) {
	for _, notFound := range []bool{false, true} {
		t.Run(map[bool]string{false: "expired", true: "not found"}[notFound], func(t *testing.T) { testExpiry(t, notFound) })
	}
}

func testExpiry(t *testing.T, notFound bool) {
	fc, addrs := newFakeCluster(t, 1, 60_000)
	fc.notFound = notFound
	cfg := testConfig(addrs...)
	cfg.HeartbeatInterval = fastHeartbeats
	s, sc := startServer(t, cfg)
	if _, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 1, StartCode: sc, Ops: ops(opOpen, "a", "b", "c")}); err != nil {
		t.Fatal(err)
	}
	fc.expireNext("rs1")
	testwait.For(t, 5*time.Second, "a new registration", func() bool { return s.StartCode() != 0 && s.StartCode() != sc })
	if got := s.Regions(); len(got) != 0 {
		t.Fatalf("regions after expiry: %v", got)
	}
	regs, _, _ := fc.snapshot()
	if len(regs) != 2 || len(regs[1].req.GetRegions()) != 0 {
		t.Fatalf("registrations %v: want a second one naming no region", regs)
	}
	_, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 1, StartCode: sc, Ops: ops(opOpen, "a")})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "wrong start code") {
		t.Fatalf("old start code: %v, want FAILED_PRECONDITION wrong start code", err)
	}
	resp, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 1, StartCode: s.StartCode(), Ops: ops(opOpen, "a")})
	if err != nil || !resp.GetResults()[0].GetOk() || resp.GetResults()[0].GetAlready() {
		t.Fatalf("new start code: %v, %v", resp, err)
	}
	// Heartbeats carry the new start code and are no longer expired.
	newSC := s.StartCode()
	testwait.For(t, 5*time.Second, "heartbeats with the new start code", func() bool {
		_, hbs, _ := fc.snapshot()
		return len(hbs) > 0 && hbs[len(hbs)-1].req.GetStartCode() == newSC && s.StartCode() == newSC
	})
}

// TestFailover: when the leader changes, heartbeats follow the new one's
// hint, the start code survives (leases are replicated), the new term
// fences the old leader, and an expiry by the new leader still works.
//
// Whatever the load, a failover must not cost the start code here: the
// server's self-fence deadline is long (see testConfig), so a start code
// that changes is a lost lease, not a slow machine.
func TestFailover(t *testing.T) {
	fc, addrs := newFakeCluster(t, 3, 60_000)
	cfg := testConfig(addrs...)
	cfg.HeartbeatInterval = fastHeartbeats
	s, sc := startServer(t, cfg)
	for i, next := range []string{addrs[2], addrs[1], addrs[0]} {
		fc.setLeader(next)
		term := fc.currentTerm()
		testwait.For(t, 5*time.Second, fmt.Sprintf("heartbeats at the new leader %d", i), func() bool {
			_, hbs, _ := fc.snapshot()
			return len(hbs) > 0 && hbs[len(hbs)-1].master == next && s.HighestTerm() == term
		})
		if s.StartCode() != sc {
			t.Fatalf("start code changed across a failover: %d → %d", sc, s.StartCode())
		}
		_, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: term - 1, StartCode: sc, Ops: ops(opOpen, "x")})
		if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "stale term") {
			t.Fatalf("deposed leader's batch: %v, want stale term", err)
		}
	}
	fc.expireNext("rs1")
	testwait.For(t, 5*time.Second, "re-registration at the new leader", func() bool {
		regs, _, _ := fc.snapshot()
		return len(regs) == 2 && regs[1].master == addrs[0] && s.StartCode() != 0 && s.StartCode() != sc
	})
}

// TestInjectedFailures: failures hit opens only, leave the region closed,
// and are reported FAILED_OPEN; a rate of 0.5 fails about half.
func TestInjectedFailures(t *testing.T) {
	for _, tc := range []struct {
		rate     float64
		n        int
		min, max int // failed opens
	}{
		{0, 50, 0, 0},
		{1, 5, 5, 5},
		{0.5, 400, 120, 280},
	} {
		t.Run(fmt.Sprint(tc.rate), func(t *testing.T) {
			fc, addrs := newFakeCluster(t, 1, 60_000)
			cfg := testConfig(addrs...)
			cfg.FailureRate = tc.rate
			s, sc := startServer(t, cfg)
			var regions []string
			for i := range tc.n {
				regions = append(regions, fmt.Sprintf("t,%04d", i))
			}
			resp, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 1, StartCode: sc, Ops: ops(opOpen, regions...)})
			if err != nil {
				t.Fatal(err)
			}
			failed := map[string]bool{}
			for _, r := range resp.GetResults() {
				if !r.GetOk() {
					if r.GetError() != InjectedFailure {
						t.Fatalf("result %v: want %q", r, InjectedFailure)
					}
					failed[r.GetRegion()] = true
				}
			}
			if len(failed) < tc.min || len(failed) > tc.max {
				t.Fatalf("%d of %d opens failed, want %d..%d", len(failed), tc.n, tc.min, tc.max)
			}
			if got := len(s.Regions()); got != tc.n-len(failed) {
				t.Fatalf("%d regions hosted, want %d", got, tc.n-len(failed))
			}
			cr, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 1, StartCode: sc, Ops: ops(opClose, regions...)})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range cr.GetResults() {
				if !r.GetOk() || r.GetAlready() != failed[r.GetRegion()] {
					t.Fatalf("close %v: closes never fail; already iff the open failed", r)
				}
			}
			testwait.For(t, 5*time.Second, "FAILED_OPEN reports", func() bool {
				_, _, reps := fc.snapshot()
				if len(reps) != len(failed) {
					return false
				}
				for _, r := range reps {
					if !failed[r.req.GetRegion()] || r.req.GetState() != StateFailedOpen || r.req.GetStartCode() != sc || r.req.GetError() != InjectedFailure {
						t.Fatalf("report %v", r.req)
					}
				}
				return true
			})
		})
	}
}

// TestCloseRegion: a region closed by the server itself is reported CLOSED.
func TestCloseRegion(t *testing.T) {
	fc, addrs := newFakeCluster(t, 1, 60_000)
	s, sc := startServer(t, testConfig(addrs...))
	if _, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 1, StartCode: sc, Ops: ops(opOpen, "a", "b")}); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseRegion(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseRegion(context.Background(), "a"); !errors.Is(err, ErrNotHosted) {
		t.Fatalf("second close: %v, want ErrNotHosted", err)
	}
	if got := hostedNames(s); len(got) != 1 || got[0] != "b" {
		t.Fatalf("hosted %v", got)
	}
	testwait.For(t, 5*time.Second, "a CLOSED report", func() bool {
		_, _, reps := fc.snapshot()
		return len(reps) == 1 && reps[0].req.GetRegion() == "a" && reps[0].req.GetState() == StateClosed && reps[0].req.GetStartCode() == sc
	})
}

// startWithLatency starts a server whose operations take latency on a
// Manual clock set to start, its masters (one fake) heartbeating hourly.
func startWithLatency(t *testing.T, start time.Time, latency time.Duration) (*Server, uint64, *clock.Manual) {
	t.Helper()
	_, addrs := newFakeCluster(t, 1, 3_600_000)
	clk := clock.NewManual(start)
	cfg := testConfig(addrs...)
	cfg.Clock, cfg.OpLatency = clk, latency
	s, sc := startServer(t, cfg)
	return s, sc, clk
}

// TestOvertakenWhileRunning: with OpLatency on a Manual clock, a batch of
// term 1 is still running when a term-2 batch arrives; its open must not
// be applied when its latency ends, nor must a close hold up a batch on
// another region.
func TestOvertakenWhileRunning(t *testing.T) {
	s, sc, clk := startWithLatency(t, time.Unix(1_700_000_000, 0), time.Second)
	testwait.For(t, 5*time.Second, "the heartbeat timer", func() bool { return clk.Pending() == 1 })

	type out struct {
		resp *rspb.BatchResponse
		err  error
	}
	run := func(term uint64, o []*rspb.RegionOp) chan out {
		ch := make(chan out, 1)
		go func() {
			r, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: term, StartCode: sc, Ops: o})
			ch <- out{r, err}
		}()
		return ch
	}
	old := run(1, ops(opOpen, "r1", "r2"))
	testwait.For(t, 5*time.Second, "two operations sleeping", func() bool { return clk.Pending() == 3 })
	newer := run(2, ops(opOpen, "r3"))
	testwait.For(t, 5*time.Second, "the newer batch sleeping", func() bool { return clk.Pending() == 4 })
	clk.Advance(time.Second)
	for name, ch := range map[string]chan out{"old": old, "newer": newer} {
		select {
		case o := <-ch:
			if o.err != nil {
				t.Fatalf("%s batch: %v", name, o.err)
			}
			for _, r := range o.resp.GetResults() {
				wantOK := name == "newer"
				if r.GetOk() != wantOK || (!wantOK && !strings.Contains(r.GetError(), "stale term 1")) {
					t.Fatalf("%s batch result %v: want ok=%v", name, r, wantOK)
				}
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s batch still running after its latency", name)
		}
	}
	if got := s.Regions(); len(got) != 1 || got[0].GetRegion() != "r3" || got[0].GetOpenedUnixMs() != clk.Now().UnixMilli() {
		t.Fatalf("hosted %v, want only r3, opened at the clock's time", got)
	}
}

// TestStopInterruptsBatch: a batch in its latency when the server stops
// ends UNAVAILABLE, without applying anything.
func TestStopInterruptsBatch(t *testing.T) {
	s, sc, clk := startWithLatency(t, time.Unix(0, 0), time.Hour)
	errc := make(chan error, 1)
	go func() {
		_, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 1, StartCode: sc, Ops: ops(opOpen, "a")})
		errc <- err
	}()
	testwait.For(t, 5*time.Second, "the operation sleeping", func() bool { return clk.Pending() == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; status.Code(err) != codes.Unavailable {
		t.Fatalf("interrupted batch: %v, want UNAVAILABLE", err)
	}
	if len(s.Regions()) != 0 {
		t.Fatalf("an interrupted open was applied: %v", s.Regions())
	}
}

// TestConcurrentBatches: many batches over the same regions at once; each
// region's applied opens and closes must alternate, ending in the state
// Regions reports (run with -race).
func TestConcurrentBatches(t *testing.T) {
	_, addrs := newFakeCluster(t, 1, 60_000)
	cfg := testConfig(addrs...)
	// A latency makes operations on one region overlap: without the
	// per-region lock two opens would both find the region closed and
	// both count as applied.
	cfg.OpParallelism, cfg.OpLatency = 4, 200*time.Microsecond
	s, sc := startServer(t, cfg)
	cl := rsClient(t, s.Addr())
	const workers, batches, regions = 8, 30, 12
	var mu sync.Mutex
	applied := map[string]int{} // +1 per applied open, -1 per applied close
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range batches {
				var o []*rspb.RegionOp
				for range 1 + rng.IntN(8) {
					kind := opOpen
					if rng.IntN(2) == 0 {
						kind = opClose
					}
					o = append(o, &rspb.RegionOp{Kind: kind, Region: fmt.Sprintf("r%02d", rng.IntN(regions)), Table: "t"})
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := cl.ExecuteBatch(ctx, &rspb.BatchRequest{Term: 1, StartCode: sc, Ops: o})
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, r := range resp.GetResults() {
					if !r.GetOk() {
						t.Errorf("result %v", r)
					}
					if !r.GetAlready() {
						if r.GetKind() == opOpen {
							applied[r.GetRegion()]++
						} else {
							applied[r.GetRegion()]--
						}
					}
				}
				mu.Unlock()
			}
		}()
	}
	// Readers at the same time.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			_ = s.Regions()
			_, _ = cl.ListRegions(context.Background(), &rspb.ListRegionsRequest{})
		}
	}()
	wg.Wait()
	<-done
	hosted := map[string]bool{}
	for _, n := range hostedNames(s) {
		hosted[n] = true
	}
	for i := range regions {
		r := fmt.Sprintf("r%02d", i)
		want := 0
		if hosted[r] {
			want = 1
		}
		if applied[r] != want {
			t.Errorf("region %s: applied opens minus closes %d, hosted %v", r, applied[r], hosted[r])
		}
	}
}

// TestLifecycle: Start once, Stop idempotent, no restart.
func TestLifecycle(t *testing.T) {
	_, addrs := newFakeCluster(t, 1, 60_000)
	s, err := New(testConfig(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("stop before start: %v", err)
	}
	if err := s.Start(ctx); !errors.Is(err, ErrStopped) {
		t.Fatalf("start after stop: %v", err)
	}
	s, _ = startServer(t, testConfig(addrs...))
	if err := s.Start(ctx); !errors.Is(err, ErrStarted) {
		t.Fatalf("second start: %v", err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The address is free again after Stop.
	again, err := New(Config{ID: "x", GRPCAddr: s.Addr(), Masters: addrs})
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Start(ctx); err != nil {
		t.Fatalf("start on the freed address: %v", err)
	}
	_ = again.Stop(ctx)
}

// TestNoMaster: with no master reachable the server still serves, and
// refuses batches (it is not registered).
func TestNoMaster(t *testing.T) {
	s, err := New(testConfig(deadAddr(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := s.WaitRegistered(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitRegistered: %v", err)
	}
	_, err = rsClient(t, s.Addr()).ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 1, StartCode: 0, Ops: ops(opOpen, "a")})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "not registered") {
		t.Fatalf("batch to an unregistered server: %v", err)
	}
	wantRefusal(t, err, rspb.ReasonWrongStartCode, map[string]string{rspb.MetaServerTerm: "1", rspb.MetaServerStartCode: "0"})
}

// wantRefusal fails t unless err carries the rspb.RefusalDomain detail of
// reason with exactly metadata meta; reason "": unless it carries none.
func wantRefusal(t *testing.T, err error, reason string, meta map[string]string) {
	t.Helper()
	info := rspb.RefusalInfo(err)
	if reason == "" {
		if info != nil {
			t.Fatalf("refusal %v carries detail %v, want none", err, info)
		}
		return
	}
	if info.GetReason() != reason || !maps.Equal(info.GetMetadata(), meta) {
		t.Fatalf("refusal %v carries detail %v, want reason %s metadata %v", err, info, reason, meta)
	}
}

// TestSelfFence: a server that cannot reach any master closes its regions
// once SelfFenceAfter passes without a heartbeat, before the masters (whose
// hard limit is longer) reassign them, then registers again when a master
// answers.
//
// The server's time is a Manual clock that moves only when the regions
// are hosted and the masters are gone: on a real clock, a loaded machine
// could let SelfFenceAfter pass before the test even opened the regions.
func TestSelfFence(t *testing.T) {
	fc, addrs := newFakeCluster(t, 1, 10)
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	cfg := testConfig(addrs...)
	cfg.Clock, cfg.SelfFenceAfter = clk, 300*time.Millisecond
	s, sc := startServer(t, cfg)
	if _, err := s.ExecuteBatch(context.Background(), &rspb.BatchRequest{Term: 1, StartCode: sc, Ops: ops(opOpen, "a", "b")}); err != nil {
		t.Fatal(err)
	}
	fc.setLeader("") // every master now answers UNAVAILABLE without a hint
	// Each poll moves the server's time on by a heartbeat interval: its
	// heartbeats, backoffs and self-fence deadline all run on clk.
	tick := func() { clk.Advance(10 * time.Millisecond) }
	testwait.For(t, 5*time.Second, "regions closed by the server itself", func() bool { tick(); return len(s.Regions()) == 0 })
	if s.StartCode() == sc {
		t.Fatal("still claims its old start code after fencing itself")
	}
	fc.setLeader(addrs[0])
	testwait.For(t, 5*time.Second, "a new registration", func() bool { tick(); return s.StartCode() != 0 && s.StartCode() != sc })
}

// TestListenAddr: with Config.ListenAddr the server listens there and
// still registers with GRPCAddr, a name the masters call it by.
func TestListenAddr(t *testing.T) {
	fc, addrs := newFakeCluster(t, 1, 60_000)
	fc.setLeader(addrs[0])
	bind := testnet.FreeAddr(t)
	_, port, _ := net.SplitHostPort(bind)
	cfg := testConfig(addrs[0])
	cfg.GRPCAddr, cfg.ListenAddr = net.JoinHostPort("localhost", port), bind
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	if _, err := s.WaitRegistered(context.Background()); err != nil {
		t.Fatal(err)
	}
	regs, _, _ := fc.snapshot()
	if len(regs) != 1 || regs[0].req.GetAddress() != cfg.GRPCAddr || s.Addr() != cfg.GRPCAddr {
		t.Fatalf("registrations %+v, Addr %q: want one with the advertised %s", regs, s.Addr(), cfg.GRPCAddr)
	}
	c, err := net.Dial("tcp", bind)
	if err != nil {
		t.Fatalf("nothing listens on ListenAddr %s: %v", bind, err)
	}
	_ = c.Close()
}
