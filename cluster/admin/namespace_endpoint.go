package admin

import (
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// ListNamespaces implements adminpb.AdminServer: one page of the
// namespaces, in name order, ending at page_size names or 1 MiB.
func (s *Server) ListNamespaces(ctx context.Context, req *adminpb.ListNamespacesRequest) (*adminpb.ListNamespacesResponse, error) {
	d, after, err := s.domainPageStart("list namespaces", nsToken, req)
	if err != nil {
		return nil, err
	}
	size := pageSizeOr(req.GetPageSize(), defaultNamesPage, maxNamesPage)
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.ListNamespacesResponse, error) {
		ns, err := d.ListNamespaces()
		if err != nil {
			return nil, err
		}
		page, next := namePage(ns, after, size)
		return &adminpb.ListNamespacesResponse{Namespaces: page, Read: ri, NextPageToken: encodePageToken(nsToken, next)}, nil
	}, relayed(req, adminpb.AdminClient.ListNamespaces))
}

// GetNamespace implements adminpb.AdminServer.
func (s *Server) GetNamespace(ctx context.Context, req *adminpb.GetNamespaceRequest) (*adminpb.Namespace, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: get namespace: name is required")
	}
	return domainRead(s, ctx, req.GetConsistency(), func(d Domain, ri *adminpb.ReadInfo) (*adminpb.Namespace, error) {
		ok, err := d.NamespaceExists(req.GetName())
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, procedure.Errorf(procedure.ErrNotFound, "namespace %q does not exist", req.GetName())
		}
		return &adminpb.Namespace{Name: req.GetName(), Read: ri}, nil
	}, relayed(req, adminpb.AdminClient.GetNamespace))
}

// namePage is the page of names (sorted here) after after: at most size
// of them and maxListPageBytes, with the last one kept if more follow.
func namePage(names []string, after string, size int) ([]string, string) {
	slices.Sort(names)
	start, _ := slices.BinarySearch(names, after)
	if start < len(names) && names[start] == after {
		start++
	}
	names = names[start:]
	bytes := 0
	for i, n := range names {
		bytes += len(n) + 4
		if i == size || (i > 0 && bytes > maxListPageBytes) {
			return names[:i], names[i-1]
		}
	}
	return names, ""
}
