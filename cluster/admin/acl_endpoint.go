package admin

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/security"
)

// WhoAmI implements adminpb.AdminServer.
func (s *Server) WhoAmI(ctx context.Context, _ *adminpb.WhoAmIRequest) (*adminpb.WhoAmIResponse, error) {
	p, ok := principalOf(ctx)
	if !ok {
		var err error
		if p, err = s.resolve(ctx); err != nil {
			return nil, err
		}
	}
	return &adminpb.WhoAmIResponse{Principal: p.String(), Permission: access.Effective(p, s.acc.Enforce).String(), Enforced: s.acc.Enforce, Name: p.Name}, nil
}

// aclWrite commits muts at the leader, forwarding from a standby.
func aclWrite[T any](s *Server, ctx context.Context, local func() ([]raftfsm.Mutation, T, error), remote func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	return onLeader(s, ctx, func(Procedures) (T, error) {
		var zero T
		muts, v, err := local()
		if err != nil {
			return zero, err
		}
		if len(muts) > 0 {
			if err := s.b.Mutate(ctx, muts); err != nil {
				return zero, err
			}
		}
		return v, nil
	}, remote)
}

func parsePerm(call, s string) (security.Permission, error) {
	p, err := security.ParsePermission(s)
	if err != nil {
		return p, status.Errorf(codes.InvalidArgument, "admin: %s: permission %q: want read, operate or admin", call, s)
	}
	return p, nil
}

func checkClientName(call, name string) error {
	if err := (security.Identity{Role: security.RoleClient, ID: name}).Validate(); err != nil {
		return status.Errorf(codes.InvalidArgument, "admin: %s: client %q: want the name in the client certificate's baton://client/<name>: 1–128 letters, digits, '.', '_' or '-'", call, name)
	}
	return nil
}

// AclGrant implements adminpb.AdminServer.
func (s *Server) AclGrant(ctx context.Context, req *adminpb.AclGrantRequest) (*adminpb.AclBinding, error) {
	if err := checkClientName("acl grant", req.GetClient()); err != nil {
		return nil, err
	}
	perm, err := parsePerm("acl grant", req.GetPermission())
	if err != nil {
		return nil, err
	}
	return aclWrite(s, ctx, func() ([]raftfsm.Mutation, *adminpb.AclBinding, error) {
		muts, e := s.acl.GrantWrites(req.GetClient(), perm, s.createdBy(ctx))
		return muts, e.Binding(req.GetClient()), nil
	}, relayed(req, adminpb.AdminClient.AclGrant))
}

// AclRevoke implements adminpb.AdminServer.
func (s *Server) AclRevoke(ctx context.Context, req *adminpb.AclRevokeRequest) (*adminpb.AclRemoveResponse, error) {
	if err := checkClientName("acl revoke", req.GetClient()); err != nil {
		return nil, err
	}
	return aclRemove(s, ctx, func() ([]raftfsm.Mutation, error) {
		s.awaitFormat(ctx, version.Format2) // a revocation is format 2's (RevokeWrites refuses below it)
		return s.acl.RevokeWrites(req.GetClient(), s.createdBy(ctx))
	}, relayed(req, adminpb.AdminClient.AclRevoke))
}

// AclDeleteToken implements adminpb.AdminServer.
func (s *Server) AclDeleteToken(ctx context.Context, req *adminpb.AclDeleteTokenRequest) (*adminpb.AclRemoveResponse, error) {
	if !security.ValidAccessor(req.GetAccessor()) {
		return nil, status.Errorf(codes.InvalidArgument, "admin: acl token delete: accessor %q: want the 16 hex digits 'baton acl list' shows", req.GetAccessor())
	}
	return aclRemove(s, ctx, func() ([]raftfsm.Mutation, error) { return access.DeleteTokenWrites(req.GetAccessor()), nil },
		relayed(req, adminpb.AdminClient.AclDeleteToken))
}

// aclRemove commits the writes of writes (worked out on the leader, whose
// state says what the cluster version allows), whose first deletes the
// entry removed, in one entry, and says whether that entry existed.
func aclRemove(s *Server, ctx context.Context, writes func() ([]raftfsm.Mutation, error), remote func(context.Context, adminpb.AdminClient) (*adminpb.AclRemoveResponse, error)) (*adminpb.AclRemoveResponse, error) {
	return aclWrite(s, ctx, func() ([]raftfsm.Mutation, *adminpb.AclRemoveResponse, error) {
		muts, err := writes()
		if err != nil {
			return nil, nil, err
		}
		_, existed := s.b.DomainGet(muts[0].Key)
		return muts, &adminpb.AclRemoveResponse{Existed: existed}, nil
	}, remote)
}

// AclCreateToken implements adminpb.AdminServer.
func (s *Server) AclCreateToken(ctx context.Context, req *adminpb.AclCreateTokenRequest) (*adminpb.AclCreateTokenResponse, error) {
	if err := (security.Identity{Role: security.RoleClient, ID: req.GetName()}).Validate(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "admin: acl token create: name %q: want 1–128 letters, digits, '.', '_' or '-'", req.GetName())
	}
	perm, err := parsePerm("acl token create", req.GetPermission())
	if err != nil {
		return nil, err
	}
	ttl, err := msDuration("acl token create", "ttl_ms", req.GetTtlMs())
	if err != nil {
		return nil, err
	}
	return aclWrite(s, ctx, func() ([]raftfsm.Mutation, *adminpb.AclCreateTokenResponse, error) {
		if ttl > 0 {
			s.awaitFormat(ctx, version.Format2) // an expiry is format 2's (NewToken refuses below it)
		}
		return s.newToken(req.GetName(), perm, s.createdBy(ctx), ttl)
	}, relayed(req, adminpb.AdminClient.AclCreateToken))
}

// newToken makes a token that lasts ttl (0: until deleted), and the
// answer that tells it.
func (s *Server) newToken(name string, perm security.Permission, by string, ttl time.Duration) ([]raftfsm.Mutation, *adminpb.AclCreateTokenResponse, error) {
	muts, acc, secret, e, err := s.acl.NewToken(name, perm, by, ttl)
	if err != nil {
		return nil, nil, err
	}
	return muts, &adminpb.AclCreateTokenResponse{Secret: secret, Token: e.Token(acc)}, nil
}
