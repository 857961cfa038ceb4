package admin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/security"
)

// memberProbeTimeout bounds each member's answer to a ClusterStatus with
// members: a dead member must cost the caller a moment, not its deadline.
const memberProbeTimeout = time.Second

// ClusterStatus implements adminpb.AdminServer: this node's view, and with
// members each member's own answer.
func (s *Server) ClusterStatus(ctx context.Context, req *adminpb.ClusterStatusRequest) (*adminpb.ClusterStatusResponse, error) {
	out := s.clusterStatus()
	if req.GetMembers() {
		s.probeMembers(ctx, out)
	}
	return out, nil
}

func (s *Server) clusterStatus() *adminpb.ClusterStatusResponse {
	st := s.b.Status()
	ready, why := s.Ready()
	out := &adminpb.ClusterStatusResponse{
		NodeId:            st.ID,
		State:             st.State,
		LeaderId:          st.LeaderID,
		LeaderRaftAddress: st.LeaderAddr,
		Term:              st.Term,
		CommitIndex:       st.CommitIndex,
		AppliedIndex:      st.AppliedIndex,
		FsmIndex:          st.FSMIndex,
		Pid:               int64(os.Getpid()),
		Ready:             ready,
		ReadyReason:       why,
		StorageError:      st.StorageErr,
		LastContactMs:     -1,
		Maintenance:       s.maintenanceOf(),
		Removed:           st.Removed,
		ClusterFormat:     uint32(clusterFormatOf(s.b)),
		ClusterId:         clusterIDOf(s.b.DomainGet),
	}
	self := buildOf(s.b)
	out.Version, out.MaxFormat = self.Version, uint32(self.MaxFormat)
	if l := s.LastSnapshot(); l != nil {
		out.LastSnapshot = &adminpb.LastSnapshot{File: l.File, UnixMs: l.Time.UnixMilli(), Index: l.Index, Bytes: l.Bytes, DurationMs: l.Duration.Milliseconds()}
	}
	switch {
	case st.State == raft.Leader.String():
		out.LastContactMs = 0
	case !st.LastContact.IsZero():
		out.LastContactMs = time.Since(st.LastContact).Milliseconds()
	}
	if !st.LastContact.IsZero() {
		out.LastContactUnixMs = st.LastContact.UnixMilli()
	}
	out.HttpAddress = s.httpAddr(st.ID)
	out.WalSegments, out.WalLiveBytes, out.WalBytesWritten = int64(st.WAL.Segments), st.WAL.LiveBytes, st.WAL.Bytes
	if st.LeaderID != "" {
		out.LeaderAdminAddress = s.adminAddr(st.LeaderID)
		out.LeaderHttpAddress = s.httpAddr(st.LeaderID)
	}
	for _, p := range st.Peers {
		peer := &adminpb.Peer{
			Id:           p.ID,
			RaftAddress:  p.Address,
			AdminAddress: s.adminAddr(p.ID),
			Suffrage:     p.Suffrage,
			Leader:       p.Leader,
			HttpAddress:  s.httpAddr(p.ID),
		}
		rep, _ := cluster.ReadReport(s.b.DomainGet, p.ID)
		peer.Version, peer.MaxFormat = rep.Version, uint32(rep.MaxFormat)
		setProgress(peer, p.Progress, time.Now())
		out.Peers = append(out.Peers, peer)
	}
	return out
}

// setProgress fills peer's leader view from what this leader knows of it
// (nil: this node does not lead, nothing set).
func setProgress(peer *adminpb.Peer, p *cluster.PeerProgress, now time.Time) {
	if p == nil {
		return
	}
	peer.Healthy = proto.Bool(p.Healthy)
	if p.MatchKnown {
		peer.LagEntries = proto.Uint64(p.Lag)
	}
	if !p.LastContact.IsZero() {
		peer.LeaderContactMs = proto.Int64(max(now.Sub(p.LastContact).Milliseconds(), 0))
	}
}

// takeLeaderView copies, into out's peers, the leader's view of each
// (lag, health, contact) from the leader's own answer: a standby that
// answers shows what only the leader knows.
func takeLeaderView(out *adminpb.ClusterStatusResponse, leader *adminpb.ClusterStatusResponse) {
	byID := map[string]*adminpb.Peer{}
	for _, lp := range leader.GetPeers() {
		byID[lp.GetId()] = lp
	}
	for _, p := range out.GetPeers() {
		if lp, ok := byID[p.GetId()]; ok && p.Healthy == nil {
			p.LagEntries, p.Healthy, p.LeaderContactMs = lp.LagEntries, lp.Healthy, lp.LeaderContactMs
		}
	}
}

// AddPeer implements adminpb.AdminServer: the leader adds the node (a
// non-voter the autopilot promotes, at cluster version 2; see
// cluster.Node.Join) and records its admin address, if given. A member removed before
// comes back this way, without a restart (see removed.go). A voter that
// rejoins saying it holds no Raft state (holds_no_state: its disk was
// replaced) is demoted to a non-voter (cluster.Node.JoinEmpty).
func (s *Server) AddPeer(ctx context.Context, req *adminpb.AddPeerRequest) (*adminpb.ClusterStatusResponse, error) {
	if req.GetId() == "" || req.GetRaftAddress() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: add peer: id and raft_address are required")
	}
	return orForward(s, ctx, func() (*adminpb.ClusterStatusResponse, error) {
		if err := s.b.Join(ctx, req.GetId(), req.GetRaftAddress(), req.GetHoldsNoState()); err != nil {
			return nil, err
		}
		muts := s.clearRemovedMark(req.GetId())
		if a := req.GetAdminAddress(); a != "" {
			muts = append(muts, raftfsm.Put(cluster.AdminAddrKey(req.GetId()), []byte(a)))
		}
		if len(muts) > 0 {
			if err := s.b.Mutate(ctx, muts); err != nil {
				return nil, err
			}
		}
		return s.clusterStatus(), nil
	}, relayed(req, adminpb.AdminClient.AddPeer))
}

// RemovePeer implements adminpb.AdminServer: the leader removes the node
// and its registered addresses. Asked to remove itself, it first hands
// leadership to another voter and the call goes on there (Node.RemovePeer),
// so that the answer and the call's audit record come from a leader that
// stays one. An id no longer a member that a removal took out (RemovedKey)
// answers OK with already_removed: the retry of a removal whose answer was
// lost. One that never was a member is NOT_FOUND.
func (s *Server) RemovePeer(ctx context.Context, req *adminpb.RemovePeerRequest) (*adminpb.ClusterStatusResponse, error) {
	if req.GetId() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: remove peer: id is required")
	}
	id := req.GetId()
	ctx = context.WithValue(ctx, removingKey{}, id)
	if id == s.b.ID() {
		// A leader removing itself hands leadership over and the call
		// on: also a call a standby forwarded to it.
		ctx = context.WithValue(ctx, reforwardKey{}, true)
	}
	return orForward(s, ctx, func() (*adminpb.ClusterStatusResponse, error) {
		if s.b.IsLeader() {
			switch member := isMember(s.b.Status(), id); {
			case !member:
				if _, ok := s.b.DomainGet(RemovedKey(id)); ok {
					out := s.clusterStatus()
					out.AlreadyRemoved = true
					return out, nil
				}
			case id == s.b.ID():
				// The leadership transfer stops this leader's writes:
				// let the call's audit record (begun before the
				// handler) commit first, or it would fail.
				auditStarted(ctx, s.audit)
			case clusterFormatOf(s.b) < version.Format2:
				// No mark below cluster version 2 (0.1.0 keeps it
				// through a join, where it would stand for a removal
				// that was undone): a retry after a lost answer is
				// NOT_FOUND, as on 0.1.0.
			default:
				// The mark goes first: a removal that commits with
				// its answer lost is then always taken for one.
				mark, err := s.removedMarkMutation()
				if err != nil {
					return nil, err
				}
				if err := s.b.Mutate(ctx, []raftfsm.Mutation{raftfsm.Put(RemovedKey(id), mark)}); err != nil {
					return nil, err
				}
			}
		}
		if err := s.b.RemovePeer(ctx, id); err != nil {
			if errors.Is(err, cluster.ErrNoQuorum) {
				// Refused before anything changed: id stays a member, and
				// its mark would make a later retry of a removal that
				// never happened read as one that did.
				s.clearMarkOfRefusedRemoval(ctx, id)
			}
			return nil, err
		}
		if err := s.forgetMember(ctx, id); err != nil {
			return nil, err
		}
		return s.clusterStatus(), nil
	}, relayed(req, adminpb.AdminClient.RemovePeer))
}

// forgetMember takes out the records of id, removed from the
// configuration: its registered addresses and report.
func (s *Server) forgetMember(ctx context.Context, id string) error {
	var muts []raftfsm.Mutation
	for _, k := range []string{cluster.AdminAddrKey(id), cluster.HTTPAddrKey(id), adminAddrProvenKey(id), cluster.VersionKey(id)} {
		if _, ok := s.b.DomainGet(k); ok {
			muts = append(muts, raftfsm.Del(k))
		}
	}
	// The configuration no longer has id: the cluster version may
	// rise without it.
	_, err := s.commitWithRaise(ctx, muts, nil)
	return err
}

// removeDeadMember is the leader's autopilot removing a voter that stopped
// answering (cluster.Node.SetMemberRemover): as `cluster remove` does it
// (the removal mark first, at cluster version 2; the member's records
// after), and audited as a RemovePeer call of this master, its message
// saying why.
func (s *Server) removeDeadMember(ctx context.Context, id, why string) (err error) {
	if s.audit != nil {
		defer func() {
			p := access.Principal{Kind: access.KindMaster, ID: s.b.ID(), Perm: security.PermAdmin}
			rec := access.NewRecord(s.acc.Clock.Now(), s.b.ID(), p, "RemovePeer", &adminpb.RemovePeerRequest{Id: id}, nil, err)
			rec.Message = access.Cut("autopilot: "+why+rec.GetMessage(), access.FieldMax)
			if aerr := s.audit.Append(ctx, rec); aerr != nil {
				s.log.Error("audit record of the autopilot's removal not committed", "id", id, "error", aerr)
			}
		}()
	}
	if clusterFormatOf(s.b) >= version.Format2 {
		mark, err := s.removedMarkMutation()
		if err != nil {
			return err
		}
		if err := s.b.Mutate(ctx, []raftfsm.Mutation{raftfsm.Put(RemovedKey(id), mark)}); err != nil {
			return err
		}
	}
	if err := s.b.RemovePeer(ctx, id); err != nil {
		if errors.Is(err, cluster.ErrNoQuorum) {
			s.clearMarkOfRefusedRemoval(ctx, id)
		}
		return err
	}
	return s.forgetMember(ctx, id)
}

// clearMarkOfRefusedRemoval takes back the mark RemovePeer set for id
// (RemovedKey) when the removal was refused. Best effort: the refusal is
// the answer either way, and a mark left behind only matters if id is
// later taken out by other means.
func (s *Server) clearMarkOfRefusedRemoval(ctx context.Context, id string) {
	if _, ok := s.b.DomainGet(RemovedKey(id)); !ok {
		return
	}
	if err := s.b.Mutate(ctx, []raftfsm.Mutation{raftfsm.Del(RemovedKey(id))}); err != nil {
		s.log.Warn("removal refused; its mark stays", "id", id, "error", err)
	}
}

// RegisterNode implements adminpb.AdminServer: the leader records a
// member's admin address, and its HTTP address if given, in the domain
// state.
func (s *Server) RegisterNode(ctx context.Context, req *adminpb.RegisterNodeRequest) (*adminpb.RegisterNodeResponse, error) {
	if req.GetId() == "" || req.GetAdminAddress() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: register node: id and admin_address are required")
	}
	if err := s.admitMasterCall(ctx, "RegisterNode", req.GetId()); err != nil {
		return nil, err
	}
	proven := masterProven(ctx)
	return orForward(s, ctx, func() (*adminpb.RegisterNodeResponse, error) {
		if !s.b.IsLeader() {
			id, addr := s.b.Leader()
			return nil, &cluster.NotLeaderError{LeaderID: id, LeaderAddr: addr}
		}
		var muts []raftfsm.Mutation
		if got, _ := s.b.DomainGet(cluster.AdminAddrKey(req.GetId())); string(got) != req.GetAdminAddress() {
			muts = append(muts, raftfsm.Put(cluster.AdminAddrKey(req.GetId()), []byte(req.GetAdminAddress())))
		}
		if got, _ := s.b.DomainGet(adminAddrProvenKey(req.GetId())); proven && string(got) != req.GetAdminAddress() {
			muts = append(muts, raftfsm.Put(adminAddrProvenKey(req.GetId()), []byte(req.GetAdminAddress())))
		}
		if h := req.GetHttpAddress(); h != "" {
			if got, _ := s.b.DomainGet(cluster.HTTPAddrKey(req.GetId())); string(got) != h {
				muts = append(muts, raftfsm.Put(cluster.HTTPAddrKey(req.GetId()), []byte(h)))
			}
		}
		// The report and the raise it allows in one entry: a reader that
		// sees every member's report sees the cluster version they make.
		rep, pending := s.reportMutations(req.GetId(), version.Build{Version: req.GetVersion(), MaxFormat: version.Format(req.GetMaxFormat())})
		if _, err := s.commitWithRaise(ctx, append(muts, rep...), pending); err != nil {
			return nil, err
		}
		return &adminpb.RegisterNodeResponse{}, nil
	}, relayed(req, adminpb.AdminClient.RegisterNode))
}

// leaderHeardWithin is how recent a member's contact with its leader must
// be for cluster status to trust that a leader stands (on a quorum): a
// few heartbeat timeouts of the defaults, generous for a loaded machine.
const leaderHeardWithin = 2 * time.Second

// probeMembers asks every other member's admin API for its own status, in
// parallel, each within memberProbeTimeout, and counts the voters that
// answered. This node answers for itself. A member is judged by whether
// this node reaches it, which is what a client that reaches this node can
// learn; the member's own answer says whether it hears from the leader.
func (s *Server) probeMembers(ctx context.Context, out *adminpb.ClusterStatusResponse) {
	self := proto.Clone(out).(*adminpb.ClusterStatusResponse)
	self.Peers = nil
	var wg sync.WaitGroup
	// leaderView is the leader's peers, as it answered: written by the
	// one probe of the leader, read after wg.Wait.
	var leaderView []*adminpb.Peer
	for _, p := range out.Peers {
		if p.GetId() == out.GetNodeId() {
			p.Reachable, p.Status = true, self
			continue
		}
		if p.GetAdminAddress() == "" {
			p.Error = "admin address not registered yet (the member has not reached a leader since it started): not asked"
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := s.probeMember(ctx, p.GetId(), p.GetAdminAddress())
			if err != nil {
				p.Error = err.Error()
				return
			}
			if p.GetLeader() && st.GetState() == raft.Leader.String() {
				leaderView = st.GetPeers()
			}
			st.Peers = nil
			p.Reachable, p.Status = true, st
		}()
	}
	wg.Wait()
	if leaderView != nil {
		takeLeaderView(out, &adminpb.ClusterStatusResponse{Peers: leaderView})
	}
	out.MembersProbed = true
	leaderHeard := false
	for _, p := range out.Peers {
		if st := p.GetStatus(); p.GetReachable() && st.GetLeaderId() != "" &&
			st.GetLastContactMs() >= 0 && st.GetLastContactMs() <= leaderHeardWithin.Milliseconds() {
			leaderHeard = true
		}
		if p.GetSuffrage() != raft.Voter.String() {
			continue
		}
		out.Voters++
		switch {
		case p.GetReachable():
			out.VotersReachable++
		case p.GetAdminAddress() == "":
			out.VotersUnknown++
		}
	}
	// A member that has not registered its admin address yet cannot be
	// asked. While a member that answered hears from a leader, it is
	// likely up (a leader stands on a quorum, and the member registers
	// within moments of reaching it), so only members that failed to
	// answer count against a quorum; with no leader heard of, nothing says
	// it ever started, and only the members that answered count.
	counted := out.VotersReachable
	if leaderHeard {
		counted += out.VotersUnknown
	}
	out.Quorum = out.Voters > 0 && counted > out.Voters/2
}

// probeBudget is how long a member probe may take: memberProbeTimeout, or
// half of what the caller's deadline leaves if that is less, so that a
// dead member's silence leaves time to answer about the others (a client
// with --timeout 500ms gets its answer, not UNAVAILABLE).
func probeBudget(ctx context.Context, now time.Time) time.Duration {
	budget := memberProbeTimeout
	if dl, ok := ctx.Deadline(); ok {
		if half := dl.Sub(now) / 2; half < budget {
			budget = max(half, time.Millisecond)
		}
	}
	return budget
}

// probeMember asks the admin API at addr for its own status.
func (s *Server) probeMember(ctx context.Context, id, addr string) (*adminpb.ClusterStatusResponse, error) {
	cc, err := s.conn(id, addr)
	if err != nil {
		return nil, err
	}
	budget := probeBudget(ctx, time.Now())
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	st, err := adminpb.NewAdminClient(cc).ClusterStatus(ctx, &adminpb.ClusterStatusRequest{})
	if err != nil {
		if status.Code(err) == codes.DeadlineExceeded {
			return nil, fmt.Errorf("no answer from %s within %v", addr, budget.Round(time.Millisecond))
		}
		return nil, fmt.Errorf("%s: %s", addr, status.Convert(err).Message())
	}
	return st, nil
}

// conn returns this server's connection to the admin API at addr, node
// id's registered address, shared with forwarding.
func (s *Server) conn(id, addr string) (*grpc.ClientConn, error) {
	proven := s.secretMayGo(id, addr)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errStopping
	}
	cc, err := s.connTo(addr, proven)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	return cc, nil
}
