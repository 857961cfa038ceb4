package client

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// The domain API: namespaces, tables, regions, region servers and external
// locks (proto/adminpb/admin.proto). Calls that change state start a procedure on
// the leader and return its id at once; wait for it with Wait or Watch.
// Like Submit, they send a nonce, a random one when the caller gives none,
// so that the Client's own retries after an UNAVAILABLE whose fate is
// unknown get the first procedure's id instead of starting a second one.

// DefaultNamespace is the namespace of tables named without one.
const DefaultNamespace = "default"

// MaxRegions is the most regions CreateTable accepts from a caller (the
// request carries an int32): a table of more regions is almost certainly a
// typo, and would take one procedure per region to assign. The masters
// refuse more (domain.MaxRegions) as well.
const MaxRegions = 100000

// Lease states of region servers (Server.LeaseState).
const (
	LeaseLive    = "live"
	LeaseSuspect = "suspect" // soft limit passed: nothing new is assigned to it
	LeaseExpired = "expired" // hard limit passed: its regions are reassigned
	// LeaseUnconfirmed: the lease holds on a new leader's grace period
	// only; the server has not heartbeated to that leader yet.
	LeaseUnconfirmed = "unconfirmed"
	// LeaseUnknown: a stale read that no leader answered; the master that
	// served it records the server live, and only a leader knows its
	// lease.
	LeaseUnknown = "unknown"
)

// unary runs one call with do's retries and returns its answer.
func unary[T any](ctx context.Context, c *Client, f func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	var out T
	err := c.do(ctx, func(ctx context.Context, a adminpb.AdminClient) error {
		r, err := f(ctx, a)
		if err == nil {
			out = r
		}
		return err
	})
	return out, err
}

// call is unary for a call that sends req as it is; method is the
// AdminClient method, as a method expression (adminpb.AdminClient.GetLock).
func call[Req, Resp any](ctx context.Context, c *Client, method func(adminpb.AdminClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	return unary(ctx, c, func(ctx context.Context, a adminpb.AdminClient) (Resp, error) {
		return method(a, ctx, req)
	})
}

// submit is call for a call that starts a procedure: it returns the
// procedure's id.
func submit[Req any](ctx context.Context, c *Client, method func(adminpb.AdminClient, context.Context, Req, ...grpc.CallOption) (*adminpb.SubmitProcedureResponse, error), req Req) (uint64, error) {
	r, err := call(ctx, c, method, req)
	return r.GetId(), err
}

// orNonce returns nonce, or a fresh one if it is empty: one nonce per
// logical call, fixed before the first attempt, is what makes retries safe.
func orNonce(nonce string) string {
	if nonce == "" {
		return NewNonce()
	}
	return nonce
}

// CreateNamespace starts creating a namespace and returns the procedure's
// id.
func (c *Client) CreateNamespace(ctx context.Context, name, nonce string) (uint64, error) {
	req := &adminpb.NamespaceRequest{Name: name, Nonce: orNonce(nonce)}
	return submit(ctx, c, adminpb.AdminClient.CreateNamespace, req)
}

// DeleteNamespace starts deleting a namespace (it must hold no tables) and
// returns the procedure's id.
func (c *Client) DeleteNamespace(ctx context.Context, name, nonce string) (uint64, error) {
	req := &adminpb.NamespaceRequest{Name: name, Nonce: orNonce(nonce)}
	return submit(ctx, c, adminpb.AdminClient.DeleteNamespace, req)
}

// ListNamespaces returns the namespaces' names, every page of them.
func (c *Client) ListNamespaces(ctx context.Context, opts ...ReadOption) ([]string, error) {
	o := readOpts(opts)
	var names []string
	req := &adminpb.ListNamespacesRequest{Consistency: o.consistency}
	err := readAllPages(ctx, c, o, &req.PageToken, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.ListNamespacesResponse, error) {
		return a.ListNamespaces(ctx, req)
	}, func(r *adminpb.ListNamespacesResponse) {
		names = append(names, r.GetNamespaces()...)
	})
	if err != nil {
		return nil, err
	}
	return names, nil
}

// GetNamespace returns the namespace (NOT_FOUND if there is none); its Read
// says how it was served.
func (c *Client) GetNamespace(ctx context.Context, name string, opts ...ReadOption) (*adminpb.Namespace, error) {
	o := readOpts(opts)
	r, err := unary(ctx, c, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.Namespace, error) {
		return a.GetNamespace(ctx, &adminpb.GetNamespaceRequest{Name: name, Consistency: o.consistency})
	})
	o.served(r.GetRead())
	return r, err
}

// CreateTable starts creating table ns:name ("" for the default namespace)
// split into regions regions (0 for one) and returns the procedure's id. A
// count outside 0..MaxRegions is refused here with INVALID_ARGUMENT.
func (c *Client) CreateTable(ctx context.Context, ns, name string, regions int, nonce string) (uint64, error) {
	if regions < 0 || regions > MaxRegions {
		return 0, status.Errorf(codes.InvalidArgument, "client: %d regions: want 1 to %d", regions, MaxRegions)
	}
	req := &adminpb.CreateTableRequest{Namespace: ns, Name: name, Regions: int32(regions), Nonce: orNonce(nonce)}
	return submit(ctx, c, adminpb.AdminClient.CreateTable, req)
}

// DeleteTable starts deleting table ns:name (it must be disabled) and
// returns the procedure's id.
func (c *Client) DeleteTable(ctx context.Context, ns, name, nonce string) (uint64, error) {
	req := &adminpb.TableRequest{Namespace: ns, Name: name, Nonce: orNonce(nonce)}
	return submit(ctx, c, adminpb.AdminClient.DeleteTable, req)
}

// EnableTable starts enabling (opening every region of) table ns:name and
// returns the procedure's id.
func (c *Client) EnableTable(ctx context.Context, ns, name, nonce string) (uint64, error) {
	req := &adminpb.TableRequest{Namespace: ns, Name: name, Nonce: orNonce(nonce)}
	return submit(ctx, c, adminpb.AdminClient.EnableTable, req)
}

// DisableTable starts disabling (closing every region of) table ns:name and
// returns the procedure's id.
func (c *Client) DisableTable(ctx context.Context, ns, name, nonce string) (uint64, error) {
	req := &adminpb.TableRequest{Namespace: ns, Name: name, Nonce: orNonce(nonce)}
	return submit(ctx, c, adminpb.AdminClient.DisableTable, req)
}

// DescribeTable returns table ns:name with its region counts and its first
// regions (NOT_FOUND if there is none); RegionsTruncated says there are
// more, which Regions pages through from NextPageToken.
func (c *Client) DescribeTable(ctx context.Context, ns, name string, opts ...ReadOption) (*adminpb.Table, error) {
	o := readOpts(opts)
	return unary(ctx, c, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.Table, error) {
		r, err := a.DescribeTable(ctx, &adminpb.TableRequest{Namespace: ns, Name: name, Consistency: o.consistency})
		o.served(r.GetRead())
		return r, err
	})
}

// MoveRegion starts moving region to server to (any live server the
// master picks, if empty) and returns the procedure's id.
func (c *Client) MoveRegion(ctx context.Context, region, to, nonce string) (uint64, error) {
	req := &adminpb.MoveRegionRequest{Region: region, ToServer: to, Nonce: orNonce(nonce)}
	return submit(ctx, c, adminpb.AdminClient.MoveRegion, req)
}

// ServerRegions returns the regions server hosts by its own answer, beside
// those the master's state assigns to it: every page of both, in one
// answer (its Read the last page's).
func (c *Client) ServerRegions(ctx context.Context, server string, opts ...ReadOption) (*adminpb.ServerRegionsResponse, error) {
	o := readOpts(opts)
	req := &adminpb.ServerRegionsRequest{Server: server, Consistency: o.consistency}
	all := &adminpb.ServerRegionsResponse{Server: server}
	err := readAllPages(ctx, c, o, &req.PageToken, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.ServerRegionsResponse, error) {
		return a.ServerRegions(ctx, req)
	}, func(r *adminpb.ServerRegionsResponse) {
		all.Hosted, all.Assigned, all.Read = append(all.Hosted, r.GetHosted()...), append(all.Assigned, r.GetAssigned()...), r.GetRead()
	})
	if err != nil {
		return nil, err
	}
	return all, nil
}

// Balance starts a balancing procedure (moving regions until every live
// server holds about as many) and returns its id.
func (c *Client) Balance(ctx context.Context, nonce string) (uint64, error) {
	req := &adminpb.BalanceRequest{Nonce: orNonce(nonce)}
	return submit(ctx, c, adminpb.AdminClient.Balance, req)
}
