package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/internal/locked"
	"github.com/baton-dev/baton/internal/tracectx"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
)

// The leadership lifecycle, after Nomad's leader.go and Consul's:
//
//	monitorLeadership ── NotifyCh true ──▶ leaderLoop: Barrier → establish ─┐
//	        ▲                                   ▲          (fails: revoke,   │
//	        │                                   └── retry ◀─ transfer) ◀─────┤
//	        └──── NotifyCh false / Shutdown ──▶ revoke ◀── stopCh ◀──────────┘
//
// Raft's NotifyCh (buffered, one slot that raft overwrites) is used rather
// than LeaderCh: LeaderCh may drop a transition, NotifyCh always ends up
// holding the latest state, and a lost-then-regained leadership that we
// observe only as "true" is caught by the term check below and by the
// executor's term-fenced store (fence.go).
//
// establish waits for a Barrier, so the FSM has applied every entry that
// any earlier leader committed, then builds a RaftStore and an executor on
// it and starts the executor, which loads the FSM's procedures and resumes
// them. Only then does Executor() hand it out.
//
// revoke runs as soon as leadership is lost. The executor is unpublished
// first (Executor() answers ErrNotLeader at once), then stopped with a
// short deadline: a deposed leader must neither persist nor dispatch. Its
// RaftStore fails every write with raft.ErrNotLeader from the moment raft
// steps down, so nothing it does after that point can commit; the stop only
// keeps it from starting new steps.
//
// If establishing fails (Barrier timeout, a store error while loading), the
// node gives leadership away with LeadershipTransfer, as Nomad does, and
// retries establishing after RetryInterval if it is still leader (a single
// node cluster has no one to give it to).
//
// While leader, the loop checks every HealthInterval that the executor is
// still alive: an executor stops itself after a store failure (e.g. an
// Apply that timed out); it is then rebuilt from the FSM. It also checks
// the node's local storage (Node.StorageErr): a leader whose raft log,
// stable store or local WAL failed stops its executor, gives leadership
// away and does not establish it again while the failure lasts.

// establishRetryInterval is the pause between failed establish attempts.
const establishRetryInterval = 500 * time.Millisecond

func (n *Node) monitorLeadership() {
	defer close(n.loopDone)
	var stopCh, done chan struct{}
	stopLeader := func() {
		if stopCh == nil {
			return
		}
		close(stopCh)
		<-done
		stopCh, done = nil, nil
	}
	for {
		select {
		case leader := <-n.notify:
			if !leader {
				if stopCh != nil {
					n.log.Info("lost leadership")
				}
				stopLeader()
				continue
			}
			if stopCh != nil {
				continue // already leading
			}
			stopCh, done = make(chan struct{}), make(chan struct{})
			go func(stop <-chan struct{}, done chan<- struct{}) {
				defer close(done)
				n.leaderLoop(stop)
			}(stopCh, done)
		case <-n.shutdownCh:
			stopLeader()
			return
		}
	}
}

// leaderLoop runs while this node is leader; stopCh closes when it is not.
func (n *Node) leaderLoop(stopCh <-chan struct{}) {
	n.log.Info("gained leadership", "term", n.raft.CurrentTerm())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stopCh:
		case <-n.shutdownCh:
		case <-ctx.Done():
		}
		cancel()
	}()
	defer func() {
		rctx, rcancel := context.WithTimeout(context.Background(), n.cfg.RevokeTimeout)
		defer rcancel()
		n.revoke(rctx)
	}()

	autopilotDone := make(chan struct{})
	go func() {
		defer close(autopilotDone)
		n.autopilotLoop(ctx)
	}()
	defer func() {
		cancel()
		<-autopilotDone
	}()
	health := time.NewTicker(n.cfg.HealthInterval)
	defer health.Stop()
	established := false
	storageLogged := false
	// giveAway hands leadership to another voter because local storage
	// failed, or the cluster version is one this binary cannot read (said
	// once per term of leadership: the failure itself was logged where it
	// happened).
	giveAway := func(serr error) {
		if !storageLogged {
			n.log.Warn("not leading: "+n.notLeadingWhy()+"; transferring leadership", "error", serr)
			storageLogged = true
		}
		if terr := await(ctx, n.raft.LeadershipTransfer()); terr != nil && ctx.Err() == nil {
			n.log.Debug("leadership transfer failed", "error", terr)
		}
	}
	for {
		if serr := n.mustNotLead(); serr != nil && !established && !n.isClosed() {
			giveAway(serr)
			select {
			case <-ctx.Done():
				return
			case <-time.After(establishRetryInterval):
			}
			continue
		}
		if !established && !n.isClosed() {
			err := n.establish(ctx)
			if err == nil {
				established = true
			} else {
				if ctx.Err() != nil {
					return
				}
				n.log.Error("failed to establish leadership; transferring it", "error", err)
				if terr := await(ctx, n.raft.LeadershipTransfer()); terr != nil {
					n.log.Warn("leadership transfer failed", "error", terr)
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(establishRetryInterval):
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-health.C:
			n.mu.Lock()
			x := n.exec
			n.mu.Unlock()
			if x == nil || n.isClosed() {
				continue // Shutdown took it
			}
			if serr := n.mustNotLead(); serr != nil {
				rctx, rcancel := context.WithTimeout(ctx, n.cfg.RevokeTimeout)
				n.revoke(rctx)
				rcancel()
				established = false
				giveAway(serr)
			} else if term := n.execTermNow(); term != n.raft.CurrentTerm() {
				// Lost and regained leadership unnoticed (NotifyCh keeps
				// only the latest value): the executor's memory may be
				// stale; its store refuses writes already.
				n.log.Warn("leadership term changed under the executor; rebuilding it", "was", term, "now", n.raft.CurrentTerm())
				rctx, rcancel := context.WithTimeout(ctx, n.cfg.RevokeTimeout)
				n.revoke(rctx)
				rcancel()
				established = false
			} else if err := x.Err(); err != nil {
				n.log.Error("executor stopped on its own; rebuilding it from the FSM", "error", err)
				rctx, rcancel := context.WithTimeout(ctx, n.cfg.RevokeTimeout)
				n.revoke(rctx)
				rcancel()
				established = false
			}
		}
	}
}

// mustNotLead is why this node is not to lead, nil if it may: its local
// storage failed, or it applied a cluster version its binary cannot read
// (it would misread what the leader's executor loads; the node is
// stopping, see stopOnUnreadable).
func (n *Node) mustNotLead() error {
	if err := n.StorageErr(); err != nil {
		return err
	}
	return n.cannotRead()
}

// notLeadingWhy says what mustNotLead's error is about.
func (n *Node) notLeadingWhy() string {
	if n.StorageErr() == nil && n.cannotRead() != nil {
		return "the cluster version is above this binary's"
	}
	return "local storage failed"
}

func (n *Node) execTermNow() uint64 { return locked.Load(&n.mu, &n.execTerm) }

func (n *Node) isClosed() bool { return locked.Load(&n.mu, &n.closed) }

// Closed reports whether Shutdown (or a fatal failure) closed the node.
func (n *Node) Closed() bool { return n.isClosed() }

// establish makes this leader ready: Barrier, then a started executor on a
// RaftStore, published for Executor().
// procedureScope is the instrumentation scope of the executors' spans.
const procedureScope = "github.com/baton-dev/baton/procedure"

func (n *Node) establish(ctx context.Context) (err error) {
	start := time.Now()
	term := n.raft.CurrentTerm()
	bctx, bcancel := context.WithTimeout(ctx, n.cfg.BarrierTimeout)
	err = await(bctx, n.raft.Barrier(n.cfg.BarrierTimeout))
	bcancel()
	if err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The Barrier must have committed in the term we establish for.
	if n.raft.State() != raft.Leader || n.raft.CurrentTerm() != term {
		return fmt.Errorf("term changed from %d while establishing: %w", term, n.notLeader())
	}
	// The barrier applied what the log held: a cluster version this
	// binary cannot read may be among it.
	if err := n.cannotRead(); err != nil {
		return err
	}
	scfg := n.cfg.Store
	scfg.FenceTerm = term // the FSM refuses this executor's writes in any other term
	scfg.Sequencer = &n.seq
	if scfg.Logger == nil {
		scfg.Logger = n.log.Named("store")
	}
	rs := raftfsm.NewRaftStore(n.raft, n.fsm, scfg)
	pcfg := procedure.Config{
		Node:     n.cfg.ID, // each procedure's Runs name the master that wrote it
		Registry: n.cfg.Registry,
		Env:      n.cfg.Env,
		Workers:  n.cfg.Workers,
		Logger:   n.log.Named("executor"),
		Metrics:  n.cfg.Metrics,
		Tracer:   tracectx.Tracer(n.cfg.TracerProvider, procedureScope),
		// The store is replicated to every member: what the records may
		// carry is what the oldest of them reads.
		RecordFormat: n.ClusterFormat,
	}
	pcfg.Store = &fencedStore{RaftStore: rs, n: n, term: term}
	if n.cfg.Executor != nil {
		n.cfg.Executor(&pcfg) // it may wrap the store (a test's fault injection)
	}
	x, err := procedure.New(pcfg)
	if err != nil {
		rs.Close()
		return fmt.Errorf("executor: %w", err)
	}
	started := false
	var stopServices func()
	defer func() {
		if err != nil {
			if stopServices != nil {
				// Started for this attempt only: a retry (or the next
				// term) builds its own, and these must not live on.
				n.mu.Lock()
				n.stopServices = nil
				n.mu.Unlock()
				stopServices()
			}
			if started {
				sctx, scancel := context.WithTimeout(context.Background(), n.cfg.RevokeTimeout)
				x.Stop(sctx)
				scancel()
			}
			rs.Close()
		}
	}()
	if n.cfg.PrepareExecutor != nil {
		if err := n.cfg.PrepareExecutor(x); err != nil {
			return fmt.Errorf("prepare executor: %w", err)
		}
	}
	if n.cfg.LeaderServices != nil {
		stop, err := n.cfg.LeaderServices(term, x)
		if err != nil {
			return fmt.Errorf("leader services: %w", err)
		}
		stopServices = stop
		n.mu.Lock()
		n.stopServices = stop
		n.mu.Unlock()
	}
	// Start loads through a raft Barrier, which, like any raft future, may
	// never be answered if raft shuts down meanwhile (see revoke): wait for
	// it only as long as ctx, and let a late start stop itself.
	startErr := make(chan error, 1)
	go func() { startErr <- x.Start() }()
	select {
	case err := <-startErr:
		if err != nil {
			return fmt.Errorf("start executor: %w", err)
		}
	case <-ctx.Done():
		go func() {
			if <-startErr == nil {
				sctx, scancel := context.WithTimeout(context.Background(), n.cfg.RevokeTimeout)
				x.Stop(sctx)
				scancel()
			}
		}()
		return ctx.Err()
	}
	started = true
	if err := ctx.Err(); err != nil {
		return err // lost leadership while loading
	}
	// The FSM sees no raft no-op or barrier entry, so its applied index
	// stops short of a commit index they end; a command of this term
	// brings it level, so that a linearizable read (read.go) need not wait
	// for the next write to reach its read index.
	nctx, ncancel := context.WithTimeout(ctx, n.cfg.BarrierTimeout)
	err = await(nctx, n.raft.Apply(raftfsm.EncodeNoop(), n.cfg.BarrierTimeout))
	ncancel()
	if err != nil {
		return fmt.Errorf("no-op command: %w", err)
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return ErrShutdown
	}
	n.exec, n.rstore, n.execTerm = x, rs, term
	n.execChangedLocked()
	n.mu.Unlock()
	info := x.LoadInfo()
	n.log.Info("leadership established", "term", n.raft.CurrentTerm(),
		"procedures", info.Live, "index", info.Index, "problems", len(x.Problems()),
		"took", time.Since(start))
	return nil
}

// revoke unpublishes and stops the executor, if any, waiting for its
// workers until ctx ends.
func (n *Node) revoke(ctx context.Context) {
	n.mu.Lock()
	x, rs, stopServices := n.exec, n.rstore, n.stopServices
	if n.exec != nil {
		n.execChangedLocked()
	}
	n.exec, n.rstore, n.stopServices = nil, nil, nil
	n.mu.Unlock()
	if stopServices != nil {
		defer stopServices()
	}
	if x == nil {
		return
	}
	if err := x.Stop(ctx); err != nil && !errors.Is(err, procedure.ErrStopped) {
		n.log.Warn("executor stop did not finish; its writes fail from now on", "error", err)
	}
	// RaftStore.Close waits for the entries it has in flight. With
	// BatchApplyCh, an entry still in raft's buffered apply channel when
	// raft shuts down never gets an answer (raft's documented caveat), so
	// after a hard shutdown Close may wait forever: bound the wait and
	// abandon the store's goroutine rather than hang the node's shutdown.
	closed := make(chan struct{})
	go func() {
		rs.Close()
		close(closed)
	}()
	t := time.NewTimer(n.cfg.RevokeTimeout)
	defer t.Stop()
	select {
	case <-closed:
		n.log.Info("executor stopped")
	case <-t.C:
		n.log.Warn("procedure store still waiting for raft after the executor stopped; abandoning it")
	}
}
