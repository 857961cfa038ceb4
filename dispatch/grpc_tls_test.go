package dispatch

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/security"
)

// impostor is a region server that answers every operation as done.
type impostor struct {
	rspb.UnimplementedRegionServerServer
}

func (impostor) ExecuteBatch(_ context.Context, req *rspb.BatchRequest) (*rspb.BatchResponse, error) {
	var res []*rspb.RegionOpResult
	for _, op := range req.GetOps() {
		res = append(res, &rspb.RegionOpResult{Region: op.GetRegion(), Kind: op.GetKind(), Ok: true, ProcId: op.GetProcId()})
	}
	return &rspb.BatchResponse{Results: res, HighestTerm: req.GetTerm()}, nil
}

// TestGRPCTransportAcceptsOnlyTheServerDialled: with per-server TLS
// credentials (DialOptionsFor), a batch for rs1 sent to an address where
// rs2's certificate answers fails, and one to rs2 there succeeds: another
// region server at rs1's address cannot acknowledge rs1's opens.
func TestGRPCTransportAcceptsOnlyTheServerDialled(t *testing.T) {
	pki, err := security.NewTestPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rs2 := pki.MustCredentials(security.Identity{Role: security.RoleRegionServer, ID: "rs2"})
	master := pki.MustCredentials(security.Identity{Role: security.RoleMaster, ID: "m1"})
	gs := grpc.NewServer(security.RegionServerPolicy().ServerOptions(rs2)...)
	rspb.RegisterRegionServerServer(gs, impostor{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	defer gs.Stop()

	tr := NewGRPCTransport(GRPCTransportConfig{DialOptionsFor: func(id string) []grpc.DialOption {
		return []grpc.DialOption{master.DialOptionFor(security.Identity{Role: security.RoleRegionServer, ID: id})}
	}})
	defer tr.Close()
	send := func(id string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := tr.ExecuteBatch(ctx, Target{ServerID: id, Address: ln.Addr().String()},
			&rspb.BatchRequest{Term: 1, MasterId: "m1", ServerId: id, StartCode: 7, Ops: []*rspb.RegionOp{{Kind: rspb.OpKind_OP_KIND_OPEN, Region: "t,,1"}}})
		return err
	}
	if err := send("rs1"); err == nil {
		t.Error("a batch for rs1 was answered by rs2's certificate and accepted")
	}
	if err := send("rs2"); err != nil {
		t.Errorf("a batch for rs2, answered by rs2: %v", err)
	}
}
