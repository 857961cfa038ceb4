package dispatch

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/proto/rspb"
)

func newGRPCTransport(t *testing.T, timeout time.Duration) *GRPCTransport {
	gt := NewGRPCTransport(GRPCTransportConfig{CallTimeout: timeout, Logger: testLogger(t)})
	t.Cleanup(func() { _ = gt.Close() })
	return gt
}

// The dispatcher over real gRPC to in-process region servers: batches,
// idempotent repeats, cached connections closed on RemoveServer and Close.
func TestGRPCTransportEndToEnd(t *testing.T) {
	rs1, rs2 := newFakeRS(11), newFakeRS(22)
	t1 := Target{ServerID: "rs1", Address: serveRS(t, rs1), StartCode: 11}
	t2 := Target{ServerID: "rs2", Address: serveRS(t, rs2), StartCode: 22}
	gt := newGRPCTransport(t, waitFor)
	h := newHarness(t, func(c *Config) { c.Transport = gt })

	ops := h.dispatch(t1, 33) // over MinBatch: sent at once
	h.waitSender()
	for _, r := range h.collect(33) {
		if !r.OK || r.Already || r.Err != nil || r.Target != t1 {
			t.Fatalf("result %+v", r)
		}
	}
	h.dispatch(t2, 3)
	h.clk.Advance(DefaultDelay)
	h.waitSender()
	h.collect(3)

	// The same opens again (a re-dispatch after failover): already open.
	for _, op := range ops {
		h.d.Dispatch(t1, op)
	}
	h.waitSender()
	for _, r := range h.collect(33) {
		if !r.OK || !r.Already {
			t.Fatalf("repeated open %+v", r)
		}
	}
	if rs1.regions() != 33 || rs2.regions() != 3 {
		t.Fatalf("regions open: rs1 %d, rs2 %d", rs1.regions(), rs2.regions())
	}
	if gt.Conns() != 2 {
		t.Fatalf("%d connections, want one per server", gt.Conns())
	}

	h.d.RemoveServer("rs1")
	if gt.Conns() != 1 {
		t.Fatalf("%d connections after RemoveServer", gt.Conns())
	}
	if err := gt.Close(); err != nil {
		t.Fatal(err)
	}
	if gt.Conns() != 0 {
		t.Fatal("connections left after Close")
	}
	_, err := gt.ExecuteBatch(context.Background(), t2, &rspb.BatchRequest{})
	if !errors.Is(err, net.ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
}

// Fencing refusals keep their meaning across a real gRPC hop, said in the
// message (a region server older than the details) or in the detail alone.
func TestGRPCTransportFencing(t *testing.T) {
	tests := []struct {
		name       string
		highest    uint64 // highest term the server has seen (ours is 7)
		startCode  uint64 // the server's; the target says 5
		detailOnly bool
		want       error
		wantFailed bool
	}{
		{"current", 7, 5, false, nil, false},
		{"stale term", 9, 5, false, ErrStaleTerm, false},
		{"wrong start code", 3, 6, false, ErrWrongStartCode, true},
		{"stale term detail", 9, 5, true, ErrStaleTerm, false},
		{"wrong start code detail", 3, 6, true, ErrWrongStartCode, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := newFakeRS(tc.startCode)
			rs.highest, rs.detailOnly = tc.highest, tc.detailOnly
			tg := Target{ServerID: "rs", Address: serveRS(t, rs), StartCode: 5}
			h := newHarness(t, func(c *Config) { c.Transport = newGRPCTransport(t, waitFor) })
			h.dispatch(tg, 33)
			h.waitSender()
			for _, r := range h.collect(33) {
				if tc.want == nil && !r.OK || tc.want != nil && !errors.Is(r.Err, tc.want) {
					t.Fatalf("result %+v, want %v", r, tc.want)
				}
			}
			if got := len(h.failed) == 1; got != tc.wantFailed {
				t.Fatalf("OnServerFailed called: %v", got)
			}
			if h.clk.Pending() != 0 {
				t.Fatal("retry scheduled")
			}
		})
	}
}

// What the transport returns for calls that cannot succeed, and how the
// dispatcher classifies it.
func TestGRPCTransportErrors(t *testing.T) {
	blocked := newFakeRS(1)
	blocked.block = true
	blockedAddr := serveRS(t, blocked)

	deadAddr := testnet.DeadAddr(t) // connection refused

	tests := []struct {
		name  string
		tg    Target
		code  codes.Code
		class errClass
	}{
		{"connection refused", Target{ServerID: "dead", Address: deadAddr, StartCode: 1}, codes.Unavailable, classRetry},
		{"call timeout", Target{ServerID: "slow", Address: blockedAddr, StartCode: 1}, codes.DeadlineExceeded, classRetry},
		{"no address", Target{ServerID: "nowhere", StartCode: 1}, codes.InvalidArgument, classRefused},
		{"malformed address", Target{ServerID: "bad", Address: "dns://a b/%%", StartCode: 1}, codes.InvalidArgument, classRefused},
	}
	gt := newGRPCTransport(t, 100*time.Millisecond)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := &rspb.BatchRequest{Term: 1, MasterId: "m", ServerId: tc.tg.ServerID, StartCode: 1,
				Ops: []*rspb.RegionOp{{Kind: rspb.OpKind_OP_KIND_OPEN, Region: "r"}}}
			_, err := gt.ExecuteBatch(context.Background(), tc.tg, req)
			if status.Code(err) != tc.code {
				t.Fatalf("error %v, want code %v", err, tc.code)
			}
			if c := classify(err); c != tc.class {
				t.Fatalf("classified %v, want %v", c, tc.class)
			}
		})
	}
}
