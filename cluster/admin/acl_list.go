package admin

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster/access"
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
	after, err := pageStart("acl list", adminpb.AclPageToken, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	resume := aclListOf(after)
	if after != "" && resume < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "admin: acl list: bad page_token %q (pass next_page_token of the previous page of this list)", req.GetPageToken())
	}
	size := pageSizeOr(req.GetPageSize(), defaultAclPage, maxAclPage)
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.AclListResponse, error) {
		out := &adminpb.AclListResponse{Enforced: s.acc.Enforce, Read: ri}
		page := aclPage{pageBudget: newPage(size)}
		for i, prefix := range access.ListPrefixes {
			if page.full || i < resume {
				continue
			}
			from := ""
			if i == resume {
				from = after
			}
			scanAfter(sc, prefix, from, func(k string, v []byte) bool {
				return s.addAclListEntry(out, &page, prefix, k, v)
			})
		}
		if page.full {
			out.NextPageToken = encodePageToken(adminpb.AclPageToken, page.last)
		}
		return out, nil
	}, relayed(req, adminpb.AdminClient.AclList))
}

// aclListOf is the position in access.ListPrefixes of the list key
// belongs to; -1 for none.
func aclListOf(key string) int {
	for i, p := range access.ListPrefixes {
		if strings.HasPrefix(key, p) {
			return i
		}
	}
	return -1
}

// addAclListEntry adds the entry stored at k under prefix to out if it
// fits the page, and says whether the scan goes on; one that does not
// decode is skipped.
func (s *Server) addAclListEntry(out *adminpb.AclListResponse, page *aclPage, prefix, k string, v []byte) bool {
	switch m := access.DecodeListEntry(prefix, k, v).(type) {
	case *adminpb.AclRevocation:
		m.RevokedBy, _ = clipText(m.GetRevokedBy(), maxAnswerText)
		return page.add(k, m) && appendTo(&out.Revoked, m)
	case *adminpb.AclBinding:
		m.CreatedBy, _ = clipText(m.GetCreatedBy(), maxAnswerText)
		return page.add(k, m) && appendTo(&out.Bindings, m)
	case *adminpb.AclToken:
		m.CreatedBy, _ = clipText(m.GetCreatedBy(), maxAnswerText)
		m.LastUsedUnixMs = s.acl.TokenLastUse(m.GetAccessor())
		return page.add(k, m) && appendTo(&out.Tokens, m)
	}
	return true
}

// aclPage counts what a page of AclList holds.
type aclPage struct {
	pageBudget
	last string // the key of the last entry kept
	full bool
}

// add says whether entry m under key k fits in the page, and counts it
// if so.
func (p *aclPage) add(k string, m proto.Message) bool {
	if !p.fits(m) {
		p.full = true
		return false
	}
	p.last = k
	return true
}

func appendTo[T any](list *[]T, v T) bool {
	*list = append(*list, v)
	return true
}

// scanAfter walks the entries under prefix whose key is above after, in
// key order, until fn returns false.
func scanAfter(sc domainScanner, prefix, after string, fn func(k string, v []byte) bool) {
	visit := func(k string, v []byte) bool {
		if k <= after {
			return true
		}
		return fn(k, v)
	}
	if from, ok := sc.(domainScannerFrom); ok && after > prefix {
		from.DomainScanFrom(prefix, after, visit)
		return
	}
	sc.DomainScan(prefix, visit)
}
