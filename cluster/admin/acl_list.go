package admin

import (
	"context"
	"encoding/json"
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
	if err := checkPageSize("acl list", req.GetPageSize()); err != nil {
		return nil, err
	}
	after, err := decodePageToken("acl list", adminpb.AclPageToken, req.GetPageToken())
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
		for i, prefix := range aclListPrefixes {
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
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.AclListResponse, error) {
		return c.AclList(ctx, req)
	})
}

// aclListPrefixes are AclList's lists, in the order it pages them.
var aclListPrefixes = []string{access.CertPrefix, access.TokenPrefix, access.RevokedPrefix}

// aclListOf is the position in aclListPrefixes of the list key belongs
// to; -1 for none.
func aclListOf(key string) int {
	for i, p := range aclListPrefixes {
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
	name := strings.TrimPrefix(k, prefix)
	if prefix == access.RevokedPrefix {
		var r access.Revocation
		if json.Unmarshal(v, &r) != nil {
			return true
		}
		m := &adminpb.AclRevocation{Client: name, RevokedUnixMs: r.AtMs}
		m.RevokedBy, _ = clipText(r.By, maxAnswerText)
		return page.add(k, m) && appendTo(&out.Revoked, m)
	}
	var e access.Entry
	if json.Unmarshal(v, &e) != nil {
		return true
	}
	if prefix == access.CertPrefix {
		b := bindingMsg(name, e)
		b.CreatedBy, _ = clipText(b.GetCreatedBy(), maxAnswerText)
		return page.add(k, b) && appendTo(&out.Bindings, b)
	}
	t := tokenMsg(name, e)
	t.CreatedBy, _ = clipText(t.GetCreatedBy(), maxAnswerText)
	t.LastUsedUnixMs = s.acl.TokenLastUse(t.GetAccessor())
	return page.add(k, t) && appendTo(&out.Tokens, t)
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
