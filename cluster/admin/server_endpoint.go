package admin

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/proto/adminpb"
)

// ListServers implements adminpb.AdminServer: served by the leader, whose
// leases say live, suspect or expired (a stale read skips its quorum
// round). A stale read that finds no leader answering is served from this
// master's replicated state, the leases unknown.
func (s *Server) ListServers(ctx context.Context, req *adminpb.ListServersRequest) (*adminpb.ListServersResponse, error) {
	d, after, err := s.domainPageStart("list servers", serverToken, req)
	if err != nil {
		return nil, err
	}
	q := catalog.ServerQuery{PageSize: int(req.GetPageSize()), After: after}
	answer := func(list func(catalog.ServerQuery) (catalog.ServerPage, error)) func(*adminpb.ReadInfo) (*adminpb.ListServersResponse, error) {
		return func(ri *adminpb.ReadInfo) (*adminpb.ListServersResponse, error) {
			page, err := list(q)
			if err != nil {
				return nil, err
			}
			servers, next := boundPageAt(serverMsgs(page.Servers), page.Next, (*adminpb.Server).GetId)
			return &adminpb.ListServersResponse{Servers: servers, Read: ri, NextPageToken: encodePageToken(serverToken, next)}, nil
		}
	}
	return serveLeaderReadOr(s, ctx, req.GetConsistency(), answer(d.ListServersPage), answer(d.ListRecordedServersPage), relayed(req, adminpb.AdminClient.ListServers))
}

// ServerRegions implements adminpb.AdminServer: the region server's own
// answer beside the assignment in the master's state (read at the
// request's consistency), a page of both at a time.
func (s *Server) ServerRegions(ctx context.Context, req *adminpb.ServerRegionsRequest) (*adminpb.ServerRegionsResponse, error) {
	if req.GetServer() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: server regions: server is required")
	}
	after, err := pageStart("server regions", adminpb.ServerRegionsPageToken, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	q := catalog.ServerRegionsQuery{Server: req.GetServer(), After: after,
		PageSize: pageSizeOr(req.GetPageSize(), defaultServerRegionsPage, maxServerRegionsPage)}
	return domainRead(s, ctx, req.GetConsistency(), func(d Domain, ri *adminpb.ReadInfo) (*adminpb.ServerRegionsResponse, error) {
		sr, err := d.ServerRegions(ctx, q)
		if err != nil {
			return nil, err
		}
		return &adminpb.ServerRegionsResponse{Server: sr.Server, Assigned: sr.Assigned, Hosted: sr.Hosted, Read: ri,
			NextPageToken: encodePageToken(adminpb.ServerRegionsPageToken, sr.Next)}, nil
	}, relayed(req, adminpb.AdminClient.ServerRegions))
}
