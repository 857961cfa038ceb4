package dispatch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/proto/rspb"
)

// waitFor bounds every wait on another goroutine; it is a failure guard,
// never a timing assumption.
const waitFor = 5 * time.Second

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// call is one ExecuteBatch seen by fakeTransport, waiting for the test's
// answer.
type call struct {
	ctx    context.Context
	target Target
	req    *rspb.BatchRequest
	reply  chan reply
}

type reply struct {
	resp *rspb.BatchResponse
	err  error
}

// ok answers every op of the call with success.
func (c *call) ok() { c.reply <- reply{resp: okResponse(c.req)} }

func (c *call) fail(err error) { c.reply <- reply{err: err} }

func okResponse(req *rspb.BatchRequest) *rspb.BatchResponse {
	resp := &rspb.BatchResponse{HighestTerm: req.GetTerm()}
	for _, op := range req.GetOps() {
		resp.Results = append(resp.Results, &rspb.RegionOpResult{
			Region: op.GetRegion(), Kind: op.GetKind(), Ok: true, ProcId: op.GetProcId(),
		})
	}
	return resp
}

// fakeTransport hands every call to the test and blocks until the test
// answers it or the call's context ends.
type fakeTransport struct {
	calls chan *call

	mu      sync.Mutex
	removed []string
}

func newFakeTransport() *fakeTransport { return &fakeTransport{calls: make(chan *call, 1024)} }

func (f *fakeTransport) ExecuteBatch(ctx context.Context, t Target, req *rspb.BatchRequest) (*rspb.BatchResponse, error) {
	c := &call{ctx: ctx, target: t, req: req, reply: make(chan reply, 1)}
	f.calls <- c
	select {
	case r := <-c.reply:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// RemoveServer records the dispatcher's notice.
func (f *fakeTransport) RemoveServer(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, id)
}

type serverFailure struct {
	id  string
	err error
}

// harness is a Dispatcher on a Manual clock and a fakeTransport, with its
// callbacks and sender completions turned into channels.
type harness struct {
	t       *testing.T
	d       *Dispatcher
	clk     *clock.Manual
	tr      *fakeTransport
	results chan Result
	failed  chan serverFailure
	senders chan struct{}
	nextID  uint64
}

func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{
		t:       t,
		clk:     clock.NewManual(t0),
		tr:      newFakeTransport(),
		results: make(chan Result, 100000),
		failed:  make(chan serverFailure, 100),
		senders: make(chan struct{}, 100000),
	}
	cfg := DefaultConfig()
	cfg.Term, cfg.MasterID = 7, "m1"
	cfg.Transport = h.tr
	cfg.Clock = h.clk
	cfg.OnResult = func(r Result) { h.results <- r }
	cfg.OnServerFailed = func(id string, err error) { h.failed <- serverFailure{id, err} }
	cfg.Logger = testLogger(t)
	// The tests of the other rules run unpaced; TestPaceGathersBursts
	// turns it on.
	cfg.Pace = -1
	if mod != nil {
		mod(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	d.jitter = func(time.Duration) time.Duration { return 0 }
	d.senderDone = func() { h.senders <- struct{}{} }
	h.d = d
	t.Cleanup(d.Stop)
	return h
}

func testLogger(t *testing.T) hclog.Logger {
	lvl := hclog.Off
	if testing.Verbose() {
		lvl = hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: lvl})
}

func target(id string, startCode uint64) Target {
	return Target{ServerID: id, Address: id + ".test:16020", StartCode: startCode}
}

// dispatch sends n opens with fresh proc ids to tg and returns them.
func (h *harness) dispatch(tg Target, n int) []Op {
	ops := make([]Op, n)
	for i := range ops {
		h.nextID++
		ops[i] = Op{Kind: rspb.OpKind_OP_KIND_OPEN, Region: fmt.Sprintf("r%d", h.nextID), Table: "t", ProcID: h.nextID}
		h.d.Dispatch(tg, ops[i])
	}
	return ops
}

// nextCall waits for the transport's next call.
func (h *harness) nextCall() *call {
	h.t.Helper()
	select {
	case c := <-h.tr.calls:
		return c
	case <-time.After(waitFor):
		h.t.Fatalf("no call within %v (stats %+v)", waitFor, h.d.Stats())
		return nil
	}
}

// nextCallOf waits for the transport's next call and fails unless it
// carries exactly ops, in order; what names the call in the failure.
func (h *harness) nextCallOf(what string, ops []Op) *call {
	h.t.Helper()
	c := h.nextCall()
	if got := regions(c.req); !slices.Equal(got, opRegions(ops)) {
		h.t.Fatalf("%s %v, want %v", what, got, opRegions(ops))
	}
	return c
}

// waitSender waits until a sender goroutine has finished with its call:
// results delivered and the server's next step (timer, send) decided.
func (h *harness) waitSender() {
	h.t.Helper()
	select {
	case <-h.senders:
	case <-time.After(waitFor):
		h.t.Fatalf("no sender finished within %v", waitFor)
	}
}

// answer replies to c and waits until the dispatcher has acted on it.
func (h *harness) answer(c *call, err error) {
	h.t.Helper()
	if err == nil {
		c.ok()
	} else {
		c.fail(err)
	}
	h.waitSender()
}

// collect takes n results.
func (h *harness) collect(n int) []Result {
	h.t.Helper()
	out := make([]Result, 0, n)
	for len(out) < n {
		select {
		case r := <-h.results:
			out = append(out, r)
		case <-time.After(waitFor):
			h.t.Fatalf("got %d of %d results within %v", len(out), n, waitFor)
		}
	}
	return out
}

// noResults checks that no result is waiting. Results are delivered before
// a sender finishes (waitSender) or a synchronous call returns, so this is
// exact at those points.
func (h *harness) noResults() {
	h.t.Helper()
	if n := len(h.results); n > 0 {
		h.t.Fatalf("%d unexpected results, first %+v", n, <-h.results)
	}
}

func (h *harness) batches() uint64 { return h.d.Stats().Batches }

func (h *harness) wantBatches(want uint64) {
	h.t.Helper()
	if got := h.batches(); got != want {
		h.t.Fatalf("batches = %d, want %d", got, want)
	}
}

func regions(req *rspb.BatchRequest) []string {
	out := make([]string, len(req.GetOps()))
	for i, op := range req.GetOps() {
		out[i] = op.GetRegion()
	}
	return out
}

func opRegions(ops []Op) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = op.Region
	}
	return out
}
