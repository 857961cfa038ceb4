package admin

import (
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
