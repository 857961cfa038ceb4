package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/raftfsm"
)

// Reads of the replicated state come in two consistencies, after etcd's
// linearizable and serializable reads and rqlite's strong and none:
//
// A linearizable read reflects every write acknowledged before it arrived.
// LinearizableRead gives the read an index (a read index, as in the Raft
// thesis §6.4): the leader's commit index when the read arrived, which
// covers every entry of earlier terms because a leader publishes its
// executor only after a Barrier of its own term committed. Then a quorum
// confirms the node is still leader of the same term with answers to
// requests sent after the read arrived, so no other leader can have
// acknowledged anything the index misses. A round sends heartbeats at
// once: to the fewest followers that make a quorum with the leader, those
// that answered last (probeQuorum), or, when they do not answer within
// probeTimeout, to every follower through raft.VerifyLeader.
// contactTracker (contact.go) tells which answers came to requests sent
// after the read arrived (raft's own count may include older ones); rounds
// repeat until a quorum of such answers is in. That count, not the round's
// own outcome, is what confirms the read. Last, the read waits for the FSM
// to apply the index. Concurrent reads share rounds (readConfirmer). The
// reads a standby forwards come with its word that it was in the leader's
// term after they arrived (Voucher), which counts as its answer: in a
// cluster of three they need no round.
//
// Leases are not used: a leader trusting its lease without a round answers
// stale reads when its process was paused past the lease (SIGSTOP, a long
// GC, a frozen VM), which is exactly when another leader has taken over.
//
// A stale read is served from the local state at once; ReadState says how
// stale it may be (applied index, age of the last contact with a leader).

// ReadInfo says how a read was served.
type ReadInfo struct {
	ServedBy     string
	AppliedIndex uint64
	Linearizable bool
	RaftState    string
	Term         uint64
	// LeaderContactAge is how long ago this node last heard from the
	// leader: 0 on the leader, negative if it never has.
	LeaderContactAge time.Duration
}

// ReadState describes this node's local state for a stale read.
func (n *Node) ReadState() ReadInfo {
	st := n.raft.State()
	ri := ReadInfo{
		ServedBy:     n.cfg.ID,
		AppliedIndex: n.fsm.AppliedIndex(),
		RaftState:    st.String(),
		Term:         n.raft.CurrentTerm(),
	}
	switch last := n.raft.LastContact(); {
	case st == raft.Leader:
	case last.IsZero():
		ri.LeaderContactAge = -1
	default:
		ri.LeaderContactAge = time.Since(last)
	}
	return ri
}

// nudgeAfter is how long a linearizable read waits for the FSM to reach its
// read index before it commits a NOOP command to push it there: the index
// may name a raft no-op or barrier entry, which the FSM never sees (see
// raftfsm.FSM.WaitApplied).
const nudgeAfter = 50 * time.Millisecond

// shutdownPoll is how often a read waiting on raft checks that raft has
// not shut down under it.
const shutdownPoll = 100 * time.Millisecond

// LinearizableRead makes the read that called it linearizable (see above):
// when it returns nil, this node's FSM holds every write acknowledged before
// the call, and the caller reads it (or the executor of the same term)
// right away. On a node that is not the leader it fails with a
// *NotLeaderError; on a leader still establishing itself with ErrNotReady;
// when the quorum round fails (deposed, cut off) with an error wrapping
// ErrNotLeader. The returned ReadInfo describes the served read.
func (n *Node) LinearizableRead(ctx context.Context) (ReadInfo, error) {
	return n.linearizableRead(ctx, nil)
}

// Voucher is a voter's word that its Raft term was Term at a moment after
// the reads it vouches for arrived: a standby forwarding linearizable
// reads to the leader gives its own, read once the reads were queued.
//
// Why it may count towards a read's quorum: a write acknowledged before
// the read arrived was committed by a leader of some term. One of a term
// later than the leader's T needed a quorum of voters in that term before
// the read arrived; but a voter in term T after the read arrived was in T
// or lower until then (terms only grow), as is this leader, in T when it
// serves the read. So a quorum of voters each known to be in T after the
// read arrived (this node, voters that answered a heartbeat of T sent
// after it, and the voucher) leaves no room for such a leader, and this
// leader's commit index covers every earlier term's writes (its executor
// is published after a barrier of T). It is the evidence a heartbeat's
// answer gives, which the voter gave unasked: in a cluster of three the
// forwarding standby and the leader are a quorum, and its reads need no
// round at all.
type Voucher struct {
	ID   string // the voter's server id
	Term uint64
}

// LinearizableReadVouched is LinearizableRead counting v as voter v.ID's
// acknowledgement of this node's term, when it names a voter of the
// latest configuration other than this node in the term this node's
// executor leads; otherwise it counts for nothing. It runs no round when
// this node and v make a quorum.
func (n *Node) LinearizableReadVouched(ctx context.Context, v Voucher) (ReadInfo, error) {
	return n.linearizableRead(ctx, &v)
}

func (n *Node) linearizableRead(ctx context.Context, v *Voucher) (ReadInfo, error) {
	n.mu.Lock()
	established, execTerm, closed := n.exec != nil, n.execTerm, n.closed
	n.mu.Unlock()
	switch {
	case closed:
		return ReadInfo{}, ErrShutdown
	case n.raft.State() != raft.Leader:
		return ReadInfo{}, n.notLeader()
	case !established || execTerm != n.raft.CurrentTerm():
		return ReadInfo{}, ErrNotReady
	}
	arrived := time.Now()
	readIndex := n.raft.CommitIndex()
	if v != nil && v.Term != execTerm {
		v = nil // another term's word says nothing of this one
	}
	for round := 0; ; round++ {
		// A voucher may make the quorum without a round: then the checks
		// below run at once.
		if round > 0 || v == nil {
			if err := n.reads.confirm(ctx); err != nil {
				return ReadInfo{}, err
			}
		}
		if term := n.raft.CurrentTerm(); term != execTerm {
			return ReadInfo{}, fmt.Errorf("cluster: read: term changed from %d to %d: %w", execTerm, term, n.notLeader())
		}
		if n.raft.State() != raft.Leader {
			// Stepped down in the same term during the round (a lost
			// lease): the read would still be linearizable, but this
			// node says it does not lead, as VerifyLeader would.
			return ReadInfo{}, fmt.Errorf("cluster: read: stepped down in term %d: %w", execTerm, n.notLeader())
		}
		ok, err := n.quorumAckedSince(arrived, v)
		if err != nil {
			return ReadInfo{}, err
		}
		if ok {
			if round == 0 && v != nil {
				n.reads.vouched.Add(1) // no round ran
			}
			break
		}
		// The round counted answers to requests sent before the read
		// arrived; the next one sends fresh heartbeats.
	}
	if err := n.waitApplied(ctx, readIndex); err != nil {
		return ReadInfo{}, err
	}
	ri := n.ReadState()
	ri.Linearizable = true
	return ri, nil
}

// ReadRounds says how many leadership rounds this node ran for
// linearizable reads, and how many reads they answered (a read that
// needed a second round counts twice): their ratio is how well concurrent
// reads share rounds.
func (n *Node) ReadRounds() (rounds, reads int64) {
	return n.reads.rounds.Load(), n.reads.reads.Load()
}

// VouchedReads says how many linearizable reads a Voucher confirmed
// without a round.
func (n *Node) VouchedReads() int64 { return n.reads.vouched.Load() }

// probeTimeout bounds a probe's wait for its followers' answers before
// the round falls back to raft's own (which asks every follower).
const probeTimeout = 25 * time.Millisecond

var errProbe = errors.New("cluster: read: the probe got no quorum")

// probeQuorum sends a heartbeat of this node's term, as raft's own, to
// the fewest followers that make a quorum with this node (one of three),
// those that answered last, through the contact tracker, which records their
// answers; LinearizableRead then counts them (quorumAckedSince). raft's
// VerifyLeader heartbeats every follower through its leader loop: twice
// the messages in a cluster of three, and more goroutine hops.
func (n *Node) probeQuorum() error {
	if n.raft.State() != raft.Leader {
		// A heartbeat of a node that stepped down in the same term
		// would reset its followers' election timers for nothing.
		return errProbe
	}
	term := n.raft.CurrentTerm()
	n.mu.Lock()
	execTerm := n.execTerm
	n.mu.Unlock()
	if term != execTerm {
		return errProbe // not the term its executor leads: raft's round tells
	}
	peers, selfVotes, err := n.voters()
	if err != nil {
		return err
	}
	need := (len(peers)+selfVotes)/2 + 1 - selfVotes
	if need <= 0 {
		return nil
	}
	if need > len(peers) {
		return errProbe
	}
	n.contact.newestAckFirst(peers)
	self := raft.ServerID(n.cfg.ID)
	// A peer whose last probe has not returned (a dial or an answer that
	// hangs, up to the transport's timeout) is not asked again: at most
	// one probe per peer is in flight, and its late heartbeat is the only
	// one that may reach the peer after this node stepped down.
	n.probing.Lock()
	var asked []raft.Server
	for _, p := range peers {
		if len(asked) == need {
			break
		}
		if !n.probing.busy[p.ID] {
			n.probing.busy[p.ID] = true
			asked = append(asked, p)
		}
	}
	n.probing.Unlock()
	local := n.trans.LocalAddr()
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(self), Addr: n.trans.EncodePeer(self, local)}
	answers := make(chan bool, len(asked))
	for _, p := range asked {
		go func() {
			req := &raft.AppendEntriesRequest{RPCHeader: hdr, Term: term, Leader: n.trans.EncodePeer(self, local)}
			var resp raft.AppendEntriesResponse
			err := n.contact.AppendEntries(p.ID, p.Address, req, &resp)
			n.probing.Lock()
			delete(n.probing.busy, p.ID)
			n.probing.Unlock()
			answers <- err == nil && resp.Term == term
		}()
	}
	if len(asked) < need {
		return errProbe
	}
	timeout := time.NewTimer(probeTimeout)
	defer timeout.Stop()
	for range need {
		select {
		case ok := <-answers:
			if !ok {
				return errProbe
			}
		case <-timeout.C:
			return errProbe
		}
	}
	return nil
}

// quorumAckedSince reports whether a quorum of the voters (this node
// counting for itself) accepted, in this node's term, requests it sent at
// or after t; v, if set, is a voter's word that it was in this node's
// term after the read arrived at the standby that forwarded it (Voucher),
// which counts as its acceptance. That moment may come before t, the
// read's arrival here: the argument needs only that it followed the
// client's call.
func (n *Node) quorumAckedSince(t time.Time, v *Voucher) (bool, error) {
	peers, selfVotes, err := n.voters()
	if err != nil {
		return false, err
	}
	acked := selfVotes
	for _, p := range peers {
		if n.contact.ackedSince(p.ID, t) || (v != nil && string(p.ID) == v.ID) {
			acked++
		}
	}
	return 2*acked > len(peers)+selfVotes, nil
}

// voters is the latest configuration's voters other than this node, and
// this node's own vote: 1, or 0 for a leader on its way out of the
// configuration.
func (n *Node) voters() (peers []raft.Server, selfVotes int, err error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, 0, readError("reading the configuration", err)
	}
	self := raft.ServerID(n.cfg.ID)
	for _, s := range f.Configuration().Servers {
		switch {
		case s.Suffrage != raft.Voter:
		case s.ID == self:
			selfVotes = 1
		default:
			peers = append(peers, s)
		}
	}
	return peers, selfVotes, nil
}

// waitApplied waits for the FSM to apply index, nudging it with a NOOP
// command if raft dispatched everything up to index but the FSM stays
// behind (the tail is a no-op or barrier entry).
func (n *Node) waitApplied(ctx context.Context, index uint64) error {
	if n.fsm.AppliedIndex() >= index {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, nudgeAfter)
	err := n.fsm.WaitApplied(wctx, index)
	cancel()
	if err == nil || ctx.Err() != nil {
		if err != nil {
			return fmt.Errorf("cluster: read: waiting for index %d: %w", index, ctx.Err())
		}
		return nil
	}
	if err := n.reads.nudge(ctx); err != nil {
		return err
	}
	if err := n.fsm.WaitApplied(ctx, index); err != nil {
		return fmt.Errorf("cluster: read: waiting for index %d: %w", index, err)
	}
	return nil
}

// readConfirmer batches the leadership confirmations of concurrent reads:
// a read joins the next round, which starts once the round in flight (if
// any) ended, so the round that answers it always started after it
// arrived; every read waiting when a round starts shares it.
type readConfirmer struct {
	verify func() error // one quorum round
	// probe, if set, is tried first: fresh acknowledgements from just
	// enough followers to make a quorum with this node, asked directly
	// (probeQuorum); nil when they came, and verify is then not run.
	probe func() error
	noop  func() error // commits a NOOP command

	mu      sync.Mutex
	next    *readRound // the round reads join now
	running bool

	rounds, reads atomic.Int64 // rounds run, and the reads they answered
	vouched       atomic.Int64 // reads a Voucher confirmed without a round

	nudgeMu sync.Mutex
	nudging *readRound
}

type readRound struct {
	done    chan struct{}
	err     error
	waiters int // reads that joined it (for tests)
}

// wait returns r's outcome once it is known, or ctx's end: what names the
// round in the error.
func (r *readRound) wait(ctx context.Context, what string) error {
	select {
	case <-r.done:
		return readError(what, r.err)
	case <-ctx.Done():
		return fmt.Errorf("cluster: read: %s: %w", what, ctx.Err())
	}
}

// newReadConfirmer confirms with r. A raft future may stay unanswered
// once raft shuts down (a request left in one of its buffered channels):
// shutdown ends the wait, so that neither a read nor the confirmer's loop
// outlives the node.
func newReadConfirmer(r *raft.Raft, applyTimeout time.Duration, shutdown <-chan struct{}) *readConfirmer {
	wait := func(f raft.Future) error {
		// Raft shut down by itself (not through the node) closes no
		// channel of ours: look at its state now and then.
		return raftfsm.AwaitFuture(f, shutdown, shutdownPoll, raftfsm.IfShutDown(r))
	}
	return &readConfirmer{
		verify: func() error { return wait(r.VerifyLeader()) },
		noop:   func() error { return wait(r.Apply(raftfsm.EncodeNoop(), applyTimeout)) },
	}
}

// confirm waits for a quorum round that started after the call.
func (c *readConfirmer) confirm(ctx context.Context) error {
	c.mu.Lock()
	if c.next == nil {
		c.next = &readRound{done: make(chan struct{})}
	}
	r := c.next
	r.waiters++
	if !c.running {
		c.running = true
		go c.run()
	}
	c.mu.Unlock()
	return r.wait(ctx, "confirming leadership")
}

func (c *readConfirmer) run() {
	for {
		c.mu.Lock()
		r := c.next
		c.next = nil
		if r == nil {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		if c.probe == nil || c.probe() != nil {
			r.err = c.verify()
		}
		c.rounds.Add(1)
		c.reads.Add(int64(r.waiters))
		close(r.done)
	}
}

// nudge commits one NOOP command, shared by the reads that need one at the
// same time.
func (c *readConfirmer) nudge(ctx context.Context) error {
	c.nudgeMu.Lock()
	r := c.nudging
	if r == nil {
		r = &readRound{done: make(chan struct{})}
		c.nudging = r
		go func() {
			r.err = c.noop()
			c.nudgeMu.Lock()
			c.nudging = nil
			c.nudgeMu.Unlock()
			close(r.done)
		}()
	}
	c.nudgeMu.Unlock()
	return r.wait(ctx, "committing a no-op")
}

// readError wraps raft's answer: losing leadership means "ask the leader".
func readError(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("cluster: read: %s: %v: %w", what, err, ErrNotLeader)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("cluster: read: %s: %w", what, ErrShutdown)
	}
	return fmt.Errorf("cluster: read: %s: %w", what, err)
}
