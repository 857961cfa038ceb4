package dispatch

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/rspb"
)

// fakeRS is a minimal region server: term fencing, start code check,
// idempotent open and close, as proto/rspb/regionserver.proto describes.
type fakeRS struct {
	rspb.UnimplementedRegionServerServer
	startCode uint64

	mu      sync.Mutex
	highest uint64
	open    map[string]bool
	batches int
	block   bool // hold every call until its context ends
	// detailOnly: refusals say what they are only in their rspb detail,
	// under a message a text match would not recognise.
	detailOnly bool
}

func newFakeRS(startCode uint64) *fakeRS {
	return &fakeRS{startCode: startCode, open: make(map[string]bool)}
}

func (s *fakeRS) ExecuteBatch(ctx context.Context, req *rspb.BatchRequest) (*rspb.BatchResponse, error) {
	s.mu.Lock()
	block := s.block
	s.mu.Unlock()
	if block {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches++
	if req.GetTerm() < s.highest {
		if s.detailOnly {
			return nil, rspb.Refusal(rspb.ReasonStaleTerm, map[string]string{rspb.MetaServerTerm: fmt.Sprint(s.highest)}, "refused")
		}
		return nil, status.Errorf(codes.FailedPrecondition, "stale term %d < %d", req.GetTerm(), s.highest)
	}
	s.highest = req.GetTerm()
	if req.GetStartCode() != s.startCode {
		if s.detailOnly {
			return nil, rspb.Refusal(rspb.ReasonWrongStartCode, map[string]string{rspb.MetaServerStartCode: fmt.Sprint(s.startCode)}, "refused")
		}
		return nil, status.Errorf(codes.FailedPrecondition, "wrong start code %d, current %d", req.GetStartCode(), s.startCode)
	}
	resp := &rspb.BatchResponse{HighestTerm: s.highest, Results: make([]*rspb.RegionOpResult, len(req.GetOps()))}
	for i, op := range req.GetOps() {
		r := &rspb.RegionOpResult{Region: op.GetRegion(), Kind: op.GetKind(), ProcId: op.GetProcId(), Ok: true}
		switch op.GetKind() {
		case rspb.OpKind_OP_KIND_OPEN:
			r.Already = s.open[op.GetRegion()]
			s.open[op.GetRegion()] = true
		case rspb.OpKind_OP_KIND_CLOSE:
			r.Already = !s.open[op.GetRegion()]
			delete(s.open, op.GetRegion())
		default:
			r.Ok, r.Error = false, fmt.Sprintf("unknown kind %v", op.GetKind())
		}
		resp.Results[i] = r
	}
	return resp, nil
}

func (s *fakeRS) regions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// serveRS serves rs on 127.0.0.1:0 and returns its address.
func serveRS(t testing.TB, rs *fakeRS) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rspb.RegisterRegionServerServer(srv, rs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}
