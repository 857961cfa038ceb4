package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/proto/adminpb"
)

// The audit trail: a record of every client call to a method that
// changes state (Audited), refusals included, in the replicated domain
// keys audit/<term>-<n>. A call is recorded where it was served or
// refused: the leader, or a standby that refused it or could not forward
// it (its record goes to the leader by AppendAudit); a standby that
// forwarded a call leaves its record to the leader. The call is answered
// only once its record is committed.
//
// Only the leader numbers and writes records, one batch at a time: the
// key's term is the leader's, and no other master writes in its term, so
// two leaders never write the same key; within the term a counter that
// only grows numbers them, so a batch that timed out and committed later
// collides with none either.

const (
	// maxAuditPageBytes ends a page of ListAudit early.
	maxAuditPageBytes = 1 << 20
	// auditScanMax bounds the records one page of a filtered list reads.
	auditScanMax = 100_000
	// auditPageToken and auditDescPageToken are the kinds of ListAudit's
	// page tokens, oldest and newest first.
	auditPageToken     = "audit"
	auditDescPageToken = "audit-desc"
)

// auditNoteKey carries a call's auditNote through its handler.
type auditNoteKey struct{}

// auditNote tells the access interceptor that a call was answered by the
// leader it was forwarded to, which recorded it; and tells the handler of
// the record begun as the call started, if any (start).
type auditNote struct {
	remote atomic.Bool
	start  *auditStart
}

// auditStart is the commit of a call's first record (PENDING), which both
// the interceptor and a handler may wait for.
type auditStart struct {
	ch   <-chan error
	once sync.Once
	err  error
}

func (a *auditStart) wait(t *access.Trail) error {
	a.once.Do(func() { a.err = t.Wait(a.ch) })
	return a.err
}

// auditStarted waits until ctx's call's first record committed, if this
// leader began one: for a handler about to give leadership away, after
// which this node can commit nothing (the record's outcome is then sent
// to the new leader).
func auditStarted(ctx context.Context, t *access.Trail) {
	if n, ok := ctx.Value(auditNoteKey{}).(*auditNote); ok && n.start != nil {
		_ = n.start.wait(t)
	}
}

func (n *auditNote) isRemote() bool { return n != nil && n.remote.Load() }

// markForwarded notes that ctx's call reached the leader it was forwarded
// to (an answer came back, or it was sent and may have been served).
func markForwarded(ctx context.Context) {
	if n, ok := ctx.Value(auditNoteKey{}).(*auditNote); ok {
		n.remote.Store(true)
	}
}

// procIDer and friends are the shapes of requests and answers that name
// procedures.
type (
	procIDer  interface{ GetProcId() uint64 }
	procIDser interface{ GetProcIds() []uint64 }
)

// auditRecord is the record of a call of method by p.
func (s *Server) auditRecord(ctx context.Context, p access.Principal, method string, req, resp any, err error) *adminpb.AuditRecord {
	rec := &adminpb.AuditRecord{
		AtUnixMs: s.acc.Clock.Now().UnixMilli(), Principal: p.String(), Name: p.Name, Method: method,
		Code: status.Code(err).String(), Node: s.b.ID(),
	}
	rec.Peer, rec.Via = callOrigin(ctx)
	if err != nil {
		rec.Message = access.Cut(status.Convert(err).Message(), access.FieldMax)
	}
	if m, ok := req.(proto.Message); ok {
		if b, err := (proto.MarshalOptions{Deterministic: true}).Marshal(m); err == nil {
			h := sha256.Sum256(b)
			rec.ArgsDigest = hex.EncodeToString(h[:])
		}
		if b, err := (protojson.MarshalOptions{UseProtoNames: true}).Marshal(m); err == nil {
			rec.Args = access.Cut(string(b), access.FieldMax)
		}
	}
	rec.Refused = access.IsRefusal(status.Code(err))
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

// AppendAudit implements adminpb.AdminServer: records of a standby,
// committed by the leader.
func (s *Server) AppendAudit(ctx context.Context, req *adminpb.AppendAuditRequest) (*adminpb.AppendAuditResponse, error) {
	if err := s.admitMasterCall(ctx, "AppendAudit", ""); err != nil {
		return nil, err
	}
	if s.audit == nil {
		return nil, status.Error(codes.FailedPrecondition, "admin: this master keeps no audit trail")
	}
	recs := req.GetRecords()
	if len(recs) > access.Batch {
		return nil, status.Errorf(codes.InvalidArgument, "admin: append audit: %d records, at most %d", len(recs), access.Batch)
	}
	for _, r := range recs {
		if r == nil || r.GetMethod() == "" {
			return nil, status.Error(codes.InvalidArgument, "admin: append audit: a record without a method")
		}
		access.SanitizeRecord(r)
	}
	return onLeader(s, ctx, func(Procedures) (*adminpb.AppendAuditResponse, error) {
		if err := s.audit.Append(ctx, recs...); err != nil {
			return nil, err
		}
		return &adminpb.AppendAuditResponse{}, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.AppendAuditResponse, error) {
		return c.AppendAudit(ctx, req)
	})
}

// sendAudit has the leader commit records of this standby
// (AppendAudit), and waits up to access.WriteTimeout. Records not sent
// for want of a leader wait for one: an outcome this node writes just
// after giving leadership away (a leader removing itself) finds none for
// a moment.
func (s *Server) sendAudit(recs []*adminpb.AuditRecord) error {
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), noHoldKey{}, true), access.WriteTimeout)
	defer cancel()
	for {
		_, err := forward(s, ctx, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.AppendAuditResponse, error) {
			return c.AppendAudit(ctx, &adminpb.AppendAuditRequest{Records: recs})
		})
		var ur *unreachableLeader
		if err == nil || !errors.As(err, &ur) || !ur.unsent {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-s.stopCh:
			return err
		case <-time.After(5 * holdPoll):
		}
	}
}

// newAuditTrail is the audit trail of s, with its Access's bounds.
func newAuditTrail(s *Server) (*access.Trail, error) {
	return access.NewTrail(trailState(s.b), access.TrailConfig{
		Clock: s.acc.Clock, Retention: s.acc.AuditRetention,
		MaxRecords: s.acc.AuditMaxRecords, MaxPerPrincipal: s.acc.AuditMaxPerPrincipal, MaxRefusedPerCaller: s.acc.AuditMaxRefusedPerCaller,
		Established: func() bool { _, err := s.b.Procedures(); return err == nil },
		Send:        s.sendAudit,
		Stop:        s.stopCh, Stopping: errStopping, Loops: &s.loops, Log: s.log, Metrics: s.acc.Metrics,
	})
}

// ListAudit implements adminpb.AdminServer.
func (s *Server) ListAudit(ctx context.Context, req *adminpb.ListAuditRequest) (*adminpb.ListAuditResponse, error) {
	limit := int(req.GetPageSize())
	switch {
	case limit < 0:
		return nil, status.Errorf(codes.InvalidArgument, "admin: list audit: negative page_size %d", limit)
	case limit == 0:
		limit = DefaultPageSize
	case limit > MaxPageSize:
		limit = MaxPageSize
	}
	kind := auditPageToken
	if req.GetNewestFirst() {
		kind = auditDescPageToken
	}
	var after string // the suffix (term-n) the page resumes after (before, newest first)
	if tok := req.GetPageToken(); tok != "" {
		last, ok := adminpb.DecodePageToken(kind, tok)
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "admin: list audit: bad page_token %q (pass next_page_token of the previous page, listed in the same order)", tok)
		}
		after = last
	}
	sc, ok := s.b.(auditScanner)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "admin: list audit: this node cannot list its state")
	}
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.ListAuditResponse, error) {
		return listAuditPage(sc, req, after, limit, ri), nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.ListAuditResponse, error) {
		return c.ListAudit(ctx, req)
	})
}

// auditScanner is a backend that can walk its domain keys both ways.
type auditScanner interface {
	domainScannerFrom
	domainScannerBefore
}

// domainScannerBefore is a backend that can walk its domain keys
// newest first.
type domainScannerBefore interface {
	DomainScanBefore(prefix, before string, fn func(string, []byte) bool)
}

// listAuditPage reads a page of both spaces from suffix after on (before
// it, newest first), merged in order: the first limit records of either
// that match req's filters.
func listAuditPage(sc auditScanner, req *adminpb.ListAuditRequest, after string, limit int, ri *adminpb.ReadInfo) *adminpb.ListAuditResponse {
	desc := req.GetNewestFirst()
	kind := auditPageToken
	if desc {
		kind = auditDescPageToken
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
	for _, prefix := range []string{access.AuditPrefix, access.RefusedPrefix} {
		n, scanned, last, stopped := 0, 0, "", false
		from := ""
		if after != "" {
			from = prefix + after
		}
		visit := func(k string, v []byte) bool {
			if n > limit || scanned >= auditScanMax {
				stopped = true
				return false
			}
			scanned++
			last = k
			var r adminpb.AuditRecord
			if proto.Unmarshal(v, &r) != nil {
				return true
			}
			if (req.GetPrincipal() != "" && r.GetPrincipal() != req.GetPrincipal()) || (req.GetMethod() != "" && r.GetMethod() != req.GetMethod()) {
				return true
			}
			all = append(all, found{strings.TrimPrefix(k, prefix), &r, len(v)})
			n++
			return true
		}
		if desc {
			sc.DomainScanBefore(prefix, from, visit)
		} else {
			sc.DomainScanFrom(prefix, from, visit)
		}
		if suffix := strings.TrimPrefix(last, prefix); stopped && (cutAt == "" || beyond(cutAt, suffix)) {
			cutAt = suffix
		}
	}
	slices.SortFunc(all, func(a, b found) int {
		if desc {
			return strings.Compare(b.suffix, a.suffix)
		}
		return strings.Compare(a.suffix, b.suffix)
	})
	out := &adminpb.ListAuditResponse{Read: ri}
	size, last := 0, ""
	for _, f := range all {
		if cutAt != "" && beyond(f.suffix, cutAt) {
			break // everything up to cutAt is on the page
		}
		if len(out.Records) >= limit || size >= maxAuditPageBytes {
			out.NextPageToken = adminpb.EncodePageToken(kind, last)
			return out
		}
		out.Records = append(out.Records, clipAuditRecord(f.rec))
		size += f.size
		last = f.suffix
	}
	if cutAt != "" {
		out.NextPageToken = adminpb.EncodePageToken(kind, cutAt)
	}
	return out
}
