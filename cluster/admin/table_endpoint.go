package admin

import (
	"context"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/proto/adminpb"
)

// DescribeTable implements adminpb.AdminServer.
func (s *Server) DescribeTable(ctx context.Context, req *adminpb.TableRequest) (*adminpb.Table, error) {
	return domainRead(s, ctx, req.GetConsistency(), func(d Domain, ri *adminpb.ReadInfo) (*adminpb.Table, error) {
		t, err := d.DescribeTable(req.GetNamespace(), req.GetName())
		if err != nil {
			return nil, err
		}
		out := tableMsg(t)
		out.Read = ri
		return out, nil
	}, relayed(req, adminpb.AdminClient.DescribeTable))
}

// ListTables implements adminpb.AdminServer: one page of tables, with
// their region counts but not their regions.
func (s *Server) ListTables(ctx context.Context, req *adminpb.ListTablesRequest) (*adminpb.ListTablesResponse, error) {
	d, after, err := s.domainPageStart("list tables", tableToken, req)
	if err != nil {
		return nil, err
	}
	q := catalog.TableQuery{Namespace: req.GetNamespace(), States: req.GetStates(), PageSize: int(req.GetPageSize()), After: after}
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.ListTablesResponse, error) {
		page, err := d.ListTablesPage(q)
		if err != nil {
			return nil, err
		}
		tables, next := boundPageAt(tableMsgs(page.Tables), page.Next, func(t *adminpb.Table) string { return t.GetNamespace() + ":" + t.GetName() })
		return &adminpb.ListTablesResponse{Tables: tables, Read: ri, NextPageToken: encodePageToken(tableToken, next)}, nil
	}, relayed(req, adminpb.AdminClient.ListTables))
}

// ListRegions implements adminpb.AdminServer: one page of regions,
// filtered by the server.
func (s *Server) ListRegions(ctx context.Context, req *adminpb.ListRegionsRequest) (*adminpb.ListRegionsResponse, error) {
	d, after, err := s.domainPageStart("list regions", regionToken, req)
	if err != nil {
		return nil, err
	}
	q := catalog.RegionQuery{Table: req.GetTable(), States: req.GetStates(), Server: req.GetServer(), PageSize: int(req.GetPageSize()), After: after}
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.ListRegionsResponse, error) {
		page, err := d.ListRegionsPage(q)
		if err != nil {
			return nil, err
		}
		regions, next := boundPageAt(regionMsgs(page.Regions), page.Next, (*adminpb.Region).GetName)
		return &adminpb.ListRegionsResponse{Regions: regions, Read: ri, NextPageToken: encodePageToken(regionToken, next)}, nil
	}, relayed(req, adminpb.AdminClient.ListRegions))
}
