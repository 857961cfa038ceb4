package console_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// forgetAdmin holds procedure 7, a ServerCrash whose Info.Children lists
// the ids of n children that were forgotten as they succeeded (the admin
// API lists them: procedure.Info.Children keeps them), and one live child.
type forgetAdmin struct {
	fakeAdmin
	n     uint64
	reads atomic.Int64
}

func (f *forgetAdmin) GetProcedure(_ context.Context, req *adminpb.GetProcedureRequest) (*adminpb.Procedure, error) {
	f.reads.Add(1)
	id := req.GetId()
	switch {
	case id == 7:
		p := &adminpb.Procedure{Id: 7, RootId: 7, Type: "ServerCrash", State: "WAITING",
			Read: &adminpb.ReadInfo{ServedBy: "m1", Consistency: adminpb.Consistency_LINEARIZABLE}}
		for c := uint64(0); c <= f.n; c++ {
			p.Children = append(p.Children, 100+c)
		}
		return p, nil
	case id == 100+f.n:
		return &adminpb.Procedure{Id: id, ParentId: 7, RootId: 7, Type: "TransitRegionState", State: "RUNNABLE",
			Read: &adminpb.ReadInfo{ServedBy: "m1", Consistency: adminpb.Consistency_LINEARIZABLE}}, nil
	}
	return nil, status.Errorf(codes.NotFound, "procedure: not found: %d", id)
}

// TestConsoleTreeBoundsReadsOfForgottenChildren: the procedure page's tree
// reads at most maxTree (60) children, found or not: a crash recovery's
// children are forgotten as they succeed while it lists them all, and
// reading every one would be one linearizable read each.
func TestConsoleTreeBoundsReadsOfForgottenChildren(t *testing.T) {
	f := &forgetAdmin{n: 5000}
	srv := consoleOver(t, f)
	req, _ := http.NewRequest("GET", srv.URL+"/ui/procedures/7", nil)
	resp, _ := fetch(t, req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if n := f.reads.Load(); n > 100 {
		t.Fatalf("one page view of a ServerCrash with %d forgotten children made %d GetProcedure reads (maxTree is 60)", f.n, n)
	}
}
