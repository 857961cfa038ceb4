package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// The audit trail's calls and its part in the interceptors: the trail
// itself (numbering, batching, pruning, its keys and records) is
// access.Trail's. A call is recorded where it was served or refused: the
// leader, or a standby that refused it or could not forward it (its
// record goes to the leader by AppendAudit); a standby that forwarded a
// call leaves its record to the leader. The call is answered only once
// its record is committed.

// auditNoteKey carries a call's auditNote through its handler.
type auditNoteKey struct{}

// auditNote tells the access interceptor that a call was answered by the
// leader it was forwarded to, which recorded it; and tells the handler of
// the record begun as the call started, if any (start).
type auditNote struct {
	remote atomic.Bool
	start  *auditStart
	carry  *auditCarry
}

// auditCarry is the record of a submission the leader serves, carried in
// the submission's own Raft entry: one entry commits both, so the answer
// waits for one commit, and neither commits without the other. It is
// finished as the entry is proposed, the procedure's id known: the
// carrying (access.Trail.CarryPrepared) adds the id to the record
// prepared as the call started, under the node's Sequencer, so it does
// nothing slower (once: a store asks for a write's late mutations at most
// once).
type auditCarry struct {
	trail    *access.Trail
	prepared *access.Prepared

	mu   sync.Mutex
	rec  *adminpb.AuditRecord // as carried; nil: not carried
	done func(error)          // access.Trail.CarryPrepared's
	// grouped: carried as a placeholder, so written in a group
	// (access.AuditRecordGroup), not under a key of its own.
	grouped bool
}

// mutations is procedure.SubmitOptions.Mutations: the record of the
// submission of procedure id, numbered.
func (c *auditCarry) mutations(id uint64) []store.Mutation {
	muts, done, ok := c.trail.CarryPrepared(c.prepared, id)
	rec := c.prepared.Record()
	if !ok {
		return nil
	}
	out := make([]store.Mutation, len(muts))
	grouped := false
	for i, m := range muts {
		out[i] = store.Mutation{Key: m.Key, Value: m.Value, Delete: m.Op == raftfsm.OpDelete}
		grouped = grouped || strings.HasPrefix(m.Key, raftfsm.PlaceholderPrefix)
	}
	c.mu.Lock()
	c.rec, c.done, c.grouped = rec, done, grouped
	c.mu.Unlock()
	return out
}

// carried is the record carried, if one was, once the call's handler
// returned err: a carried record then committed if and only if err is
// nil (the submission's answer is its entry's outcome).
// grouped says it was written in a group.
func (c *auditCarry) carried(err error) (rec *adminpb.AuditRecord, grouped bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	rec, done, grouped := c.rec, c.done, c.grouped
	c.mu.Unlock()
	if done != nil {
		done(err)
	}
	return rec, grouped
}

// auditMutations is what a submission served for ctx's call gives
// procedure.SubmitOptions.Mutations: its audit record, where the
// interceptor has it carried (nil: it records the call itself).
func auditMutations(ctx context.Context) func(id uint64) []store.Mutation {
	if n, ok := ctx.Value(auditNoteKey{}).(*auditNote); ok && n.carry != nil {
		return n.carry.mutations
	}
	return nil
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

// auditRecord is the record of a call of method by p, where it came
// from included.
func (s *Server) auditRecord(ctx context.Context, p access.Principal, method string, req, resp any, err error) *adminpb.AuditRecord {
	newRecord := access.NewRecord
	if s.audit.KeepsRequests() {
		newRecord = access.NewRequestRecord
	}
	rec := newRecord(s.acc.Clock.Now(), s.b.ID(), p, method, req, resp, err)
	rec.Peer, rec.Via = callOrigin(ctx)
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
	}, relayed(req, adminpb.AdminClient.AppendAudit))
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
		// Sent again when nothing was done of it: not sent, or refused
		// by a master that does not lead (which records nothing of an
		// AppendAudit). Not once this node leads: it forwards nothing to
		// itself, and its trail writes them as the leader's.
		var ur *unreachableLeader
		if err == nil || !errors.As(err, &ur) || !ur.unsent && !ur.unserved {
			return err
		}
		if s.b.IsLeader() {
			return fmt.Errorf("%w (%w)", access.ErrLeading, err)
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
		Format: func() version.Format { return clusterFormatOf(s.b) },
	})
}

// ListAudit implements adminpb.AdminServer.
func (s *Server) ListAudit(ctx context.Context, req *adminpb.ListAuditRequest) (*adminpb.ListAuditResponse, error) {
	if err := checkPageSize("list audit", req.GetPageSize()); err != nil {
		return nil, err
	}
	limit := pageSizeOr(req.GetPageSize(), DefaultPageSize, MaxPageSize)
	kind := access.PageToken
	if req.GetNewestFirst() {
		kind = access.DescPageToken
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
		out := access.ListPage(auditPages{sc}, req, after, limit)
		out.Read = ri
		for _, r := range out.Records {
			clipAuditRecord(r)
		}
		return out, nil
	}, relayed(req, adminpb.AdminClient.ListAudit))
}

// auditPages is an auditScanner as access.ListPage walks it.
type auditPages struct{ sc auditScanner }

func (p auditPages) ScanFrom(prefix, after string, fn func(string, []byte) bool) {
	p.sc.DomainScanFrom(prefix, after, fn)
}

func (p auditPages) ScanBefore(prefix, before string, fn func(string, []byte) bool) {
	p.sc.DomainScanBefore(prefix, before, fn)
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
