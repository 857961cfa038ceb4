package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/rspb"
)

// An answer that a client older than paging gets, or one page, stays
// well under gRPC's 4 MiB.
const pageBytesMost = 2 << 20

// TestRSRegionsOfManyLongRegions: a region server hosting 10,000 regions
// of a table with the longest names answered ListRegions in 5.4 MB, so
// that neither 'rs regions' (through the masters, whose ServerRegions
// asks the region server) nor 'rs regions --direct' could show it. Both
// now read it in pages; a client that sends no page token (0.1.0's) gets
// the first page and a next_page_token saying there are more.
func TestRSRegionsOfManyLongRegions(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1, RegionServers: 1, Domain: func(_ int, c *domain.Config) {
		c.ServerLease.SoftLimit, c.ServerLease.HardLimit, c.HeartbeatInterval = 30*time.Minute, time.Hour, time.Minute
	}})
	fc.WaitLeader()
	rs := fc.RegionServers()["rs1"]
	const n = 10_000
	table := strings.Repeat("n", 128) + ":" + strings.Repeat("t", 128)
	names := fc.SeedTable(table, domain.TableEnabled, n, 3, func(int) domain.Region {
		return domain.Region{State: domain.RegionOpen, Server: "rs1", StartCode: rs.StartCode()}
	})
	cc, err := grpc.NewClient(rs.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rsc := rspb.NewRegionServerClient(cc)
	openRegions(t, rs.HighestTerm(), rs.StartCode(), rs.ClusterID(), rsc, table, names)

	env := map[string]string{"BATON_ADDR": fc.AdminAddrs()[0]}
	type doc struct {
		Hosted   []string `json:"hosted"`
		Assigned []string `json:"assigned"`
	}
	for _, args := range [][]string{{"rs", "regions", "rs1", "--json"}, {"rs", "regions", "rs1", "--direct", rs.Addr(), "--json"}} {
		code, stdout, stderr := runCLI(t, env, args...)
		var d doc
		if code != exitOK || json.Unmarshal([]byte(stdout), &d) != nil {
			t.Errorf("%s: exit %d\n%.2000s", strings.Join(args, " "), code, stderr)
			continue
		}
		if len(d.Hosted) != n || len(d.Assigned) != n || d.Hosted[0] != names[0] || d.Hosted[n-1] != names[n-1] {
			t.Errorf("%s: %d hosted, %d assigned, want %d each", strings.Join(args, " "), len(d.Hosted), len(d.Assigned), n)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old, err := rsc.ListRegions(ctx, &rspb.ListRegionsRequest{})
	if err != nil || old.GetNextPageToken() == "" || len(old.GetRegions()) >= n || proto.Size(old) > pageBytesMost {
		t.Errorf("a region server's first page: %d regions, %d bytes, next_page_token %q, %v",
			len(old.GetRegions()), proto.Size(old), old.GetNextPageToken(), err)
	}
	first, err := fc.Leader().Admin().ServerRegions(ctx, &adminpb.ServerRegionsRequest{Server: "rs1"})
	if err != nil || first.GetNextPageToken() == "" || len(first.GetHosted()) >= n || proto.Size(first) > pageBytesMost {
		t.Errorf("ServerRegions' first page: %d hosted, %d assigned, %d bytes, next_page_token %q, %v",
			len(first.GetHosted()), len(first.GetAssigned()), proto.Size(first), first.GetNextPageToken(), err)
	}
	if h, a := first.GetHosted(), first.GetAssigned(); len(h) != len(a) || len(h) == 0 || h[len(h)-1] != a[len(a)-1] {
		t.Errorf("ServerRegions' first page covers different names: %d hosted, %d assigned", len(h), len(a))
	}
}

// openRegions opens names on the region server behind rsc as the leader
// of term would, in batches under the message limit.
func openRegions(t *testing.T, term, startCode uint64, clusterID string, rsc rspb.RegionServerClient, table string, names []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for from := 0; from < len(names); from += 4096 {
		// As a master of its cluster sends it: a region server that knows
		// its cluster's id refuses a batch naming another, or none.
		req := &rspb.BatchRequest{Term: term, MasterId: "test", ServerId: "rs1", StartCode: startCode, ClusterId: clusterID}
		for _, name := range names[from:min(from+4096, len(names))] {
			req.Ops = append(req.Ops, &rspb.RegionOp{Kind: rspb.OpKind_OP_KIND_OPEN, Region: name, Table: table})
		}
		resp, err := rsc.ExecuteBatch(ctx, req)
		if err != nil {
			t.Fatalf("open regions %d…: %v", from, err)
		}
		for _, r := range resp.GetResults() {
			if !r.GetOk() {
				t.Fatalf("open %s: %s", r.GetRegion(), r.GetError())
			}
		}
	}
}

// bigResult is a procedure whose result is 5 MiB: one a release without
// bounds on answers could not show at all.
type bigResult struct{ procedure.Base }

func (p *bigResult) Execute(ctx *procedure.Context) (procedure.Step, error) {
	ctx.SetResult([]byte(strings.Repeat("r", 5<<20)))
	return procedure.Done(), nil
}
func (p *bigResult) Rollback(*procedure.Context) error { return nil }

// TestProcOfHugeResult: 'proc wait --json', 'proc get' and 'proc get
// --json' of a procedure with a 5 MiB result failed (larger than a gRPC
// message); they now show its first MiB and say it was cut.
func TestProcOfHugeResult(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1, Register: func(r *procedure.Registry) error {
		return r.Register("bigresult", 1, func() procedure.Procedure { return &bigResult{} })
	}})
	fc.WaitLeader()
	id := fc.Submit(&bigResult{}, "")
	env := map[string]string{"BATON_ADDR": fc.AdminAddrs()[0]}
	// cutToAMiB is nil if the --json document of the command args shows
	// the procedure succeeded with its result cut to its first MiB.
	cutToAMiB := func(args ...string) error {
		code, stdout, stderr := runCLI(t, env, args...)
		var doc struct {
			State     string `json:"state"`
			Result    string `json:"result"`
			Truncated bool   `json:"truncated"`
		}
		if code != exitOK || json.Unmarshal([]byte(stdout), &doc) != nil || doc.State != "SUCCESS" || !doc.Truncated || len(doc.Result) != 1<<20 {
			return fmt.Errorf("exit %d, %d bytes of result\n%.2000s", code, len(doc.Result), stderr)
		}
		return nil
	}
	if err := cutToAMiB("proc", "wait", idStr(id), "--json"); err != nil {
		t.Fatalf("wait --json: %v", err)
	}
	if err := cutToAMiB("proc", "get", idStr(id), "--json"); err != nil {
		t.Errorf("get --json: %v", err)
	}
	code, stdout, stderr := runCLI(t, env, "proc", "get", idStr(id))
	if code != exitOK || !strings.Contains(stdout, "truncated    fields longer than an answer carries were cut") {
		t.Errorf("get: exit %d\n%.500s\n%.2000s", code, stdout[max(0, len(stdout)-500):], stderr)
	}
}
