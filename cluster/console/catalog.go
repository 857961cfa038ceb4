package console

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// The region servers, tables and regions pages.

type serversPage struct {
	base
	pager
	Servers []*adminpb.Server
	// ByLease counts the page's servers by lease state.
	ByLease []count
	Error   string
}

func (c *Console) servers(w http.ResponseWriter, r *http.Request) {
	rd := c.pageReads(w, r, "Region servers")
	if rd == nil {
		return
	}
	var p serversPage
	q := r.URL.Query()
	code := http.StatusOK
	resp, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListServersResponse, error) {
		return c.self.ListServers(ctx, &adminpb.ListServersRequest{PageToken: q.Get("page"), Consistency: cons})
	}, readOf)
	if err != nil {
		p.Error = leaderOnly(rd, err)
		if status.Code(err) == codes.InvalidArgument {
			code = http.StatusBadRequest
		}
	} else {
		p.pager = pagerOf("/ui/servers", q, resp.GetNextPageToken())
		p.Servers = resp.GetServers()
		by := map[string]int64{}
		for _, s := range p.Servers {
			by[s.GetLeaseState()]++
		}
		p.ByLease = sortedCounts(by)
	}
	p.base = c.base(rd, "Region servers", "servers", true)
	c.render(w, code, "servers", p)
}

type serverPage struct {
	base
	ID     string
	Server *adminpb.Server
	// Hosted is the region server's own answer, Assigned the master's
	// state; Regions the master's regions placed on it.
	Hosted, Assigned []string
	OnlyHosted       []string
	OnlyAssigned     []string
	HostedError      string
	Regions          []*adminpb.Region
	// MoreRegions: more are placed on it than the page shows; the
	// regions page filtered by the server lists them all.
	MoreRegions  bool
	ServerError  string
	RegionsError string
}

// serverPageRegions is how many of a server's regions its page shows.
const serverPageRegions = 1000

func (c *Console) server(w http.ResponseWriter, r *http.Request) {
	rd := c.pageReads(w, r, "Region server")
	if rd == nil {
		return
	}
	id := r.PathValue("id")
	p := serverPage{ID: id}
	srv, err := rd.getServer(id)
	if err != nil {
		p.ServerError = leaderOnly(rd, err)
	} else {
		p.Server = srv
		if p.Server == nil {
			p.ServerError = "no region server " + id + " is registered"
		}
	}
	sr, srErr := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ServerRegionsResponse, error) {
		return c.self.ServerRegions(ctx, &adminpb.ServerRegionsRequest{Server: id, Consistency: cons})
	}, readOf)
	if err := srErr; err != nil {
		p.HostedError = status.Convert(err).Message()
	} else {
		p.Hosted, p.Assigned = sr.GetHosted(), sr.GetAssigned()
		p.OnlyHosted, p.OnlyAssigned = minus(p.Hosted, p.Assigned), minus(p.Assigned, p.Hosted)
	}
	// The masters filter by server, a scan budget per call: a page may
	// come short with more to follow, so the first serverPageRegions are
	// gathered over as many calls as that takes.
	tok := ""
	for {
		regions, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListRegionsResponse, error) {
			return c.self.ListRegions(ctx, &adminpb.ListRegionsRequest{Server: id, PageToken: tok,
				PageSize: int32(serverPageRegions - len(p.Regions)), Consistency: cons})
		}, readOf)
		if err != nil {
			p.RegionsError = status.Convert(err).Message()
			break
		}
		p.Regions = append(p.Regions, regions.GetRegions()...)
		if tok = regions.GetNextPageToken(); tok == "" {
			break
		}
		if len(p.Regions) == serverPageRegions {
			p.MoreRegions = true
			break
		}
	}
	// Unknown to the replicated state (which ServerRegions reads), not in
	// the leader's leases, and placed nowhere: no such region server, as
	// an unknown procedure is none.
	if status.Code(srErr) == codes.NotFound && p.Server == nil && len(p.Regions) == 0 {
		c.fail(w, rd, "Region server "+id, status.Errorf(codes.NotFound, "no region server %q is registered (the region servers page lists them)", id))
		return
	}
	p.base = c.base(rd, "Region server "+id, "servers", true)
	c.render(w, http.StatusOK, "server", p)
}

// minus is a without b's elements.
func minus(a, b []string) []string {
	in := map[string]bool{}
	for _, s := range b {
		in[s] = true
	}
	var out []string
	for _, s := range a {
		if !in[s] {
			out = append(out, s)
		}
	}
	return out
}

type tablesPage struct {
	base
	pager
	Tables []tableRow
	Error  string
}

type tableRow struct {
	*adminpb.Table
	Regions int
	// ByState counts its regions by state.
	ByState []count
}

func (c *Console) tables(w http.ResponseWriter, r *http.Request) {
	rd := c.pageReads(w, r, "Tables")
	if rd == nil {
		return
	}
	var p tablesPage
	q := r.URL.Query()
	code := http.StatusOK
	resp, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListTablesResponse, error) {
		return c.self.ListTables(ctx, &adminpb.ListTablesRequest{PageToken: q.Get("page"), Consistency: cons})
	}, readOf)
	if err != nil {
		p.Error = status.Convert(err).Message()
		code = statusOf(err)
	} else {
		p.pager = pagerOf("/ui/tables", q, resp.GetNextPageToken())
		for _, t := range resp.GetTables() {
			by := map[string]int64{}
			for st, n := range t.GetRegionsByState() {
				by[st] = int64(n)
			}
			p.Tables = append(p.Tables, tableRow{Table: t, Regions: int(t.GetRegionCount()), ByState: sortedCounts(by)})
		}
	}
	p.base = c.base(rd, "Tables", "tables", true)
	c.render(w, code, "tables", p)
}

// regionStates are the states a region can be listed by.
var regionStates = []string{"OFFLINE", "OPENING", "OPEN", "CLOSING", "CLOSED", "FAILED_OPEN"}

type regionsPage struct {
	base
	pager
	Table, State, Server string
	States               []string
	// Regions is one page of the regions the filters select, filtered
	// by the masters.
	Regions []*adminpb.Region
	Error   string
}

func (c *Console) regions(w http.ResponseWriter, r *http.Request) {
	rd := c.pageReads(w, r, "Regions")
	if rd == nil {
		return
	}
	q := r.URL.Query()
	p := regionsPage{Table: strings.TrimSpace(q.Get("table")), State: strings.ToUpper(strings.TrimSpace(q.Get("state"))),
		Server: strings.TrimSpace(q.Get("server")), States: regionStates}
	code := http.StatusOK
	req := &adminpb.ListRegionsRequest{Table: p.Table, Server: p.Server, PageToken: q.Get("page")}
	if p.State != "" {
		req.States = []string{p.State}
	}
	resp, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListRegionsResponse, error) {
		req.Consistency = cons
		return c.self.ListRegions(ctx, req)
	}, readOf)
	if err != nil {
		p.Error = status.Convert(err).Message()
		code = statusOf(err)
	} else {
		p.Regions = resp.GetRegions()
		p.pager = pagerOf("/ui/regions", q, resp.GetNextPageToken())
	}
	p.base = c.base(rd, "Regions", "regions", true)
	c.render(w, code, "regions", p)
}

// getServer finds region server id in the leader's list (nil when it is
// not there), a page of the largest size at a time: servers are few.
func (rd *reads) getServer(id string) (*adminpb.Server, error) {
	// A token resuming just before id: its list starts at id if id is
	// registered (any id between would sort before it).
	tok := ""
	if id != "" {
		tok = adminpb.EncodePageToken(adminpb.ServerPageToken, id[:len(id)-1])
	}
	for {
		resp, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListServersResponse, error) {
			return rd.c.self.ListServers(ctx, &adminpb.ListServersRequest{PageToken: tok, PageSize: 100, Consistency: cons})
		}, readOf)
		if err != nil {
			return nil, err
		}
		for _, s := range resp.GetServers() {
			switch {
			case s.GetId() == id:
				return s, nil
			case s.GetId() > id:
				return nil, nil
			}
		}
		if tok = resp.GetNextPageToken(); tok == "" {
			return nil, nil
		}
	}
}
