package admin

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
)

// The eight domain calls 0.1.0 served with methods of *Server keep those
// methods, as one line each into the gateway: a Go caller in process, or
// a program that registers the Server with adminpb.RegisterAdminServer
// rather than RegisterServices, keeps them working, and a node without a
// domain answers them as it answers the domain's reads. An operation
// added since needs no method here: the gateway serves it through
// RegisterServices, and no older caller knows its Go name.

// CreateTable implements adminpb.AdminServer (through the gateway).
func (s *Server) CreateTable(ctx context.Context, req *adminpb.CreateTableRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.callGateway(ctx, adminpb.Admin_CreateTable_FullMethodName, req)
}

// DeleteTable implements adminpb.AdminServer (through the gateway).
func (s *Server) DeleteTable(ctx context.Context, req *adminpb.TableRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.callGateway(ctx, adminpb.Admin_DeleteTable_FullMethodName, req)
}

// EnableTable implements adminpb.AdminServer (through the gateway).
func (s *Server) EnableTable(ctx context.Context, req *adminpb.TableRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.callGateway(ctx, adminpb.Admin_EnableTable_FullMethodName, req)
}

// DisableTable implements adminpb.AdminServer (through the gateway).
func (s *Server) DisableTable(ctx context.Context, req *adminpb.TableRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.callGateway(ctx, adminpb.Admin_DisableTable_FullMethodName, req)
}

// MoveRegion implements adminpb.AdminServer (through the gateway).
func (s *Server) MoveRegion(ctx context.Context, req *adminpb.MoveRegionRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.callGateway(ctx, adminpb.Admin_MoveRegion_FullMethodName, req)
}

// Balance implements adminpb.AdminServer (through the gateway).
func (s *Server) Balance(ctx context.Context, req *adminpb.BalanceRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.callGateway(ctx, adminpb.Admin_Balance_FullMethodName, req)
}

// CreateNamespace implements adminpb.AdminServer (through the gateway).
func (s *Server) CreateNamespace(ctx context.Context, req *adminpb.NamespaceRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.callGateway(ctx, adminpb.Admin_CreateNamespace_FullMethodName, req)
}

// DeleteNamespace implements adminpb.AdminServer (through the gateway).
func (s *Server) DeleteNamespace(ctx context.Context, req *adminpb.NamespaceRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.callGateway(ctx, adminpb.Admin_DeleteNamespace_FullMethodName, req)
}

// callGateway serves method with req as the gateway does, or answers why
// it cannot: no domain here, or a domain that does not build it.
func (s *Server) callGateway(ctx context.Context, method string, req proto.Message) (*adminpb.SubmitProcedureResponse, error) {
	m, ok := s.gateway[method]
	if !ok {
		if _, err := s.domain(); err != nil {
			return nil, err
		}
		return nil, status.Errorf(codes.Unimplemented, "admin: this node's domain builds no procedure for %s", method)
	}
	return s.serveGateway(ctx, m, req)
}
