package domain_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/proto/adminpb"
)

// The lists are paged and filtered by the masters (list.go). These tests
// seed region records straight into the replicated state
// (clustertest.SeedTable): the regions are on made-up servers ("x1".."x3")
// that never register, so nothing moves them while they are listed.

// listLayout is what listCluster seeds.
type listLayout struct {
	// regions by table, in name order, and each region's seeded record.
	names   map[string][]string
	records map[string]domain.Region
}

// seededPlace spreads regions over states and servers: every fifth
// CLOSED on no server, the others OPEN on x1, x2 or x3.
func seededPlace(i int) domain.Region {
	if i%5 == 0 {
		return domain.Region{State: domain.RegionClosed}
	}
	return domain.Region{State: domain.RegionOpen, Server: fmt.Sprintf("x%d", i%3+1)}
}

// listCluster starts one master with tables default:a (no regions),
// default:b (25 regions, seededPlace), ns1:c (10 regions OPENING on x1,
// DISABLED) and default:big (1500 regions, seededPlace).
func listCluster(t *testing.T) (*clustertest.Cluster, listLayout) {
	t.Helper()
	c := clustertest.New(t, clustertest.Config{Masters: 1})
	l := listLayout{names: map[string][]string{}, records: map[string]domain.Region{}}
	seed := func(full, state string, n int, place func(int) domain.Region) {
		l.names[full] = c.SeedTable(full, state, n, 7, place)
		for i, name := range l.names[full] {
			rg := place(i)
			rg.Table = full
			l.records[name] = rg
		}
	}
	seed("default:a", domain.TableEnabled, 0, seededPlace)
	seed("default:b", domain.TableEnabled, 25, seededPlace)
	seed("ns1:c", domain.TableDisabled, 10, func(int) domain.Region {
		return domain.Region{State: domain.RegionOpening, Server: "x1"}
	})
	seed("default:big", domain.TableEnabled, 1500, seededPlace)
	return c, l
}

// want lists the seeded regions matching keep, in name order.
func (l listLayout) want(keep func(name string, rg domain.Region) bool) []string {
	var out []string
	for name, rg := range l.records {
		if keep(name, rg) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func listCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// walkRegions pages through ListRegions from req, returning the names in
// order and how many calls it took.
func walkRegions(t *testing.T, a adminpb.AdminClient, req *adminpb.ListRegionsRequest) ([]string, int, error) {
	t.Helper()
	var names []string
	for calls := 1; ; calls++ {
		resp, err := a.ListRegions(listCtx(t), req)
		if err != nil {
			return names, calls, err
		}
		if n := len(resp.GetRegions()); n > int(max(req.GetPageSize(), 0)) && req.GetPageSize() > 0 {
			t.Fatalf("page of %d regions, asked for %d", n, req.GetPageSize())
		}
		for _, r := range resp.GetRegions() {
			names = append(names, r.GetName())
		}
		if resp.GetNextPageToken() == "" {
			return names, calls, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

func TestListRegionsPaging(t *testing.T) {
	c, l := listCluster(t)
	a := c.Leader().Admin()
	all := func(string, domain.Region) bool { return true }
	ofTable := func(tb string) func(string, domain.Region) bool {
		return func(_ string, rg domain.Region) bool { return rg.Table == tb }
	}
	for _, tc := range []struct {
		name string
		req  *adminpb.ListRegionsRequest
		keep func(string, domain.Region) bool
		// calls is the number of calls the walk takes, 0 to not check.
		calls int
		code  codes.Code
	}{
		{name: "every region, default page", req: &adminpb.ListRegionsRequest{}, keep: all, calls: 2},
		{name: "every region, pages of 100", req: &adminpb.ListRegionsRequest{PageSize: 100}, keep: all, calls: 16},
		{name: "empty table", req: &adminpb.ListRegionsRequest{Table: "a"}, keep: ofTable("default:a"), calls: 1},
		{name: "unknown table", req: &adminpb.ListRegionsRequest{Table: "nope:t"}, keep: ofTable("nope:t"), calls: 1},
		// No trailing empty page: the last full page knows it is last.
		{name: "exact multiple of the page size", req: &adminpb.ListRegionsRequest{Table: "default:b", PageSize: 5}, keep: ofTable("default:b"), calls: 5},
		{name: "one short of a multiple", req: &adminpb.ListRegionsRequest{Table: "ns1:c", PageSize: 3}, keep: ofTable("ns1:c"), calls: 4},
		{name: "page of one", req: &adminpb.ListRegionsRequest{Table: "ns1:c", PageSize: 1}, keep: ofTable("ns1:c"), calls: 10},
		{name: "state", req: &adminpb.ListRegionsRequest{States: []string{"CLOSED"}, PageSize: 50},
			keep: func(_ string, rg domain.Region) bool { return rg.State == domain.RegionClosed }},
		{name: "states", req: &adminpb.ListRegionsRequest{States: []string{"CLOSED", "OPENING"}, PageSize: 50},
			keep: func(_ string, rg domain.Region) bool {
				return rg.State == domain.RegionClosed || rg.State == domain.RegionOpening
			}},
		{name: "server", req: &adminpb.ListRegionsRequest{Server: "x1", PageSize: 70},
			keep: func(_ string, rg domain.Region) bool { return rg.Server == "x1" }},
		{name: "table, state and server", req: &adminpb.ListRegionsRequest{Table: "default:b", States: []string{"OPEN"}, Server: "x2", PageSize: 2},
			keep: func(_ string, rg domain.Region) bool {
				return rg.Table == "default:b" && rg.State == domain.RegionOpen && rg.Server == "x2"
			}},
		{name: "filter matching none", req: &adminpb.ListRegionsRequest{Server: "x9"}, keep: func(string, domain.Region) bool { return false }, calls: 1},
		{name: "unknown state", req: &adminpb.ListRegionsRequest{States: []string{"SLEEPING"}}, code: codes.InvalidArgument},
		{name: "negative page size", req: &adminpb.ListRegionsRequest{PageSize: -1}, code: codes.InvalidArgument},
		{name: "garbage token", req: &adminpb.ListRegionsRequest{PageToken: "not a token!"}, code: codes.InvalidArgument},
		{name: "token of another list", req: &adminpb.ListRegionsRequest{PageToken: tableToken(t, a)}, code: codes.InvalidArgument},
		{name: "token of another table", req: &adminpb.ListRegionsRequest{Table: "ns1:c", PageToken: regionToken(t, a, "default:b")}, code: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, calls, err := walkRegions(t, a, tc.req)
			if status.Code(err) != tc.code {
				t.Fatalf("err = %v, want code %v", err, tc.code)
			}
			if tc.code != codes.OK {
				return
			}
			if want := l.want(tc.keep); !slices.Equal(got, want) {
				t.Fatalf("listed %d regions, want %d\ngot  %.300v\nwant %.300v", len(got), len(want), got, want)
			}
			if tc.calls != 0 && calls != tc.calls {
				t.Errorf("took %d calls, want %d", calls, tc.calls)
			}
		})
	}
}

// tableToken is a valid next_page_token of ListTables.
func tableToken(t *testing.T, a adminpb.AdminClient) string {
	t.Helper()
	resp, err := a.ListTables(listCtx(t), &adminpb.ListTablesRequest{PageSize: 1})
	if err != nil || resp.GetNextPageToken() == "" {
		t.Fatalf("ListTables: %v, token %q", err, resp.GetNextPageToken())
	}
	return resp.GetNextPageToken()
}

// regionToken is a valid next_page_token of ListRegions of table.
func regionToken(t *testing.T, a adminpb.AdminClient, table string) string {
	t.Helper()
	resp, err := a.ListRegions(listCtx(t), &adminpb.ListRegionsRequest{Table: table, PageSize: 1})
	if err != nil || resp.GetNextPageToken() == "" {
		t.Fatalf("ListRegions: %v, token %q", err, resp.GetNextPageToken())
	}
	return resp.GetNextPageToken()
}

// TestListRegionsStableUnderDeletes: a page resumes strictly after the
// last region returned, whether that region, the next one or an earlier
// one was deleted in between; nothing is returned twice or skipped.
func TestListRegionsStableUnderDeletes(t *testing.T) {
	c, l := listCluster(t)
	a := c.Leader().Admin()
	b := l.names["default:b"]
	first, err := a.ListRegions(listCtx(t), &adminpb.ListRegionsRequest{Table: "b", PageSize: 10})
	if err != nil || len(first.GetRegions()) != 10 {
		t.Fatalf("first page: %v, %d regions", err, len(first.GetRegions()))
	}
	// The token's own region, the one after it and one already listed.
	for _, name := range []string{b[9], b[10], b[2]} {
		c.DeleteRegion(name)
	}
	rest, _, err := walkRegions(t, a, &adminpb.ListRegionsRequest{Table: "b", PageSize: 10, PageToken: first.GetNextPageToken()})
	if err != nil {
		t.Fatal(err)
	}
	if want := b[11:]; !slices.Equal(rest, want) {
		t.Fatalf("after the deletes: %v, want %v", rest, want)
	}
}

func TestListTablesPaging(t *testing.T) {
	c, l := listCluster(t)
	a := c.Leader().Admin()
	walk := func(req *adminpb.ListTablesRequest) ([]*adminpb.Table, error) {
		var out []*adminpb.Table
		for {
			resp, err := a.ListTables(listCtx(t), req)
			if err != nil {
				return nil, err
			}
			out = append(out, resp.GetTables()...)
			if resp.GetNextPageToken() == "" {
				return out, nil
			}
			req.PageToken = resp.GetNextPageToken()
		}
	}
	names := func(ts []*adminpb.Table) []string {
		var out []string
		for _, tb := range ts {
			out = append(out, tb.GetNamespace()+":"+tb.GetName())
		}
		return out
	}
	for _, tc := range []struct {
		name string
		req  *adminpb.ListTablesRequest
		want []string
		code codes.Code
	}{
		{name: "all", req: &adminpb.ListTablesRequest{}, want: []string{"default:a", "default:b", "default:big", "ns1:c"}},
		{name: "pages of one", req: &adminpb.ListTablesRequest{PageSize: 1}, want: []string{"default:a", "default:b", "default:big", "ns1:c"}},
		{name: "exact multiple", req: &adminpb.ListTablesRequest{PageSize: 2}, want: []string{"default:a", "default:b", "default:big", "ns1:c"}},
		{name: "namespace", req: &adminpb.ListTablesRequest{Namespace: "ns1"}, want: []string{"ns1:c"}},
		{name: "unknown namespace", req: &adminpb.ListTablesRequest{Namespace: "nope"}},
		{name: "state", req: &adminpb.ListTablesRequest{States: []string{"DISABLED"}, PageSize: 1}, want: []string{"ns1:c"}},
		{name: "namespace and state", req: &adminpb.ListTablesRequest{Namespace: "default", States: []string{"DISABLED"}}},
		{name: "unknown state", req: &adminpb.ListTablesRequest{States: []string{"OPEN"}}, code: codes.InvalidArgument},
		{name: "bad token", req: &adminpb.ListTablesRequest{PageToken: "x"}, code: codes.InvalidArgument},
		{name: "region token", req: &adminpb.ListTablesRequest{PageToken: regionToken(t, a, "")}, code: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := walk(tc.req)
			if status.Code(err) != tc.code {
				t.Fatalf("err = %v, want code %v", err, tc.code)
			}
			if !slices.Equal(names(got), tc.want) {
				t.Fatalf("tables %v, want %v", names(got), tc.want)
			}
			for _, tb := range got {
				full := tb.GetNamespace() + ":" + tb.GetName()
				if len(tb.GetRegions()) != 0 {
					t.Errorf("%s listed with %d regions: a list carries counts only", full, len(tb.GetRegions()))
				}
				checkCounts(t, l, tb)
			}
		})
	}
}

// checkCounts checks a table's counts against what was seeded.
func checkCounts(t *testing.T, l listLayout, tb *adminpb.Table) {
	t.Helper()
	full := tb.GetNamespace() + ":" + tb.GetName()
	byState, groups := map[string]int32{}, map[[2]string]int32{}
	for _, name := range l.names[full] {
		rg := l.records[name]
		byState[rg.State]++
		groups[[2]string{rg.State, rg.Server}]++
	}
	gotGroups := map[[2]string]int32{}
	for _, g := range tb.GetRegionGroups() {
		gotGroups[[2]string{g.GetState(), g.GetServer()}] = g.GetCount()
	}
	if int(tb.GetRegionCount()) != len(l.names[full]) || !maps.Equal(tb.GetRegionsByState(), byState) || !maps.Equal(gotGroups, groups) {
		t.Errorf("%s: %d regions %v groups %v, want %d %v %v", full, tb.GetRegionCount(), tb.GetRegionsByState(), gotGroups,
			len(l.names[full]), byState, groups)
	}
}

// TestDescribeTableIsBounded: a table of more regions than DescribeTable
// returns answers the first ones, whole counts, and a token that
// ListRegions of the table resumes from.
func TestDescribeTableIsBounded(t *testing.T) {
	c, l := listCluster(t)
	a := c.Leader().Admin()
	big, err := a.DescribeTable(listCtx(t), &adminpb.TableRequest{Name: "big"})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, l, big)
	names := l.names["default:big"]
	if len(big.GetRegions()) != catalog.DescribeRegions || !big.GetRegionsTruncated() || big.GetNextPageToken() == "" ||
		big.GetRegions()[0].GetName() != names[0] {
		t.Fatalf("describe big: %d regions, truncated %v, token %q", len(big.GetRegions()), big.GetRegionsTruncated(), big.GetNextPageToken())
	}
	rest, _, err := walkRegions(t, a, &adminpb.ListRegionsRequest{Table: "big", PageToken: big.GetNextPageToken()})
	if err != nil || !slices.Equal(rest, names[catalog.DescribeRegions:]) {
		t.Fatalf("the rest: %v, %d regions, want %d", err, len(rest), len(names)-catalog.DescribeRegions)
	}
	small, err := a.DescribeTable(listCtx(t), &adminpb.TableRequest{Name: "b"})
	if err != nil || len(small.GetRegions()) != 25 || small.GetRegionsTruncated() || small.GetNextPageToken() != "" {
		t.Fatalf("describe b: %v, %d regions, truncated %v", err, len(small.GetRegions()), small.GetRegionsTruncated())
	}
	checkCounts(t, l, small)
}

func TestListServersPaging(t *testing.T) {
	c := clustertest.New(t, clustertest.Config{Masters: 1, RegionServers: 3})
	a := c.Leader().Admin()
	var ids []string
	req := &adminpb.ListServersRequest{PageSize: 2}
	for calls := 1; ; calls++ {
		resp, err := a.ListServers(listCtx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range resp.GetServers() {
			ids = append(ids, s.GetId())
		}
		if resp.GetNextPageToken() == "" {
			if calls != 2 {
				t.Errorf("took %d calls, want 2", calls)
			}
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if !slices.Equal(ids, []string{"rs1", "rs2", "rs3"}) {
		t.Fatalf("servers %v", ids)
	}
	if _, err := a.ListServers(listCtx(t), &adminpb.ListServersRequest{PageToken: "bad"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad token: %v", err)
	}
}
