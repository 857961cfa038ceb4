package domain

import (
	"context"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/proto/rspb"
)

// ServerRegions is a page of what the region server says it hosts, and
// of what the replicated state assigns to its live incarnation: the names
// of both after q.After, at most q.PageSize of each, in
// maxServerRegionsPageBytes.
func (d *Domain) ServerRegions(ctx context.Context, q catalog.ServerRegionsQuery) (catalog.ServerRegions, error) {
	r, err := d.fsmReader()
	if err != nil {
		return catalog.ServerRegions{}, err
	}
	srv, err := knownServer(r, q.Server)
	if err != nil {
		return catalog.ServerRegions{}, err
	}
	var assigned []string
	ref := ServerRef{q.Server, srv.StartCode}
	if err := scanRegions(r, func(name string, rg Region) bool {
		if name > q.After && rg.onServer(ref) {
			assigned = append(assigned, name)
		}
		return true
	}); err != nil {
		return catalog.ServerRegions{}, err
	}
	hosted, hostedMore, err := d.hostedPage(ctx, q, srv.Address)
	if err != nil {
		return catalog.ServerRegions{}, err
	}
	sort.Strings(assigned)
	a, h, next := serverRegionsPage(assigned, hosted, hostedMore, q.PageSize)
	return catalog.ServerRegions{Server: q.Server, Assigned: a, Hosted: h, Next: next}, nil
}

// hostedPage asks the region server for the regions it hosts after
// q.After, at most q.PageSize, sorted; more says it has more.
func (d *Domain) hostedPage(ctx context.Context, q catalog.ServerRegionsQuery, addr string) (hosted []string, more bool, err error) {
	c, err := d.rsClient(q.Server, addr)
	if err != nil {
		return nil, false, err
	}
	req := &rspb.ListRegionsRequest{PageSize: int32(q.PageSize)}
	if q.After != "" {
		req.PageToken = rspb.EncodeRegionsToken(q.After)
	}
	// A deadline the gRPC call carries on the wire: real time, whatever
	// the domain's clock.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.ListRegions(cctx, req)
	if err != nil {
		// Not UNAVAILABLE: that would send the client to another master,
		// which cannot reach the region server any better.
		return nil, false, status.Errorf(codes.FailedPrecondition, "region server %s at %s does not answer: %s", q.Server, addr, status.Convert(err).Message())
	}
	// A region server older than paging answers every region, whatever
	// the token: those up to q.After were on earlier pages.
	for _, h := range resp.GetRegions() {
		if h.GetRegion() > q.After {
			hosted = append(hosted, h.GetRegion())
		}
	}
	sort.Strings(hosted)
	return hosted, resp.GetNextPageToken() != "", nil
}

// maxServerRegionsPageBytes ends a ServerRegions page before the names of
// both lists add up to more, far below gRPC's 4 MiB message limit.
const maxServerRegionsPageBytes = 1 << 20

// serverRegionsPage cuts the sorted lists at the same name, so that a
// page compares like with like: the last name both are complete up to,
// within size names of each and maxServerRegionsPageBytes in all. next
// is that name when either list has more.
func serverRegionsPage(assigned, hosted []string, hostedMore bool, size int) (a, h []string, next string) {
	bound, cut := "", false
	lower := func(list []string, more bool) {
		if len(list) == 0 || (!more && len(list) <= size) {
			return
		}
		if last := list[min(size, len(list))-1]; !cut || last < bound {
			bound, cut = last, true
		}
	}
	lower(hosted, hostedMore)
	lower(assigned, false)
	i, j, bytes, prev := 0, 0, 0, ""
	for i < len(assigned) || j < len(hosted) {
		name := firstOf(assigned, hosted, i, j)
		if cut && name > bound {
			break
		}
		inA, inH := i < len(assigned) && assigned[i] == name, j < len(hosted) && hosted[j] == name
		n := (len(name) + 4) * (boolInt(inA) + boolInt(inH)) // with each field's tag and length
		if prev != "" && bytes+n > maxServerRegionsPageBytes {
			return assigned[:i], hosted[:j], prev
		}
		i, j, bytes, prev = i+boolInt(inA), j+boolInt(inH), bytes+n, name
	}
	if !cut {
		return assigned, hosted, ""
	}
	return assigned[:i], hosted[:j], bound
}

// firstOf is the lesser of a[i] and b[j], of those there are.
func firstOf(a, b []string, i, j int) string {
	switch {
	case i >= len(a):
		return b[j]
	case j >= len(b):
		return a[i]
	}
	return min(a[i], b[j])
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
