package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// Procedures is what the admin API uses of the leader's executor;
// *procedure.Executor implements it.
type Procedures interface {
	Submit(p procedure.Procedure, opts procedure.SubmitOptions) (uint64, error)
	Get(id uint64) (procedure.Info, error)
	List(f procedure.Filter) []procedure.Info
	Abort(id uint64) error
	Pause(id uint64) error
	Resume(id uint64) error
	Ack(id uint64) error
	Why(id uint64) (procedure.Why, error)
	// WhyUpTo is Why listing at most n unfinished children.
	WhyUpTo(id uint64, n int) (procedure.Why, error)
	// Wait returns once root procedure id is terminal (or ctx ends).
	Wait(ctx context.Context, id uint64) (procedure.Info, error)
	// LookupNonce finds the procedure a submission with owner and nonce
	// created (maintenance mode lets its retry through).
	LookupNonce(owner, nonce string) (uint64, bool)
}

// Backend is what the admin server uses of a master node. NodeBackend
// adapts a *cluster.Node; tests may fake it.
type Backend interface {
	// ID is this node's server id.
	ID() string
	// Leader returns the leader's id and Raft address, empty if unknown.
	Leader() (id, raftAddr string)
	// IsLeader reports whether this node is the Raft leader.
	IsLeader() bool
	// Procedures returns the leader's running executor; on a standby an
	// error wrapping cluster.ErrNotLeader, on a leader still establishing
	// itself cluster.ErrNotReady.
	Procedures() (Procedures, error)
	// Status is the node's status (cluster.Node.Status).
	Status() cluster.Status
	// Join and RemovePeer change the Raft configuration (leader only;
	// others fail with an error wrapping cluster.ErrNotLeader).
	// holdsNoState: the joiner says it holds no Raft state
	// (cluster.Node.JoinEmpty).
	Join(ctx context.Context, id, raftAddr string, holdsNoState bool) error
	RemovePeer(ctx context.Context, id string) error
	// DomainGet reads a key of the replicated domain state (local FSM).
	DomainGet(key string) ([]byte, bool)
	// Mutate commits domain mutations through Raft (leader only; others
	// fail with an error wrapping cluster.ErrNotLeader) and returns once
	// the local FSM applied them.
	Mutate(ctx context.Context, muts []raftfsm.Mutation) error
	// LinearizableRead makes the caller's next read of the local state
	// (FSM or executor) linearizable, or fails: with an error wrapping
	// cluster.ErrNotLeader where the leader must be asked instead (see
	// cluster.Node.LinearizableRead).
	LinearizableRead(ctx context.Context) (cluster.ReadInfo, error)
	// ReadState describes the local state a stale read is served from.
	ReadState() cluster.ReadInfo
	// StoredProcedure and StoredProceduresAfter read the procedures of the
	// local FSM: what is committed, which is what reads answer (the
	// executor's memory runs ahead of its commits). StoredProceduresAfter
	// walks those with an id above after, in id order.
	StoredProcedure(id uint64) ([]byte, bool)
	StoredProceduresAfter(after uint64, fn func(store.Proc) error) error
}

// NodeBackend adapts a cluster node to Backend. Domain mutations are
// committed as a PROC_BATCH entry holding only mutations, applied directly
// on the node's Raft (no procedure is involved, so the executor's group
// committing store is not needed).
func NodeBackend(n *cluster.Node) Backend { return nodeBackend{n: n, applyTimeout: 10 * time.Second} }

type nodeBackend struct {
	n            *cluster.Node
	applyTimeout time.Duration
}

func (b nodeBackend) ID() string { return b.n.ID() }

// SetMemberRemover implements memberRemoverSetter.
func (b nodeBackend) SetMemberRemover(fn func(ctx context.Context, id, why string) error) {
	b.n.SetMemberRemover(fn)
}
func (b nodeBackend) Leader() (string, string)          { return b.n.Leader() }
func (b nodeBackend) IsLeader() bool                    { return b.n.IsLeader() }
func (b nodeBackend) Status() cluster.Status            { return b.n.Status() }
func (b nodeBackend) DomainGet(k string) ([]byte, bool) { return b.n.FSM().Get(k) }

// DomainScan lists domain keys under prefix from the local FSM.
func (b nodeBackend) DomainScan(prefix string, fn func(string, []byte) bool) {
	b.n.FSM().Scan(prefix, fn)
}

// DomainScanFrom lists domain keys under prefix above after, in order.
func (b nodeBackend) DomainScanFrom(prefix, after string, fn func(string, []byte) bool) {
	b.n.FSM().ScanFrom(prefix, after, fn)
}

// ObserveDomain has the FSM tell o of the domain writes it applies.
func (b nodeBackend) ObserveDomain(o *raftfsm.PutObserver) (stop func()) { return b.n.FSM().Observe(o) }

// DomainScanBefore lists domain keys under prefix below before, newest
// first.
func (b nodeBackend) DomainScanBefore(prefix, before string, fn func(string, []byte) bool) {
	b.n.FSM().ScanBefore(prefix, before, fn)
}

// CatchUp implements catchUpper.
func (b nodeBackend) CatchUp() cluster.CatchUp { return b.n.CatchUp() }

// Live implements liver.
func (b nodeBackend) Live() (bool, string) {
	if b.n.Closed() {
		return false, "node shut down"
	}
	st := b.n.Raft().State()
	if st == raft.Shutdown {
		return false, "raft shut down"
	}
	return true, "alive (" + strings.ToLower(st.String()) + ")"
}

// Term is the node's current Raft term.
func (b nodeBackend) Term() uint64 { return b.n.Raft().CurrentTerm() }

func (b nodeBackend) Procedures() (Procedures, error) {
	x, err := b.n.Executor()
	if err != nil {
		return nil, err // not a typed nil inside the interface
	}
	return x, nil
}

func (b nodeBackend) LinearizableRead(ctx context.Context) (cluster.ReadInfo, error) {
	return b.n.LinearizableRead(ctx)
}

func (b nodeBackend) LinearizableReadVouched(ctx context.Context, v cluster.Voucher) (cluster.ReadInfo, error) {
	return b.n.LinearizableReadVouched(ctx, v)
}

// vouchedReader is a Backend whose linearizable read can count a
// forwarding standby's word that it was in the leader's term
// (cluster.Voucher): nodeBackend.
type vouchedReader interface {
	LinearizableReadVouched(ctx context.Context, v cluster.Voucher) (cluster.ReadInfo, error)
}

func (b nodeBackend) ReadState() cluster.ReadInfo { return b.n.ReadState() }

// appliedWaiter is a Backend that can wait for its local state to apply a
// Raft index (a standby catching up with the leader): nodeBackend.
type appliedWaiter interface {
	WaitApplied(ctx context.Context, index uint64) error
}

// appliedWaiterOf is b's appliedWaiter, through a domain's wrapper (whose
// embedded Backend hides it); nil if it has none: a standby then judges
// on its own copy of the grants, asking the leader nothing.
func appliedWaiterOf(b Backend) appliedWaiter {
	switch x := b.(type) {
	case appliedWaiter:
		return x
	case domainBackend:
		return appliedWaiterOf(x.Backend)
	}
	return nil
}

// WaitApplied implements appliedWaiter: index is an FSM applied index (a
// ReadInfo's), which every node's FSM reaches by the same commands.
func (b nodeBackend) WaitApplied(ctx context.Context, index uint64) error {
	return b.n.FSM().WaitApplied(ctx, index)
}

func (b nodeBackend) StoredProcedure(id uint64) ([]byte, bool) { return b.n.FSM().Proc(id) }

func (b nodeBackend) StoredProceduresAfter(after uint64, fn func(store.Proc) error) error {
	return b.n.FSM().View().ProcsAfter(after, fn)
}

// StoredProceduresBefore walks the local FSM's procedures below before,
// newest first.
func (b nodeBackend) StoredProceduresBefore(before uint64, fn func(store.Proc) error) error {
	return b.n.FSM().View().ProcsBefore(before, fn)
}

func (b nodeBackend) Join(ctx context.Context, id, addr string, holdsNoState bool) error {
	if holdsNoState {
		return b.n.JoinEmpty(ctx, id, addr)
	}
	return b.n.Join(ctx, id, addr)
}

func (b nodeBackend) RemovePeer(ctx context.Context, id string) error {
	return b.n.RemovePeer(ctx, id)
}

func (b nodeBackend) notLeader() error {
	id, addr := b.n.Leader()
	return &cluster.NotLeaderError{LeaderID: id, LeaderAddr: addr}
}

func (b nodeBackend) Mutate(ctx context.Context, muts []raftfsm.Mutation) error {
	return b.MutateInTerm(ctx, 0, muts)
}

// MutateInTerm is Mutate fenced to Raft term term (0: not fenced): every
// node's FSM refuses the entry unless it was appended in that term
// (raftfsm.EncodeFencedProcBatch), so a write computed by the leader of
// term T never lands under a later leadership, its own regained included.
func (b nodeBackend) MutateInTerm(ctx context.Context, term uint64, muts []raftfsm.Mutation) error {
	if err := checkDomainKeys(muts); err != nil {
		return err
	}
	if !b.n.IsLeader() {
		return b.notLeader()
	}
	data, err := raftfsm.EncodeFencedProcBatch(term, raftfsm.Write{Mutations: muts})
	if err != nil {
		return err
	}
	return b.await(ctx, b.n.Raft().Apply(data, b.applyTimeout))
}

// MutateNumbered implements access.Sequenced: build runs under the node's
// raftfsm.Sequencer, and its mutations go to raft there, so the audit
// records it numbers commit in that order with those a submission's entry
// carries (the executor's store numbers those under the same Sequencer).
func (b nodeBackend) MutateNumbered(ctx context.Context, build func() ([]raftfsm.Mutation, error)) error {
	if !b.n.IsLeader() {
		return b.notLeader()
	}
	var f raft.ApplyFuture
	var err error
	b.n.Sequencer().Do(func() {
		var muts []raftfsm.Mutation
		if muts, err = build(); err != nil || len(muts) == 0 {
			return
		}
		if err = checkDomainKeys(muts); err != nil {
			return
		}
		var data []byte
		if data, err = raftfsm.EncodeProcBatch(raftfsm.Write{Mutations: muts}); err != nil {
			return
		}
		f = b.n.Raft().Apply(data, b.applyTimeout)
	})
	if err != nil || f == nil {
		return err
	}
	return b.await(ctx, f)
}

// SetFolder implements access.Folding: f folds the placeholders of the
// entries proposed under the node's Sequencer, the executor's included.
func (b nodeBackend) SetFolder(f *raftfsm.Folder) { b.n.Sequencer().SetFolder(f) }

func checkDomainKeys(muts []raftfsm.Mutation) error {
	for _, m := range muts {
		if m.Key == "" {
			return procedure.Errorf(procedure.ErrInvalid, "empty domain key")
		}
	}
	return nil
}

// await waits for a domain write's outcome, or for ctx.
func (b nodeBackend) await(ctx context.Context, f raft.ApplyFuture) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return fmt.Errorf("admin: domain write: %w", b.notLeader())
	}
	if errors.Is(err, raft.ErrRaftShutdown) {
		return fmt.Errorf("admin: domain write: %w", cluster.ErrShutdown)
	}
	if err != nil {
		return fmt.Errorf("admin: domain write: %w", err)
	}
	if rerr, ok := f.Response().(error); ok && rerr != nil {
		return fmt.Errorf("admin: domain write refused: %w", rerr)
	}
	return nil
}

// LeaderBarrier waits until this leader's FSM has applied every entry
// committed before (a Raft barrier) and returns the term it leads in: what
// it then reads of the state includes everything any earlier leader
// committed, and a write fenced to that term (MutateInTerm) commits only
// while that still holds.
func (b nodeBackend) LeaderBarrier(ctx context.Context) (uint64, error) {
	r := b.n.Raft()
	term := r.CurrentTerm()
	if !b.n.IsLeader() {
		return 0, b.notLeader()
	}
	f := r.Barrier(b.applyTimeout)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			return 0, fmt.Errorf("admin: barrier: %w", err)
		}
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	// Leader now and still in term afterwards: the barrier committed in
	// term, with no later leadership in between.
	if !b.n.IsLeader() || r.CurrentTerm() != term {
		return 0, b.notLeader()
	}
	return term, nil
}

// fencer is a Backend that writes fenced to a leader term (nodeBackend);
// a test's fake need not.
type fencer interface {
	LeaderBarrier(ctx context.Context) (uint64, error)
	MutateInTerm(ctx context.Context, term uint64, muts []raftfsm.Mutation) error
}

// domainReader is a Backend as access control reads it.
type domainReader struct{ b Backend }

func (r domainReader) Get(key string) ([]byte, bool) { return r.b.DomainGet(key) }

// termer is a backend that knows the Raft term.
type termer interface{ Term() uint64 }

// stateOf is a Backend as the audit trail writes it (access.State): its
// term, if it knows one (0 otherwise).
type stateOf struct{ b Backend }

func (st stateOf) IsLeader() bool { return st.b.IsLeader() }

func (st stateOf) Mutate(ctx context.Context, muts []raftfsm.Mutation) error {
	return st.b.Mutate(ctx, muts)
}

func (st stateOf) Term() uint64 {
	if t, ok := st.b.(termer); ok {
		return t.Term()
	}
	return 0
}

// scanningStateOf is stateOf a Backend that can walk its domain keys
// (access.Scanner): only such a trail prunes.
type scanningStateOf struct {
	stateOf
	domainScans
}

// trailState is b as the audit trail uses it: one that numbers its
// records as it proposes them (access.Sequenced) where b can.
func trailState(b Backend) access.State {
	sc, scans := b.(domainScanner)
	nb := numbererOf(b)
	switch {
	case scans && nb != nil:
		st := sequencedStateOf{scanningStateOf{stateOf{b}, domainScans{sc}}, nb}
		if f, ok := nb.(access.Folding); ok {
			return foldingStateOf{st, f}
		}
		return st
	case scans:
		return scanningStateOf{stateOf{b}, domainScans{sc}}
	}
	return stateOf{b}
}

// sequencedStateOf is a scanning trail state whose backend numbers the
// records as it proposes them.
type sequencedStateOf struct {
	scanningStateOf
	access.Sequenced
}

// foldingStateOf is a sequenced trail state whose node folds the records
// one entry carries into groups (access.Folding).
type foldingStateOf struct {
	sequencedStateOf
	access.Folding
}

// numbererOf is b's access.Sequenced, through a domain's wrapper; nil if
// it has none (a test's fake backend): its trail then carries no record in
// a submission's entry.
func numbererOf(b Backend) access.Sequenced {
	switch x := b.(type) {
	case access.Sequenced:
		return x
	case domainBackend:
		return numbererOf(x.Backend)
	}
	return nil
}

// domainScans is a domainScanner as access.Scanner.
type domainScans struct{ sc domainScanner }

func (d domainScans) Scan(prefix string, fn func(string, []byte) bool) { d.sc.DomainScan(prefix, fn) }

// scannerOf is b's domain keys as access reads them; nil if b cannot
// walk them.
func scannerOf(b Backend) access.Scanner {
	if sc, ok := b.(domainScanner); ok {
		return domainScans{sc}
	}
	return nil
}

// TransferLeadership implements leadershipTransferrer.
func (b nodeBackend) TransferLeadership(ctx context.Context, to string) error {
	return b.n.TransferLeadership(ctx, to)
}
