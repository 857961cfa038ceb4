package domain_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/proto/adminpb"
)

// The scale: at 100,000 regions an unpaged region list was 5 MB,
// over gRPC's 4 MiB message limit. Here every list is walked page by
// page, and no answer grows with the cluster.

const (
	scaleTables    = 10
	scalePerTable  = 10_000
	scaleServers   = 100 // so that one server's regions are 1% of them
	grpcMessageMax = 4 << 20
)

// scalePlace: every tenth region CLOSED on no server, the others OPEN on
// one of scaleServers made-up servers.
func scalePlace(i int) domain.Region {
	if i%10 == 0 {
		return domain.Region{State: domain.RegionClosed}
	}
	return domain.Region{State: domain.RegionOpen, Server: fmt.Sprintf("x%02d", i%scaleServers)}
}

// scaleCluster is one master (and rs, registered, so that ListServers
// counts) over scaleTables tables of scalePerTable seeded regions. It
// returns the region names in name order.
func scaleCluster(tb testing.TB, servers, tables int) (*clustertest.Cluster, []string) {
	tb.Helper()
	c := clustertest.New(tb, clustertest.Config{Masters: 1, RegionServers: servers})
	var names []string
	for t := range tables {
		names = append(names, c.SeedTable(fmt.Sprintf("default:t%02d", t), domain.TableEnabled, scalePerTable, 3, scalePlace)...)
	}
	return c, names
}

// TestList100kRegions lists 100,000 regions through the API, walking the
// pages with the client's iterator: every region comes exactly once, in
// order, and no answer is near gRPC's limit; a filter matching 1% of them
// comes in budget-bounded calls; the table list counts them all.
func TestList100kRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 100,000 regions")
	}
	c, names := scaleCluster(t, 0, scaleTables)
	ctx := listCtx(t)
	cl := c.Client()

	seen := make(map[string]bool, len(names))
	i := 0
	for r, err := range cl.Regions(ctx, &adminpb.ListRegionsRequest{}) {
		if err != nil {
			t.Fatalf("after %d regions: %v", i, err)
		}
		if seen[r.GetName()] {
			t.Fatalf("region %s listed twice", r.GetName())
		}
		seen[r.GetName()] = true
		if i >= len(names) || r.GetName() != names[i] {
			t.Fatalf("region %d is %s, want %s", i, r.GetName(), names[min(i, len(names)-1)])
		}
		i++
	}
	if i != len(names) {
		t.Fatalf("listed %d regions, want %d", i, len(names))
	}

	// The biggest page there is: clamped to the maximum, and well under
	// the message limit.
	big, err := cl.ListRegionsPage(ctx, &adminpb.ListRegionsRequest{PageSize: 50_000})
	if err != nil {
		t.Fatal(err)
	}
	if len(big.GetRegions()) != catalog.MaxRegionPageSize || proto.Size(big) > grpcMessageMax/4 {
		t.Fatalf("page of 50,000 asked: %d regions, %d bytes", len(big.GetRegions()), proto.Size(big))
	}

	// One server's regions: 1% of them, found in calls that each examine
	// at most the scan budget, so some pages are short.
	want := 0
	for j := range scalePerTable {
		if scalePlace(j).Server == "x07" {
			want += scaleTables
		}
	}
	req := &adminpb.ListRegionsRequest{Server: "x07"}
	got, calls := 0, 0
	for {
		calls++
		resp, err := cl.ListRegionsPage(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetRegions() {
			if r.GetServer() != "x07" {
				t.Fatalf("server filter let %s on %q through", r.GetName(), r.GetServer())
			}
		}
		got += len(resp.GetRegions())
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if got != want || calls < len(names)/catalog.ScanBudget {
		t.Fatalf("server filter: %d regions in %d calls, want %d in at least %d", got, calls, want, len(names)/catalog.ScanBudget)
	}

	tables, err := cl.ListTables(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, tb := range tables {
		total += int(tb.GetRegionCount())
		if len(tb.GetRegions()) != 0 || tb.GetRegionsByState()[domain.RegionClosed] != scalePerTable/10 {
			t.Fatalf("table %s: %d regions carried, by state %v", tb.GetName(), len(tb.GetRegions()), tb.GetRegionsByState())
		}
	}
	if len(tables) != scaleTables || total != len(names) {
		t.Fatalf("%d tables counting %d regions, want %d counting %d", len(tables), total, scaleTables, len(names))
	}
}

// BenchmarkListRegions100k measures one call of each list at 100,000
// regions over the admin API (stale, so that no quorum round is in the
// figure), against a stale GetNamespace measured first in the same run
// (x-get: how many of those one call costs):
//
//	get           the baseline: a point read through the same API
//	first-page    ListRegions, the first 1000 regions
//	middle-page   ListRegions, 1000 regions from the 50,000th on
//	server-1pct   ListRegions filtered to one server (1% of the
//	              regions): one call, which examines the scan budget
//	tables        ListTables: 10 tables, counting all 100,000 regions
//	servers       ListServers: one pass over the regions to count
//
//	go test -run xxx -bench BenchmarkListRegions100k ./cluster/domain/
//
// BATON_LIST_BENCH_TABLES=100 runs it at a million regions (100 tables of
// 10,000; the table list then counts the budget's worth, 500,000).
//
// On a loaded 2-core machine (x-get; the get itself about 40 µs): at
// 100,000 regions first-page 42, middle-page 45, server-1pct 376, tables
// 1008, servers 666. At a million, a page costs the same, server-1pct
// (budget-bound) about the same, and tables and servers about 0.7 s: the
// servers' counts are one pass over the regions per call.
func BenchmarkListRegions100k(b *testing.B) {
	tables := scaleTables
	if v := os.Getenv("BATON_LIST_BENCH_TABLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("BATON_LIST_BENCH_TABLES=%q: want a positive number of tables", v)
		}
		tables = n
	}
	c, names := scaleCluster(b, 1, tables)
	a := c.Leader().Admin()
	ctx := context.Background()
	stale := adminpb.Consistency_STALE
	var baseline float64
	perOp := func(b *testing.B) float64 { return float64(b.Elapsed().Nanoseconds()) / float64(b.N) }
	b.Run("get", func(b *testing.B) {
		for b.Loop() {
			if _, err := a.GetNamespace(ctx, &adminpb.GetNamespaceRequest{Name: "default", Consistency: stale}); err != nil {
				b.Fatal(err)
			}
		}
		baseline = perOp(b)
	})
	run := func(name string, call func() error) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
			if baseline > 0 {
				b.ReportMetric(perOp(b)/baseline, "x-get")
			}
		})
	}
	regions := func(req *adminpb.ListRegionsRequest, want int) func() error {
		req.Consistency = stale
		return func() error {
			r, err := a.ListRegions(ctx, req)
			if err == nil && len(r.GetRegions()) != want {
				err = fmt.Errorf("%d regions listed, want %d", len(r.GetRegions()), want)
			}
			return err
		}
	}
	// A token is opaque: the middle one is reached by walking there.
	tok := ""
	for passed := 0; passed < len(names)/2; {
		r, err := a.ListRegions(ctx, &adminpb.ListRegionsRequest{PageSize: catalog.MaxRegionPageSize, PageToken: tok})
		if err != nil {
			b.Fatal(err)
		}
		passed, tok = passed+len(r.GetRegions()), r.GetNextPageToken()
	}
	middle := &adminpb.ListRegionsRequest{PageToken: tok}
	run("first-page", regions(&adminpb.ListRegionsRequest{}, catalog.DefaultRegionPageSize))
	run("middle-page", regions(middle, catalog.DefaultRegionPageSize))
	run("server-1pct", regions(&adminpb.ListRegionsRequest{Server: "x07"}, catalog.ScanBudget/scaleServers))
	// The first page of tables: as many as the count budget lets it
	// count (all of them at 100,000 regions).
	wantTables := min(tables, catalog.CountBudget/scalePerTable)
	run("tables", func() error {
		r, err := a.ListTables(ctx, &adminpb.ListTablesRequest{Consistency: stale})
		if err == nil && len(r.GetTables()) != wantTables {
			err = fmt.Errorf("%d tables listed, want %d", len(r.GetTables()), wantTables)
		}
		return err
	})
	run("servers", func() error {
		r, err := a.ListServers(ctx, &adminpb.ListServersRequest{Consistency: stale})
		if err == nil && len(r.GetServers()) != 1 {
			err = fmt.Errorf("%d servers listed", len(r.GetServers()))
		}
		return err
	})
}
