package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/raftfsm"
)

// builder is a Backend that knows what its node's binary is
// (cluster.Node.Build); a test's fake need not.
type builder interface{ Build() version.Build }

// Build is the node's binary: what it reports to the leader.
func (b nodeBackend) Build() version.Build { return b.n.Build() }

// buildOf is what b's binary is: its node's build, else this binary's.
func buildOf(b Backend) version.Build {
	if bb, ok := b.(builder); ok {
		return bb.Build()
	}
	return version.Current("")
}

// clusterFormatOf is the cluster version b's replicated state holds
// (cluster.ReadClusterFormat).
func clusterFormatOf(b Backend) version.Format {
	f, _ := cluster.ReadClusterFormat(b.DomainGet)
	return f
}

// unreadableReason is why b is not ready when its replicated state holds a
// cluster version its binary cannot read (a member older than the cluster
// that joined after the raise, see docs/upgrades.md), naming both; "" when
// it can read it.
func unreadableReason(b Backend) string {
	if err := version.CheckReadable(clusterFormatOf(b), buildOf(b).MaxFormat); err != nil {
		return err.Error()
	}
	return ""
}

// reported says whether node me's committed report is its binary's.
func (s *Server) reported(me string) bool {
	got, ok := s.b.DomainGet(cluster.VersionKey(me))
	return ok && bytes.Equal(got, version.EncodeReport(buildOf(s.b)))
}

// reportMutations are the leader's writes for a RegisterNode that says
// (or, from a 0.1.0 member, does not say) what id's binary is: its report,
// and the report as pending for the raise it allows (commitWithRaise).
func (s *Server) reportMutations(id string, b version.Build) ([]raftfsm.Mutation, map[string]version.Build) {
	got, had := s.b.DomainGet(cluster.VersionKey(id))
	if b.MaxFormat == 0 {
		// A binary that sends no report (0.1.0, after a downgrade): its
		// old report no longer says what it runs.
		if had {
			return []raftfsm.Mutation{raftfsm.Del(cluster.VersionKey(id))}, map[string]version.Build{id: version.Unreported}
		}
		return nil, nil
	}
	var muts []raftfsm.Mutation
	if enc := version.EncodeReport(b); !had || !bytes.Equal(got, enc) {
		muts = append(muts, raftfsm.Put(cluster.VersionKey(id), enc))
	}
	return muts, map[string]version.Build{id: b}
}

// commitWithRaise commits muts (there may be none) on the leader, in one
// entry with the raise of the cluster version they allow: pending are the
// reports muts commits, counted in place of the stored ones. held says why
// a raise the reports call for is not made (a member not confirmed, see
// raise); err is the commit's.
//
// The cluster version cannot go down:
//   - Every write of it on this leader runs under raiseMu, from the read of
//     the committed value to the end of the commit, so no raise computed
//     before another commits after it.
//   - A raise reads the state after a Raft barrier of the leader's term, so
//     it sees every value any earlier leader committed, and reads it again
//     after its probes: it writes only above what is committed then.
//   - The entry is fenced to that term (nodeBackend.MutateInTerm): a leader
//     deposed while it probed, whose entry lands under a later leadership
//     (its own regained included) after a higher value, is refused by
//     every FSM. Entries of term T precede those of later terms in the
//     log, and a later leader reads past them (its barrier) before it
//     writes.
func (s *Server) commitWithRaise(ctx context.Context, muts []raftfsm.Mutation, pending map[string]version.Build) (held, err error) {
	s.raiseMu.Lock()
	defer s.raiseMu.Unlock()
	raise, term, held := s.raise(ctx, pending)
	muts = append(muts, raise...)
	if len(muts) == 0 {
		return held, nil
	}
	if f, ok := s.b.(fencer); ok && term != 0 {
		err = f.MutateInTerm(ctx, term, muts)
	} else {
		err = s.b.Mutate(ctx, muts)
	}
	return held, err
}

// raiseHeldMax bounds raiseLoop's wait while a member keeps the cluster
// version from rising.
const raiseHeldMax = 30 * time.Second

// raiseLoop raises the cluster version, on the leader, when what the
// registrations and removals commit with their own raise did not: a leader
// elected after the last report, a member that left by other means, a
// raise a member's probe held back. Off the health tick: a raise probes
// every member, for up to a second. While a member holds it back (it runs
// an older binary, or does not answer), the wait doubles up to
// raiseHeldMax, so a member that stays old is not probed every tick for
// good.
func (s *Server) raiseLoop() {
	defer s.loops.Done()
	wait := s.cfg.RegisterInterval
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-s.stopCh:
			return
		case <-t.C:
		}
		wait = s.raiseTick(wait)
		t.Reset(wait)
	}
}

// raiseTick is one turn of raiseLoop, which waited wait before it: the
// wait before the next.
func (s *Server) raiseTick(wait time.Duration) time.Duration {
	if ok, _ := s.Ready(); !ok || !s.b.IsLeader() {
		return s.cfg.RegisterInterval
	}
	ctx, cancel := s.untilStop(context.Background(), 5*time.Second)
	defer cancel()
	held, err := s.commitWithRaise(ctx, nil, nil)
	if err != nil {
		s.log.Debug("raising the cluster version failed; will retry", "error", err)
	} else if err := s.ensureClusterID(ctx); err != nil {
		s.log.Debug("writing the cluster id failed; will retry", "error", err)
	}
	return nextRaiseWait(wait, s.cfg.RegisterInterval, held != nil && err == nil)
}

// nextRaiseWait is raiseLoop's wait after one of wait: base, or while a
// member holds the raise back, twice wait up to raiseHeldMax.
func nextRaiseWait(wait, base time.Duration, held bool) time.Duration {
	if !held {
		return base
	}
	return max(base, min(2*wait, raiseHeldMax))
}

// nextClusterFormat is the committed cluster version and the one the
// members of the Raft configuration (voters and not) allow: the lowest
// level over them, with pending reports in place of the stored ones. A
// member without a report, or with one that cannot be read, counts as
// version.Unreported (cluster.ReadReport, version.Build.Counted); this
// leader counts as what it runs,
// whatever its report says.
func (s *Server) nextClusterFormat(peers []cluster.PeerStatus, pending map[string]version.Build) (committed, next version.Format) {
	members := make([]version.Format, 0, len(peers))
	for _, p := range peers {
		b, ok := pending[p.ID]
		switch {
		case p.ID == s.b.ID():
			b = buildOf(s.b)
		case !ok:
			b, _ = cluster.ReadReport(s.b.DomainGet, p.ID)
		}
		members = append(members, b.Counted())
	}
	committed = clusterFormatOf(s.b)
	return committed, version.Next(committed, members)
}

// raise is the write that raises the committed cluster version to what the
// members allow (nextClusterFormat), and the term to fence it to (0: no
// fence, a backend without one); none when it stays, and then held says
// why if the reports call for a raise. Under raiseMu (commitWithRaise).
// Before a raise every other member is asked what it runs now
// (confirmRaise): a report outlives the binary that made it, and a member
// taken back to 0.1.0 on the same address never registers again. A member
// older than the cluster version that joins later stops (cluster.Node's
// check of what it applies): its report does not lower it.
func (s *Server) raise(ctx context.Context, pending map[string]version.Build) ([]raftfsm.Mutation, uint64, error) {
	peers := s.b.Status().Peers
	if len(peers) == 0 {
		return nil, 0, nil
	}
	committed, next := s.nextClusterFormat(peers, pending)
	if next <= committed {
		return nil, 0, nil
	}
	var term uint64
	if f, ok := s.b.(fencer); ok {
		t, err := f.LeaderBarrier(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("no barrier: %w", err)
		}
		term = t
		if committed, next = s.nextClusterFormat(peers, pending); next <= committed {
			return nil, 0, nil
		}
	}
	if err := s.confirmRaise(ctx, peers, next); err != nil {
		s.log.Debug("the cluster version stays", "at", committed.String(), "not raised to", next.String(), "because", err)
		return nil, 0, err
	}
	// Read again: what the probes took time over may have changed it.
	now, again := s.nextClusterFormat(peers, pending)
	if now >= next || again < next {
		return nil, 0, nil
	}
	s.log.Info("raising the cluster version", "from", now.String(), "to", next.String())
	return []raftfsm.Mutation{raftfsm.Put(cluster.ClusterFormatKey, version.EncodeClusterFormat(next))}, term, nil
}

// confirmRaise asks every member other than this one, in parallel, what
// its binary writes and reads now, and says why not if one does not
// answer, another node answers for it, or it answers below next (0.1.0
// answers without a level, and counts as version.Unreported).
func (s *Server) confirmRaise(ctx context.Context, peers []cluster.PeerStatus, next version.Format) error {
	me := s.b.ID()
	errs := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		if p.ID == me {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr := s.adminAddr(p.ID)
			if addr == "" {
				errs[i] = fmt.Errorf("%s has no admin address registered", p.ID)
				return
			}
			st, err := s.probeMember(ctx, p.ID, addr)
			answered := version.Build{Version: st.GetVersion(), MaxFormat: version.Format(st.GetMaxFormat())}
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("%s: %w", p.ID, err)
			case st.GetNodeId() != p.ID:
				// The address registered for p is stale (p moved, its new
				// registration not through yet) and another node answers
				// on it: its binary says nothing of p's.
				errs[i] = fmt.Errorf("%s: %s, its registered admin address, is answered by %q", p.ID, addr, st.GetNodeId())
			case answered.Counted() < next:
				errs[i] = fmt.Errorf("%s runs %q, %v at most", p.ID, answered.Version, answered.Counted())
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// formatWait bounds how long a call that writes what a format level added
// waits for the cluster version to reach it (awaitFormat).
const formatWait = 5 * time.Second

// awaitFormat waits, on the leader, until the cluster version reaches f,
// for at most formatWait (less if ctx ends first), and returns whether it
// did. A new cluster starts at format 1 and the leader raises it once
// every member has registered, within a second or so of the cluster
// forming: a write made in that second (the README's token with a ttl,
// right after `cluster status`) waits for the raise instead of being
// refused. While a member runs an older release the version does not
// rise, and the caller refuses after the wait, saying why.
func (s *Server) awaitFormat(ctx context.Context, f version.Format) bool {
	if clusterFormatOf(s.b) >= f {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, formatWait)
	defer cancel()
	for {
		tick := make(chan struct{})
		t := s.acc.Clock.AfterFunc(20*time.Millisecond, func() { close(tick) })
		select {
		case <-ctx.Done():
			t.Stop()
			return clusterFormatOf(s.b) >= f
		case <-tick:
		}
		if clusterFormatOf(s.b) >= f {
			return true
		}
	}
}
