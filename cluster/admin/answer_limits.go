package admin

import (
	"fmt"
	"math"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster/access"
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
	// result and children a list answer carries; maxAnswerResult and
	// maxAnswerChildren what an answer of one procedure does (GetProcedure,
	// WatchProcedure, pause, resume, abort, ack): with its data and history,
	// well under gRPC's 4 MiB.
	maxListResult     = 64 << 10
	maxListChildren   = 10_000
	maxAnswerResult   = 1 << 20
	maxAnswerChildren = 100_000
)

// clipText cuts s to max bytes, saying so in what it keeps.
func clipText(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	note := fmt.Sprintf("…[cut from %d bytes]", len(s))
	return access.Cut(s, max-len(note)+len("…")) + note[len("…"):], true
}

// clipProcedure cuts p's text fields, result and children to what an
// answer carries: a list answer less of the result and children.
func clipProcedure(p *adminpb.Procedure, listing bool) *adminpb.Procedure {
	var cut [4]bool
	p.Owner, cut[0] = clipText(p.GetOwner(), maxAnswerText)
	p.Nonce, cut[1] = clipText(p.GetNonce(), maxAnswerText)
	p.Error, cut[2] = clipText(p.GetError(), maxAnswerText)
	p.WaitingFor, cut[3] = clipText(p.GetWaitingFor(), maxAnswerText)
	for _, c := range cut {
		p.Truncated = p.Truncated || c
	}
	results, children := maxAnswerResult, maxAnswerChildren
	if listing {
		results, children = maxListResult, maxListChildren
	}
	if len(p.GetResult()) > results {
		p.Result, p.Truncated = p.GetResult()[:results], true
	}
	if len(p.GetChildren()) > children {
		p.Children, p.Truncated = p.GetChildren()[:children], true
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
	var h, d, w bool
	p.Holder, h = clipText(p.GetHolder(), maxAnswerText)
	p.Description, d = clipText(p.GetDescription(), maxAnswerText)
	p.WaitingFor, w = clipText(p.GetWaitingFor(), maxAnswerText)
	p.Truncated = h || d || w
	return p
}

// maxAnswerData is the most of a procedure's data (its arguments and
// progress) GetProcedure carries: 0.1.0 stored arguments of megabytes.
const maxAnswerData = 64 << 10

// clipData cuts p's data to maxAnswerData, saying so in p.Truncated.
func clipData(p *adminpb.Procedure) *adminpb.Procedure {
	if len(p.GetData()) > maxAnswerData {
		p.Data, p.Truncated = p.GetData()[:maxAnswerData], true
	}
	return p
}

// pageBudget is what is left of a list answer: of its items (a page's
// page_size) and of its bytes, each item costing its size and its field's
// tag and length. A page takes its first item whatever its size, so that
// no single item can stop a list from going on.
type pageBudget struct {
	items, bytes int
	kept         int
	firstFits    bool
}

// newPage is the budget of a page of at most size items.
func newPage(size int) pageBudget {
	return pageBudget{items: size, bytes: maxListPageBytes, firstFits: true}
}

// newByteBudget is a budget of n bytes, of any number of items.
func newByteBudget(n int) pageBudget {
	return pageBudget{items: math.MaxInt, bytes: n}
}

// fits says whether m fits in what is left, and takes it from b if so.
func (b *pageBudget) fits(m proto.Message) bool {
	n := proto.Size(m) + 4 // the field's tag and length
	if b.items == 0 || (n > b.bytes && !(b.firstFits && b.kept == 0)) {
		return false
	}
	b.items, b.bytes, b.kept = b.items-1, b.bytes-n, b.kept+1
	return true
}

// boundPage keeps of items, in order, as many as fit in maxListPageBytes
// (at least one, each cut already to what an answer carries); cut says
// whether any were left for a next page.
func boundPage[T proto.Message](items []T) (kept []T, cut bool) {
	page := newPage(len(items))
	for i, it := range items {
		if !page.fits(it) {
			return items[:i], true
		}
	}
	return items, false
}

// clipServer cuts a region server's address, which release 0.1.0 took of
// any length.
func clipServer(s *adminpb.Server) *adminpb.Server {
	s.Address, s.Truncated = clipText(s.GetAddress(), maxAnswerText)
	return s
}

// Lock entries: the most holders and waiters of one lock an answer
// carries, and the most bytes of them.
const (
	maxLockParties    = 1000
	maxLockPartyBytes = 512 << 10
	defaultLocksPage  = 1000
	maxLocksPage      = 10000
	defaultNamesPage  = 1000
	maxNamesPage      = 10000
	maxCancelIDs      = 100_000
	// ServerRegions pages count names of each list.
	defaultServerRegionsPage = 10_000
	maxServerRegionsPage     = 100_000
	maxCancelListBytes       = maxListPageBytes
)

// clipLockEntry keeps of e's holders and waiters the first
// maxLockParties of each, in maxLockPartyBytes in all, counting them all.
func clipLockEntry(e *adminpb.LockEntry) *adminpb.LockEntry {
	e.HolderCount, e.WaiterCount = int32(len(e.GetHolders())), int32(len(e.GetWaiters()))
	budget := newByteBudget(maxLockPartyBytes)
	keep := func(parties []*adminpb.LockParty) []*adminpb.LockParty {
		for i, p := range parties {
			if i == maxLockParties || !budget.fits(p) {
				e.Truncated = true
				return parties[:i]
			}
		}
		return parties
	}
	e.Holders = keep(e.GetHolders())
	e.Waiters = keep(e.GetWaiters())
	return e
}

// pageSizeOr applies a list's default and bound to an asked page size
// (checked not negative).
func pageSizeOr(asked int32, def, most int) int {
	switch {
	case asked <= 0:
		return def
	case int(asked) > most:
		return most
	}
	return int(asked)
}

// clipCancelled bounds a CancelProcedures answer: the procedures listed
// fit in maxCancelListBytes (cancelled first), every one is counted, and
// the ids of the first maxCancelIDs cancelled are all named, which is
// what a confirmation binds itself to.
func clipCancelled(out *adminpb.CancelProceduresResponse) *adminpb.CancelProceduresResponse {
	out.CancelledCount, out.SkippedCount = int64(len(out.GetCancelled())), int64(len(out.GetSkipped()))
	for _, p := range out.GetCancelled()[:min(len(out.GetCancelled()), maxCancelIDs)] {
		out.CancelledIds = append(out.CancelledIds, p.GetId())
	}
	budget := newByteBudget(maxCancelListBytes)
	for i, p := range out.GetCancelled() {
		if !budget.fits(clipProcedure(p, true)) {
			out.Cancelled, out.Truncated = out.GetCancelled()[:i], true
			break
		}
	}
	for i, sk := range out.GetSkipped() {
		clipProcedure(sk.GetProcedure(), true)
		sk.Reason, _ = clipText(sk.GetReason(), maxAnswerText)
		if !budget.fits(sk) {
			out.Skipped, out.Truncated = out.GetSkipped()[:i], true
			break
		}
	}
	return out
}

// boundPageAt is boundPage over a page the domain read up to next (its
// resume key, "" for the end): a page cut short resumes after the key of
// its last item kept.
func boundPageAt[T proto.Message](items []T, next string, key func(T) string) ([]T, string) {
	kept, cut := boundPage(items)
	if cut {
		next = key(kept[len(kept)-1])
	}
	return kept, next
}

// maxAuditText is the most of an audit record's args or message an
// answer carries: they are written cut at 512 bytes, but a record stored
// otherwise (by a release before that cut, or forged into the state) must
// not make the trail unreadable.
const maxAuditText = 1 << 10

// clipAuditRecord cuts r's text fields to what an answer carries.
func clipAuditRecord(r *adminpb.AuditRecord) *adminpb.AuditRecord {
	r.Args, _ = clipText(r.GetArgs(), maxAuditText)
	r.Message, _ = clipText(r.GetMessage(), maxAuditText)
	for _, f := range []*string{&r.Id, &r.Principal, &r.Name, &r.Method, &r.ArgsDigest, &r.Code, &r.Node, &r.Peer, &r.Via} {
		*f, _ = clipText(*f, maxAnswerText)
	}
	if len(r.GetProcIds()) > maxCancelIDs {
		r.ProcIds = r.GetProcIds()[:maxCancelIDs]
	}
	return r
}
