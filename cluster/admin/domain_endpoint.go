package admin

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// Domain serves the namespace, table, region, region-server and external
// lock calls of the admin API; package cluster/domain implements it. It
// answers in the plain values of package catalog, which this package
// translates into its messages (translate.go); the admin layer does not
// import the domain, whose in-package tests drive it through this API. The
// server stays ignorant of the domain's procedures: Domain builds them from
// the request (Build, which validates it: errors wrap procedure.ErrInvalid;
// each operation's file in the domain registers its builder), and the server
// submits them on the leader with the request's nonce, forwarding from a
// standby like SubmitProcedure does. The methods it builds for have no
// handler here: the server serves them by name (gateway.go).
//
// Reads (namespaces, tables, regions) come from the answering node's FSM:
// the server makes them linearizable (read.go) or serves them stale, as
// asked. ListServers needs the leader's lease view (renewals are not
// replicated), so it fails with an error wrapping cluster.ErrNotLeader on a
// standby and is forwarded.
type Domain interface {
	// Build validates req, the request of the admin method method (its
	// full gRPC name, adminpb.Admin_*_FullMethodName), and builds the
	// procedure it asks for. Each operation registers its own builder in
	// the domain.
	Build(method string, req proto.Message) (procedure.Procedure, error)
	// BuildMethods are the methods Build builds for (full gRPC names):
	// each must start a procedure and answer a SubmitProcedureResponse,
	// or New refuses the domain.
	BuildMethods() []string
	// ReadableValue is the stored value v of domain key key as /debug/domain
	// shows it: JSON, whichever form the domain stores it in.
	ReadableValue(key string, v []byte) []byte

	ListNamespaces() ([]string, error)
	NamespaceExists(name string) (bool, error)
	// DescribeTable fails with an error wrapping procedure.ErrNotFound
	// for an unknown table. It returns a first page of the regions only.
	DescribeTable(ns, name string) (catalog.Table, error)
	// The lists answer one page each (see catalog's list.go); bad
	// filters fail with errors wrapping procedure.ErrInvalid.
	ListTablesPage(q catalog.TableQuery) (catalog.TablePage, error)
	ListRegionsPage(q catalog.RegionQuery) (catalog.RegionPage, error)
	ListServersPage(q catalog.ServerQuery) (catalog.ServerPage, error)
	// ListRecordedServersPage is ListServersPage on any master, without
	// the leader's lease view (lease state "unknown" for live servers).
	ListRecordedServersPage(q catalog.ServerQuery) (catalog.ServerPage, error)
	ServerRegions(ctx context.Context, q catalog.ServerRegionsQuery) (catalog.ServerRegions, error)

	// The lock calls run on the leader, with its executor.
	AcquireLock(x catalog.Executor, req catalog.LockRequest) (catalog.Lock, error)
	LockHeartbeat(ctx context.Context, x catalog.Executor, id uint64, lease time.Duration) (catalog.Lock, error)
	ReleaseLock(ctx context.Context, x catalog.Executor, id uint64) (catalog.Lock, error)

	// The repair kit (repair_endpoint.go) runs on the leader, with the
	// executor of the domain's leader services; elsewhere its calls fail
	// with an error wrapping cluster.ErrNotLeader.
	AssignRegion(ctx context.Context, region, server string, o catalog.RepairOptions) (catalog.RepairResult, error)
	UnassignRegion(ctx context.Context, region string, o catalog.RepairOptions) (catalog.RepairResult, error)
	RecoverServer(ctx context.Context, server string, o catalog.RepairOptions) (catalog.RepairResult, error)
	CancelProcedures(ctx context.Context, f catalog.CancelFilter, o catalog.RepairOptions) (catalog.CancelResult, error)
	BypassProcedure(ctx context.Context, id uint64, recursive bool, o catalog.RepairOptions) (catalog.RepairResult, error)
	SetMaintenance(ctx context.Context, on bool, reason string, o catalog.RepairOptions) (catalog.RepairResult, error)
	// Maintenance and ListRepairs read this node's replicated state.
	Maintenance() (catalog.Maintenance, error)
	ListRepairs(after uint64, limit int) ([]catalog.Repair, error)
	// CheckSubmissions refuses a new submission while maintenance mode is
	// on (FAILED_PRECONDITION); the retry of one that got through (owner
	// and nonce known to x) passes.
	CheckSubmissions(x catalog.Executor, owner, nonce string) error
}

// DomainBackend is a Backend that also serves the domain calls. A Backend
// that does not implement it answers them UNIMPLEMENTED (so existing
// backends and fakes need no change).
type DomainBackend interface {
	Backend
	Domain() Domain
}

// WithDomain returns b serving the domain calls with d.
func WithDomain(b Backend, d Domain) Backend { return domainBackend{Backend: b, d: d} }

type domainBackend struct {
	Backend
	d Domain
}

func (b domainBackend) Domain() Domain { return b.d }

// Build passes the wrapped backend's through (builder): the embedded
// interface would hide it, and the node would then report, and answer
// ClusterStatus with, this binary's default build instead of its own.
func (b domainBackend) Build() version.Build { return buildOf(b.Backend) }

// Removed and MarkRemoved pass the wrapped backend's through (remover).
func (b domainBackend) Removed() bool {
	r, ok := b.Backend.(remover)
	return ok && r.Removed()
}

func (b domainBackend) MarkRemoved() {
	if r, ok := b.Backend.(remover); ok {
		r.MarkRemoved()
	}
}

// DomainScan passes the wrapped backend's through, for /debug/domain,
// with the values the domain stores in binary (region records) as JSON.
func (b domainBackend) DomainScan(prefix string, fn func(string, []byte) bool) {
	if sc, ok := b.Backend.(interface {
		DomainScan(string, func(string, []byte) bool)
	}); ok {
		if b.d == nil {
			sc.DomainScan(prefix, fn)
			return
		}
		sc.DomainScan(prefix, func(k string, v []byte) bool { return fn(k, b.d.ReadableValue(k, v)) })
	}
}

// DomainScanFrom passes the wrapped backend's through (the audit trail,
// stored as it is read).
func (b domainBackend) DomainScanFrom(prefix, after string, fn func(string, []byte) bool) {
	if sc, ok := b.Backend.(domainScannerFrom); ok {
		sc.DomainScanFrom(prefix, after, fn)
	}
}

// ObserveDomain passes the wrapped backend's through (the audit file).
func (b domainBackend) ObserveDomain(o *raftfsm.PutObserver) (stop func()) {
	if ob, ok := b.Backend.(domainObserver); ok {
		return ob.ObserveDomain(o)
	}
	return func() {}
}

// DomainScanBefore passes the wrapped backend's through.
func (b domainBackend) DomainScanBefore(prefix, before string, fn func(string, []byte) bool) {
	if sc, ok := b.Backend.(domainScannerBefore); ok {
		sc.DomainScanBefore(prefix, before, fn)
	}
}

// Term passes the wrapped backend's through.
func (b domainBackend) Term() uint64 {
	if t, ok := b.Backend.(termer); ok {
		return t.Term()
	}
	return 0
}

// SetMemberRemover passes the wrapped backend's through
// (memberRemoverSetter): the embedded interface would hide it, and the
// autopilot would then remove a dead member without its records or audit.
func (b domainBackend) SetMemberRemover(fn func(ctx context.Context, id, why string) error) {
	if r, ok := b.Backend.(memberRemoverSetter); ok {
		r.SetMemberRemover(fn)
	}
}

// LeaderBarrier passes the wrapped backend's through (fencer); without
// one it answers term 0, which MutateInTerm takes as no fence.
func (b domainBackend) LeaderBarrier(ctx context.Context) (uint64, error) {
	if f, ok := b.Backend.(fencer); ok {
		return f.LeaderBarrier(ctx)
	}
	return 0, nil
}

// MutateInTerm passes the wrapped backend's through (fencer), else Mutate.
func (b domainBackend) MutateInTerm(ctx context.Context, term uint64, muts []raftfsm.Mutation) error {
	if f, ok := b.Backend.(fencer); ok {
		return f.MutateInTerm(ctx, term, muts)
	}
	return b.Backend.Mutate(ctx, muts)
}

// StoredProceduresBefore passes the wrapped backend's through, for
// listings newest first.
func (b domainBackend) StoredProceduresBefore(before uint64, fn func(store.Proc) error) error {
	sb, ok := b.Backend.(storedProceduresBefore)
	if !ok {
		return procedure.Errorf(procedure.ErrInvalid, "this node cannot list procedures newest first")
	}
	return sb.StoredProceduresBefore(before, fn)
}

// domainOwner is the owner of the domain calls' submissions (part of the
// nonce key).
const domainOwner = "admin"

func (s *Server) domain() (Domain, error) {
	if db, ok := s.b.(DomainBackend); ok && db.Domain() != nil {
		return db.Domain(), nil
	}
	return nil, status.Error(codes.Unimplemented, "admin: this node serves no domain (namespaces, tables, regions)")
}

// CatchUp, Live and TransferLeadership pass the wrapped backend's through
// (catchUpper, liver, leadershipTransferrer), which the embedded
// interface would hide: a domain master's /readyz would then not look at
// its lag.
func (b domainBackend) CatchUp() cluster.CatchUp {
	if c, ok := b.Backend.(catchUpper); ok {
		return c.CatchUp()
	}
	return cluster.CatchUp{CaughtUp: true}
}

func (b domainBackend) Live() (bool, string) { return Live(b.Backend) }

func (b domainBackend) TransferLeadership(ctx context.Context, to string) error {
	if t, ok := b.Backend.(leadershipTransferrer); ok {
		return t.TransferLeadership(ctx, to)
	}
	return status.Error(codes.Unimplemented, "admin: this node cannot transfer leadership")
}

// LinearizableReadVouched passes the wrapped backend's through
// (vouchedReader), which the embedded interface would hide: a domain
// master's forwarded reads would each cost the leader a round. Without
// it the word counts for nothing, and a round confirms the reads.
// (WaitApplied is found through the wrapper instead, appliedWaiterOf: a
// wrapper claiming it could only answer a caught-up standby's leader
// read with a refusal.)
func (b domainBackend) LinearizableReadVouched(ctx context.Context, v cluster.Voucher) (cluster.ReadInfo, error) {
	if vr, ok := b.Backend.(vouchedReader); ok {
		return vr.LinearizableReadVouched(ctx, v)
	}
	return b.Backend.LinearizableRead(ctx)
}
