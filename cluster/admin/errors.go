package admin

import (
	"context"
	"errors"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/adminpb"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
)

// Code maps an error of the procedure, cluster or raft layers to the gRPC
// code the API answers with (see proto/admin.proto):
//
//	procedure.ErrInvalid, ErrUnknownType          INVALID_ARGUMENT
//	procedure.ErrNotFound                         NOT_FOUND
//	procedure.ErrNotAllowed, ErrNotTerminal       FAILED_PRECONDITION
//	cluster.ErrNotLeader, ErrNotReady, ErrShutdown,
//	raft.ErrNotLeader, ErrLeadershipLost, ErrRaftShutdown,
//	procedure.ErrStopped, ErrNotStarted, ErrStoreFailed,
//	ErrNonceFailed, raftfsm.ErrClosed,
//	cluster.ErrStorageFailed                       UNAVAILABLE (retry)
//	context.Canceled / DeadlineExceeded           CANCELED / DEADLINE_EXCEEDED
//	an error that already is a gRPC status        its own code
//	anything else                                 INTERNAL
//
// Availability is checked first: a store failure that happens to wrap
// another sentinel is still a reason to retry elsewhere.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	switch {
	case errors.Is(err, cluster.ErrNotLeader), errors.Is(err, cluster.ErrNotReady),
		errors.Is(err, cluster.ErrShutdown), errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown),
		errors.Is(err, procedure.ErrStopped), errors.Is(err, procedure.ErrNotStarted),
		errors.Is(err, procedure.ErrStoreFailed), errors.Is(err, procedure.ErrNonceFailed),
		errors.Is(err, raftfsm.ErrClosed), errors.Is(err, cluster.ErrStorageFailed):
		return codes.Unavailable
	case errors.Is(err, procedure.ErrInvalid), errors.Is(err, procedure.ErrUnknownType):
		return codes.InvalidArgument
	case errors.Is(err, procedure.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, procedure.ErrNotAllowed), errors.Is(err, procedure.ErrNotTerminal):
		return codes.FailedPrecondition
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	return codes.Internal
}

// toStatus turns err into a gRPC status error. UNAVAILABLE errors carry a
// LeaderHint with what this node knows of the leader.
func (s *Server) toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	c := Code(err)
	if c == codes.Unavailable {
		return s.unavailable(err.Error())
	}
	return status.Error(c, err.Error())
}

// unavailable builds an UNAVAILABLE status with a LeaderHint.
func (s *Server) unavailable(msg string) error {
	st := status.New(codes.Unavailable, msg)
	id, _ := s.b.Leader()
	hint := &adminpb.LeaderHint{LeaderId: id}
	if id != "" {
		hint.LeaderAdminAddress = s.adminAddr(id)
	}
	if d, err := st.WithDetails(hint); err == nil {
		st = d
	}
	return st.Err()
}

// LeaderHintOf extracts the LeaderHint from an UNAVAILABLE error, if any.
func LeaderHintOf(err error) (*adminpb.LeaderHint, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return nil, false
	}
	for _, d := range st.Details() {
		if h, ok := d.(*adminpb.LeaderHint); ok {
			return h, true
		}
	}
	return nil, false
}
