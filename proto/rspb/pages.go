package rspb

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Paging of ListRegions lives beside the wire types because both ends
// need it: region servers answer pages, and the masters and the CLI read
// every page of them.
const (
	// MaxRegionsPage is the most regions a ListRegions page carries, and
	// what a page_size of 0 asks for; MaxRegionsPageBytes ends a page
	// sooner, far below gRPC's 4 MiB message limit.
	MaxRegionsPage      = 100_000
	MaxRegionsPageBytes = 1 << 20

	hostedTokenKind = "hosted/"
)

// EncodeRegionsToken is the page token that resumes strictly after
// region last.
func EncodeRegionsToken(last string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(hostedTokenKind + last))
}

// DecodeRegionsToken returns the region a page resumes after ("" for no
// token); an error for a token that is not one of ListRegions'.
func DecodeRegionsToken(tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	last, ok := strings.CutPrefix(string(b), hostedTokenKind)
	if err != nil || !ok || last == "" {
		return "", status.Error(codes.InvalidArgument, "list regions: page_token is not a token of this list")
	}
	return last, nil
}

// ListAllRegions reads every page of c's hosted regions. A region server
// that restarts between pages (another start code) is read again from
// the start, a few times. A region server older than paging answers
// everything at once, with no token.
func ListAllRegions(ctx context.Context, c RegionServerClient, opts ...grpc.CallOption) (*ListRegionsResponse, error) {
	const attempts = 3
	for range attempts {
		all, restarted, err := listRegionPages(ctx, c, opts)
		if err != nil || !restarted {
			return all, err
		}
	}
	return nil, status.Errorf(codes.Unavailable, "list regions: the region server restarted while being read, %d times", attempts)
}

func listRegionPages(ctx context.Context, c RegionServerClient, opts []grpc.CallOption) (all *ListRegionsResponse, restarted bool, err error) {
	tok := ""
	for {
		page, err := c.ListRegions(ctx, &ListRegionsRequest{PageToken: tok}, opts...)
		if err != nil {
			return nil, false, err
		}
		if all == nil {
			all = &ListRegionsResponse{ServerId: page.GetServerId(), StartCode: page.GetStartCode()}
		} else if page.GetStartCode() != all.GetStartCode() {
			return nil, true, nil
		}
		all.Regions = append(all.Regions, page.GetRegions()...)
		next := page.GetNextPageToken()
		if next == "" {
			return all, false, nil
		}
		if next == tok {
			return nil, false, fmt.Errorf("list regions: the region server answered the same page token twice")
		}
		tok = next
	}
}
