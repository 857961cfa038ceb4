package admin

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/proto/adminpb"
)

// The domain answers in catalog values; these turn them into the API's
// messages, so the wire types stay out of the domain.

func regionMsg(r catalog.Region) *adminpb.Region {
	return &adminpb.Region{Name: r.Name, Table: r.Table, State: r.State, Server: r.Server, ProcId: r.ProcID}
}

func regionMsgs(rs []catalog.Region) []*adminpb.Region {
	if rs == nil {
		return nil
	}
	out := make([]*adminpb.Region, len(rs))
	for i, r := range rs {
		out[i] = regionMsg(r)
	}
	return out
}

func tableMsg(t catalog.Table) *adminpb.Table {
	out := &adminpb.Table{Namespace: t.Namespace, Name: t.Name, State: t.State, Regions: regionMsgs(t.Regions),
		RegionCount: int32(t.RegionCount), RegionsTruncated: t.RegionsTruncated}
	if len(t.RegionsByState) > 0 {
		out.RegionsByState = make(map[string]int32, len(t.RegionsByState))
		for st, n := range t.RegionsByState {
			out.RegionsByState[st] = int32(n)
		}
	}
	for _, g := range t.Groups {
		out.RegionGroups = append(out.RegionGroups, &adminpb.RegionGroup{State: g.State, Server: g.Server, Count: int32(g.Count)})
	}
	if t.RegionsTruncated {
		out.NextPageToken = encodePageToken(regionToken, t.NextRegion)
	}
	return out
}

func tableMsgs(ts []catalog.Table) []*adminpb.Table {
	out := make([]*adminpb.Table, len(ts))
	for i, t := range ts {
		out[i] = tableMsg(t)
	}
	return out
}

func serverMsgs(ss []catalog.Server) []*adminpb.Server {
	out := make([]*adminpb.Server, len(ss))
	for i, s := range ss {
		out[i] = clipServer(&adminpb.Server{
			Id: s.ID, Address: s.Address, StartCode: s.StartCode, RegionCount: int32(s.RegionCount),
			LeaseState: s.LeaseState, LastRenewalUnixMs: s.LastRenewalUnixMs,
			HeartbeatSeen: s.HeartbeatSeen, LastHeartbeatAgeMs: s.LastHeartbeatAgeMs,
			SoftLimitMs: s.SoftLimitMs, HardLimitMs: s.HardLimitMs,
			Version: s.Version, MaxFormat: s.MaxFormat,
		})
	}
	return out
}

// lockMsg is nil for the zero Lock a failed call returns, as the call's
// answer is then only its error.
func lockMsg(l catalog.Lock) *adminpb.LockResponse {
	if l == (catalog.Lock{}) {
		return nil
	}
	return &adminpb.LockResponse{LockId: l.ID, State: l.State, LeaseTimeoutMs: l.LeaseTimeoutMs}
}

// Page tokens (adminpb.EncodePageToken) name the list and the last key.
const (
	regionToken = adminpb.RegionPageToken
	tableToken  = adminpb.TablePageToken
	serverToken = adminpb.ServerPageToken
	nsToken     = adminpb.NamespacePageToken
	lockToken   = adminpb.LockPageToken
)

func encodePageToken(kind, last string) string { return adminpb.EncodePageToken(kind, last) }

// decodePageToken returns the key a page resumes after ("" for the first
// page); a token that is not the next_page_token of this kind of list is
// INVALID_ARGUMENT.
func decodePageToken(call, kind, tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	last, ok := adminpb.DecodePageToken(kind, tok)
	if !ok {
		return "", status.Errorf(codes.InvalidArgument, "admin: %s: bad page_token %q (pass next_page_token of the previous page of this list)", call, tok)
	}
	return last, nil
}

// pageStart checks a list call's page size (checkPageSize) and returns
// the key its page token resumes after (decodePageToken), refusing the
// size first: the opening of every paged list call.
func pageStart(call, kind string, size int32, token string) (string, error) {
	if err := checkPageSize(call, size); err != nil {
		return "", err
	}
	return decodePageToken(call, kind, token)
}

// pagedRequest is a paged list call's request.
type pagedRequest interface {
	GetPageSize() int32
	GetPageToken() string
}

// domainPageStart opens a paged list of the domain's: this node's domain,
// then pageStart of req, refused in that order.
func (s *Server) domainPageStart(call, kind string, req pagedRequest) (Domain, string, error) {
	d, err := s.domain()
	if err != nil {
		return nil, "", err
	}
	after, err := pageStart(call, kind, req.GetPageSize(), req.GetPageToken())
	return d, after, err
}

// checkPageSize refuses a negative page size; 0 takes the list's default
// and one above its maximum is clamped (by the domain).
func checkPageSize(call string, n int32) error {
	if n < 0 {
		return status.Errorf(codes.InvalidArgument, "admin: %s: negative page_size %d", call, n)
	}
	return nil
}
