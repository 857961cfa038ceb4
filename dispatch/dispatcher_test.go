package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testcheck"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/rspb"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	want := Config{MinBatch: 32, MaxBatch: 1000, Delay: 150 * time.Millisecond, RetryBase: 100 * time.Millisecond,
		RetryMax: 10 * time.Second, MaxFailures: 10, CallTimeout: 10 * time.Second}
	if c.MinBatch != want.MinBatch || c.MaxBatch != want.MaxBatch || c.Delay != want.Delay || c.RetryBase != want.RetryBase ||
		c.RetryMax != want.RetryMax || c.MaxFailures != want.MaxFailures || c.CallTimeout != want.CallTimeout {
		t.Fatalf("DefaultConfig = %+v", c)
	}
	if _, ok := c.Clock.(clock.Real); !ok {
		t.Fatalf("default clock %T, want clock.Real", c.Clock)
	}
	// Zero values take the defaults.
	d, err := New(Config{Term: 1, MasterID: "m", Transport: newFakeTransport(),
		OnResult: func(Result) {}, OnServerFailed: func(string, error) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	if d.cfg.MinBatch != 32 || d.cfg.MaxBatch != 1000 || d.cfg.Delay != DefaultDelay || d.cfg.MaxFailures != 10 || d.cfg.Logger == nil {
		t.Fatalf("defaults not applied: %+v", d.cfg)
	}
}

func TestConfigValidate(t *testing.T) {
	valid := func() Config {
		c := DefaultConfig()
		c.Term, c.MasterID, c.Transport = 3, "m1", newFakeTransport()
		c.OnResult, c.OnServerFailed = func(Result) {}, func(string, error) {}
		return c
	}
	tests := []struct {
		name string
		mod  func(*Config)
		want []string // substrings of the error; none means valid
	}{
		{"valid", func(*Config) {}, nil},
		{"zeros take defaults", func(c *Config) { c.MinBatch, c.MaxBatch, c.Delay, c.RetryBase, c.RetryMax = 0, 0, 0, 0, 0 }, nil},
		{"no term", func(c *Config) { c.Term = 0 }, []string{"Term is 0"}},
		{"no master id", func(c *Config) { c.MasterID = "" }, []string{"MasterID is empty"}},
		{"no transport", func(c *Config) { c.Transport = nil }, []string{"Transport is nil"}},
		{"no OnResult", func(c *Config) { c.OnResult = nil }, []string{"OnResult is nil"}},
		{"no OnServerFailed", func(c *Config) { c.OnServerFailed = nil }, []string{"OnServerFailed is nil"}},
		{"negative batch", func(c *Config) { c.MaxBatch = -1 }, []string{"MaxBatch -1 is negative"}},
		{"negative min batch", func(c *Config) { c.MinBatch = -1 }, []string{"MinBatch -1 is negative"}},
		{"batch too big", func(c *Config) { c.MaxBatch = 5000 }, []string{"MaxBatch 5000 is above 4096"}},
		{"min not below max", func(c *Config) { c.MinBatch, c.MaxBatch = 64, 64 }, []string{"MinBatch 64 is not below MaxBatch 64"}},
		{"min above default max", func(c *Config) { c.MinBatch, c.MaxBatch = 2000, 0 }, []string{"MinBatch 2000 is not below MaxBatch 1000"}},
		{"negative delay", func(c *Config) { c.Delay = -time.Second }, []string{"Delay -1s is negative"}},
		{"max below base", func(c *Config) { c.RetryBase, c.RetryMax = time.Second, time.Millisecond },
			[]string{"RetryMax 1ms is below RetryBase 1s"}},
		{"negative failures", func(c *Config) { c.MaxFailures = -2 }, []string{"MaxFailures -2 is negative"}},
		{"negative timeout", func(c *Config) { c.CallTimeout = -1 }, []string{"CallTimeout -1ns is negative"}},
		{"all reported", func(c *Config) { c.Term, c.Transport, c.MaxBatch = 0, nil, -5 },
			[]string{"Term is 0", "Transport is nil", "MaxBatch -5"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.mod(&c)
			if !testcheck.Refusal(t, c.Validate(), tc.want) {
				return
			}
			if _, nerr := New(c); nerr == nil {
				t.Error("New accepted the config")
			}
		})
	}
}

func TestInvalidOp(t *testing.T) {
	tests := []struct {
		name string
		tg   Target
		op   Op
	}{
		{"no server", Target{}, Op{Kind: rspb.OpKind_OP_KIND_OPEN, Region: "r"}},
		{"no region", target("a", 1), Op{Kind: rspb.OpKind_OP_KIND_OPEN}},
		{"no kind", target("a", 1), Op{Region: "r"}},
		{"bad kind", target("a", 1), Op{Kind: 9, Region: "r"}},
	}
	h := newHarness(t, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h.d.Dispatch(tc.tg, tc.op) // answered before it returns
			select {
			case r := <-h.results:
				if !errors.Is(r.Err, ErrInvalidOp) || r.Op != tc.op {
					t.Fatalf("result %+v, want ErrInvalidOp", r)
				}
			default:
				t.Fatal("no immediate result")
			}
		})
	}
	if s := h.d.Stats(); s.Ops != 0 || h.clk.Pending() != 0 {
		t.Fatalf("invalid ops were buffered: %+v", s)
	}
}

// A buffer is flushed as soon as it holds more than MinBatch ops.
func TestCountFlush(t *testing.T) {
	tests := []struct {
		name     string
		minBatch int
		ops      int
		sendNow  bool // the Dispatch calls alone send a batch
	}{
		{"32 of 32 wait", 32, 32, false},
		{"33 of 32 go at once", 32, 33, true},
		{"1 of 1 waits", 1, 1, false},
		{"2 of 1 go at once", 1, 2, true},
		{"5 of 4 go at once", 4, 5, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.MinBatch = tc.minBatch })
			ops := h.dispatch(target("a", 1), tc.ops)
			if !tc.sendNow {
				h.wantBatches(0)
				if h.clk.Pending() != 1 {
					t.Fatalf("%d timers pending, want the delay timer", h.clk.Pending())
				}
				h.clk.Advance(DefaultDelay)
			}
			h.wantBatches(1)
			c := h.nextCallOf("batch", ops)
			h.answer(c, nil)
			for _, r := range h.collect(tc.ops) {
				if !r.OK || r.Err != nil {
					t.Fatalf("result %+v", r)
				}
			}
			if h.clk.Pending() != 0 {
				t.Fatalf("%d timers left", h.clk.Pending())
			}
		})
	}
}

// The delay runs from the first buffered op, not the last.
func TestTimeFlush(t *testing.T) {
	h := newHarness(t, nil)
	tg := target("a", 42)
	first := h.dispatch(tg, 1)
	h.clk.Advance(100 * time.Millisecond)
	second := h.dispatch(tg, 1)
	h.clk.Advance(49 * time.Millisecond)
	h.wantBatches(0)
	h.clk.Advance(time.Millisecond)
	h.wantBatches(1)
	c := h.nextCall()
	want := &rspb.BatchRequest{Term: 7, MasterId: "m1", ServerId: "a", StartCode: 42, Seq: 1, Ops: []*rspb.RegionOp{
		{Kind: rspb.OpKind_OP_KIND_OPEN, Region: first[0].Region, Table: "t", ProcId: first[0].ProcID},
		{Kind: rspb.OpKind_OP_KIND_OPEN, Region: second[0].Region, Table: "t", ProcId: second[0].ProcID},
	}}
	if c.req.String() != want.String() {
		t.Fatalf("request\n%v\nwant\n%v", c.req, want)
	}
	if c.target != tg {
		t.Fatalf("target %+v, want %+v", c.target, tg)
	}
	if dl, ok := c.ctx.Deadline(); !ok || time.Until(dl) > DefaultCallTimeout {
		t.Fatalf("call context deadline %v, %v", dl, ok)
	}
	h.answer(c, nil)
	rs := h.collect(2)
	if rs[0].Op != first[0] || rs[1].Op != second[0] || rs[0].Target != tg {
		t.Fatalf("results %+v", rs)
	}
}

// Each server (incarnation) has its own buffer, timer and call.
func TestPerServerSeparation(t *testing.T) {
	h := newHarness(t, nil)
	a, b, b2 := target("a", 1), target("b", 1), target("b", 2) // b2: b restarted
	opsA := h.dispatch(a, 33)
	h.wantBatches(1) // a alone crossed MinBatch
	opsB := h.dispatch(b, 2)
	opsB2 := h.dispatch(b2, 3)
	h.wantBatches(1)
	h.clk.Advance(DefaultDelay)
	h.wantBatches(3)

	want := map[serverKey][]string{
		{"a", 1}: opRegions(opsA), {"b", 1}: opRegions(opsB), {"b", 2}: opRegions(opsB2),
	}
	for range 3 {
		c := h.nextCall()
		k := serverKey{c.req.GetServerId(), c.req.GetStartCode()}
		if c.target.ServerID != k.id || c.target.StartCode != k.startCode {
			t.Fatalf("target %+v for request to %v", c.target, k)
		}
		if got := regions(c.req); !slices.Equal(got, want[k]) {
			t.Fatalf("%v got %v, want %v", k, got, want[k])
		}
		delete(want, k)
		h.answer(c, nil)
	}
	if len(want) != 0 {
		t.Fatalf("no call to %v", want)
	}
	h.collect(38)
}

// Ops arriving while a call is out wait for it; the next batch carries all
// of them, at once if it is due, else after the delay of its oldest op.
func TestOneCallInFlight(t *testing.T) {
	h := newHarness(t, nil)
	a := target("a", 1)
	h.dispatch(a, 33)
	c1 := h.nextCall()

	more := h.dispatch(a, 40) // over MinBatch, but a call is out
	h.wantBatches(1)
	if h.clk.Pending() != 0 {
		t.Fatal("a timer was armed while a call is in flight")
	}
	h.answer(c1, nil)
	h.wantBatches(2) // due (40 > 32): sent as soon as c1 returned
	c2 := h.nextCallOf("second batch", more)

	// Few ops during c2, which carried more than MinBatch (a stream):
	// sent as soon as it returns, without waiting for their delay.
	few := h.dispatch(a, 3)
	h.clk.Advance(50 * time.Millisecond)
	h.answer(c2, nil)
	h.wantBatches(3)
	c3 := h.nextCallOf("third batch", few)

	// Few ops during c3, a small call that returns quickly: they wait
	// for their delay.
	wait := h.dispatch(a, 2)
	h.clk.Advance(50 * time.Millisecond)
	h.answer(c3, nil)
	h.wantBatches(3)
	h.clk.Advance(99 * time.Millisecond)
	h.wantBatches(3)
	h.clk.Advance(time.Millisecond)
	h.wantBatches(4)
	c4 := h.nextCallOf("fourth batch", wait)

	// Few ops during c4, c4 outlives their delay: sent as it returns.
	late := h.dispatch(a, 2)
	h.clk.Advance(time.Second)
	h.wantBatches(4)
	h.answer(c4, nil)
	h.wantBatches(5)
	c5 := h.nextCallOf("fifth batch", late)
	h.answer(c5, nil)
	h.collect(33 + 40 + 3 + 2 + 2)
}

// A backlog bigger than MaxBatch goes in calls of MaxBatch ops, one after
// the other, each as soon as the previous returns.
func TestMaxBatchCapsACall(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MinBatch, c.MaxBatch = 32, 1000 })
	a := target("a", 1)
	ops := h.dispatch(a, 2500)
	var sizes []int
	var sent []string
	for range 4 {
		c := h.nextCall()
		sizes = append(sizes, len(c.req.GetOps()))
		sent = append(sent, regions(c.req)...)
		h.answer(c, nil)
	}
	// The 33rd op started the first call; the rest piled up behind it.
	if want := []int{33, 1000, 1000, 467}; !slices.Equal(sizes, want) {
		t.Fatalf("batches of %v ops, want %v", sizes, want)
	}
	if !slices.Equal(sent, opRegions(ops)) {
		t.Fatal("ops sent out of dispatch order")
	}
	h.collect(2500)
	h.wantBatches(4)
}

func TestBackoffFormula(t *testing.T) {
	d, err := New(Config{Term: 1, MasterID: "m", Transport: newFakeTransport(), OnResult: func(Result) {},
		OnServerFailed: func(string, error) {}})
	if err != nil {
		t.Fatal(err)
	}
	d.jitter = func(time.Duration) time.Duration { return 0 }
	ms := time.Millisecond
	tests := []struct {
		n    int
		want time.Duration
	}{
		{1, 100 * ms}, {2, 400 * ms}, {3, 900 * ms}, {5, 2500 * ms}, {9, 8100 * ms},
		{10, 10 * time.Second}, {11, 10 * time.Second}, {1 << 19, 10 * time.Second}, {1 << 40, 10 * time.Second},
	}
	for _, tc := range tests {
		if got := d.backoff(tc.n); got != tc.want {
			t.Errorf("backoff(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	// Default jitter: up to 10% on top.
	d.jitter = defaultJitter
	for n := 1; n <= 12; n++ {
		for range 50 {
			base := min(100*ms*time.Duration(n*n), 10*time.Second)
			if got := d.backoff(n); got < base || got > base+base/10 {
				t.Fatalf("backoff(%d) = %v, outside [%v, %v]", n, got, base, base+base/10)
			}
		}
	}
}

// The n-th consecutive failure waits RetryBase × n², capped, and the retry
// carries the failed ops first, then the ones that arrived meanwhile.
func TestRetryBackoffSchedule(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.RetryBase, c.RetryMax, c.MaxFailures = 100*time.Millisecond, time.Second, 100
	})
	a := target("a", 1)
	first := h.dispatch(a, 33)
	c := h.nextCall()
	seq := c.req.GetSeq()
	unavailable := status.Error(codes.Unavailable, "connection reset")
	var late []Op
	schedule := []time.Duration{100, 400, 900, 1000, 1000} // ms
	for i, w := range schedule {
		w *= time.Millisecond
		h.answer(c, unavailable)
		if i == 0 {
			// Over MaxBatch, but the server is backing off.
			late = h.dispatch(a, 40)
		}
		before := h.batches()
		h.clk.Advance(w - time.Nanosecond)
		if h.batches() != before {
			t.Fatalf("retry %d sent before %v", i+1, w)
		}
		h.clk.Advance(time.Nanosecond)
		if h.batches() != before+1 {
			t.Fatalf("retry %d not sent at %v", i+1, w)
		}
		c = h.nextCall()
		if c.req.GetSeq() <= seq {
			// A server must be able to tell the attempt given up on from
			// its retry (BatchRequest.seq).
			t.Fatalf("retry %d has seq %d, not above the previous attempt's %d", i+1, c.req.GetSeq(), seq)
		}
		seq = c.req.GetSeq()
		if got, want := regions(c.req), append(opRegions(first), opRegions(late)...); !slices.Equal(got, want) {
			t.Fatalf("retry %d carries %d ops, want the 33 failed then the 40 new", i+1, len(got))
		}
	}
	h.noResults()
	h.answer(c, nil)
	for _, r := range h.collect(73) {
		if !r.OK {
			t.Fatalf("result %+v", r)
		}
	}
	s := h.d.Stats()
	if s.Retries != 5 || s.Failures != 5 || s.Batches != 6 || s.Ops != 73 || s.ServerFailures != 0 {
		t.Fatalf("stats %+v", s)
	}
	// A success resets the count: the next failure waits RetryBase again.
	h.dispatch(a, 33)
	c = h.nextCall()
	h.answer(c, unavailable)
	h.clk.Advance(100 * time.Millisecond)
	h.answer(h.nextCall(), nil)
	h.collect(33)
}

// Every way a call can end, and what happens to its ops.
func TestCallErrors(t *testing.T) {
	tests := []struct {
		name         string
		err          error
		retried      bool
		want         []error // sentinels the results' errors match
		serverFailed bool
	}{
		{"stale term", status.Error(codes.FailedPrecondition, "stale term 7 < 9"), false, []error{ErrStaleTerm}, false},
		{"wrong start code", status.Error(codes.FailedPrecondition, "wrong start code 1, current 2"), false,
			[]error{ErrWrongStartCode, ErrServerRemoved}, true},
		// A current region server's: the detail decides, whatever the
		// message says.
		{"stale term detail", rspb.Refusal(rspb.ReasonStaleTerm, nil, "refused"), false, []error{ErrStaleTerm}, false},
		{"wrong start code detail", rspb.Refusal(rspb.ReasonWrongStartCode, nil, "refused"), false,
			[]error{ErrWrongStartCode, ErrServerRemoved}, true},
		{"another cluster detail", rspb.Refusal(rspb.ReasonClusterIDMismatch, map[string]string{rspb.MetaServerClusterID: "c0"}, "refused"), false,
			[]error{ErrWrongStartCode, ErrServerRemoved}, true},
		{"another cluster", status.Error(codes.FailedPrecondition, `wrong start code 1: the batch is from cluster "c1", this server's is "c0"`), false,
			[]error{ErrWrongStartCode, ErrServerRemoved}, true},
		{"other precondition", status.Error(codes.FailedPrecondition, "not serving"), false, []error{ErrRefused}, false},
		{"invalid argument", status.Error(codes.InvalidArgument, "bad op"), false, []error{ErrRefused}, false},
		{"unimplemented", status.Error(codes.Unimplemented, "no such method"), false, []error{ErrRefused}, false},
		{"deadline exceeded", status.Error(codes.DeadlineExceeded, "deadline"), true, nil, false},
		{"unavailable", status.Error(codes.Unavailable, "transport is closing"), true, nil, false},
		{"canceled", status.Error(codes.Canceled, "canceled"), true, nil, false},
		{"internal", status.Error(codes.Internal, "stream reset"), true, nil, false},
		{"wrapped unavailable", fmt.Errorf("x: %w", status.Error(codes.Unavailable, "y")), true, nil, false},
		{"connection refused", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true, nil, false},
		{"context deadline", context.DeadlineExceeded, true, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			a := target("a", 1)
			ops := h.dispatch(a, 33)
			h.answer(h.nextCall(), tc.err)
			if tc.retried {
				h.noResults()
				h.clk.Advance(DefaultRetryBase)
				h.wantBatches(2)
				h.answer(h.nextCall(), nil)
				for _, r := range h.collect(33) {
					if !r.OK || r.Err != nil {
						t.Fatalf("result after retry %+v", r)
					}
				}
				return
			}
			rs := h.collect(len(ops))
			for i, r := range rs {
				if r.OK || r.Op != ops[i] {
					t.Fatalf("result %d %+v", i, r)
				}
				for _, w := range tc.want {
					if !errors.Is(r.Err, w) {
						t.Fatalf("result error %v does not match %v", r.Err, w)
					}
				}
				if st, _ := status.FromError(r.Err); st.Code() != status.Code(tc.err) {
					t.Fatalf("result error %v lost the status %v", r.Err, status.Code(tc.err))
				}
			}
			if h.clk.Pending() != 0 {
				t.Fatal("a retry was scheduled")
			}
			h.clk.Advance(time.Hour)
			h.wantBatches(1)
			if got := len(h.failed); got != map[bool]int{true: 1}[tc.serverFailed] {
				t.Fatalf("%d OnServerFailed calls", got)
			}
			if tc.serverFailed {
				f := <-h.failed
				if f.id != "a" || !errors.Is(f.err, ErrWrongStartCode) {
					t.Fatalf("OnServerFailed(%q, %v)", f.id, f.err)
				}
			}
		})
	}
}

// Stale term deposes the whole dispatcher: every buffer fails, new ops are
// refused at once, and other calls' retryable failures are not retried.
func TestStaleTermLatches(t *testing.T) {
	h := newHarness(t, nil)
	a, b, c := target("a", 1), target("b", 1), target("c", 1)
	h.dispatch(a, 33)
	ca := h.nextCall()
	h.dispatch(c, 33)
	cc := h.nextCall()
	if cc.target.ServerID != "c" {
		ca, cc = cc, ca
	}
	h.dispatch(b, 2) // buffered, timer armed
	h.dispatch(a, 1) // buffered behind a's call

	h.answer(ca, status.Error(codes.FailedPrecondition, "stale term"))
	rs := h.collect(33 + 2 + 1)
	for _, r := range rs {
		if !errors.Is(r.Err, ErrStaleTerm) {
			t.Fatalf("result %+v", r)
		}
	}
	if h.clk.Pending() != 0 {
		t.Fatal("b's timer survived")
	}
	h.dispatch(b, 1)
	if r := <-h.results; !errors.Is(r.Err, ErrStaleTerm) {
		t.Fatalf("dispatch after deposal: %+v", r)
	}
	h.answer(cc, status.Error(codes.Unavailable, "x"))
	for _, r := range h.collect(33) {
		if !errors.Is(r.Err, ErrStaleTerm) {
			t.Fatalf("c's result %+v", r)
		}
	}
	h.clk.Advance(time.Hour)
	h.wantBatches(2)
}

// A server that answered "wrong start code" is dead: its ops, and any sent
// to it later, fail at once; the new incarnation is a new buffer.
func TestWrongStartCodeIncarnation(t *testing.T) {
	h := newHarness(t, nil)
	old, cur := target("a", 1), target("a", 2)
	h.dispatch(old, 33)
	c := h.nextCall()
	h.dispatch(old, 3)
	h.answer(c, status.Error(codes.FailedPrecondition, "wrong start code"))
	h.collect(36)
	if len(h.failed) != 1 {
		t.Fatalf("%d OnServerFailed calls", len(h.failed))
	}
	h.dispatch(old, 1)
	if r := <-h.results; !errors.Is(r.Err, ErrWrongStartCode) {
		t.Fatalf("dispatch to the dead incarnation: %+v", r)
	}
	h.dispatch(cur, 33)
	c = h.nextCall()
	if c.req.GetStartCode() != 2 {
		t.Fatalf("start code %d", c.req.GetStartCode())
	}
	h.answer(c, nil)
	h.collect(33)
	if len(h.failed) != 1 {
		t.Fatal("OnServerFailed called again")
	}
}

// A batch built in the moment before the leader applied its cluster's id
// names none; the region server, which has learned the id from the
// leader's answers since, refuses it as another cluster's. That is no
// restarted server: the batch is sent again, naming the id, and nothing is
// expired. A server holding another id (a restored cluster's, before it
// registers) is still a dead incarnation. Both as a current region server
// says it (the detail, under a message that names no id) and as one before
// the details did (the message only).
func TestBatchBuiltBeforeTheClusterID(t *testing.T) {
	shapes := []struct {
		name    string
		refusal func(batchID, serverID string) error
	}{
		{"detail", func(_, serverID string) error {
			return rspb.Refusal(rspb.ReasonClusterIDMismatch, map[string]string{rspb.MetaServerClusterID: serverID}, "refused")
		}},
		{"text", func(batchID, serverID string) error {
			return status.Errorf(codes.FailedPrecondition, "wrong start code 1: the batch is from cluster %q, this server's is %q", batchID, serverID)
		}},
	}
	for _, shape := range shapes {
		t.Run(shape.name, func(t *testing.T) {
			var mu sync.Mutex
			id := ""
			h := newHarness(t, func(c *Config) {
				c.ClusterID = func() string { mu.Lock(); defer mu.Unlock(); return id }
			})
			a := target("a", 1)
			h.dispatch(a, 33) // a full batch: sent at once
			c := h.nextCall()
			if c.req.GetClusterId() != "" {
				t.Fatalf("first batch names cluster %q", c.req.GetClusterId())
			}
			mu.Lock()
			id = "c1"
			mu.Unlock()
			h.answer(c, shape.refusal("", "c1"))
			h.noResults()
			h.clk.Advance(DefaultRetryBase)
			c = h.nextCall()
			if c.req.GetClusterId() != "c1" {
				t.Fatalf("the batch sent again names cluster %q, want c1", c.req.GetClusterId())
			}
			h.answer(c, nil)
			for _, r := range h.collect(33) {
				if !r.OK {
					t.Fatalf("result after the batch was sent again: %+v", r)
				}
			}
			if len(h.failed) != 0 {
				t.Fatalf("%d OnServerFailed calls for a server that did not restart", len(h.failed))
			}

			// Another cluster's server: dead, as before.
			b := target("b", 1)
			h.dispatch(b, 33)
			h.answer(h.nextCall(), shape.refusal("c1", "c0"))
			for _, r := range h.collect(33) {
				if !errors.Is(r.Err, ErrWrongStartCode) {
					t.Fatalf("a batch refused by another cluster's server: %+v", r)
				}
			}
		})
	}
}

// builtBeforeTheClusterID reads the detail when there is one it knows,
// and only then; the message otherwise.
func TestBuiltBeforeTheClusterIDDetailFirst(t *testing.T) {
	mismatch := func(meta map[string]string) error {
		return rspb.Refusal(rspb.ReasonClusterIDMismatch, meta, "refused")
	}
	text := func(serverID string) error {
		return status.Errorf(codes.FailedPrecondition, "wrong start code 1: the batch is from cluster \"\", this server's is %q", serverID)
	}
	tests := []struct {
		name      string
		leader    string // the leader's cluster id now
		batch     string // the cluster id the batch named
		err       error
		sendAgain bool
	}{
		{"detail: the leader's id", "c1", "", mismatch(map[string]string{rspb.MetaServerClusterID: "c1"}), true},
		{"detail: another id", "c1", "", mismatch(map[string]string{rspb.MetaServerClusterID: "c0"}), false},
		{"detail: no id", "c1", "", mismatch(nil), false},
		{"detail: the batch named one", "c1", "c0", mismatch(map[string]string{rspb.MetaServerClusterID: "c1"}), false},
		{"detail: the leader has none", "", "", mismatch(map[string]string{rspb.MetaServerClusterID: "c1"}), false},
		// The detail decides even against a message that would match.
		{"detail: another reason", "c1", "", rspb.Refusal(rspb.ReasonWrongStartCode, nil, `this server's is "c1"`), false},
		{"text: the leader's id", "c1", "", text("c1"), true},
		{"text: another id", "c1", "", text("c0"), false},
		{"text: the batch named one", "c1", "c0", text("c1"), false},
		// A reason from a newer server than this master: the message.
		{"unknown reason: text", "c1", "", rspb.Refusal("SOMETHING_NEWER", nil, `wrong start code 1: this server's is "c1"`), true},
		{"not a refusal", "c1", "", status.Error(codes.Unavailable, `this server's is "c1"`), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &Dispatcher{cfg: Config{ClusterID: func() string { return tc.leader }}}
			if got := d.builtBeforeTheClusterID(&rspb.BatchRequest{ClusterId: tc.batch}, tc.err); got != tc.sendAgain {
				t.Fatalf("builtBeforeTheClusterID = %v, want %v", got, tc.sendAgain)
			}
		})
	}
}

// The refusals sorted by their detail: its reason decides, whatever the
// message says; a detail that is not a region server refusal's, or whose
// reason this master does not know, leaves the message to decide.
func TestClassifyRefusalDetails(t *testing.T) {
	foreign := status.New(codes.FailedPrecondition, "not serving")
	foreign, _ = foreign.WithDetails(&errdetails.ErrorInfo{Reason: rspb.ReasonStaleTerm, Domain: "example.com"})
	unavailable := status.New(codes.Unavailable, "refused")
	unavailable, _ = unavailable.WithDetails(&errdetails.ErrorInfo{Reason: rspb.ReasonStaleTerm, Domain: rspb.RefusalDomain})
	tests := []struct {
		name string
		err  error
		want errClass
	}{
		{"stale term", rspb.Refusal(rspb.ReasonStaleTerm, map[string]string{rspb.MetaServerTerm: "9"}, "refused"), classStaleTerm},
		{"wrong start code", rspb.Refusal(rspb.ReasonWrongStartCode, map[string]string{rspb.MetaServerStartCode: "2"}, "refused"), classWrongStartCode},
		{"another cluster", rspb.Refusal(rspb.ReasonClusterIDMismatch, map[string]string{rspb.MetaServerClusterID: "c0"}, "refused"), classWrongStartCode},
		{"detail over message", rspb.Refusal(rspb.ReasonStaleTerm, nil, "wrong start code 1: this server's is 2"), classStaleTerm},
		{"wrapped", fmt.Errorf("x: %w", rspb.Refusal(rspb.ReasonStaleTerm, nil, "refused")), classStaleTerm},
		{"unknown reason", rspb.Refusal("SOMETHING_NEWER", nil, "stale term 7: this server has seen term 9"), classStaleTerm},
		{"unknown reason, unknown text", rspb.Refusal("SOMETHING_NEWER", nil, "refused"), classRefused},
		{"another domain", foreign.Err(), classRefused},
		{"not a refusal", unavailable.Err(), classRetry},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.err); got != tc.want {
				t.Fatalf("classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// A region server that sends no details (0.1.0, or any before them) is
// classified by its message, as before; and the same refusal from a
// current server, with the detail, is classified the same. The messages
// are 0.1.0's (fa4612c, cluster/regionserver/server.go), and the cluster
// id refusal's of the servers between it and the details.
func TestClassifyRefusalFrom010(t *testing.T) {
	tests := []struct {
		name   string
		msg    string
		reason string // the current server's detail ("": it sends none)
		want   errClass
	}{
		{"wrong server", `wrong server: this is "rs1", the batch is for "rs2"`, "", classRefused},
		{"stale term", "stale term 7: this server has seen term 9", rspb.ReasonStaleTerm, classStaleTerm},
		{"stale attempt", "stale attempt 3: this server has admitted attempt 4 of term 7", "", classRefused},
		{"not registered", "wrong start code 5: this server is not registered (it is registering again)", rspb.ReasonWrongStartCode, classWrongStartCode},
		{"wrong start code", "wrong start code 5: this server's is 6", rspb.ReasonWrongStartCode, classWrongStartCode},
		{"another cluster", `wrong start code 5: the batch is from cluster "c1", this server's is "c0"`, rspb.ReasonClusterIDMismatch, classWrongStartCode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old := status.Error(codes.FailedPrecondition, tc.msg)
			if got := classify(old); got != tc.want {
				t.Fatalf("text only: classify(%q) = %v, want %v", tc.msg, got, tc.want)
			}
			if tc.reason == "" {
				return
			}
			if got := classify(rspb.Refusal(tc.reason, nil, tc.msg)); got != tc.want {
				t.Fatalf("with the detail: classify(%q) = %v, want %v", tc.msg, got, tc.want)
			}
		})
	}
}

// After MaxFailures consecutive failures OnServerFailed is called once and
// the ops are held, unanswered and unsent, until RemoveServer.
func TestMaxFailures(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxFailures = 3 })
	a := target("a", 1)
	ops := h.dispatch(a, 33)
	last := status.Error(codes.DeadlineExceeded, "deadline exceeded")
	for i := range 3 {
		h.answer(h.nextCall(), last)
		if i < 2 {
			h.clk.Advance(h.d.cfg.RetryMax)
		}
	}
	h.wantBatches(3)
	select {
	case f := <-h.failed:
		if f.id != "a" || status.Code(f.err) != codes.DeadlineExceeded {
			t.Fatalf("OnServerFailed(%q, %v)", f.id, f.err)
		}
	default:
		t.Fatal("OnServerFailed not called")
	}
	h.noResults()
	more := h.dispatch(a, 40)
	h.clk.Advance(time.Hour)
	h.wantBatches(3)
	h.noResults()
	if s := h.d.Stats(); s.ServerFailures != 1 || s.Failures != 3 || s.Retries != 2 {
		t.Fatalf("stats %+v", s)
	}

	h.d.RemoveServer("a")
	rs := h.collect(73)
	for i, r := range rs {
		if !errors.Is(r.Err, ErrServerRemoved) || r.Op != append(ops, more...)[i] {
			t.Fatalf("result %d %+v", i, r)
		}
	}
	h.noResults()
	if len(h.failed) != 0 {
		t.Fatal("OnServerFailed called twice")
	}
}

// The usual reaction to OnServerFailed, expiring the server right away,
// may call RemoveServer from inside the callback.
func TestServerFailedRemovesAtOnce(t *testing.T) {
	var h *harness
	h = newHarness(t, func(c *Config) {
		c.MaxFailures = 2
		c.OnServerFailed = func(id string, err error) {
			h.failed <- serverFailure{id, err}
			h.d.RemoveServer(id)
		}
	})
	h.dispatch(target("a", 1), 33)
	h.answer(h.nextCall(), status.Error(codes.Unavailable, "x"))
	h.dispatch(target("a", 1), 2)
	h.clk.Advance(DefaultRetryBase)
	h.answer(h.nextCall(), status.Error(codes.Unavailable, "x"))
	for _, r := range h.collect(35) {
		if !errors.Is(r.Err, ErrServerRemoved) {
			t.Fatalf("result %+v", r)
		}
	}
	h.noResults()
	if len(h.failed) != 1 || len(h.d.Servers()) != 0 {
		t.Fatalf("%d OnServerFailed calls, servers %+v", len(h.failed), h.d.Servers())
	}
}

func TestServers(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxFailures = 1 })
	h.dispatch(target("b", 2), 33)
	cb := h.nextCall()
	h.dispatch(target("b", 2), 3)
	h.dispatch(target("a", 1), 33)
	h.answer(h.nextCall(), status.Error(codes.Unavailable, "x"))
	h.dispatch(target("b", 1), 1)
	want := []ServerState{
		{Target: target("a", 1), Buffered: 33, Failures: 1, Held: true},
		{Target: target("b", 1), Buffered: 1},
		{Target: target("b", 2), Buffered: 3, InFlight: 33},
	}
	if got := h.d.Servers(); !slices.Equal(got, want) {
		t.Fatalf("Servers() = %+v\nwant %+v", got, want)
	}
	h.answer(cb, nil)
}

func TestRemoveServer(t *testing.T) {
	h := newHarness(t, nil)
	a, a2, b, c := target("a", 1), target("a", 2), target("b", 1), target("c", 1)
	h.dispatch(a, 33)
	ca := h.nextCall() // a: in flight
	h.dispatch(a, 5)   // a: buffered behind it
	h.dispatch(a2, 1)  // another incarnation of a
	h.dispatch(b, 33)
	h.answer(h.nextCall(), status.Error(codes.Unavailable, "x")) // b: backing off
	keep := h.dispatch(c, 2)                                     // c: buffered

	h.d.RemoveServer("a") // answers before it returns
	if n := len(h.results); n != 33+5+1 {
		t.Fatalf("%d results after RemoveServer(a), want 39", n)
	}
	for range 39 {
		if r := <-h.results; !errors.Is(r.Err, ErrServerRemoved) || r.Target.ServerID != "a" {
			t.Fatalf("result %+v", r)
		}
	}
	select {
	case <-ca.ctx.Done():
	case <-time.After(waitFor):
		t.Fatal("a's call was not cancelled")
	}
	h.waitSender() // a's sender ends without answering again
	h.noResults()

	h.d.RemoveServer("b")
	if n := len(h.results); n != 33 {
		t.Fatalf("%d results after RemoveServer(b)", n)
	}
	h.collect(33)

	h.clk.Advance(time.Hour) // c's flush; b's retry is gone
	h.wantBatches(3)
	cc := h.nextCall()
	if cc.target.ServerID != "c" || !slices.Equal(regions(cc.req), opRegions(keep)) {
		t.Fatalf("call %+v", cc.req)
	}
	h.answer(cc, nil)
	h.collect(2)

	h.tr.mu.Lock()
	removed := slices.Clone(h.tr.removed)
	h.tr.mu.Unlock()
	if !slices.Equal(removed, []string{"a", "b"}) {
		t.Fatalf("transport told of %v", removed)
	}
	// The id can come back.
	h.dispatch(a, 33)
	h.answer(h.nextCall(), nil)
	h.collect(33)
}

// OnResult runs outside the dispatcher's lock, so it may dispatch.
func TestCallbackMayDispatch(t *testing.T) {
	var h *harness
	redispatched := make(chan Result, 100)
	h = newHarness(t, func(c *Config) {
		c.OnResult = func(r Result) {
			if errors.Is(r.Err, ErrServerRemoved) && r.Target.ServerID == "a" {
				h.d.Dispatch(target("b", 1), r.Op) // reassign elsewhere
				return
			}
			redispatched <- r
		}
	})
	ops := h.dispatch(target("a", 1), 3)
	h.d.RemoveServer("a")
	h.clk.Advance(DefaultDelay)
	c := h.nextCall()
	if c.target.ServerID != "b" || !slices.Equal(regions(c.req), opRegions(ops)) {
		t.Fatalf("re-dispatched call %v", c.req)
	}
	c.ok()
	for range 3 {
		select {
		case r := <-redispatched:
			if !r.OK {
				t.Fatalf("result %+v", r)
			}
		case <-time.After(waitFor):
			t.Fatal("no result")
		}
	}
}

// TestStop runs in a synctest bubble: Test fails if a sender goroutine
// outlives the test, which replaces polling runtime.NumGoroutine (a count
// of the whole process, which any other goroutine could disturb).
func TestStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.MaxFailures = 1 })
		h.dispatch(target("a", 1), 33)
		h.nextCall() // a: in flight, never answered
		h.dispatch(target("a", 1), 4)
		h.dispatch(target("b", 1), 33)
		h.answer(h.nextCall(), status.Error(codes.Unavailable, "x")) // b: held
		<-h.failed
		h.d.Dispatch(target("c", 1), Op{Kind: rspb.OpKind_OP_KIND_CLOSE, Region: "rc", ProcID: 1}) // c: buffered

		h.d.Stop()
		if n := len(h.results); n != 33+4+33+1 {
			t.Fatalf("%d results after Stop, want 71", n)
		}
		for range 71 {
			if r := <-h.results; !errors.Is(r.Err, ErrStopped) {
				t.Fatalf("result %+v", r)
			}
		}
		if h.clk.Pending() != 0 {
			t.Fatalf("%d timers left", h.clk.Pending())
		}
		h.clk.Advance(time.Hour)
		h.noResults()

		h.dispatch(target("a", 1), 1) // after Stop: answered at once
		if r := <-h.results; !errors.Is(r.Err, ErrStopped) {
			t.Fatalf("dispatch after Stop: %+v", r)
		}
		h.d.Stop() // again: no-op
		h.noResults()
		if s := h.d.Stats(); s.Batches != 2 {
			t.Fatalf("stats %+v", s)
		}

	})
}

// A call the server never answers is cancelled at exactly CallTimeout and
// retried like any other failed call, RetryBase later. CallTimeout is a
// context deadline on the real clock, not cfg.Clock, so only a synctest
// bubble (whose real clock is fake) can test it without waiting 10 s; the
// whole schedule runs on clock.Real and is checked to the nanosecond.
func TestCallTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.Clock = clock.Real{} })
		start := time.Now()
		at := func(d time.Duration) { testwait.FakeTimeTo(start, d) }
		// pending takes the call the transport is holding, if any.
		pending := func() *call {
			select {
			case c := <-h.tr.calls:
				return c
			default:
				return nil
			}
		}
		ops := h.dispatch(target("a", 1), 1) // under MinBatch: waits Delay
		at(DefaultDelay - time.Nanosecond)
		if c := pending(); c != nil {
			t.Fatalf("sent before the delay: %v", regions(c.req))
		}
		at(DefaultDelay)
		c := pending()
		if c == nil {
			t.Fatal("not sent at the delay")
		}
		deadline := DefaultDelay + DefaultCallTimeout
		at(deadline - time.Nanosecond)
		if err := c.ctx.Err(); err != nil {
			t.Fatalf("call cancelled before CallTimeout: %v", err)
		}
		h.noResults()
		at(deadline)
		if err := c.ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call at CallTimeout: %v", err)
		}
		h.waitSender()
		h.noResults()
		if s := h.d.Stats(); s.Failures != 1 || s.Batches != 1 {
			t.Fatalf("stats after the timeout %+v", s)
		}
		at(deadline + DefaultRetryBase - time.Nanosecond)
		if c := pending(); c != nil {
			t.Fatal("retried before RetryBase")
		}
		at(deadline + DefaultRetryBase)
		c = pending()
		if c == nil {
			t.Fatal("not retried at RetryBase")
		}
		if got := regions(c.req); !slices.Equal(got, opRegions(ops)) {
			t.Fatalf("retry carries %v", got)
		}
		h.answer(c, nil)
		if rs := h.collect(1); !rs[0].OK || rs[0].Op != ops[0] {
			t.Fatalf("result %+v", rs[0])
		}
		if s := h.d.Stats(); s.Retries != 1 || s.Failures != 1 || s.Batches != 2 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// Stop must not lose or repeat results of calls that return while it runs.
func TestStopRacesCalls(t *testing.T) {
	for i := range 20 {
		h := newHarness(t, nil)
		for s := range 5 {
			h.dispatch(target(fmt.Sprint("s", s), 1), 33)
		}
		for range 5 {
			c := h.nextCall()
			if i%2 == 0 {
				go c.ok()
			}
		}
		h.d.Stop()
		rs := h.collect(5 * 33)
		seen := map[uint64]bool{}
		for _, r := range rs {
			if seen[r.Op.ProcID] {
				t.Fatalf("two results for proc %d", r.Op.ProcID)
			}
			seen[r.Op.ProcID] = true
			if !r.OK && !errors.Is(r.Err, ErrStopped) {
				t.Fatalf("result %+v", r)
			}
		}
		h.noResults()
	}
}

// Many dispatching goroutines, failing calls, shuffled responses and
// removals: every op gets exactly one result.
func TestResultsOncePerOp(t *testing.T) {
	const (
		servers    = 6
		goroutines = 4
		perG       = 600
	)
	rng := rand.New(rand.NewPCG(1, 2))
	var rngMu sync.Mutex
	clk := clock.NewManual(t0)
	var calls, failures int
	tr := TransportFunc(func(ctx context.Context, tg Target, req *rspb.BatchRequest) (*rspb.BatchResponse, error) {
		rngMu.Lock()
		defer rngMu.Unlock()
		calls++
		switch p := rng.Float64(); {
		case p < 0.25:
			failures++
			return nil, status.Error(codes.Unavailable, "flaky")
		case p < 0.30:
			failures++
			return nil, status.Error(codes.DeadlineExceeded, "applied, answer lost")
		}
		resp := okResponse(req)
		rng.Shuffle(len(resp.Results), func(i, j int) { resp.Results[i], resp.Results[j] = resp.Results[j], resp.Results[i] })
		if rng.Float64() < 0.1 && len(resp.Results) > 0 {
			resp.Results[0].Ok, resp.Results[0].Error = false, "failed to open"
		}
		return resp, nil
	})
	var mu sync.Mutex
	got := map[uint64]int{}
	n := 0
	all := make(chan struct{})
	total := goroutines * perG
	cfg := DefaultConfig()
	cfg.Term, cfg.MasterID, cfg.Transport, cfg.Clock = 1, "m", tr, clk
	cfg.MaxFailures = 1 << 20
	cfg.MinBatch, cfg.MaxBatch = 2, 4 // many small calls, many failures
	cfg.Logger = testLogger(t)
	cfg.OnServerFailed = func(string, error) { t.Error("OnServerFailed") }
	cfg.OnResult = func(r Result) {
		mu.Lock()
		defer mu.Unlock()
		got[r.Op.ProcID]++
		if r.Err != nil && !errors.Is(r.Err, ErrOpFailed) && !errors.Is(r.Err, ErrServerRemoved) {
			t.Errorf("result %+v", r)
		}
		if n++; n == total {
			close(all)
		}
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()

	// The clock moves while ops arrive, so flushes, retries and
	// dispatches interleave.
	stopTicking := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		for {
			select {
			case <-stopTicking:
				return
			default:
				clk.Advance(20 * time.Millisecond)
				runtime.Gosched()
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				id := uint64(g*perG + i + 1)
				d.Dispatch(target(fmt.Sprint("s", id%servers), 1),
					Op{Kind: rspb.OpKind_OP_KIND_OPEN, Region: fmt.Sprint("r", id), ProcID: id})
				if id == uint64(total/2) {
					d.RemoveServer("s0")
				}
				runtime.Gosched() // let senders run between ops: more, smaller calls
			}
		})
	}
	wg.Wait()
	close(stopTicking)
	<-ticked
	if !testwait.Until(waitFor, func() bool {
		select {
		case <-all:
			return true
		default:
			clk.Advance(time.Second) // flushes and retries (jitter ≤ 1 s)
			return false
		}
	}) {
		t.Fatalf("results missing; stats %+v", d.Stats())
	}
	mu.Lock()
	defer mu.Unlock()
	rngMu.Lock()
	defer rngMu.Unlock()
	for id := uint64(1); id <= uint64(total); id++ {
		if got[id] != 1 {
			t.Fatalf("proc %d got %d results", id, got[id])
		}
	}
	s := d.Stats()
	t.Logf("ops %d, calls %d (transport saw %d), retries %d, failures %d (transport failed %d)",
		s.Ops, s.Batches, calls, s.Retries, s.Failures, failures)
	if s.Ops != uint64(total) || s.Failures == 0 || s.Retries == 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Per-op results are matched to ops by position or, when the server
// reorders, by region, kind and proc id.
func TestAnswerMatching(t *testing.T) {
	open, cls := rspb.OpKind_OP_KIND_OPEN, rspb.OpKind_OP_KIND_CLOSE
	batch := []pending{
		{op: Op{Kind: open, Region: "r1", ProcID: 1}},
		{op: Op{Kind: cls, Region: "r1", ProcID: 2}},
		{op: Op{Kind: open, Region: "r2", ProcID: 3}},
		{op: Op{Kind: open, Region: "r2", ProcID: 4}}, // the same open twice
	}
	res := func(kind rspb.OpKind, region string, proc uint64, ok, already bool, msg string) *rspb.RegionOpResult {
		return &rspb.RegionOpResult{Kind: kind, Region: region, ProcId: proc, Ok: ok, Already: already, Error: msg}
	}
	type want struct {
		ok, already bool
		err         string // substring; "" means no error
	}
	allOK := []want{{ok: true}, {ok: true}, {ok: true}, {ok: true, already: true}}
	tests := []struct {
		name string
		res  []*rspb.RegionOpResult
		want []want
	}{
		{"in order", []*rspb.RegionOpResult{
			res(open, "r1", 1, true, false, ""), res(cls, "r1", 2, true, false, ""),
			res(open, "r2", 3, true, false, ""), res(open, "r2", 4, true, true, ""),
		}, allOK},
		{"reversed", []*rspb.RegionOpResult{
			res(open, "r2", 4, true, true, ""), res(open, "r2", 3, true, false, ""),
			res(cls, "r1", 2, true, false, ""), res(open, "r1", 1, true, false, ""),
		}, allOK},
		{"no proc ids echoed", []*rspb.RegionOpResult{
			res(cls, "r1", 0, true, false, ""), res(open, "r1", 0, true, false, ""),
			res(open, "r2", 0, true, false, ""), res(open, "r2", 0, true, true, ""),
		}, allOK},
		{"failure and missing", []*rspb.RegionOpResult{
			res(open, "r1", 1, false, false, "region is splitting"), res(open, "r2", 3, true, false, ""),
		}, []want{{err: "region is splitting"}, {err: "no result"}, {ok: true}, {err: "no result"}}},
		{"foreign result ignored", []*rspb.RegionOpResult{
			res(open, "r9", 9, true, false, ""), res(open, "r1", 1, true, false, ""), res(cls, "r1", 2, true, false, ""),
			res(open, "r2", 3, true, false, ""), res(open, "r2", 4, true, true, ""),
		}, allOK},
		{"empty response", nil, []want{{err: "no result"}, {err: "no result"}, {err: "no result"}, {err: "no result"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tg := target("a", 1)
			out := answer(serverKey{"a", 1}, tg, batch, &rspb.BatchResponse{Results: tc.res})
			for i, r := range out {
				w := tc.want[i]
				if r.Op != batch[i].op || r.Target != tg || r.OK != w.ok || r.Already != w.already {
					t.Fatalf("result %d %+v, want %+v", i, r, w)
				}
				if w.err == "" {
					if r.Err != nil {
						t.Fatalf("result %d error %v", i, r.Err)
					}
				} else if !errors.Is(r.Err, ErrOpFailed) || !strings.Contains(r.Err.Error(), w.err) {
					t.Fatalf("result %d error %v, want ErrOpFailed with %q", i, r.Err, w.err)
				}
			}
		})
	}
}

// Pace: a burst due at once waits until Pace has passed since the server's
// last call started, and the bursts that arrive meanwhile go with it; a
// server quiet for Pace gets its burst at once, a full batch (MaxBatch) and
// a due retry never wait, and a delay timer armed for a trickle gives way
// to the sooner pace timer.
func TestPaceGathersBursts(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Pace, c.MaxBatch = 20*time.Millisecond, 100 })
	a := target("a", 1)

	first := h.dispatch(a, 33) // quiet server: at once
	c1 := h.nextCallOf("first burst", first)
	h.answer(c1, nil)

	h.clk.Advance(5 * time.Millisecond)
	second := h.dispatch(a, 33) // due, but 5 ms after the last call
	h.wantBatches(1)
	h.clk.Advance(10 * time.Millisecond)
	third := h.dispatch(a, 33)
	h.wantBatches(1)
	h.clk.Advance(4 * time.Millisecond)
	h.wantBatches(1)
	h.clk.Advance(time.Millisecond) // 20 ms since c1 started
	h.wantBatches(2)
	c2 := h.nextCallOf("two bursts in one call", append(second, third...))
	h.answer(c2, nil)

	// A full batch goes at once, however soon.
	full := h.dispatch(a, 100)
	h.wantBatches(3)
	c3 := h.nextCallOf("a full batch", full)
	h.answer(c3, nil)

	// A trickle arms the delay timer; a burst behind it, paced, fires
	// sooner and takes the trickle along.
	h.clk.Advance(2 * time.Millisecond)
	trickle := h.dispatch(a, 2)
	burst := h.dispatch(a, 40)
	h.clk.Advance(17 * time.Millisecond)
	h.wantBatches(3)
	h.clk.Advance(time.Millisecond)
	h.wantBatches(4)
	c4 := h.nextCallOf("trickle and burst", append(trickle, burst...))
	h.answer(c4, nil)

	// Quiet for longer than Pace: at once.
	h.clk.Advance(25 * time.Millisecond)
	late := h.dispatch(a, 33)
	h.wantBatches(5)
	c5 := h.nextCallOf("after a quiet spell", late)
	h.answer(c5, nil)
	h.collect(33 + 33 + 33 + 100 + 2 + 40 + 33)
}
