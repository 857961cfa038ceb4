package client

import (
	"context"
	"iter"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
)

// Lists are paged by the masters (see ListRegionsRequest in
// proto/adminpb/admin.proto): the *Page calls return one page and its
// next_page_token; the iterators (Regions, Tables, Servers) walk every
// page, holding one page at a time; ListRegions, ListTables and
// ListServers collect every page into one slice, which is fine for a
// small cluster and grows with a big one.
//
// Each page is read on its own, at the read options' consistency: a walk
// is not a snapshot. An item deleted while the walk runs may be missed;
// none is returned twice.

// ListRegionsPage returns one page of regions: req names the filters and
// the page (its consistency is the read options').
func (c *Client) ListRegionsPage(ctx context.Context, req *adminpb.ListRegionsRequest, opts ...ReadOption) (*adminpb.ListRegionsResponse, error) {
	o := readOpts(opts)
	q := cloneReq(req)
	q.Consistency = o.consistency
	return unary(ctx, c, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.ListRegionsResponse, error) {
		r, err := a.ListRegions(ctx, q)
		o.served(r.GetRead())
		return r, err
	})
}

// ListTablesPage returns one page of tables, with their region counts but
// not their regions.
func (c *Client) ListTablesPage(ctx context.Context, req *adminpb.ListTablesRequest, opts ...ReadOption) (*adminpb.ListTablesResponse, error) {
	o := readOpts(opts)
	q := cloneReq(req)
	q.Consistency = o.consistency
	return unary(ctx, c, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.ListTablesResponse, error) {
		r, err := a.ListTables(ctx, q)
		o.served(r.GetRead())
		return r, err
	})
}

// ListServersPage returns one page of the region servers the leader knows,
// with their lease state.
func (c *Client) ListServersPage(ctx context.Context, req *adminpb.ListServersRequest, opts ...ReadOption) (*adminpb.ListServersResponse, error) {
	o := readOpts(opts)
	q := cloneReq(req)
	q.Consistency = o.consistency
	return unary(ctx, c, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.ListServersResponse, error) {
		r, err := a.ListServers(ctx, q)
		o.served(r.GetRead())
		return r, err
	})
}

// cloneReq copies a request so that paging never writes to the caller's
// (nil is an empty request).
func cloneReq[P interface {
	*T
	proto.Message
}, T any](req P) P {
	if req == nil {
		return P(new(T))
	}
	return proto.Clone(req).(P)
}

// Regions walks every page of regions matching req (whose page_token says
// where to start), yielding each region, or the error that ended the walk.
func (c *Client) Regions(ctx context.Context, req *adminpb.ListRegionsRequest, opts ...ReadOption) iter.Seq2[*adminpb.Region, error] {
	return walk(ctx, req.GetPageToken(), func(tok string) ([]*adminpb.Region, string, error) {
		q := cloneReq(req)
		q.PageToken = tok
		r, err := c.ListRegionsPage(ctx, q, opts...)
		return r.GetRegions(), r.GetNextPageToken(), err
	})
}

// Tables walks every page of tables matching req.
func (c *Client) Tables(ctx context.Context, req *adminpb.ListTablesRequest, opts ...ReadOption) iter.Seq2[*adminpb.Table, error] {
	return walk(ctx, req.GetPageToken(), func(tok string) ([]*adminpb.Table, string, error) {
		q := cloneReq(req)
		q.PageToken = tok
		r, err := c.ListTablesPage(ctx, q, opts...)
		return r.GetTables(), r.GetNextPageToken(), err
	})
}

// Servers walks every page of region servers.
func (c *Client) Servers(ctx context.Context, req *adminpb.ListServersRequest, opts ...ReadOption) iter.Seq2[*adminpb.Server, error] {
	return walk(ctx, req.GetPageToken(), func(tok string) ([]*adminpb.Server, string, error) {
		q := cloneReq(req)
		q.PageToken = tok
		r, err := c.ListServersPage(ctx, q, opts...)
		return r.GetServers(), r.GetNextPageToken(), err
	})
}

// walk yields the items of page after page, starting at token tok, until a
// page has no next token, the consumer stops, or a call fails (the error
// is yielded last, with a nil item).
func walk[T any](ctx context.Context, tok string, page func(tok string) ([]T, string, error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		for {
			if err := ctx.Err(); err != nil {
				yield(zero, err)
				return
			}
			items, next, err := page(tok)
			if err != nil {
				yield(zero, err)
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			tok = next
		}
	}
}

// collect gathers a walk into a slice.
func collect[T any](seq iter.Seq2[T, error]) ([]T, error) {
	var out []T
	for it, err := range seq {
		if err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, nil
}

// ListTables returns the tables of namespace ns, or of every namespace if
// ns is empty, walking every page. The tables carry region counts, not
// regions.
func (c *Client) ListTables(ctx context.Context, ns string, opts ...ReadOption) ([]*adminpb.Table, error) {
	return collect(c.Tables(ctx, &adminpb.ListTablesRequest{Namespace: ns}, opts...))
}

// ListRegions returns the regions of table ("ns:name", or "name" in the
// default namespace), or every region if table is empty, walking every
// page: a big cluster's regions are better walked with Regions.
func (c *Client) ListRegions(ctx context.Context, table string, opts ...ReadOption) ([]*adminpb.Region, error) {
	return collect(c.Regions(ctx, &adminpb.ListRegionsRequest{Table: table}, opts...))
}

// ListServers returns the region servers the leader knows, with their
// lease state, walking every page.
func (c *Client) ListServers(ctx context.Context, opts ...ReadOption) ([]*adminpb.Server, error) {
	return collect(c.Servers(ctx, &adminpb.ListServersRequest{}, opts...))
}
