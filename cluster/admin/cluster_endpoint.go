package admin

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// ClusterStatus implements adminpb.AdminServer: this node's view.
func (s *Server) ClusterStatus(ctx context.Context, _ *adminpb.ClusterStatusRequest) (*adminpb.ClusterStatusResponse, error) {
	return s.clusterStatus(), nil
}

func (s *Server) clusterStatus() *adminpb.ClusterStatusResponse {
	st := s.b.Status()
	out := &adminpb.ClusterStatusResponse{
		NodeId:            st.ID,
		State:             st.State,
		LeaderId:          st.LeaderID,
		LeaderRaftAddress: st.LeaderAddr,
		Term:              st.Term,
		CommitIndex:       st.CommitIndex,
		AppliedIndex:      st.AppliedIndex,
		FsmIndex:          st.FSMIndex,
	}
	if st.LeaderID != "" {
		out.LeaderAdminAddress = s.adminAddr(st.LeaderID)
	}
	for _, p := range st.Peers {
		out.Peers = append(out.Peers, &adminpb.Peer{
			Id:           p.ID,
			RaftAddress:  p.Address,
			AdminAddress: s.adminAddr(p.ID),
			Suffrage:     p.Suffrage,
			Leader:       p.Leader,
		})
	}
	return out
}

// AddPeer implements adminpb.AdminServer: the leader adds the node as a
// voter and records its admin address, if given.
func (s *Server) AddPeer(ctx context.Context, req *adminpb.AddPeerRequest) (*adminpb.ClusterStatusResponse, error) {
	if req.GetId() == "" || req.GetRaftAddress() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: add peer: id and raft_address are required")
	}
	return orForward(s, ctx, func() (*adminpb.ClusterStatusResponse, error) {
		if err := s.b.Join(ctx, req.GetId(), req.GetRaftAddress()); err != nil {
			return nil, err
		}
		if a := req.GetAdminAddress(); a != "" {
			if err := s.b.Mutate(ctx, []raftfsm.Mutation{raftfsm.Put(cluster.AdminAddrKey(req.GetId()), []byte(a))}); err != nil {
				return nil, err
			}
		}
		return s.clusterStatus(), nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.ClusterStatusResponse, error) {
		return c.AddPeer(ctx, req)
	})
}

// RemovePeer implements adminpb.AdminServer: the leader removes the node
// and its registered admin address.
func (s *Server) RemovePeer(ctx context.Context, req *adminpb.RemovePeerRequest) (*adminpb.ClusterStatusResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: remove peer: id is required")
	}
	return orForward(s, ctx, func() (*adminpb.ClusterStatusResponse, error) {
		if err := s.b.RemovePeer(ctx, req.GetId()); err != nil {
			return nil, err
		}
		if _, ok := s.b.DomainGet(cluster.AdminAddrKey(req.GetId())); ok {
			if err := s.b.Mutate(ctx, []raftfsm.Mutation{raftfsm.Del(cluster.AdminAddrKey(req.GetId()))}); err != nil {
				return nil, err
			}
		}
		return s.clusterStatus(), nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.ClusterStatusResponse, error) {
		return c.RemovePeer(ctx, req)
	})
}

// RegisterNode implements adminpb.AdminServer: the leader records a
// member's admin address in the domain state.
func (s *Server) RegisterNode(ctx context.Context, req *adminpb.RegisterNodeRequest) (*adminpb.RegisterNodeResponse, error) {
	if req.GetId() == "" || req.GetAdminAddress() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: register node: id and admin_address are required")
	}
	return orForward(s, ctx, func() (*adminpb.RegisterNodeResponse, error) {
		if !s.b.IsLeader() {
			id, addr := s.b.Leader()
			return nil, &cluster.NotLeaderError{LeaderID: id, LeaderAddr: addr}
		}
		if got, _ := s.b.DomainGet(cluster.AdminAddrKey(req.GetId())); string(got) == req.GetAdminAddress() {
			return &adminpb.RegisterNodeResponse{}, nil
		}
		if err := s.b.Mutate(ctx, []raftfsm.Mutation{raftfsm.Put(cluster.AdminAddrKey(req.GetId()), []byte(req.GetAdminAddress()))}); err != nil {
			return nil, err
		}
		return &adminpb.RegisterNodeResponse{}, nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.RegisterNodeResponse, error) {
		return c.RegisterNode(ctx, req)
	})
}
