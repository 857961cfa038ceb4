package admin

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/proto/adminpb"
)

// Code maps an error to the gRPC code the API answers with; it is
// cluster.Code, kept here for the API's callers.
func Code(err error) codes.Code { return cluster.Code(err) }

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
	id, _ := s.b.Leader()
	addr := ""
	if id != "" {
		addr = s.adminAddr(id)
	}
	return Unavailable(msg, id, addr)
}

// Unavailable builds the UNAVAILABLE status a master that cannot serve a
// call answers with, carrying an adminpb.LeaderHint naming what it knows
// of the leader (its id and admin address, empty if unknown), which
// clients and region servers follow. The domain's region server service
// answers with it too (domain.RegisterMasterService).
func Unavailable(msg, leaderID, leaderAdminAddr string) error {
	st := status.New(codes.Unavailable, msg)
	hint := &adminpb.LeaderHint{LeaderId: leaderID, LeaderAdminAddress: leaderAdminAddr}
	if d, err := st.WithDetails(hint); err == nil {
		st = d
	}
	return st.Err()
}

// A master that is not the leader refuses a call another master forwarded
// to it (it forwards no call twice). It refuses it before doing anything
// of it, which the master that forwarded it cannot tell from the answer
// alone: UNAVAILABLE with a LeaderHint is also what a leader deposed while
// serving a call answers, and that call may have committed. Such a
// refusal carries, beside the code, message and hint 0.1.0 sends, an
// ErrorInfo of UnservedDomain, where the master knows it did none of what
// the call asks (onLeader): it may have recorded the call, its refusal
// included, in the audit trail, as a master records every audited call it
// answers. A standby sends its own audit records again on it, once it
// sees a leader to take them (sendAudit): they were lost when the leader
// it took had stepped down a moment before. A 0.1.0 master answers
// without the mark, and its refusals stay final. A client's call is not
// sent again: the refusing master recorded its refusal, and the client,
// told so, decides.
const (
	// UnservedDomain is the ErrorInfo domain of a master's refusal that
	// says it did none of what the call asks.
	UnservedDomain = "baton.admin"
	// ReasonForwardedToNonLeader: the call came forwarded to a master
	// that is not (or no longer, or not yet) the leader.
	ReasonForwardedToNonLeader = "FORWARDED_TO_NON_LEADER"
)

// markUnserved adds to err, an UNAVAILABLE status, the detail saying the
// master answering it did none of what the call asks (UnservedDomain).
func markUnserved(err error) error {
	st := status.Convert(err)
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Domain: UnservedDomain, Reason: ReasonForwardedToNonLeader}); derr == nil {
		st = d
	}
	return st.Err()
}

// withoutUnserved is err, a status, without its unserved mark.
func withoutUnserved(err error) error {
	st := status.Convert(err)
	p := st.Proto()
	kept := p.Details[:0]
	for _, d := range p.GetDetails() {
		var info errdetails.ErrorInfo
		if d.UnmarshalTo(&info) == nil && isUnservedMark(&info) {
			continue
		}
		kept = append(kept, d)
	}
	p.Details = kept
	return status.FromProto(p).Err()
}

// Unserved says err, an answer of a master, is an UNAVAILABLE refusal of
// a call that master did none of (UnservedDomain).
func Unserved(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && isUnservedMark(info) {
			return true
		}
	}
	return false
}

// isUnservedMark says info is the mark markUnserved adds.
func isUnservedMark(info *errdetails.ErrorInfo) bool {
	return info.GetDomain() == UnservedDomain && info.GetReason() == ReasonForwardedToNonLeader
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
