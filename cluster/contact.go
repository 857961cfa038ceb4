package cluster

import (
	"io"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// contactTracker wraps the raft transport to learn, for each peer, the
// latest moment a request was sent to it that it accepted in the sender's
// term: the proof a linearizable read needs (read.go).
//
// raft.VerifyLeader alone is not that proof. It counts, as a follower's
// vote, the next successful AppendEntries answer from it, including the
// answer to a heartbeat sent before VerifyLeader was called: a leader
// paused or cut off right after sending one, and resumed after a new
// leader committed writes, may count such an answer when it arrives late
// and confirm a leadership it lost meanwhile. Knowing when each answered
// request was sent lets the read count only requests sent after it
// arrived.
type contactTracker struct {
	raft.Transport

	mu    sync.Mutex
	acked map[raft.ServerID]time.Time // send time of the newest request accepted in its term
	// match is, per peer, the highest log index it is known to hold as
	// the leader of a term replicated it: what raft's own match index
	// would say, which raft does not export. Cluster status shows the lag
	// from it, and the autopilot promotes a non-voter by it.
	match map[raft.ServerID]termIndex

	// The follower's side: what this node last heard from a leader on
	// the replication path (follow.go). raft keeps the leader's commit
	// index to itself: a follower's own commit index is capped at its
	// last entry, so it cannot tell from it that it is behind.
	follow     followState
	relayOnce  sync.Once
	relayOut   chan raft.RPC
	relayStop  chan struct{}
	relayClose sync.Once
}

// termIndex is a log index learned in a leader's term.
type termIndex struct{ term, index uint64 }

// newContactTracker wraps t, keeping the optional interfaces raft looks
// for (pre-vote, close).
func newContactTracker(t raft.Transport) (raft.Transport, *contactTracker) {
	c := &contactTracker{Transport: t, acked: map[raft.ServerID]time.Time{}, match: map[raft.ServerID]termIndex{},
		relayOut: make(chan raft.RPC), relayStop: make(chan struct{})}
	if _, ok := t.(raft.WithPreVote); ok {
		return contactTrackerPreVote{c}, c
	}
	return c, c
}

// record notes that id accepted, in the sender's term, a request sent at
// sent.
func (c *contactTracker) record(id raft.ServerID, sent time.Time, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) {
	if resp == nil || req == nil || resp.Term != req.Term {
		return // a higher term answered: not a vote for the sender
	}
	c.mu.Lock()
	if sent.After(c.acked[id]) {
		c.acked[id] = sent
	}
	switch {
	case resp.Success && req.PrevLogEntry > 0:
		// A heartbeat carries no PrevLogEntry and says nothing of the
		// peer's log.
		c.matched(id, req.Term, req.PrevLogEntry+uint64(len(req.Entries)))
	case !resp.Success:
		// Refused in the sender's term: the peer lacks PrevLogEntry (or
		// could not store the entries), and holds no more than its last
		// index. It may have lost its log since it last matched (rebuilt
		// empty, or cut back): a match index kept from before would show
		// it caught up, to the autopilot too, while it holds nothing.
		most := resp.LastLog
		if req.PrevLogEntry > 0 {
			most = min(most, req.PrevLogEntry-1)
		}
		c.refused(id, req.Term, most)
	}
	c.mu.Unlock()
}

// refused notes that id holds the log up to index at most, as the leader
// of term learned. Under c.mu.
func (c *contactTracker) refused(id raft.ServerID, term, index uint64) {
	if m := c.match[id]; term > m.term || (term == m.term && index < m.index) {
		c.match[id] = termIndex{term, index}
	}
}

// matched notes that id holds the log up to index, as the leader of term
// learned. A newer term starts afresh: the peer's log may have been cut
// back since the older one. Under c.mu.
func (c *contactTracker) matched(id raft.ServerID, term, index uint64) {
	m := c.match[id]
	switch {
	case term > m.term:
		c.match[id] = termIndex{term, index}
	case term == m.term && index > m.index:
		c.match[id] = termIndex{term, index}
	}
}

// progress is what this node, leading in term, knows of id: the highest
// index id holds (known false if nothing was learned in term) and the
// send time of the newest request it accepted.
func (c *contactTracker) progress(id raft.ServerID, term uint64) (match uint64, known bool, acked time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.match[id]
	return m.index, m.term == term, c.acked[id]
}

// ackedSince reports whether id accepted a request sent at or after t.
func (c *contactTracker) ackedSince(id raft.ServerID, t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.acked[id].Before(t)
}

// newestAckFirst orders peers by the send time of their newest accepted
// request, latest first: those most likely to answer the next one.
func (c *contactTracker) newestAckFirst(peers []raft.Server) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sort.SliceStable(peers, func(i, j int) bool { return c.acked[peers[i].ID].After(c.acked[peers[j].ID]) })
}

// AppendEntries implements raft.Transport: heartbeats and unpipelined
// replication.
func (c *contactTracker) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	sent := time.Now()
	err := c.Transport.AppendEntries(id, target, args, resp)
	if err == nil {
		c.record(id, sent, args, resp)
	}
	return err
}

// AppendEntriesPipeline implements raft.Transport: pipelined replication,
// whose answers raft also counts as votes.
func (c *contactTracker) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := c.Transport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	tp := &trackedPipeline{AppendPipeline: p, c: c, id: id, out: make(chan raft.AppendFuture), closed: make(chan struct{})}
	go tp.relay()
	return tp, nil
}

// InstallSnapshot implements raft.Transport: a peer that took a snapshot
// holds the log up to its last index, and may get no entry after it for a
// while if nothing is written.
func (c *contactTracker) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	err := c.Transport.InstallSnapshot(id, target, args, resp, data)
	if err == nil && resp.Success && resp.Term == args.Term {
		c.mu.Lock()
		c.matched(id, args.Term, args.LastLogIndex)
		c.mu.Unlock()
	}
	return err
}

// Close implements raft.WithClose (raft's shutdown calls it): it also
// ends the relay of Consumer.
func (c *contactTracker) Close() error {
	c.relayClose.Do(func() { close(c.relayStop) })
	if wc, ok := c.Transport.(raft.WithClose); ok {
		return wc.Close()
	}
	return nil
}

type contactTrackerPreVote struct{ *contactTracker }

// RequestPreVote implements raft.WithPreVote.
func (c contactTrackerPreVote) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return c.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp)
}

// trackedPipeline records the answers of a pipeline before raft sees them
// (raft counts them as votes once it reads them from Consumer).
type trackedPipeline struct {
	raft.AppendPipeline
	c         *contactTracker
	id        raft.ServerID
	out       chan raft.AppendFuture
	closed    chan struct{}
	closeOnce sync.Once
}

func (p *trackedPipeline) relay() {
	in := p.AppendPipeline.Consumer()
	for {
		select {
		case f, ok := <-in:
			if !ok {
				close(p.out)
				return
			}
			if f.Error() == nil {
				p.c.record(p.id, f.Start(), f.Request(), f.Response())
			}
			select {
			case p.out <- f:
			case <-p.closed:
				return
			}
		case <-p.closed:
			return
		}
	}
}

// Consumer implements raft.AppendPipeline.
func (p *trackedPipeline) Consumer() <-chan raft.AppendFuture { return p.out }

// Close implements raft.AppendPipeline.
func (p *trackedPipeline) Close() error {
	p.closeOnce.Do(func() { close(p.closed) })
	return p.AppendPipeline.Close()
}
