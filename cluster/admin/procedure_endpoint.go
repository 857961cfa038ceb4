package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// SubmitProcedure implements adminpb.AdminServer.
func (s *Server) SubmitProcedure(ctx context.Context, req *adminpb.SubmitProcedureRequest) (*adminpb.SubmitProcedureResponse, error) {
	if req.GetType() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: submit: empty procedure type")
	}
	if req.GetTimeoutMs() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "admin: submit: negative timeout_ms %d", req.GetTimeoutMs())
	}
	// Validate here too, so a standby refuses bad input without a trip to
	// the leader.
	p, err := s.cfg.Factory(req.GetType(), req.GetArguments())
	if err != nil {
		return nil, s.toStatus(err)
	}
	timeout, err := msDuration("submit", "timeout_ms", req.GetTimeoutMs())
	if err != nil {
		return nil, err
	}
	return onLeader(s, ctx, func(x Procedures) (*adminpb.SubmitProcedureResponse, error) {
		if err := s.checkSubmissions(x, req.GetOwner(), req.GetNonce()); err != nil {
			return nil, err
		}
		id, err := x.Submit(p, procedure.SubmitOptions{
			Nonce:     req.GetNonce(),
			Owner:     req.GetOwner(),
			Submitter: submitterOf(ctx),
			Timeout:   timeout,
			Mutations: auditMutations(ctx),
		})
		if err != nil {
			return nil, err
		}
		return &adminpb.SubmitProcedureResponse{Id: id}, nil
	}, relayed(req, adminpb.AdminClient.SubmitProcedure))
}

// GetProcedure implements adminpb.AdminServer: the procedure as committed
// (procread.go).
func (s *Server) GetProcedure(ctx context.Context, req *adminpb.GetProcedureRequest) (*adminpb.Procedure, error) {
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.Procedure, error) {
		x, err := s.localExecutor(ri)
		if err != nil {
			return nil, err
		}
		p, info, err := s.storedProcInfo(x, req.GetId())
		if err != nil {
			return nil, err
		}
		p.Data = info.Data
		p.History = historyToProto(info.History)
		p.Read = ri
		return clipData(p), nil
	}, relayed(req, adminpb.AdminClient.GetProcedure))
}

// localExecutor returns this node's executor for a read, or nil where
// there is none and the read is stale (a linearizable read is served by
// the leader, which has one).
func (s *Server) localExecutor(ri *adminpb.ReadInfo) (Procedures, error) {
	x, err := s.b.Procedures()
	if err == nil {
		return x, nil
	}
	if ri.GetConsistency() == adminpb.Consistency_STALE {
		return nil, nil
	}
	return nil, err
}

func (s *Server) getProc(x Procedures, id uint64) (*adminpb.Procedure, error) {
	info, err := x.Get(id)
	if err != nil {
		return nil, err
	}
	return toProto(info, s.whyReason(x, info)), nil
}

func (s *Server) whyReason(x Procedures, info procedure.Info) string {
	why, _ := s.liveWhy(x, info)
	return why
}

// liveWhy is whyReason with how far the procedure is, which the executor
// holds and its record does not: both from one look at the executor.
func (s *Server) liveWhy(x Procedures, info procedure.Info) (string, procedure.Progress) {
	if info.State.Terminal() {
		return "finished", procedure.Progress{}
	}
	w, err := x.WhyUpTo(info.ID, childNoteBreadth)
	if err != nil {
		return "", procedure.Progress{}
	}
	if w.Note != "" {
		return w.Note, w.Progress
	}
	if w.Reason == "waiting for lock" && w.Sched.Lock != nil {
		return "waiting for lock " + w.Sched.Lock.String() + s.heldBy(x, w.Sched.Holders), w.Progress
	}
	if w.Reason == "waiting for children" {
		// A parent's own reason says nothing of what holds it up: name the
		// first descendant that says why it waits.
		if id, note := childNote(x, w.Children, 4); note != "" {
			return fmt.Sprintf("waiting for children: procedure %d: %s", id, note), w.Progress
		}
	}
	return w.Reason, w.Progress
}

// heldBy names who holds a lock a procedure waits for: " held by
// procedure 12 (CreateTable)", or an external lock's holder as its
// acquirer named it; the first holder, and how many others share it.
func (s *Server) heldBy(x Procedures, holders []uint64) string {
	if len(holders) == 0 {
		return ""
	}
	id := holders[0]
	who := fmt.Sprintf(" held by procedure %d", id)
	if info, err := s.lockPartyInfo(x, id); err == nil {
		who += " (" + info.Type + ")"
		if d, err := s.domain(); err == nil {
			if namer, ok := d.(lockHolderNamer); ok {
				if h, ok := namer.LockHolderOf(info); ok {
					who = fmt.Sprintf(" held by external lock %d (holder %s)", id, h.Holder)
				}
			}
		}
	}
	if len(holders) > 1 {
		who += fmt.Sprintf(" and %d more", len(holders)-1)
	}
	return who
}

// childNoteBreadth is how many unfinished children of each procedure
// childNote looks at.
const childNoteBreadth = 64

// childNote finds, depth levels deep at most, the first of the unfinished
// procedures ids whose suspension says why it waits (procedure.Because).
// It looks at a bounded number of them: this runs on every watch poll.
func childNote(x Procedures, ids []uint64, depth int) (uint64, string) {
	if depth == 0 {
		return 0, ""
	}
	for _, id := range ids[:min(len(ids), childNoteBreadth)] {
		w, err := x.WhyUpTo(id, childNoteBreadth)
		if err != nil {
			continue
		}
		if w.Note != "" {
			return id, w.Note
		}
		if len(w.Children) > 0 {
			if cid, note := childNote(x, w.Children, depth-1); note != "" {
				return cid, note
			}
		}
	}
	return 0, ""
}

// ListProcedures implements adminpb.AdminServer. Pages are in ascending id
// order; the page token is the last id of the previous page.
func (s *Server) ListProcedures(ctx context.Context, req *adminpb.ListProceduresRequest) (*adminpb.ListProceduresResponse, error) {
	f := procedure.Filter{Type: req.GetType(), RootsOnly: req.GetRootsOnly(), Owner: req.GetOwner(), Limit: int(req.GetPageSize())}
	after, before := req.GetSubmittedAfterUnixMs(), req.GetSubmittedBeforeUnixMs()
	switch {
	case after < 0 || before < 0:
		return nil, status.Errorf(codes.InvalidArgument, "admin: list: negative submission bound (after %d, before %d)", after, before)
	case after > 0 && before > 0 && before <= after:
		return nil, status.Errorf(codes.InvalidArgument, "admin: list: submitted_before_unix_ms %d is not after submitted_after_unix_ms %d", before, after)
	}
	if after > 0 {
		f.SubmittedAfter = time.UnixMilli(after)
	}
	if before > 0 {
		f.SubmittedBefore = time.UnixMilli(before)
	}
	switch {
	case f.Limit < 0:
		return nil, status.Errorf(codes.InvalidArgument, "admin: list: negative page_size %d", f.Limit)
	case f.Limit == 0:
		f.Limit = DefaultPageSize
	case f.Limit > MaxPageSize:
		f.Limit = MaxPageSize
	}
	if st := strings.TrimSpace(req.GetState()); st != "" {
		state, err := procedure.ParseState(strings.ToUpper(st))
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "admin: list: %v", err)
		}
		f.States = []procedure.State{state}
	}
	beforeID := ^uint64(0)
	if tok := req.GetPageToken(); tok != "" {
		last, err := strconv.ParseUint(tok, 10, 64)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "admin: list: bad page_token %q (pass next_page_token of the previous page)", tok)
		}
		if req.GetNewestFirst() {
			beforeID = last
		} else {
			f.AfterID = last
		}
	}
	return serveRead(s, ctx, req.GetConsistency(), func(ri *adminpb.ReadInfo) (*adminpb.ListProceduresResponse, error) {
		x, err := s.localExecutor(ri)
		if err != nil {
			return nil, err
		}
		procs, err := s.storedProcs(x, f, req.GetNewestFirst(), beforeID)
		if err != nil {
			return nil, err
		}
		out := &adminpb.ListProceduresResponse{Read: ri}
		out.Procedures, out.NextPageToken = procPage(procs, f.Limit)
		return out, nil
	}, relayed(req, adminpb.AdminClient.ListProcedures))
}

// WatchProcedure implements adminpb.AdminServer (see the package doc).
func (s *Server) WatchProcedure(req *adminpb.WatchProcedureRequest, stream grpc.ServerStreamingServer[adminpb.Procedure]) error {
	ctx := stream.Context()
	if _, err := s.b.Procedures(); err != nil {
		if !isNotLeader(err) {
			return s.toStatus(err)
		}
		// No timeout: a watch lasts as long as its procedure runs.
		_, err := forwardCall(s, ctx, 0, func(ctx context.Context, c adminpb.AdminClient) (struct{}, error) {
			ws, err := c.WatchProcedure(ctx, req)
			if err != nil {
				return struct{}{}, err
			}
			for first := true; ; first = false {
				p, err := ws.Recv()
				if err != nil {
					if errors.Is(err, io.EOF) {
						return struct{}{}, nil
					}
					return struct{}{}, err
				}
				if addr, _ := ctx.Value(answeredByKey{}).(string); first && addr != "" {
					// The header goes with the first message: the
					// leader answered.
					nameLeader(stream.Context(), addr)
				}
				if err := stream.Send(p); err != nil {
					return struct{}{}, err
				}
			}
		})
		return err
	}
	// The first state sent is a linearizable read: a deposed leader that
	// still has its executor must not start a watch with what it holds.
	if _, err := s.b.LinearizableRead(ctx); err != nil {
		return s.toStatus(fmt.Errorf("admin: watch %d: %w", req.GetId(), err))
	}
	t := time.NewTicker(s.cfg.WatchInterval)
	defer t.Stop()
	w := &procWatch{s: s, id: req.GetId()}
	for {
		x, err := s.b.Procedures()
		if err != nil {
			return s.toStatus(fmt.Errorf("admin: watch %d: %w", req.GetId(), err))
		}
		p, err := w.poll(x, time.Now())
		if err != nil {
			return err
		}
		if p != nil {
			if err := stream.Send(p); err != nil {
				return err
			}
		}
		if w.ended() {
			return nil
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
	}
}

// watchRecompute is how often a watch recomputes a procedure whose record
// has not changed: its Why and its progress, which its children move
// without a write of its own. A parent of thousands of children costs a
// walk of them (WhyUpTo, childNote) per computation: at every tick, a
// thousand watchers of creates took 43% of a leader's CPU.
const watchRecompute = time.Second

// procWatch is one WatchProcedure stream's view of its procedure: what it
// sent last, and the record that was built from.
type procWatch struct {
	s    *Server
	id   uint64
	last *adminpb.Procedure
	// rec is the committed record last was built from, at computed: while
	// the record is the same, the procedure is computed again only every
	// watchRecompute, for what its children change.
	rec      []byte
	computed time.Time
}

// poll answers the procedure if it changed since the last answer (the
// first poll always answers), nil if not.
func (w *procWatch) poll(x Procedures, now time.Time) (*adminpb.Procedure, error) {
	rec, ok := w.s.b.StoredProcedure(w.id)
	if ok && w.last != nil && bytes.Equal(rec, w.rec) && now.Sub(w.computed) < watchRecompute {
		return nil, nil
	}
	p, err := w.s.storedProc(x, w.id)
	if err != nil {
		if w.last != nil && errors.Is(err, procedure.ErrNotFound) {
			// A child is deleted with its root; it may go between
			// two polls.
			return nil, status.Errorf(codes.NotFound, "admin: watch %d: procedure deleted before a terminal state was seen (children are removed when their root finishes, a crash recovery's as soon as each succeeds; watch the root)", w.id)
		}
		return nil, w.s.toStatus(err)
	}
	w.rec = append(w.rec[:0], rec...)
	w.computed = now
	if w.last != nil && sameProcedure(w.last, p) {
		return nil, nil
	}
	w.last = p
	return p, nil
}

// ended reports whether the last procedure sent is terminal.
func (w *procWatch) ended() bool {
	if w.last == nil {
		return false
	}
	st, _ := procedure.ParseState(w.last.GetState())
	return st.Terminal()
}

func procOp(s *Server, ctx context.Context, req *adminpb.ProcedureRef, op func(Procedures, uint64) error, remote func(context.Context, adminpb.AdminClient) (*adminpb.Procedure, error)) (*adminpb.Procedure, error) {
	return onLeader(s, ctx, func(x Procedures) (*adminpb.Procedure, error) {
		if err := s.actOn(ctx, x, fmt.Sprintf("procedure %d", req.GetId()), req.GetId(), req.GetForce()); err != nil {
			return nil, err
		}
		if err := op(x, req.GetId()); err != nil {
			return nil, err
		}
		return s.getProc(x, req.GetId())
	}, remote)
}

// AbortProcedure implements adminpb.AdminServer.
func (s *Server) AbortProcedure(ctx context.Context, req *adminpb.ProcedureRef) (*adminpb.Procedure, error) {
	return procOp(s, ctx, req, Procedures.Abort, relayed(req, adminpb.AdminClient.AbortProcedure))
}

// PauseProcedure implements adminpb.AdminServer.
func (s *Server) PauseProcedure(ctx context.Context, req *adminpb.ProcedureRef) (*adminpb.Procedure, error) {
	return procOp(s, ctx, req, Procedures.Pause, relayed(req, adminpb.AdminClient.PauseProcedure))
}

// ResumeProcedure implements adminpb.AdminServer.
func (s *Server) ResumeProcedure(ctx context.Context, req *adminpb.ProcedureRef) (*adminpb.Procedure, error) {
	return procOp(s, ctx, req, Procedures.Resume, relayed(req, adminpb.AdminClient.ResumeProcedure))
}

// AckResult implements adminpb.AdminServer.
func (s *Server) AckResult(ctx context.Context, req *adminpb.ProcedureRef) (*adminpb.Procedure, error) {
	return procOp(s, ctx, req, Procedures.Ack, relayed(req, adminpb.AdminClient.AckResult))
}

// toProto converts a procedure snapshot.
func toProto(info procedure.Info, waitingFor string) *adminpb.Procedure {
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMilli()
	}
	var progress *adminpb.ProcedureProgress
	if pr := info.Progress; pr.Unit != "" && !info.State.Terminal() {
		progress = &adminpb.ProcedureProgress{Done: pr.Done, Total: pr.Total, Unit: pr.Unit}
	}
	return clipProcedure(&adminpb.Procedure{
		Progress:        progress,
		Id:              info.ID,
		ParentId:        info.ParentID,
		RootId:          info.RootID,
		Type:            info.Type,
		State:           info.State.String(),
		Owner:           info.Owner,
		Nonce:           info.Nonce,
		SubmittedUnixMs: ms(info.Submitted),
		UpdatedUnixMs:   ms(info.Updated),
		FinishedUnixMs:  ms(info.Finished),
		Error:           info.Error,
		ErrorCode:       info.ErrorCode,
		Result:          info.Result,
		Paused:          info.Paused,
		AbortRequested:  info.AbortRequested,
		Children:        info.Children,
		WaitingFor:      waitingFor,
		Runs:            runsToProto(info.Runs),
		RollingBack:     info.RollingBack,
		StackDepth:      int32(info.StackDepth),
		SummaryOnly:     info.SummaryOnly,
		SubmittedBy:     info.Submitter,
	}, false)
}

func historyToProto(h []procedure.Transition) []*adminpb.ProcedureTransition {
	out := make([]*adminpb.ProcedureTransition, 0, len(h))
	for _, t := range h {
		out = append(out, &adminpb.ProcedureTransition{
			State: t.State.String(), Step: t.Step, Depth: t.Depth, Node: t.Node,
			AtUnixMs: t.At.UnixMilli(), UntilUnixMs: t.Until.UnixMilli(), Writes: t.Writes,
			Attempt: t.Attempt, RollingBack: t.RollingBack,
		})
	}
	return out
}

func runsToProto(runs []procedure.Run) []*adminpb.ProcedureRun {
	out := make([]*adminpb.ProcedureRun, 0, len(runs))
	for _, r := range runs {
		out = append(out, &adminpb.ProcedureRun{Node: r.Node, FirstWrite: r.First, LastWrite: r.Last,
			StartedUnixMs: r.At.UnixMilli(), LastUnixMs: r.Until.UnixMilli()})
	}
	return out
}

// sameProcedure is proto.Equal for two states of one procedure, with the
// children compared as the slice of ids they are: reflection over the
// 10,000 children of a big create, every poll of every watch, was 3% of a
// 1 M-region leader's CPU. Both messages are the caller's own (a message
// is encoded by the time stream.Send returns), so their children are set
// aside for the comparison of the rest.
func sameProcedure(a, b *adminpb.Procedure) bool {
	if !slices.Equal(a.GetChildren(), b.GetChildren()) {
		return false
	}
	ac, bc := a.Children, b.Children
	a.Children, b.Children = nil, nil
	eq := proto.Equal(a, b)
	a.Children, b.Children = ac, bc
	return eq
}
