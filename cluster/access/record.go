package access

import (
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
)

const (
	// maxPageBytes ends a page of ListAudit early.
	maxPageBytes = 1 << 20
	// scanMax bounds the records one page of a filtered list reads.
	scanMax = 100_000
	// PageToken and DescPageToken are the kinds of ListAudit's page
	// tokens, oldest and newest first.
	PageToken     = "audit"
	DescPageToken = "audit-desc"
)

// procIDer and friends are the shapes of requests and answers that name
// procedures.
type (
	procIDer  interface{ GetProcId() uint64 }
	procIDser interface{ GetProcIds() []uint64 }
)

// NewRecord is the record of a call of method by p, made at node at
// time at, answered resp or err: its arguments (cut, and their digest),
// its outcome, and the procedures the request or answer names. Where the
// call came from (Peer, Via) is the caller's to fill.
func NewRecord(at time.Time, node string, p Principal, method string, req, resp any, err error) *adminpb.AuditRecord {
	return newRecord(false, at, node, p, method, req, resp, err)
}

// NewRequestRecord is NewRecord's record in the form a cluster at format 2
// stores (see RenderArgs): the request itself, marshalled, in place of
// its JSON and digest, which every reader of the trail makes from it. The
// JSON took a quarter of what recording a submission cost its leader,
// and the two strings most of the bytes its record added to the entry
// carrying it through Raft and every master's state (issue 33). A
// request that does not fit (requestMax), or of a method of no service
// this binary knows, is recorded as NewRecord records it.
func NewRequestRecord(at time.Time, node string, p Principal, method string, req, resp any, err error) *adminpb.AuditRecord {
	return newRecord(true, at, node, p, method, req, resp, err)
}

func newRecord(keepRequest bool, at time.Time, node string, p Principal, method string, req, resp any, err error) *adminpb.AuditRecord {
	rec := &adminpb.AuditRecord{
		AtUnixMs: at.UnixMilli(), Principal: p.String(), Name: p.Name, Method: method,
		Code: status.Code(err).String(), Node: node,
	}
	if err != nil {
		rec.Message = Cut(status.Convert(err).Message(), FieldMax)
	}
	if m, ok := req.(proto.Message); ok {
		b, err := (proto.MarshalOptions{Deterministic: true}).Marshal(m)
		// An empty request is no request on the wire: kept as args.
		if err == nil && keepRequest && len(b) > 0 && len(b) <= requestMax && isRequestOf(method, m) {
			rec.Request = b
		} else {
			if err == nil {
				rec.ArgsDigest = argsDigest(b)
			}
			rec.Args = argsJSON(m)
		}
	}
	rec.Refused = IsRefusal(status.Code(err))
	add := func(id uint64) {
		if id != 0 && !slices.Contains(rec.ProcIds, id) {
			rec.ProcIds = append(rec.ProcIds, id)
		}
	}
	for _, v := range []any{req, resp} {
		switch x := v.(type) {
		case *adminpb.ProcedureRef:
			add(x.GetId())
		case *adminpb.Procedure:
			add(x.GetId())
		case *adminpb.SubmitProcedureResponse:
			add(x.GetId())
		case *adminpb.LockRef: // an external lock is held by a procedure of that id
			add(x.GetLockId())
		case *adminpb.LockResponse:
			add(x.GetLockId())
		case *adminpb.BypassProcedureRequest:
			add(x.GetId())
		case *adminpb.CancelProceduresResponse:
			for _, p := range x.GetCancelled() {
				if len(rec.ProcIds) < 100 {
					add(p.GetId())
				}
			}
		case procIDer:
			add(x.GetProcId())
		}
		if x, ok := v.(procIDser); ok {
			for _, id := range x.GetProcIds() {
				if len(rec.ProcIds) >= 100 {
					break
				}
				add(id)
			}
		}
	}
	return rec
}

// PageScanner walks keys under a prefix from a key on, either way.
type PageScanner interface {
	ScanFrom(prefix, after string, fn func(string, []byte) bool)
	ScanBefore(prefix, before string, fn func(string, []byte) bool)
}

// ListPage reads a page of both spaces from suffix after on (before it,
// newest first), merged in order: the first limit records of either that
// match req's filters, as stored (the caller clips them for its answer),
// and the token of the next page if there is one.
func ListPage(sc PageScanner, req *adminpb.ListAuditRequest, after string, limit int) *adminpb.ListAuditResponse {
	desc := req.GetNewestFirst()
	kind := PageToken
	if desc {
		kind = DescPageToken
	}
	// beyond says suffix a comes later than b in the listing's order.
	beyond := func(a, b string) bool { return (!desc && a > b) || (desc && a < b) }
	type found struct {
		suffix string
		rec    *adminpb.AuditRecord
		size   int
	}
	var all []found
	// cutAt: a space's read stopped here, so nothing beyond it is known.
	cutAt := ""
	for _, prefix := range []string{AuditPrefix, RefusedPrefix} {
		n, scanned, last, stopped := 0, 0, "", false
		visit := func(sr StoredRecord) bool {
			if n > limit || scanned >= scanMax {
				stopped = true
				return false
			}
			scanned++
			last = sr.Suffix
			var r adminpb.AuditRecord
			if UnmarshalRecord(sr.Value, &r) != nil {
				return true
			}
			if (req.GetPrincipal() != "" && r.GetPrincipal() != req.GetPrincipal()) || (req.GetMethod() != "" && r.GetMethod() != req.GetMethod()) {
				return true
			}
			all = append(all, found{sr.Suffix, &r, len(sr.Value)})
			n++
			return true
		}
		if desc {
			ScanRecordsBefore(sc, prefix, after, visit)
		} else {
			ScanRecords(sc, prefix, after, visit)
		}
		if stopped && (cutAt == "" || beyond(cutAt, last)) {
			cutAt = last
		}
	}
	slices.SortFunc(all, func(a, b found) int {
		if desc {
			return strings.Compare(b.suffix, a.suffix)
		}
		return strings.Compare(a.suffix, b.suffix)
	})
	out := &adminpb.ListAuditResponse{}
	size, last := 0, ""
	for _, f := range all {
		if cutAt != "" && beyond(f.suffix, cutAt) {
			break // everything up to cutAt is on the page
		}
		if len(out.Records) >= limit || size >= maxPageBytes {
			out.NextPageToken = adminpb.EncodePageToken(kind, last)
			return out
		}
		out.Records = append(out.Records, f.rec)
		size += f.size
		last = f.suffix
	}
	if cutAt != "" {
		out.NextPageToken = adminpb.EncodePageToken(kind, cutAt)
	}
	return out
}
