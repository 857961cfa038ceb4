package admin

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// Reads (see proto/adminpb/admin.proto for the guarantees of each consistency).
//
// A linearizable read is served by the leader after
// Backend.LinearizableRead: a standby, or a leader that finds it is no
// longer one, forwards it (once: a forwarded read that reaches a
// non-leader answers UNAVAILABLE). It is never answered from a standby's
// state, nor from a leader's that a quorum did not confirm after the read
// arrived. A stale read is answered from the local state at once.

// readInfo converts the cluster layer's description of a read.
func readInfo(ri cluster.ReadInfo) *adminpb.ReadInfo {
	out := &adminpb.ReadInfo{
		ServedBy:           ri.ServedBy,
		AppliedIndex:       ri.AppliedIndex,
		Consistency:        adminpb.Consistency_STALE,
		RaftState:          ri.RaftState,
		Term:               ri.Term,
		LeaderContactAgeMs: ri.LeaderContactAge.Milliseconds(),
	}
	if ri.LeaderContactAge < 0 {
		out.LeaderContactAgeMs = -1
	}
	if ri.Linearizable {
		out.Consistency = adminpb.Consistency_LINEARIZABLE
	}
	return out
}

// checkConsistency refuses a consistency this server does not know (a
// newer client's), rather than serving it at a weaker one.
func checkConsistency(c adminpb.Consistency) error {
	switch c {
	case adminpb.Consistency_LINEARIZABLE, adminpb.Consistency_STALE:
		return nil
	}
	return procedure.Errorf(procedure.ErrInvalid, "unknown read consistency %d", int32(c))
}

// domainRead is serveRead of this node's domain: local is given it, and a
// node that serves no domain refuses the call before any read.
func domainRead[T any](s *Server, ctx context.Context, c adminpb.Consistency,
	local func(Domain, *adminpb.ReadInfo) (T, error),
	remote func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	d, err := s.domain()
	if err != nil {
		var zero T
		return zero, err
	}
	return serveRead(s, ctx, c, func(ri *adminpb.ReadInfo) (T, error) { return local(d, ri) }, remote)
}

// serveRead answers a read at consistency c: local reads this node's state
// and returns the answer to which it attaches the ReadInfo; remote
// forwards the read to the leader.
func serveRead[T any](s *Server, ctx context.Context, c adminpb.Consistency,
	local func(*adminpb.ReadInfo) (T, error),
	remote func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	var zero T
	if err := checkConsistency(c); err != nil {
		return zero, s.toStatus(err)
	}
	if c == adminpb.Consistency_STALE {
		v, err := local(readInfo(s.b.ReadState()))
		if err != nil {
			return zero, s.toStatus(err)
		}
		return v, nil
	}
	// Forwarded, the read may go in bulk with others (forward_reads.go).
	fctx := context.WithValue(ctx, batchReadKey{}, true)
	return heldCall(s, fctx, func() (v T, served bool, err error) {
		ri, err := s.linearizableRead(ctx)
		if err != nil {
			return v, false, err
		}
		v, err = local(readInfo(ri))
		return v, true, err
	}, remote)
}

// serveLeaderRead is serveRead for state only the leader holds (its
// executor, its lease view): a stale read skips the quorum round but is
// still served by the leader, forwarded from a standby.
func serveLeaderRead[T any](s *Server, ctx context.Context, c adminpb.Consistency,
	local func(*adminpb.ReadInfo) (T, error),
	remote func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	var zero T
	if c != adminpb.Consistency_STALE {
		return serveRead(s, ctx, c, local, remote)
	}
	if err := checkConsistency(c); err != nil {
		return zero, s.toStatus(err)
	}
	return heldCall(s, ctx, func() (v T, served bool, err error) {
		if !s.b.IsLeader() {
			return v, false, cluster.ErrNotLeader
		}
		v, err = serveRead(s, ctx, c, local, remote)
		return v, true, err
	}, remote)
}

// staleLeaderAsk bounds a stale read's question to the leader in
// serveLeaderReadOr: the leader a standby still names may be gone (paused,
// cut off) until the standby's election timeout says so, and a stale read
// must not wait for that. A live leader answers in milliseconds.
const staleLeaderAsk = 500 * time.Millisecond

// serveLeaderReadOr is serveLeaderRead whose stale reads do not depend on
// a leader: a standby asks the leader it knows (at most staleLeaderAsk),
// and answers with recorded, what its own replicated state holds without
// the leader's view, when it knows none or the leader does not answer.
// The README promises that a stale read works without a quorum.
func serveLeaderReadOr[T any](s *Server, ctx context.Context, c adminpb.Consistency,
	local func(*adminpb.ReadInfo) (T, error),
	recorded func(*adminpb.ReadInfo) (T, error),
	remote func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	var zero T
	if c != adminpb.Consistency_STALE || s.b.IsLeader() {
		return serveLeaderRead(s, ctx, c, local, remote)
	}
	if _, _, _, err := s.leaderClient(ctx); err == nil {
		actx, cancel := context.WithTimeout(ctx, staleLeaderAsk)
		v, err := forwardCall(s, actx, 0, remote)
		cancel()
		switch code := status.Code(err); {
		case err == nil:
			return v, nil
		case ctx.Err() != nil:
			return zero, status.FromContextError(ctx.Err()).Err()
		case code != codes.Unavailable && code != codes.DeadlineExceeded && code != codes.Canceled:
			return zero, err // the leader's own answer (a bad page token, ...)
		}
		s.log.Debug("stale read: the leader did not answer; answering from the recorded state", "error", err)
	}
	if s.b.IsLeader() { // it became the leader meanwhile
		return serveLeaderRead(s, ctx, c, local, remote)
	}
	v, err := recorded(readInfo(s.b.ReadState()))
	if err != nil {
		return zero, s.toStatus(err)
	}
	return v, nil
}
