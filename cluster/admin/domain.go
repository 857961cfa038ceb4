package admin

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/adminpb"
	"github.com/baton-dev/baton/procedure"
)

// Domain serves the namespace, table, region, region-server and external
// lock calls of the admin API; package cluster/master implements it. The
// server stays ignorant of the domain's procedures: Domain builds them
// (validating the request: errors wrap procedure.ErrInvalid), and the
// server submits them on the leader with the request's nonce, forwarding
// from a standby like SubmitProcedure does.
//
// Reads (namespaces, tables, regions) come from the answering node's FSM:
// the server makes them linearizable (read.go) or serves them stale, as
// asked. ListServers needs the leader's lease view (renewals are not
// replicated), so it fails with an error wrapping cluster.ErrNotLeader on a
// standby and is forwarded.
type Domain interface {
	CreateNamespaceProcedure(name string) (procedure.Procedure, error)
	DeleteNamespaceProcedure(name string) (procedure.Procedure, error)
	CreateTableProcedure(ns, name string, regions int) (procedure.Procedure, error)
	DeleteTableProcedure(ns, name string) (procedure.Procedure, error)
	EnableTableProcedure(ns, name string) (procedure.Procedure, error)
	DisableTableProcedure(ns, name string) (procedure.Procedure, error)
	MoveRegionProcedure(region, toServer string) (procedure.Procedure, error)
	BalanceProcedure() (procedure.Procedure, error)

	ListNamespaces() ([]string, error)
	NamespaceExists(name string) (bool, error)
	// DescribeTable fails with an error wrapping procedure.ErrNotFound
	// for an unknown table.
	DescribeTable(ns, name string) (*adminpb.Table, error)
	ListTables(ns string) ([]*adminpb.Table, error)
	ListRegions(table string) ([]*adminpb.Region, error)
	ListServers() ([]*adminpb.Server, error)
	ServerRegions(ctx context.Context, server string) (*adminpb.ServerRegionsResponse, error)

	// The lock calls run on the leader, with its executor.
	AcquireLock(x Procedures, req *adminpb.AcquireLockRequest) (*adminpb.LockResponse, error)
	LockHeartbeat(x Procedures, id uint64) (*adminpb.LockResponse, error)
	ReleaseLock(ctx context.Context, x Procedures, id uint64) (*adminpb.LockResponse, error)
}

// DomainBackend is a Backend that also serves the domain calls. A Backend
// that does not implement it answers them UNIMPLEMENTED (so existing
// backends and fakes need no change).
type DomainBackend interface {
	Backend
	Domain() Domain
}

// WithDomain returns b serving the domain calls with d.
func WithDomain(b Backend, d Domain) Backend { return domainBackend{Backend: b, d: d} }

type domainBackend struct {
	Backend
	d Domain
}

func (b domainBackend) Domain() Domain { return b.d }

// DomainScan passes the wrapped backend's through, for /debug/domain.
func (b domainBackend) DomainScan(prefix string, fn func(string, []byte) bool) {
	if sc, ok := b.Backend.(interface {
		DomainScan(string, func(string, []byte) bool)
	}); ok {
		sc.DomainScan(prefix, fn)
	}
}

// domainOwner is the owner of the domain calls' submissions (part of the
// nonce key).
const domainOwner = "admin"

func (s *Server) domain() (Domain, error) {
	if db, ok := s.b.(DomainBackend); ok && db.Domain() != nil {
		return db.Domain(), nil
	}
	return nil, status.Error(codes.Unimplemented, "admin: this node serves no domain (namespaces, tables, regions)")
}

// submitDomain builds a procedure with build, then submits it on the leader
// (or forwards the call with remote).
func (s *Server) submitDomain(ctx context.Context, nonce string, build func(Domain) (procedure.Procedure, error),
	remote func(context.Context, adminpb.AdminClient) (*adminpb.SubmitProcedureResponse, error)) (*adminpb.SubmitProcedureResponse, error) {
	d, err := s.domain()
	if err != nil {
		return nil, err
	}
	// Built here too, so a standby refuses bad input without a trip to the
	// leader.
	p, err := build(d)
	if err != nil {
		return nil, s.toStatus(err)
	}
	return onLeader(s, ctx, func(x Procedures) (*adminpb.SubmitProcedureResponse, error) {
		id, err := x.Submit(p, procedure.SubmitOptions{Nonce: nonce, Owner: domainOwner})
		if err != nil {
			return nil, err
		}
		return &adminpb.SubmitProcedureResponse{Id: id}, nil
	}, remote)
}

// CreateNamespace implements adminpb.AdminServer.
func (s *Server) CreateNamespace(ctx context.Context, req *adminpb.NamespaceRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.submitDomain(ctx, req.GetNonce(), func(d Domain) (procedure.Procedure, error) {
		return d.CreateNamespaceProcedure(req.GetName())
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.SubmitProcedureResponse, error) {
		return c.CreateNamespace(ctx, req)
	})
}

// DeleteNamespace implements adminpb.AdminServer.
func (s *Server) DeleteNamespace(ctx context.Context, req *adminpb.NamespaceRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.submitDomain(ctx, req.GetNonce(), func(d Domain) (procedure.Procedure, error) {
		return d.DeleteNamespaceProcedure(req.GetName())
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.SubmitProcedureResponse, error) {
		return c.DeleteNamespace(ctx, req)
	})
}

// CreateTable implements adminpb.AdminServer.
func (s *Server) CreateTable(ctx context.Context, req *adminpb.CreateTableRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.submitDomain(ctx, req.GetNonce(), func(d Domain) (procedure.Procedure, error) {
		return d.CreateTableProcedure(req.GetNamespace(), req.GetName(), int(req.GetRegions()))
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.SubmitProcedureResponse, error) {
		return c.CreateTable(ctx, req)
	})
}

// DeleteTable implements adminpb.AdminServer.
func (s *Server) DeleteTable(ctx context.Context, req *adminpb.TableRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.submitDomain(ctx, req.GetNonce(), func(d Domain) (procedure.Procedure, error) {
		return d.DeleteTableProcedure(req.GetNamespace(), req.GetName())
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.SubmitProcedureResponse, error) {
		return c.DeleteTable(ctx, req)
	})
}

// EnableTable implements adminpb.AdminServer.
func (s *Server) EnableTable(ctx context.Context, req *adminpb.TableRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.submitDomain(ctx, req.GetNonce(), func(d Domain) (procedure.Procedure, error) {
		return d.EnableTableProcedure(req.GetNamespace(), req.GetName())
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.SubmitProcedureResponse, error) {
		return c.EnableTable(ctx, req)
	})
}

// DisableTable implements adminpb.AdminServer.
func (s *Server) DisableTable(ctx context.Context, req *adminpb.TableRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.submitDomain(ctx, req.GetNonce(), func(d Domain) (procedure.Procedure, error) {
		return d.DisableTableProcedure(req.GetNamespace(), req.GetName())
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.SubmitProcedureResponse, error) {
		return c.DisableTable(ctx, req)
	})
}

// MoveRegion implements adminpb.AdminServer.
func (s *Server) MoveRegion(ctx context.Context, req *adminpb.MoveRegionRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.submitDomain(ctx, req.GetNonce(), func(d Domain) (procedure.Procedure, error) {
		return d.MoveRegionProcedure(req.GetRegion(), req.GetToServer())
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.SubmitProcedureResponse, error) {
		return c.MoveRegion(ctx, req)
	})
}

// Balance implements adminpb.AdminServer.
func (s *Server) Balance(ctx context.Context, req *adminpb.BalanceRequest) (*adminpb.SubmitProcedureResponse, error) {
	return s.submitDomain(ctx, req.GetNonce(), func(d Domain) (procedure.Procedure, error) {
		return d.BalanceProcedure()
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.SubmitProcedureResponse, error) {
		return c.Balance(ctx, req)
	})
}

// ListNamespaces implements adminpb.AdminServer.
func (s *Server) ListNamespaces(ctx context.Context, req *adminpb.ListNamespacesRequest) (*adminpb.ListNamespacesResponse, error) {
	d, err := s.domain()
	if err != nil {
		return nil, err
	}
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.ListNamespacesResponse, error) {
		ns, err := d.ListNamespaces()
		if err != nil {
			return nil, err
		}
		return &adminpb.ListNamespacesResponse{Namespaces: ns, Read: ri}, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.ListNamespacesResponse, error) {
		return c.ListNamespaces(ctx, req)
	})
}

// GetNamespace implements adminpb.AdminServer.
func (s *Server) GetNamespace(ctx context.Context, req *adminpb.GetNamespaceRequest) (*adminpb.Namespace, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: get namespace: name is required")
	}
	d, err := s.domain()
	if err != nil {
		return nil, err
	}
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.Namespace, error) {
		ok, err := d.NamespaceExists(req.GetName())
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: namespace %q", procedure.ErrNotFound, req.GetName())
		}
		return &adminpb.Namespace{Name: req.GetName(), Read: ri}, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.Namespace, error) {
		return c.GetNamespace(ctx, req)
	})
}

// DescribeTable implements adminpb.AdminServer.
func (s *Server) DescribeTable(ctx context.Context, req *adminpb.TableRequest) (*adminpb.Table, error) {
	d, err := s.domain()
	if err != nil {
		return nil, err
	}
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.Table, error) {
		t, err := d.DescribeTable(req.GetNamespace(), req.GetName())
		if err != nil {
			return nil, err
		}
		t.Read = ri
		return t, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.Table, error) {
		return c.DescribeTable(ctx, req)
	})
}

// ListTables implements adminpb.AdminServer.
func (s *Server) ListTables(ctx context.Context, req *adminpb.ListTablesRequest) (*adminpb.ListTablesResponse, error) {
	d, err := s.domain()
	if err != nil {
		return nil, err
	}
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.ListTablesResponse, error) {
		ts, err := d.ListTables(req.GetNamespace())
		if err != nil {
			return nil, err
		}
		return &adminpb.ListTablesResponse{Tables: ts, Read: ri}, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.ListTablesResponse, error) {
		return c.ListTables(ctx, req)
	})
}

// ListRegions implements adminpb.AdminServer.
func (s *Server) ListRegions(ctx context.Context, req *adminpb.ListRegionsRequest) (*adminpb.ListRegionsResponse, error) {
	d, err := s.domain()
	if err != nil {
		return nil, err
	}
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.ListRegionsResponse, error) {
		rs, err := d.ListRegions(req.GetTable())
		if err != nil {
			return nil, err
		}
		return &adminpb.ListRegionsResponse{Regions: rs, Read: ri}, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.ListRegionsResponse, error) {
		return c.ListRegions(ctx, req)
	})
}

// ListServers implements adminpb.AdminServer: served by the leader, whose
// leases say live, suspect or expired (a stale read skips its quorum
// round).
func (s *Server) ListServers(ctx context.Context, req *adminpb.ListServersRequest) (*adminpb.ListServersResponse, error) {
	d, err := s.domain()
	if err != nil {
		return nil, err
	}
	return serveLeaderRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.ListServersResponse, error) {
		srvs, err := d.ListServers()
		if err != nil {
			return nil, err
		}
		return &adminpb.ListServersResponse{Servers: srvs, Read: ri}, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.ListServersResponse, error) {
		return c.ListServers(ctx, req)
	})
}

// ServerRegions implements adminpb.AdminServer: the region server's own
// answer beside the assignment in the master's state (read at the
// request's consistency).
func (s *Server) ServerRegions(ctx context.Context, req *adminpb.ServerRegionsRequest) (*adminpb.ServerRegionsResponse, error) {
	if req.GetServer() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: server regions: server is required")
	}
	d, err := s.domain()
	if err != nil {
		return nil, err
	}
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.ServerRegionsResponse, error) {
		out, err := d.ServerRegions(ctx, req.GetServer())
		if err != nil {
			return nil, err
		}
		out.Read = ri
		return out, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.ServerRegionsResponse, error) {
		return c.ServerRegions(ctx, req)
	})
}

// AcquireLock implements adminpb.AdminServer (leader; forwarded).
func (s *Server) AcquireLock(ctx context.Context, req *adminpb.AcquireLockRequest) (*adminpb.LockResponse, error) {
	d, err := s.domain()
	if err != nil {
		return nil, err
	}
	return onLeader(s, ctx, func(x Procedures) (*adminpb.LockResponse, error) {
		return d.AcquireLock(x, req)
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.LockResponse, error) {
		return c.AcquireLock(ctx, req)
	})
}

// LockHeartbeat implements adminpb.AdminServer (leader; forwarded).
func (s *Server) LockHeartbeat(ctx context.Context, req *adminpb.LockRef) (*adminpb.LockResponse, error) {
	d, err := s.domain()
	if err != nil {
		return nil, err
	}
	return onLeader(s, ctx, func(x Procedures) (*adminpb.LockResponse, error) {
		return d.LockHeartbeat(x, req.GetLockId())
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.LockResponse, error) {
		return c.LockHeartbeat(ctx, req)
	})
}

// ReleaseLock implements adminpb.AdminServer (leader; forwarded).
func (s *Server) ReleaseLock(ctx context.Context, req *adminpb.LockRef) (*adminpb.LockResponse, error) {
	d, err := s.domain()
	if err != nil {
		return nil, err
	}
	return onLeader(s, ctx, func(x Procedures) (*adminpb.LockResponse, error) {
		return d.ReleaseLock(ctx, x, req.GetLockId())
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.LockResponse, error) {
		return c.ReleaseLock(ctx, req)
	})
}
