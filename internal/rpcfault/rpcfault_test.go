package rpcfault

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/testwait"
)

const (
	checkMethod = "/grpc.health.v1.Health/Check"
	watchMethod = "/grpc.health.v1.Health/Watch"
)

// countingHealth answers Check with the number of Checks it has run so
// far, spelt as the status: the n-th call answers SERVING for odd n,
// NOT_SERVING for even n. A client can thus tell which run answered.
type countingHealth struct {
	healthpb.UnimplementedHealthServer
	checks  atomic.Int64
	watches atomic.Int64
}

func (h *countingHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if h.checks.Add(1)%2 == 1 {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
}

func (h *countingHealth) Watch(_ *healthpb.HealthCheckRequest, s grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	h.watches.Add(1)
	return s.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// serve starts a health server over an in-memory listener with the given
// server options, and returns a client dialled with the given dial options.
func serve(t *testing.T, sopts []grpc.ServerOption, dopts ...grpc.DialOption) (*countingHealth, healthpb.HealthClient) {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	gs := grpc.NewServer(sopts...)
	h := &countingHealth{}
	healthpb.RegisterHealthServer(gs, h)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	dopts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
	}, dopts...)
	cc, err := grpc.NewClient("passthrough:///bufnet", dopts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return h, healthpb.NewHealthClient(cc)
}

func check(t *testing.T, c healthpb.HealthClient) (healthpb.HealthCheckResponse_ServingStatus, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
	return r.GetStatus(), err
}

// Each fault, on the server side and on the client side, does to the
// handler and to the caller what it says: a dropped answer after the
// handler ran, a dropped request without it, a duplicate runs it twice and
// answers the second run.
func TestFaultsOnEitherSide(t *testing.T) {
	for _, side := range []Side{Server, Client} {
		for _, tc := range []struct {
			fault      Fault
			wantRuns   int64
			wantCode   codes.Code
			wantStatus healthpb.HealthCheckResponse_ServingStatus
		}{
			{DropAnswer, 1, codes.Unavailable, 0},
			{DropRequest, 0, codes.Unavailable, 0},
			{Duplicate, 2, codes.OK, healthpb.HealthCheckResponse_NOT_SERVING},
			{DelayAnswer, 1, codes.OK, healthpb.HealthCheckResponse_SERVING},
			{DelayRequest, 1, codes.OK, healthpb.HealthCheckResponse_SERVING},
		} {
			t.Run(side.String()+"/"+tc.fault.String(), func(t *testing.T) {
				in := New(Config{Seed: 1})
				hd := in.MustAdd(Rule{Methods: []string{checkMethod}, Fault: tc.fault, Times: 1, Delay: time.Millisecond})
				var h *countingHealth
				var c healthpb.HealthClient
				if side == Server {
					h, c = serve(t, in.ServerOptions())
				} else {
					h, c = serve(t, nil, in.DialOption())
				}
				st, err := check(t, c)
				if status.Code(err) != tc.wantCode {
					t.Fatalf("first call: %v, want code %v", err, tc.wantCode)
				}
				if err == nil && st != tc.wantStatus {
					t.Errorf("first call answered %v, want %v", st, tc.wantStatus)
				}
				if got := h.checks.Load(); got != tc.wantRuns {
					t.Errorf("handler ran %d times, want %d", got, tc.wantRuns)
				}
				select {
				case <-hd.Done():
				default:
					t.Error("one-shot rule not done after firing")
				}
				if hd.Fired() != 1 || in.Count(tc.fault) != 1 || in.Total() != 1 || in.Counts()[hd.Name()] != 1 {
					t.Errorf("counts: fired %d, by fault %d, total %d, by rule %v", hd.Fired(), in.Count(tc.fault), in.Total(), in.Counts())
				}
				// Spent: the next call goes through untouched.
				before := h.checks.Load()
				if _, err := check(t, c); err != nil {
					t.Fatalf("second call: %v", err)
				}
				if h.checks.Load() != before+1 || hd.Fired() != 1 {
					t.Errorf("second call: handler runs %d→%d, fired %d", before, h.checks.Load(), hd.Fired())
				}
				ev := in.Events()
				if len(ev) != 1 || ev[0].Fault != tc.fault || ev[0].Method != checkMethod || ev[0].Side != side || ev[0].Rule != hd.Name() {
					t.Errorf("events %v", ev)
				}
			})
		}
	}
}

// A rule on the answer fires only on answers it accepts: "drop the next
// NOT_SERVING answer" lets SERVING ones through and drops the first
// NOT_SERVING one, whose handler ran.
func TestRuleOnTheAnswer(t *testing.T) {
	in := New(Config{})
	hd := in.MustAdd(Rule{Methods: []string{checkMethod}, Fault: DropAnswer, Times: 1,
		WhenAnswer: func(_ Call, resp any, err error) bool {
			r, ok := resp.(*healthpb.HealthCheckResponse)
			return err == nil && ok && r.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
		}})
	h, c := serve(t, in.ServerOptions())
	if _, err := check(t, c); err != nil { // run 1: SERVING
		t.Fatalf("call 1: %v", err)
	}
	if _, err := check(t, c); status.Code(err) != codes.Unavailable { // run 2: NOT_SERVING, dropped
		t.Fatalf("call 2: %v, want UNAVAILABLE", err)
	}
	if st, err := check(t, c); err != nil || st != healthpb.HealthCheckResponse_SERVING { // run 3
		t.Fatalf("call 3: %v %v", st, err)
	}
	if st, err := check(t, c); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING { // run 4: spent
		t.Fatalf("call 4: %v %v", st, err)
	}
	if h.checks.Load() != 4 || hd.Fired() != 1 || hd.Matched() != 1 {
		t.Errorf("runs %d, fired %d, matched %d", h.checks.Load(), hd.Fired(), hd.Matched())
	}
}

// callDelayed calls through an injector holding rule, on a manual clock,
// and returns the injector and the clock once the handler ran and the
// injector waits on the clock, with where the call's outcome will arrive.
func callDelayed(t *testing.T, rule Rule) (*Injector, *clock.Manual, <-chan error) {
	t.Helper()
	clk := clock.NewManual(time.Unix(0, 0))
	in := New(Config{Clock: clk})
	in.MustAdd(rule)
	h, c := serve(t, in.ServerOptions())
	done := make(chan error, 1)
	go func() { _, err := check(t, c); done <- err }()
	waitHandledAndTimed(t, h, clk)
	return in, clk, done
}

// noAnswerYet fails t if the call's outcome already arrived.
func noAnswerYet(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s before the delay passed: %v", what, err)
	default:
	}
}

// A delayed answer is held on the injector's clock after the handler ran:
// the caller gets it only once the clock has moved on.
func TestDelayAnswerWaitsOnTheClock(t *testing.T) {
	_, clk, done := callDelayed(t, Rule{Fault: DelayAnswer, Delay: time.Second})
	noAnswerYet(t, done, "answer arrived")
	clk.Advance(999 * time.Millisecond)
	noAnswerYet(t, done, "answer arrived")
	clk.Advance(time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A lost answer with a delay reaches the caller as an error only once the
// injector's clock has moved on, the handler having run at once.
func TestLostAnswerNoticedLate(t *testing.T) {
	in, clk, done := callDelayed(t, Rule{Fault: DropAnswer, Delay: time.Second, Code: codes.DeadlineExceeded})
	noAnswerYet(t, done, "the loss was noticed")
	clk.Advance(time.Second)
	if err := <-done; status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("%v, want DEADLINE_EXCEEDED", err)
	}
	if ev := in.Events(); len(ev) != 1 || ev[0].Delay != time.Second {
		t.Errorf("events %v", ev)
	}
}

// Rules are chosen by method (exact, or a service prefix), the first that
// fires decides, and Pause, Resume and Remove take effect at once.
func TestRuleSelection(t *testing.T) {
	in := New(Config{})
	other := in.MustAdd(Rule{Methods: []string{"/other.Service/"}, Fault: DropRequest})
	svc := in.MustAdd(Rule{Name: "health", Methods: []string{"/grpc.health.v1.Health/"}, Fault: DropAnswer})
	later := in.MustAdd(Rule{Methods: []string{checkMethod}, Fault: DropRequest})
	h, c := serve(t, in.ServerOptions())
	if _, err := check(t, c); status.Code(err) != codes.Unavailable {
		t.Fatalf("%v", err)
	}
	if h.checks.Load() != 1 || svc.Fired() != 1 || later.Fired() != 0 || later.Matched() != 0 || other.Matched() != 0 {
		t.Errorf("runs %d; fired: prefix rule %d, later rule %d (matched %d), other service %d", h.checks.Load(), svc.Fired(), later.Fired(), later.Matched(), other.Matched())
	}
	in.Pause()
	if _, err := check(t, c); err != nil {
		t.Fatalf("paused: %v", err)
	}
	in.Resume()
	svc.Remove()
	if _, err := check(t, c); status.Code(err) != codes.Unavailable {
		t.Fatalf("after removing the first rule: %v", err)
	}
	if h.checks.Load() != 2 || later.Fired() != 1 {
		t.Errorf("runs %d, later rule fired %d; want the request dropped by the later rule", h.checks.Load(), later.Fired())
	}
	if got := in.Counts(); got["health"] != 1 || got[later.Name()] != 1 {
		t.Errorf("counts %v", got)
	}
}

// A request predicate restricts a rule to the calls it accepts.
func TestRuleOnTheRequest(t *testing.T) {
	in := New(Config{})
	in.MustAdd(Rule{Fault: DropRequest, When: func(c Call) bool {
		return c.Request.(*healthpb.HealthCheckRequest).GetService() == "doomed"
	}})
	h, c := serve(t, in.ServerOptions())
	ctx := context.Background()
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "fine"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "doomed"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("%v", err)
	}
	if h.checks.Load() != 1 {
		t.Errorf("handler ran %d times, want 1", h.checks.Load())
	}
}

// The draws of a probabilistic rule are fixed by the seed: two injectors
// with one seed fire on the same calls of a sequence, another seed on
// others, and the rate is about the probability.
func TestSeedFixesTheDraws(t *testing.T) {
	pattern := func(seed uint64) []bool {
		in := New(Config{Seed: seed})
		in.MustAdd(Rule{Fault: DropRequest, Probability: 0.3})
		icpt := in.UnaryServerInterceptor()
		info := &grpc.UnaryServerInfo{FullMethod: checkMethod}
		handler := func(context.Context, any) (any, error) { return "ok", nil }
		out := make([]bool, 2000)
		for i := range out {
			_, err := icpt(context.Background(), nil, info, handler)
			out[i] = err != nil
		}
		return out
	}
	a, b, c := pattern(42), pattern(42), pattern(43)
	same, fired := 0, 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different draw at call %d", i)
		}
		if a[i] == c[i] {
			same++
		}
		if a[i] {
			fired++
		}
	}
	if same == len(a) {
		t.Error("seeds 42 and 43 drew the same sequence")
	}
	if fired < 500 || fired > 700 {
		t.Errorf("fired %d of %d calls at probability 0.3", fired, len(a))
	}
}

// Under concurrent calls a rule fires exactly Times times, and its counts
// add up.
func TestOneShotUnderConcurrency(t *testing.T) {
	in := New(Config{MaxEvents: 3})
	hd := in.MustAdd(Rule{Fault: DropAnswer, Times: 5})
	icpt := in.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: checkMethod}
	var runs, errs atomic.Int64
	handler := func(context.Context, any) (any, error) { runs.Add(1); return "ok", nil }
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if _, err := icpt(context.Background(), nil, info, handler); err != nil {
					errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if hd.Fired() != 5 || errs.Load() != 5 || runs.Load() != 400 || hd.Matched() != 5 {
		t.Errorf("fired %d, errors %d, runs %d, matched %d", hd.Fired(), errs.Load(), runs.Load(), hd.Matched())
	}
	if ev := in.Events(); len(ev) != 3 || in.Total() != 5 {
		t.Errorf("events kept %d (want the latest 3), total %d", len(ev), in.Total())
	}
}

// A stream can be refused before its handler runs.
func TestStreamDropRequest(t *testing.T) {
	in := New(Config{})
	in.MustAdd(Rule{Methods: []string{watchMethod}, Fault: DropRequest, Times: 1})
	h, c := serve(t, in.ServerOptions())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("first watch: %v", err)
	}
	s, err = c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	if err != nil || h.watches.Load() != 1 {
		t.Fatalf("second watch: %v (handler runs %d)", err, h.watches.Load())
	}
}

func TestInvalidRules(t *testing.T) {
	in := New(Config{})
	for _, r := range []Rule{
		{},
		{Fault: DropAnswer, Probability: 1.5},
		{Fault: DropAnswer, Times: -1},
		{Fault: DropAnswer, Methods: []string{"Check"}},
		{Fault: DelayAnswer},
		{Fault: DropRequest, WhenAnswer: func(Call, any, error) bool { return true }},
	} {
		if _, err := in.Add(r); err == nil {
			t.Errorf("rule %+v accepted", r)
		}
	}
}

// waitHandledAndTimed waits until the handler ran and the injector armed a
// timer on clk (a delay, or a loss noticed late).
func waitHandledAndTimed(t *testing.T, h *countingHealth, clk *clock.Manual) {
	t.Helper()
	testwait.For(t, 10*time.Second, "the handler to run and a timer to be armed", func() bool {
		return h.checks.Load() > 0 && clk.Pending() > 0
	})
}
