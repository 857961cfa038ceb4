package cluster

import (
	"context"
	"errors"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
)

// Code maps an error of the procedure, cluster or raft layers to the gRPC
// code a master answers with (see proto/adminpb/admin.proto):
//
//	procedure.ErrInvalid, ErrUnknownType          INVALID_ARGUMENT
//	procedure.ErrNotFound                         NOT_FOUND
//	procedure.ErrNotAllowed, ErrNotTerminal,
//	cluster.ErrLastVoter, ErrNoQuorum             FAILED_PRECONDITION
//	cluster.ErrNotLeader, ErrNotReady, ErrShutdown,
//	raft.ErrNotLeader, ErrLeadershipLost, ErrRaftShutdown,
//	procedure.ErrStopped, ErrNotStarted, ErrStoreFailed,
//	ErrNonceFailed, raftfsm.ErrClosed,
//	cluster.ErrStorageFailed, ErrTransferFailed    UNAVAILABLE (retry)
//	context.Canceled / DeadlineExceeded           CANCELED / DEADLINE_EXCEEDED
//	an error that already is a gRPC status        its own code
//	anything else                                 INTERNAL
//
// Availability is checked first: a store failure that happens to wrap
// another sentinel is still a reason to retry elsewhere. It lives here,
// below every gRPC service a master serves, so they all answer alike.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	switch {
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrNotReady),
		errors.Is(err, ErrShutdown), errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown),
		errors.Is(err, procedure.ErrStopped), errors.Is(err, procedure.ErrNotStarted),
		errors.Is(err, procedure.ErrStoreFailed), errors.Is(err, procedure.ErrNonceFailed),
		errors.Is(err, raftfsm.ErrClosed), errors.Is(err, ErrStorageFailed),
		errors.Is(err, ErrTransferFailed):
		return codes.Unavailable
	case errors.Is(err, procedure.ErrInvalid), errors.Is(err, procedure.ErrUnknownType):
		return codes.InvalidArgument
	case errors.Is(err, procedure.ErrNotFound), errors.Is(err, ErrUnknownPeer):
		return codes.NotFound
	case errors.Is(err, procedure.ErrNotAllowed), errors.Is(err, procedure.ErrNotTerminal),
		errors.Is(err, ErrLastVoter), errors.Is(err, ErrNoQuorum):
		return codes.FailedPrecondition
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	return codes.Internal
}
