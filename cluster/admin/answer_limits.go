package admin

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
)

// Requests are bounded (internal/reqlimit), but records stored before
// they were (release 0.1.0 took an owner of megabytes) still are what
// they are: an answer cuts what it carries of them, so that no stored
// record can make a read fail for being larger than a gRPC message.
const (
	// maxListPageBytes ends a page of a list before page_size items when
	// its items add up to this, far below gRPC's 4 MiB message limit.
	maxListPageBytes = 1 << 20
	// maxAnswerText is the most of a stored owner, nonce, holder, reason
	// or error an answer carries.
	maxAnswerText = 1 << 10
	// maxListResult and maxListChildren are the most of a procedure's
	// result and children a list answer carries (GetProcedure: all).
	maxListResult   = 64 << 10
	maxListChildren = 10_000
)

// clipText cuts s to max bytes, saying so in what it keeps.
func clipText(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	note := fmt.Sprintf("…[cut from %d bytes]", len(s))
	return cut(s, max-len(note)+len("…")) + note[len("…"):], true
}

// clipProcedure cuts p's text fields to what an answer carries, and in a
// list answer its result and children too.
func clipProcedure(p *adminpb.Procedure, listing bool) *adminpb.Procedure {
	var cut [4]bool
	p.Owner, cut[0] = clipText(p.GetOwner(), maxAnswerText)
	p.Nonce, cut[1] = clipText(p.GetNonce(), maxAnswerText)
	p.Error, cut[2] = clipText(p.GetError(), maxAnswerText)
	p.WaitingFor, cut[3] = clipText(p.GetWaitingFor(), maxAnswerText)
	for _, c := range cut {
		p.Truncated = p.Truncated || c
	}
	if listing {
		if len(p.GetResult()) > maxListResult {
			p.Result, p.Truncated = p.GetResult()[:maxListResult], true
		}
		if len(p.GetChildren()) > maxListChildren {
			p.Children, p.Truncated = p.GetChildren()[:maxListChildren], true
		}
	}
	return p
}

// procPage keeps of procs, read with limit, as many as fit in
// maxListPageBytes (at least one), each cut for a list, and returns the
// next page's token if there may be a next page.
func procPage(procs []*adminpb.Procedure, limit int) ([]*adminpb.Procedure, string) {
	size := 0
	for i, p := range procs {
		clipProcedure(p, true)
		n := proto.Size(p)
		if i > 0 && size+n > maxListPageBytes {
			return procs[:i], strconv.FormatUint(procs[i-1].GetId(), 10)
		}
		size += n
	}
	if len(procs) > 0 && len(procs) == limit {
		return procs, strconv.FormatUint(procs[len(procs)-1].GetId(), 10)
	}
	return procs, ""
}

// clipLockParty cuts an external lock's holder and description.
func clipLockParty(p *adminpb.LockParty) *adminpb.LockParty {
	var h, d bool
	p.Holder, h = clipText(p.GetHolder(), maxAnswerText)
	p.Description, d = clipText(p.GetDescription(), maxAnswerText)
	p.Truncated = h || d
	return p
}
