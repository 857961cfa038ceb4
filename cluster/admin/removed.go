package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// A removed member ('baton cluster remove') keeps running: its raft stays
// up as a follower outside the configuration (cluster.Config sets
// ShutdownOnRemove off), so that 'baton cluster join' takes it back
// without a restart. Until then it says on every answer that it is not a
// member: ClusterStatus answers with removed set and not ready, every
// other call of the admin API is refused UNAVAILABLE (a client given
// several masters moves on to another), and it does not register its
// addresses (it is not ready).
//
// The leader that removes a member leaves a mark in the domain state
// (RemovedKey), so that a removal retried after its answer was lost (the
// same id, no longer a member) answers OK with already_removed, while an
// id that never was a member stays NOT_FOUND: a typo must not read as a
// removal. A join clears the mark.

// RemovedKey is the replicated key the leader sets when it removes node
// id from the configuration ("nodes/<id>/removed"), and clears when id
// joins again.
func RemovedKey(id string) string { return "nodes/" + id + "/removed" }

// removedMark is RemovedKey's value.
type removedMark struct {
	// AtUnixMs is when the leader removed the member (its clock).
	AtUnixMs int64 `json:"at_unix_ms"`
}

// remover is a backend that knows whether its node was removed from the
// cluster (NodeBackend), and can be told that the leader does not list it.
type remover interface {
	Removed() bool
	MarkRemoved()
}

func (b nodeBackend) Removed() bool { return b.n.Removed() }
func (b nodeBackend) MarkRemoved()  { b.n.MarkRemoved() }

// checkMembership asks the other members whether this node is still one,
// when it has not heard from a leader for a while (leaderHeardWithin) and
// its own configuration still lists it: a removed member may never have
// received its removal (see cluster.Node.MarkRemoved), and would go on
// campaigning unheard (the members refuse its votes) without knowing why.
// The leader's answer decides: if its configuration does not list this
// node, the node is marked removed. Like etcd, where the members tell a
// removed one.
func (s *Server) checkMembership() {
	r, ok := s.b.(remover)
	if !ok || s.b.IsLeader() || r.Removed() {
		return
	}
	st := s.b.Status()
	if len(st.Peers) == 0 || (!st.LastContact.IsZero() && time.Since(st.LastContact) < leaderHeardWithin) {
		return // not joined yet, or a leader replicates to it
	}
	ctx, cancel := s.untilStop(context.Background(), memberProbeTimeout)
	defer cancel()
	var mu sync.Mutex
	var leaderSays *adminpb.ClusterStatusResponse
	var wg sync.WaitGroup
	for _, p := range st.Peers {
		addr := s.adminAddr(p.ID)
		if p.ID == st.ID || addr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.probeMember(ctx, p.ID, addr)
			if err != nil || got.GetState() != "Leader" || got.GetRemoved() || len(got.GetPeers()) == 0 {
				return
			}
			mu.Lock()
			if leaderSays == nil || got.GetTerm() > leaderSays.GetTerm() {
				leaderSays = got
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if leaderSays == nil || leaderSays.GetTerm() < st.Term {
		return
	}
	for _, p := range leaderSays.GetPeers() {
		if p.GetId() == st.ID {
			return
		}
	}
	s.log.Info("the leader's configuration does not list this node", "leader", leaderSays.GetNodeId(), "term", leaderSays.GetTerm())
	r.MarkRemoved()
}

// isRemoved reports whether b's node is not a member any more.
func isRemoved(b Backend) bool {
	r, ok := b.(remover)
	return ok && r.Removed()
}

// removedReason says that b's node is not a member, what its
// configuration holds and how to take it back; adminAddr is its admin
// address, "" if unknown.
func removedReason(b Backend, adminAddr string) string {
	st := b.Status()
	ids := make([]string, 0, len(st.Peers))
	for _, p := range st.Peers {
		ids = append(ids, p.ID)
	}
	slices.Sort(ids)
	join := fmt.Sprintf("baton cluster join --id %s --raft-addr %s", st.ID, st.Address)
	if adminAddr != "" {
		join += " --admin-addr " + adminAddr
	}
	return fmt.Sprintf("this master (%s) is not a member of the cluster: it was removed (its configuration lists %s, not it); it serves nothing until it re-joins: run '%s' against a member", st.ID, strings.Join(ids, ", "), join)
}

// removedAllowed are the admin methods a removed member still serves:
// what it is (its status says it is not a member) and who is asking.
var removedAllowed = map[string]bool{"ClusterStatus": true, "WhoAmI": true}

// refuseRemoved is the answer of a removed member to method, nil where it
// serves it (or is a member).
func (s *Server) refuseRemoved(method string) error {
	if removedAllowed[method] || s.b.IsLeader() || !isRemoved(s.b) {
		return nil
	}
	return s.unavailable("admin: " + method + ": " + removedReason(s.b, s.Advertise()))
}

// removedMarkMutation is the mark the leader sets as it removes id.
func (s *Server) removedMarkMutation() ([]byte, error) {
	b, err := json.Marshal(removedMark{AtUnixMs: s.acc.Clock.Now().UnixMilli()})
	if err != nil {
		return nil, fmt.Errorf("admin: removed mark: %w", err)
	}
	return b, nil
}

// isMember reports whether id is in the configuration st lists.
func isMember(st cluster.Status, id string) bool {
	return slices.ContainsFunc(st.Peers, func(p cluster.PeerStatus) bool { return p.ID == id })
}

// clearRemovedMark is the mutation a join makes, if id carries the mark.
func (s *Server) clearRemovedMark(id string) []raftfsm.Mutation {
	if _, ok := s.b.DomainGet(RemovedKey(id)); ok {
		return []raftfsm.Mutation{raftfsm.Del(RemovedKey(id))}
	}
	return nil
}
