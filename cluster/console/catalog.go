package console

import (
	"context"
	"net/http"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// The region servers, tables and regions pages.

type serversPage struct {
	base
	Servers []*adminpb.Server
	ByLease []count
	Error   string
}

func (c *Console) servers(w http.ResponseWriter, r *http.Request) {
	rd, err := c.newReads(r)
	if err != nil {
		c.fail(w, nil, "Region servers", err)
		return
	}
	var p serversPage
	resp, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListServersResponse, error) {
		return c.self.ListServers(ctx, &adminpb.ListServersRequest{Consistency: cons})
	}, readOf)
	if err != nil {
		p.Error = leaderOnly(rd, err)
	} else {
		p.Servers = resp.GetServers()
		by := map[string]int64{}
		for _, s := range p.Servers {
			by[s.GetLeaseState()]++
		}
		p.ByLease = sortedCounts(by)
	}
	p.base = c.base(rd, "Region servers", "servers", true)
	c.render(w, http.StatusOK, "servers", p)
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
	ServerError      string
	RegionsError     string
}

func (c *Console) server(w http.ResponseWriter, r *http.Request) {
	rd, err := c.newReads(r)
	if err != nil {
		c.fail(w, nil, "Region server", err)
		return
	}
	id := r.PathValue("id")
	p := serverPage{ID: id}
	srvs, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListServersResponse, error) {
		return c.self.ListServers(ctx, &adminpb.ListServersRequest{Consistency: cons})
	}, readOf)
	if err != nil {
		p.ServerError = leaderOnly(rd, err)
	} else {
		for _, s := range srvs.GetServers() {
			if s.GetId() == id {
				p.Server = s
			}
		}
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
	regions, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListRegionsResponse, error) {
		return c.self.ListRegions(ctx, &adminpb.ListRegionsRequest{Consistency: cons})
	}, readOf)
	if err != nil {
		p.RegionsError = status.Convert(err).Message()
	} else {
		for _, rg := range regions.GetRegions() {
			if rg.GetServer() == id {
				p.Regions = append(p.Regions, rg)
			}
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
	rd, err := c.newReads(r)
	if err != nil {
		c.fail(w, nil, "Tables", err)
		return
	}
	var p tablesPage
	resp, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListTablesResponse, error) {
		return c.self.ListTables(ctx, &adminpb.ListTablesRequest{Consistency: cons})
	}, readOf)
	if err != nil {
		p.Error = status.Convert(err).Message()
	} else {
		for _, t := range resp.GetTables() {
			by := map[string]int64{}
			for _, rg := range t.GetRegions() {
				by[rg.GetState()]++
			}
			p.Tables = append(p.Tables, tableRow{Table: t, Regions: len(t.GetRegions()), ByState: sortedCounts(by)})
		}
	}
	p.base = c.base(rd, "Tables", "tables", true)
	c.render(w, http.StatusOK, "tables", p)
}

// regionStates are the states a region can be listed by.
var regionStates = []string{"OFFLINE", "OPENING", "OPEN", "CLOSING", "CLOSED", "FAILED_OPEN"}

type regionsPage struct {
	base
	Table, State, Server string
	States               []string
	Regions              []*adminpb.Region
	Total                int
	Error                string
}

func (c *Console) regions(w http.ResponseWriter, r *http.Request) {
	rd, err := c.newReads(r)
	if err != nil {
		c.fail(w, nil, "Regions", err)
		return
	}
	q := r.URL.Query()
	p := regionsPage{Table: strings.TrimSpace(q.Get("table")), State: strings.ToUpper(strings.TrimSpace(q.Get("state"))),
		Server: strings.TrimSpace(q.Get("server")), States: regionStates}
	code := http.StatusOK
	// The table is filtered by the API; state and server here, on its
	// answer (a table's regions, or all of them).
	resp, err := read(rd, func(ctx context.Context, cons adminpb.Consistency) (*adminpb.ListRegionsResponse, error) {
		return c.self.ListRegions(ctx, &adminpb.ListRegionsRequest{Table: p.Table, Consistency: cons})
	}, readOf)
	if err != nil {
		p.Error = status.Convert(err).Message()
		code = statusOf(err)
	} else {
		p.Total = len(resp.GetRegions())
		for _, rg := range resp.GetRegions() {
			if (p.State == "" || rg.GetState() == p.State) && (p.Server == "" || rg.GetServer() == p.Server) {
				p.Regions = append(p.Regions, rg)
			}
		}
		sort.SliceStable(p.Regions, func(i, j int) bool { return p.Regions[i].GetTable() < p.Regions[j].GetTable() })
	}
	p.base = c.base(rd, "Regions", "regions", true)
	c.render(w, code, "regions", p)
}
