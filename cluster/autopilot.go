package cluster

// The autopilot, after Consul's: members that manage themselves.
//
// A member joins as a non-voter (Join, at cluster version 2): it receives
// the log but does not count towards a quorum, so a new member that is
// slow to catch up, or dies while it does, never holds back commits or
// elections. The leader promotes it to voter once it has been healthy
// (answering the leader, its log at most MaxTrailingLogs entries behind)
// for ServerStabilizationTime without a break. With DeadMemberTimeout set,
// a voter silent for longer than it is removed once MinQuorum other
// voters are healthy, so the voters never fall below MinQuorum.
//
// Only the leader runs it, from what it learns itself (contactTracker):
// no probe of the members, and nothing lasts past its leadership (a new
// leader starts every stabilization afresh, as Consul's does).

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/version"
)

// PeerProgress is what the leader knows of a member: how far its log
// reaches and when it last answered.
type PeerProgress struct {
	// MatchIndex is the highest index the member is known to hold;
	// MatchKnown is false until the leader learned one in its term.
	MatchIndex uint64
	MatchKnown bool
	// Lag is the leader's last index less MatchIndex (0 when unknown).
	Lag uint64
	// LastContact is when the newest request the member accepted was
	// sent; zero if none in this process's life.
	LastContact time.Time
	// Healthy: the member answered within healthyContactWithin and its
	// log is at most MaxTrailingLogs entries behind.
	Healthy bool
}

// healthyContactWithin is how recent a member's last answer must be for
// the leader to count it healthy: two heartbeat timeouts, twenty
// heartbeats, lenient to a loaded machine yet well under a failover.
func (n *Node) healthyContactWithin() time.Duration { return 2 * n.cfg.HeartbeatTimeout }

// progressOf is what this node, leading in term with lastIndex, knows of
// id at now.
func (n *Node) progressOf(id raft.ServerID, term, lastIndex uint64, now time.Time) PeerProgress {
	if id == raft.ServerID(n.cfg.ID) {
		return PeerProgress{MatchIndex: lastIndex, MatchKnown: true, LastContact: now, Healthy: true}
	}
	match, known, acked := n.contact.progress(id, term)
	p := PeerProgress{MatchIndex: match, MatchKnown: known, LastContact: acked}
	if known && lastIndex > match {
		p.Lag = lastIndex - match
	}
	p.Healthy = known && p.Lag <= n.cfg.MaxTrailingLogs && !acked.IsZero() && now.Sub(acked) <= n.healthyContactWithin()
	return p
}

// joinsAsNonvoter says whether Join adds a non-voter: the autopilot is on,
// and every member runs a binary that promotes (cluster version 2: a
// 0.1.0 leader would leave a non-voter one for good).
func (n *Node) joinsAsNonvoter() bool {
	return n.cfg.ServerStabilizationTime >= 0 && n.ClusterFormat() >= version.Format2
}

// autopilotState is the leader's memory between ticks: since when each
// member has been healthy without a break.
type autopilotState struct {
	healthySince map[raft.ServerID]time.Time
	leadingSince time.Time
}

// autopilotMember is one member of the configuration as a tick sees it.
type autopilotMember struct {
	Server   raft.Server
	Progress PeerProgress
}

// autopilotPlan is what one tick does: at most one promotion and at most
// one removal (each a configuration change; the next tick sees its
// result).
type autopilotPlan struct {
	Promote *raft.Server
	Remove  *raft.Server
	Why     string // the removal's reason, for the log and the audit
}

// autopilotLimits are the settings a plan follows.
type autopilotLimits struct {
	Stabilization time.Duration
	DeadAfter     time.Duration // 0: no removal
	MinQuorum     int
	Self          raft.ServerID
}

// plan decides a tick at now. It updates st.healthySince.
func (st *autopilotState) plan(now time.Time, members []autopilotMember, lim autopilotLimits) autopilotPlan {
	var out autopilotPlan
	seen := map[raft.ServerID]bool{}
	for _, m := range members {
		id := m.Server.ID
		seen[id] = true
		// Only a non-voter's health counts toward its promotion: a voter
		// demoted for rejoining with no raft state (JoinEmpty) waits the
		// whole stabilization time again, from its demotion on.
		if !m.Progress.Healthy || m.Server.Suffrage != raft.Nonvoter {
			delete(st.healthySince, id)
			continue
		}
		since, ok := st.healthySince[id]
		if !ok {
			since = now
			st.healthySince[id] = now
		}
		if out.Promote == nil && lim.Stabilization >= 0 && now.Sub(since) >= lim.Stabilization {
			srv := m.Server
			out.Promote = &srv
		}
	}
	for id := range st.healthySince {
		if !seen[id] {
			delete(st.healthySince, id)
		}
	}
	if lim.DeadAfter <= 0 {
		return out
	}
	healthyVoters := 0
	for _, m := range members {
		if m.Server.Suffrage == raft.Voter && m.Progress.Healthy {
			healthyVoters++
		}
	}
	for _, m := range members {
		if m.Server.Suffrage != raft.Voter || m.Server.ID == lim.Self || m.Progress.Healthy {
			continue
		}
		// Silent since its last answer, or since this leader began if it
		// never answered this one.
		last := m.Progress.LastContact
		if last.Before(st.leadingSince) {
			last = st.leadingSince
		}
		if now.Sub(last) <= lim.DeadAfter {
			continue
		}
		if healthyVoters < lim.MinQuorum {
			continue // no replacement ready: it stays until one is
		}
		srv := m.Server
		out.Remove = &srv
		out.Why = fmt.Sprintf("no answer to the leader for %v (dead-member timeout %v); %d other voters healthy (min quorum %d)",
			now.Sub(last).Round(time.Millisecond), lim.DeadAfter, healthyVoters, lim.MinQuorum)
		break
	}
	return out
}

// autopilotInterval is how often the leader looks: every HealthInterval,
// or a fifth of the stabilization time if that is shorter (tests). A
// stabilization time of (almost) none, or none at all (non-voter joins
// off), does not speed the looks up: each builds every member's health
// and may write, and 200 a second would be work for nothing.
func (n *Node) autopilotInterval() time.Duration {
	const floor = 5 * time.Millisecond
	iv := n.cfg.HealthInterval
	if fifth := n.cfg.ServerStabilizationTime / 5; fifth >= floor && fifth < iv {
		iv = fifth
	}
	return max(iv, floor)
}

// SetMemberRemover makes fn the autopilot's way to remove a dead member:
// the admin server's, which takes the member's records out and audits the
// removal as a `cluster remove`. Without one the node removes it from
// the configuration alone (RemovePeer).
func (n *Node) SetMemberRemover(fn func(ctx context.Context, id, why string) error) {
	n.mu.Lock()
	n.memberRemover = fn
	n.mu.Unlock()
}

// autopilotCluster is what the autopilot reads and changes: the node's
// own raft in production (nodeAutopilot), a fake in the tests of the
// loop's timing.
type autopilotCluster interface {
	// look is the configuration's members with what this node knows of
	// them at now; ok is false while this node does not lead.
	look(ctx context.Context, now time.Time) (members []autopilotMember, ok bool, err error)
	// promote makes srv, a non-voter of servers (the configuration
	// looked at), a voter.
	promote(ctx context.Context, servers []raft.Server, srv raft.Server) error
	// remove takes srv, a dead voter, out of the cluster for why.
	remove(ctx context.Context, srv raft.Server, why string) error
}

// autopilot is one leadership's autopilot: the loop and what it follows.
type autopilot struct {
	cl       autopilotCluster
	clk      clock.Clock
	interval time.Duration
	lim      autopilotLimits
	stats    *autopilotStats
	log      hclog.Logger
}

// autopilot is n's autopilot for the term it leads.
func (n *Node) autopilot() *autopilot {
	return &autopilot{
		cl: nodeAutopilot{n}, clk: n.cfg.Clock, interval: n.autopilotInterval(),
		lim: autopilotLimits{
			Stabilization: n.cfg.ServerStabilizationTime, DeadAfter: n.cfg.DeadMemberTimeout,
			MinQuorum: n.cfg.MinQuorum, Self: raft.ServerID(n.cfg.ID),
		},
		stats: &n.autopilotStats, log: n.log,
	}
}

// autopilotLoop runs while this node leads (leaderLoop), until ctx ends.
func (n *Node) autopilotLoop(ctx context.Context) { n.autopilot().run(ctx) }

// autopilotTick looks once, at now, and makes the plan's changes.
func (n *Node) autopilotTick(ctx context.Context, st *autopilotState, now time.Time) error {
	return n.autopilot().tick(ctx, st, now)
}

// run looks every interval until ctx ends. The interval is counted from
// the end of a look (a promotion waits up to two heartbeat timeouts for
// the member to answer), so looks never pile up.
func (a *autopilot) run(ctx context.Context) {
	defer a.stats.forget()
	st := &autopilotState{healthySince: map[raft.ServerID]time.Time{}, leadingSince: a.clk.Now()}
	for clock.Sleep(ctx, a.clk, a.interval) == nil {
		if err := a.tick(ctx, st, a.clk.Now()); err != nil && ctx.Err() == nil {
			a.log.Warn("autopilot: will retry", "error", err)
		}
	}
}

// tick looks once, at now, and makes the plan's changes.
func (a *autopilot) tick(ctx context.Context, st *autopilotState, now time.Time) error {
	members, ok, err := a.cl.look(ctx, now)
	if err != nil || !ok {
		return err
	}
	a.stats.saw(members)
	p := st.plan(now, members, a.lim)
	if srv := p.Promote; srv != nil {
		servers := make([]raft.Server, len(members))
		for i, m := range members {
			servers[i] = m.Server
		}
		if err := a.cl.promote(ctx, servers, *srv); err != nil {
			return err
		}
		delete(st.healthySince, srv.ID)
		a.stats.promotions.Add(1)
		a.log.Info("autopilot: promoted a non-voter to voter: caught up and healthy for the stabilization time",
			"id", srv.ID, "addr", srv.Address, "stabilization", a.lim.Stabilization)
	}
	if srv := p.Remove; srv != nil {
		a.log.Warn("autopilot: removing a dead voter", "id", srv.ID, "addr", srv.Address, "why", p.Why)
		if err := a.cl.remove(ctx, *srv, p.Why); err != nil {
			return fmt.Errorf("autopilot: remove dead voter %q: %w", srv.ID, err)
		}
		a.stats.removals.Add(1)
		a.log.Info("autopilot: removed a dead voter", "id", srv.ID)
	}
	return nil
}

// nodeAutopilot is the autopilotCluster of a node: its raft, its contact
// tracker, its member remover.
type nodeAutopilot struct{ n *Node }

func (c nodeAutopilot) look(ctx context.Context, now time.Time) ([]autopilotMember, bool, error) {
	n := c.n
	if n.raft.State() != raft.Leader || n.isClosed() {
		return nil, false, nil
	}
	cf := n.raft.GetConfiguration()
	if err := await(ctx, cf); err != nil {
		return nil, false, n.raftErr("autopilot: read configuration", err)
	}
	term, last := n.raft.CurrentTerm(), n.raft.LastIndex()
	servers := cf.Configuration().Servers
	members := make([]autopilotMember, 0, len(servers))
	for _, srv := range servers {
		members = append(members, autopilotMember{Server: srv, Progress: n.progressOf(srv.ID, term, last, now)})
	}
	return members, true, nil
}

func (c nodeAutopilot) promote(ctx context.Context, servers []raft.Server, srv raft.Server) error {
	return c.n.promote(ctx, servers, srv)
}

func (c nodeAutopilot) remove(ctx context.Context, srv raft.Server, why string) error {
	n := c.n
	n.mu.Lock()
	remove := n.memberRemover
	n.mu.Unlock()
	if remove != nil {
		return remove(ctx, string(srv.ID), why)
	}
	return n.RemovePeer(ctx, string(srv.ID))
}

// autopilotStats is what the autopilots of a node's terms did and saw,
// for its metrics (baton_autopilot_*).
type autopilotStats struct {
	promotions, removals atomic.Uint64

	mu sync.Mutex
	// members counts the members of the last look by suffrage and
	// health; nil while no autopilot runs (this node does not lead).
	members map[memberKind]int
}

// memberKind is a member's suffrage and health, a series of
// baton_autopilot_members.
type memberKind struct {
	Suffrage raft.ServerSuffrage
	Healthy  bool
}

// saw notes the members of a look.
func (s *autopilotStats) saw(members []autopilotMember) {
	counts := map[memberKind]int{}
	for _, m := range members {
		counts[memberKind{m.Server.Suffrage, m.Progress.Healthy}]++
	}
	s.mu.Lock()
	s.members = counts
	s.mu.Unlock()
}

// forget drops the last look's members: the autopilot has stopped, and
// what it saw may no longer hold.
func (s *autopilotStats) forget() {
	s.mu.Lock()
	s.members = nil
	s.mu.Unlock()
}

// lastLook is the last look's counts; ok false while no autopilot runs
// or before its first look.
func (s *autopilotStats) lastLook() (counts map[memberKind]int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.members), s.members != nil
}

// promote makes srv, a non-voter of servers (the configuration read), a
// voter, if the new configuration keeps a majority of answering voters.
func (n *Node) promote(ctx context.Context, servers []raft.Server, srv raft.Server) error {
	next := slices.Clone(servers)
	for i := range next {
		if next[i].ID == srv.ID {
			next[i].Suffrage = raft.Voter
		}
	}
	what := fmt.Sprintf("autopilot: promote %q", srv.ID)
	since := n.cfg.Clock.Now()
	if err := n.checkQuorum(ctx, what, next, ""); err != nil {
		return err
	}
	// Healthy allows two heartbeat timeouts since its last answer: the
	// member may have died since. Promoted dead, it would cost the
	// voters the failure they tolerated (three tolerate one; three and
	// a dead fourth, none), so it must answer a request sent now.
	if err := n.awaitAnswer(ctx, what, srv.ID, since); err != nil {
		return err
	}
	// raft's AddVoter adds a server it does not have: a member removed
	// during the quorum check (cluster remove) would come back as a
	// voter. It cannot be fenced to the configuration read by prevIndex
	// (GetConfiguration's Index is always 0 in raft v1.7.3), so the
	// configuration is read again here, narrowing the window to the two
	// calls. A changed one is looked at afresh on the next tick.
	cf := n.raft.GetConfiguration()
	if err := await(ctx, cf); err != nil {
		return n.raftErr(what, err)
	}
	if !slices.Contains(cf.Configuration().Servers, srv) {
		return fmt.Errorf("cluster: %s: the configuration changed meanwhile; nothing was changed", what)
	}
	if err := await(ctx, n.raft.AddVoter(srv.ID, srv.Address, 0, 0)); err != nil {
		return n.raftErr(what, err)
	}
	return nil
}

// awaitAnswer returns nil once id accepts a request sent at or after
// since, and an error if it does not within two heartbeat timeouts (the
// leader heartbeats ten times a timeout).
func (n *Node) awaitAnswer(ctx context.Context, what string, id raft.ServerID, since time.Time) error {
	clk := n.cfg.Clock
	deadline := since.Add(2 * max(n.cfg.HeartbeatTimeout, n.cfg.LeaderLeaseTimeout))
	poll := max(n.cfg.HeartbeatTimeout/10, time.Millisecond)
	for !n.contact.ackedSince(id, since) {
		if now := clk.Now(); now.After(deadline) {
			return fmt.Errorf("cluster: %s: it has not answered this leader since %v; nothing was changed", what, now.Sub(since).Round(time.Millisecond))
		}
		if err := clock.Sleep(ctx, clk, poll); err != nil {
			return fmt.Errorf("cluster: %s: waiting for it to answer: %w", what, err)
		}
	}
	return nil
}
