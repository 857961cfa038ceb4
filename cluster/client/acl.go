package client

import (
	"context"
	"time"

	"github.com/baton-dev/baton/proto/adminpb"
)

// Access control and the audit trail (admin.proto, "Access control").

// WhoAmI says who the cluster takes the caller for, and what it may do.
func (c *Client) WhoAmI(ctx context.Context) (*adminpb.WhoAmIResponse, error) {
	return unary(ctx, c, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.WhoAmIResponse, error) {
		return a.WhoAmI(ctx, &adminpb.WhoAmIRequest{})
	})
}

// AclGrant binds client certificate name to permission (read, operate or
// admin), replacing what it held.
func (c *Client) AclGrant(ctx context.Context, name, permission string) (*adminpb.AclBinding, error) {
	req := &adminpb.AclGrantRequest{Client: name, Permission: permission}
	return call(ctx, c, adminpb.AdminClient.AclGrant, req)
}

// AclRevoke removes the binding of client certificate name; existed says
// there was one.
func (c *Client) AclRevoke(ctx context.Context, name string) (existed bool, err error) {
	req := &adminpb.AclRevokeRequest{Client: name}
	r, err := call(ctx, c, adminpb.AdminClient.AclRevoke, req)
	return r.GetExisted(), err
}

// AclCreateToken makes a bearer token that lasts until deleted; its
// secret is in this answer only.
func (c *Client) AclCreateToken(ctx context.Context, name, permission string) (*adminpb.AclCreateTokenResponse, error) {
	return c.AclCreateTokenTTL(ctx, name, permission, 0)
}

// AclCreateTokenTTL makes a bearer token that expires ttl after it is
// made (0: never); its secret is in this answer only.
func (c *Client) AclCreateTokenTTL(ctx context.Context, name, permission string, ttl time.Duration) (*adminpb.AclCreateTokenResponse, error) {
	req := &adminpb.AclCreateTokenRequest{Name: name, Permission: permission, TtlMs: ttl.Milliseconds()}
	return call(ctx, c, adminpb.AdminClient.AclCreateToken, req)
}

// AclDeleteToken deletes the token with accessor.
func (c *Client) AclDeleteToken(ctx context.Context, accessor string) (existed bool, err error) {
	req := &adminpb.AclDeleteTokenRequest{Accessor: accessor}
	r, err := call(ctx, c, adminpb.AdminClient.AclDeleteToken, req)
	return r.GetExisted(), err
}

// AclList lists the bindings and tokens: every page, in one answer (its
// Read and Enforced the last page's).
func (c *Client) AclList(ctx context.Context, opts ...ReadOption) (*adminpb.AclListResponse, error) {
	ro := readOpts(opts)
	req := &adminpb.AclListRequest{Consistency: ro.consistency}
	all := &adminpb.AclListResponse{}
	err := readAllPages(ctx, c, ro, &req.PageToken, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.AclListResponse, error) {
		return a.AclList(ctx, req)
	}, func(r *adminpb.AclListResponse) {
		all.Bindings, all.Tokens = append(all.Bindings, r.GetBindings()...), append(all.Tokens, r.GetTokens()...)
		all.Revoked = append(all.Revoked, r.GetRevoked()...)
		all.Enforced, all.Read = r.GetEnforced(), r.GetRead()
	})
	if err != nil {
		return nil, err
	}
	return all, nil
}

// AuditFilter selects audit records: by principal (client/NAME,
// token/ACCESSOR, anonymous) and method (CreateTable), either empty for
// all.
type AuditFilter struct {
	Principal, Method string
	// NewestFirst lists from the newest record back.
	NewestFirst bool
}

// ListAudit lists up to limit audit records (0: all), oldest first, from
// page token after on (""; the start); next is where the following page
// starts, "" at the end.
func (c *Client) ListAudit(ctx context.Context, f AuditFilter, after string, limit int, opts ...ReadOption) (recs []*adminpb.AuditRecord, next string, err error) {
	ro := readOpts(opts)
	token := after
	for {
		size := int32(1000)
		if limit > 0 {
			size = int32(min(limit-len(recs), 1000))
		}
		req := &adminpb.ListAuditRequest{PageSize: size, PageToken: token, Consistency: ro.consistency, Principal: f.Principal, Method: f.Method, NewestFirst: f.NewestFirst}
		r, err := unary(ctx, c, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.ListAuditResponse, error) {
			return a.ListAudit(ctx, req)
		})
		if err != nil {
			return recs, token, err
		}
		ro.served(r.GetRead())
		recs = append(recs, r.GetRecords()...)
		token = r.GetNextPageToken()
		if token == "" || (limit > 0 && len(recs) >= limit) {
			return recs, token, nil
		}
	}
}
