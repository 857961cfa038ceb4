package admin

import (
	"context"
	"encoding/json"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
)

// AclList pages: the bindings, then the tokens, each in key order. Its
// page token names the last entry's full key, so that it says which of
// the two lists to resume.
const (
	defaultAclPage = 1000
	maxAclPage     = 10000
)

// AclList implements adminpb.AdminServer: a page of the bindings and
// tokens, ending at page_size entries or maxListPageBytes: tokens can be
// made by the thousand.
func (s *Server) AclList(ctx context.Context, req *adminpb.AclListRequest) (*adminpb.AclListResponse, error) {
	sc, ok := s.b.(domainScanner)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "admin: acl list: this node cannot list its state")
	}
	if err := checkPageSize("acl list", req.GetPageSize()); err != nil {
		return nil, err
	}
	after, err := decodePageToken("acl list", adminpb.AclPageToken, req.GetPageToken())
	if err != nil {
		return nil, err
	}
	if after != "" && !strings.HasPrefix(after, aclCertPrefix) && !strings.HasPrefix(after, aclTokenPrefix) {
		return nil, status.Errorf(codes.InvalidArgument, "admin: acl list: bad page_token %q (pass next_page_token of the previous page of this list)", req.GetPageToken())
	}
	size := pageSizeOr(req.GetPageSize(), defaultAclPage, maxAclPage)
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.AclListResponse, error) {
		out := &adminpb.AclListResponse{Enforced: s.acc.Enforce, Read: ri}
		page := aclPage{size: size}
		if !strings.HasPrefix(after, aclTokenPrefix) {
			scanAfter(sc, aclCertPrefix, after, func(k string, e aclEntry) bool {
				b := bindingMsg(strings.TrimPrefix(k, aclCertPrefix), e)
				b.CreatedBy, _ = clipText(b.GetCreatedBy(), maxAnswerText)
				return page.add(k, b) && appendTo(&out.Bindings, b)
			})
		}
		if !page.full {
			scanAfter(sc, aclTokenPrefix, after, func(k string, e aclEntry) bool {
				t := tokenMsg(strings.TrimPrefix(k, aclTokenPrefix), e)
				t.CreatedBy, _ = clipText(t.GetCreatedBy(), maxAnswerText)
				return page.add(k, t) && appendTo(&out.Tokens, t)
			})
		}
		if page.full {
			out.NextPageToken = encodePageToken(adminpb.AclPageToken, page.last)
		}
		return out, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.AclListResponse, error) {
		return c.AclList(ctx, req)
	})
}

// aclPage counts what a page of AclList holds.
type aclPage struct {
	size, n, bytes int
	last           string // the key of the last entry kept
	full           bool
}

// add says whether entry m under key k fits in the page, and counts it
// if so.
func (p *aclPage) add(k string, m proto.Message) bool {
	n := proto.Size(m) + 4
	if p.n == p.size || (p.n > 0 && p.bytes+n > maxListPageBytes) {
		p.full = true
		return false
	}
	p.n, p.bytes, p.last = p.n+1, p.bytes+n, k
	return true
}

func appendTo[T any](list *[]T, v T) bool {
	*list = append(*list, v)
	return true
}

// scanAfter walks the ACL entries under prefix whose key is above after,
// in key order, until fn returns false; entries that do not decode are
// skipped.
func scanAfter(sc domainScanner, prefix, after string, fn func(string, aclEntry) bool) {
	visit := func(k string, v []byte) bool {
		var e aclEntry
		if k <= after || json.Unmarshal(v, &e) != nil {
			return true
		}
		return fn(k, e)
	}
	if from, ok := sc.(domainScannerFrom); ok && after > prefix {
		from.DomainScanFrom(prefix, after, visit)
		return
	}
	sc.DomainScan(prefix, visit)
}
