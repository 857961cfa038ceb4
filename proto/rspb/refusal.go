package rspb

import (
	"maps"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A region server's fencing refusals of a batch live beside the wire types
// because both ends need them: the region server attaches the detail, the
// leader's dispatcher reads it.
//
// A refusal is FAILED_PRECONDITION with a message starting "stale term" or
// "wrong start code" (regionserver.proto). A region server newer than 0.1.0 also
// attaches a google.rpc.ErrorInfo detail whose Domain is RefusalDomain,
// whose Reason says which refusal it is, and whose Metadata holds the
// server's own state as decimal strings. The code and message stay as they
// were, so a 0.1.0 master (which reads the message) classifies the refusal
// as before; a master reads the detail first and the message only when
// there is none (a 0.1.0 region server sends none) or its reason is not
// one it knows.
const (
	// RefusalDomain is the ErrorInfo domain of a region server's refusal.
	RefusalDomain = "baton.regionserver"

	// ReasonStaleTerm: the batch's term is below the highest the server
	// has seen; the sender is deposed. Message: "stale term …".
	ReasonStaleTerm = "STALE_TERM"
	// ReasonWrongStartCode: the batch quotes a start code that is not the
	// server's current one (or the server is registering again, then
	// MetaServerStartCode is "0"): the incarnation it was meant for is
	// gone. Message: "wrong start code …".
	ReasonWrongStartCode = "WRONG_START_CODE"
	// ReasonClusterIDMismatch: the server has learned a cluster id and the
	// batch names another or none. To a 0.1.0-era master it is a wrong
	// start code (its message starts so); MetaServerClusterID says which
	// id the server holds.
	ReasonClusterIDMismatch = "CLUSTER_ID_MISMATCH"

	// MetaServerTerm is the highest term the server has seen.
	MetaServerTerm = "serverTerm"
	// MetaServerStartCode is the server's start code ("0": not registered).
	MetaServerStartCode = "serverStartCode"
	// MetaServerClusterID is the cluster id the server holds; absent when
	// it has learned none.
	MetaServerClusterID = "serverClusterId"
)

// Refusal returns a FAILED_PRECONDITION error with message msg carrying an
// ErrorInfo of RefusalDomain with reason and metadata.
func Refusal(reason string, metadata map[string]string, msg string) error {
	st := status.New(codes.FailedPrecondition, msg)
	info := &errdetails.ErrorInfo{Reason: reason, Domain: RefusalDomain, Metadata: maps.Clone(metadata)}
	if d, err := st.WithDetails(info); err == nil {
		// WithDetails fails only on a detail that does not marshal: the
		// message alone is still the refusal a 0.1.0 server would send.
		st = d
	}
	return st.Err()
}

// RefusalInfo returns the ErrorInfo of RefusalDomain that err, a
// FAILED_PRECONDITION status (wrapped or not), carries; nil if it carries
// none (a region server older than the details, or another error).
func RefusalInfo(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == RefusalDomain {
			return info
		}
	}
	return nil
}
