package client

import (
	"context"
	"iter"

	"google.golang.org/grpc"
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
	return listPage(ctx, c, req, opts, regionsPaging, adminpb.AdminClient.ListRegions)
}

// ListTablesPage returns one page of tables, with their region counts but
// not their regions.
func (c *Client) ListTablesPage(ctx context.Context, req *adminpb.ListTablesRequest, opts ...ReadOption) (*adminpb.ListTablesResponse, error) {
	return listPage(ctx, c, req, opts, tablesPaging, adminpb.AdminClient.ListTables)
}

// ListServersPage returns one page of the region servers the leader knows,
// with their lease state.
func (c *Client) ListServersPage(ctx context.Context, req *adminpb.ListServersRequest, opts ...ReadOption) (*adminpb.ListServersResponse, error) {
	return listPage(ctx, c, req, opts, serversPaging, adminpb.AdminClient.ListServers)
}

// paging points at the two fields of a list request that the client, not
// the caller, sets: the page to read and the consistency to read it at.
type paging struct {
	token       *string
	consistency *adminpb.Consistency
}

func regionsPaging(q *adminpb.ListRegionsRequest) paging { return paging{&q.PageToken, &q.Consistency} }
func tablesPaging(q *adminpb.ListTablesRequest) paging   { return paging{&q.PageToken, &q.Consistency} }
func serversPaging(q *adminpb.ListServersRequest) paging { return paging{&q.PageToken, &q.Consistency} }

// listReq is a pointer to a list request message T.
type listReq[T any] interface {
	*T
	proto.Message
	GetPageToken() string
}

// listPage reads one page with call, on a copy of req (the caller's is
// never written) at the read options' consistency, and reports which node
// served it to Served.
func listPage[Q listReq[T], T any, R interface{ GetRead() *adminpb.ReadInfo }](
	ctx context.Context, c *Client, req Q, opts []ReadOption, fields func(Q) paging,
	call func(adminpb.AdminClient, context.Context, Q, ...grpc.CallOption) (R, error),
) (R, error) {
	o := readOpts(opts)
	q := cloneReq(req)
	*fields(q).consistency = o.consistency
	return unary(ctx, c, func(ctx context.Context, a adminpb.AdminClient) (R, error) {
		r, err := call(a, ctx, q)
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
	return walkList(ctx, req, opts, regionsPaging, c.ListRegionsPage, (*adminpb.ListRegionsResponse).GetRegions)
}

// Tables walks every page of tables matching req.
func (c *Client) Tables(ctx context.Context, req *adminpb.ListTablesRequest, opts ...ReadOption) iter.Seq2[*adminpb.Table, error] {
	return walkList(ctx, req, opts, tablesPaging, c.ListTablesPage, (*adminpb.ListTablesResponse).GetTables)
}

// Servers walks every page of region servers.
func (c *Client) Servers(ctx context.Context, req *adminpb.ListServersRequest, opts ...ReadOption) iter.Seq2[*adminpb.Server, error] {
	return walkList(ctx, req, opts, serversPaging, c.ListServersPage, (*adminpb.ListServersResponse).GetServers)
}

// walkList walks the pages of a list from req's page token on, reading
// each with page on a copy of req and yielding the items of each answer.
func walkList[Q listReq[T], T any, R interface{ GetNextPageToken() string }, I any](
	ctx context.Context, req Q, opts []ReadOption, fields func(Q) paging,
	page func(context.Context, Q, ...ReadOption) (R, error), items func(R) []I,
) iter.Seq2[I, error] {
	return walk(ctx, req.GetPageToken(), func(tok string) ([]I, string, error) {
		q := cloneReq(req)
		*fields(q).token = tok
		r, err := page(ctx, q, opts...)
		return items(r), r.GetNextPageToken(), err
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

// readAllPages reads a list answered as one (AclList, ListLocks,
// ListNamespaces, ServerRegions) page after page: call reads the page
// *tok names, add gathers its items, and *tok takes each next_page_token
// until a page has none.
func readAllPages[R interface {
	GetRead() *adminpb.ReadInfo
	GetNextPageToken() string
}](ctx context.Context, c *Client, ro readOptions, tok *string, call func(context.Context, adminpb.AdminClient) (R, error), add func(R)) error {
	for {
		r, err := unary(ctx, c, call)
		ro.served(r.GetRead())
		if err != nil {
			return err
		}
		add(r)
		if *tok = r.GetNextPageToken(); *tok == "" {
			return nil
		}
	}
}
