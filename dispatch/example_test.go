package dispatch_test

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/proto/rspb"
)

// openAll is a region server that opens and closes anything.
type openAll struct {
	rspb.UnimplementedRegionServerServer
}

func (openAll) ExecuteBatch(_ context.Context, req *rspb.BatchRequest) (*rspb.BatchResponse, error) {
	resp := &rspb.BatchResponse{HighestTerm: req.GetTerm()}
	for _, op := range req.GetOps() {
		resp.Results = append(resp.Results, &rspb.RegionOpResult{
			Region: op.GetRegion(), Kind: op.GetKind(), ProcId: op.GetProcId(), Ok: true})
	}
	return resp, nil
}

func Example() {
	local := dispatch.NewLocalTransport()
	local.Register("rs1", openAll{})

	var mu sync.Mutex
	var wg sync.WaitGroup
	var lines []string
	cfg := dispatch.DefaultConfig()
	cfg.Term, cfg.MasterID, cfg.Transport = 3, "master-1", local
	cfg.MinBatch = 2 // the third op sends the batch at once
	cfg.OnResult = func(r dispatch.Result) {
		mu.Lock()
		lines = append(lines, fmt.Sprintf("proc %d: %v %s on %s ok=%v", r.Op.ProcID, r.Op.Kind, r.Op.Region, r.Target.ServerID, r.OK))
		mu.Unlock()
		wg.Done()
	}
	cfg.OnServerFailed = func(id string, err error) { fmt.Println("expire", id, err) }
	d, err := dispatch.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Stop()

	rs1 := dispatch.Target{ServerID: "rs1", Address: "10.0.0.1:16020", StartCode: 1}
	wg.Add(3)
	for i, region := range []string{"t1,a", "t1,b", "t1,c"} {
		d.Dispatch(rs1, dispatch.Op{Kind: rspb.OpKind_OP_KIND_OPEN, Region: region, Table: "t1", ProcID: uint64(10 + i)})
	}
	wg.Wait()
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Printf("%+v\n", d.Stats())
	// Output:
	// proc 10: OP_KIND_OPEN t1,a on rs1 ok=true
	// proc 11: OP_KIND_OPEN t1,b on rs1 ok=true
	// proc 12: OP_KIND_OPEN t1,c on rs1 ok=true
	// {Ops:3 Batches:1 Retries:0 Failures:0 ServerFailures:0}
}
