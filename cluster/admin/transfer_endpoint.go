package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/proto/adminpb"
)

// leadershipTransferrer is a backend whose node can hand its leadership
// over (cluster.Node.TransferLeadership).
type leadershipTransferrer interface {
	TransferLeadership(ctx context.Context, to string) error
}

// TransferLeadership implements adminpb.AdminServer: `baton cluster
// transfer-leadership`, and the preStop hook of a master's pod, which asks
// with the pod's own certificate for itself.
func (s *Server) TransferLeadership(ctx context.Context, req *adminpb.TransferLeadershipRequest) (*adminpb.TransferLeadershipResponse, error) {
	from, to := req.GetFrom(), req.GetTo()
	// A master's certificate is in every master's pod: it may move its
	// own leadership away (shutting down), not another's. The first
	// master a call reaches judges it: a call another master relays
	// names that master as its principal when the caller held a
	// master's certificate, so the leader takes the relaying master's
	// word, as it does for every principal a master forwards.
	if p, ok := principalOf(ctx); ok && p.Kind == access.KindMaster && from != p.ID && !(isForwarded(ctx) && relayTrusted(ctx)) {
		return nil, status.Errorf(codes.PermissionDenied, "admin: transfer leadership: %s may ask only for itself (--from %s), not for %q; an admin may ask for any member", p, p.ID, from)
	}
	if to != "" && to == from {
		return nil, status.Errorf(codes.InvalidArgument, "admin: transfer leadership: --from and --to are both %q", to)
	}
	if from != "" && !isMember(s.b.Status(), from) {
		// Not "nothing to do": a misspelt id (or a BATON_ID of another
		// cluster) would leave the leader in place unnoticed.
		return nil, status.Errorf(codes.NotFound, "admin: transfer leadership: --from %q is not a member (the members are the ids 'baton cluster status' lists)", from)
	}
	tl, ok := s.b.(leadershipTransferrer)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "admin: this node cannot transfer leadership")
	}
	out := &adminpb.TransferLeadershipResponse{From: from, To: to}
	if done, ok := s.notLeading(from, out); ok {
		return done, nil
	}
	ctx = context.WithValue(ctx, handingOverKey{}, true)
	return orForward(s, ctx, func() (*adminpb.TransferLeadershipResponse, error) {
		if !s.b.IsLeader() {
			if done, ok := s.notLeading(from, out); ok {
				return done, nil
			}
			return nil, fmt.Errorf("admin: transfer leadership: %w", cluster.ErrNotLeader)
		}
		self := s.b.ID()
		if from != "" && from != self {
			out.LeaderId, out.Message = self, fmt.Sprintf("%s does not lead (%s does): nothing to do", from, self)
			return out, nil
		}
		if to == self {
			out.From, out.LeaderId, out.Message = self, self, fmt.Sprintf("%s leads already: nothing to do", self)
			return out, nil
		}
		out.From = self
		// The transfer stops this leader's writes: the call's audit
		// record (begun before the handler) commits first.
		auditStarted(ctx, s.audit)
		if err := tl.TransferLeadership(ctx, to); err != nil {
			if errors.Is(err, cluster.ErrTransferFailed) {
				return nil, status.Errorf(codes.Aborted, "admin: %v; %s still leads", err, self)
			}
			return nil, err
		}
		out.Transferred = true
		leader, err := s.awaitOtherLeader(ctx, self)
		out.LeaderId = leader
		if err != nil {
			out.Message = fmt.Sprintf("%s stepped down; no new leader known yet (%v)", self, err)
			return out, nil
		}
		out.Message = fmt.Sprintf("leadership moved from %s to %s", self, leader)
		return out, nil
	}, relayed(req, adminpb.AdminClient.TransferLeadership))
}

// notLeading answers, without forwarding, a call whose from names a
// member that does not lead as this node knows the leader.
func (s *Server) notLeading(from string, out *adminpb.TransferLeadershipResponse) (*adminpb.TransferLeadershipResponse, bool) {
	leader, _ := s.b.Leader()
	if from == "" || leader == "" || leader == from {
		return nil, false
	}
	return &adminpb.TransferLeadershipResponse{From: out.GetFrom(), To: out.GetTo(), LeaderId: leader,
		Message: fmt.Sprintf("%s does not lead (%s does): nothing to do", from, leader)}, true
}

// awaitOtherLeader returns the leader once this node knows one other than
// self, or fails when ctx ends (or after ForwardTimeout: an election that
// long is not this call's to wait for).
func (s *Server) awaitOtherLeader(ctx context.Context, self string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ForwardTimeout)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if id, _ := s.b.Leader(); id != "" && id != self {
			return id, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-s.stopCh:
			return "", errStopping
		case <-t.C:
		}
	}
}
