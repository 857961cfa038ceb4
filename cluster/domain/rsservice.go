package domain

import (
	"context"
	"math"
	"sort"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/internal/tracectx"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/raftfsm"
)

// UnavailableFunc builds the UNAVAILABLE status a standby answers a region
// server with, naming what it knows of the leader (id and admin address,
// empty when unknown). Region servers follow the leader hint the admin API
// defines (admin.Unavailable builds it); the domain does not know that
// message, so whoever wires the node passes the builder in.
type UnavailableFunc func(msg, leaderID, leaderAdminAddr string) error

// GrantsFunc says what the cluster's access control grants clients, for
// region servers to apply to the clients that call them. Access control
// lives above the domain (package admin), so whoever wires the node passes
// it in.
type GrantsFunc func() *rspb.AccessGrants

// RefusalsFunc records the refusals a region server reports in a
// heartbeat (with the number it dropped, its buffer full), on the
// leader: the audit trail lives above the domain (package admin). ctx is
// the heartbeat's, naming the region server that sent it.
type RefusalsFunc func(ctx context.Context, serverID string, refusals []*rspb.RefusalReport, dropped uint64)

// noAccessControl is the grants of a master without access control: every
// client the identity policy admits may call.
var noAccessControl = &rspb.AccessGrants{Version: 1}

// RegisterMasterService registers the rspb.Master service (region server
// registration, heartbeats, transition reports) of d on gs, normally the
// admin API's gRPC server. unavailable builds its "ask the leader" answers;
// nil answers a bare UNAVAILABLE, which region servers meet by trying the
// next master. grants is told to the region servers at registration and,
// when it changed, at their heartbeats; nil: no access control. refusals
// records what the region servers refused; nil: nothing (no audit trail).
func RegisterMasterService(gs grpc.ServiceRegistrar, d *Domain, unavailable UnavailableFunc, grants GrantsFunc, refusals RefusalsFunc) {
	if unavailable == nil {
		unavailable = func(msg, _, _ string) error { return status.Error(codes.Unavailable, msg) }
	}
	if grants == nil {
		grants = func() *rspb.AccessGrants { return noAccessControl }
	}
	if refusals == nil {
		refusals = func(context.Context, string, []*rspb.RefusalReport, uint64) {}
	}
	rspb.RegisterMasterServer(gs, &masterService{d: d, unavailableFn: unavailable, grants: grants, refusals: refusals})
}

// masterService implements rspb.MasterServer. Only the leader serves it; a
// standby answers UNAVAILABLE with a leader hint, which region servers
// follow.
type masterService struct {
	rspb.UnimplementedMasterServer
	d             *Domain
	unavailableFn UnavailableFunc
	grants        GrantsFunc
	refusals      RefusalsFunc
}

// leader returns the leader services, or the UNAVAILABLE status to answer.
func (m *masterService) leader() (*services, error) {
	if s := m.d.services(); s != nil {
		return s, nil
	}
	return nil, m.unavailable("this node is not the leader (or not ready yet)")
}

// unavailable builds an UNAVAILABLE status with what this node knows of the
// leader, as the admin API does.
func (m *masterService) unavailable(msg string) error {
	var id, addr string
	if n := m.d.nodeOrNil(); n != nil {
		if l, _ := n.Leader(); l != "" && l != n.ID() {
			id = l
			if v, ok := n.FSM().Get(cluster.AdminAddrKey(l)); ok {
				addr = string(v)
			}
		}
	}
	return m.unavailableFn(msg, id, addr)
}

func (m *masterService) rpcError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if c := cluster.Code(err); c != codes.Unavailable {
		return status.Error(c, err.Error())
	}
	return m.unavailable(err.Error())
}

// RegisterServer implements rspb.MasterServer: the server gets a new start
// code, committed (term-fenced) before it is answered, and a lease. An
// earlier incarnation that still holds regions is treated as crashed: its
// crash procedure reassigns them at once if the registration says it
// dropped that incarnation (a server closes everything before registering;
// one that lists regions still hosted is refused), else once its
// self-fence deadline has passed (services.presenceOf).
func (m *masterService) RegisterServer(ctx context.Context, req *rspb.RegisterServerRequest) (*rspb.RegisterServerResponse, error) {
	if req.GetServerId() == "" || req.GetAddress() == "" {
		return nil, status.Error(codes.InvalidArgument, "register: server_id and address are required")
	}
	if n := len(req.GetServerId()); n > MaxNameLen {
		// The repair kit takes server ids up to this long: a longer one
		// could never be named to it.
		return nil, status.Errorf(codes.InvalidArgument, "register: server_id %.20q... is %d bytes long, longer than %d", req.GetServerId(), n, MaxNameLen)
	}
	if n := len(req.GetRegions()); n > 0 {
		// The regions of an earlier incarnation are reassigned as soon as
		// the new one registers; a server still serving them would hold
		// them twice. The protocol has it close them first.
		return nil, status.Errorf(codes.FailedPrecondition,
			"register %s: still hosting %s (e.g. %s); close them before registering", req.GetServerId(), countOf(n, "region"), req.GetRegions()[0])
	}
	if req.GetDroppedStartCode() == math.MaxUint64 {
		// The next start code would wrap to 0, which means "none".
		return nil, status.Errorf(codes.InvalidArgument, "register %s: dropped_start_code %d leaves no start code above it", req.GetServerId(), req.GetDroppedStartCode())
	}
	s, err := m.leader()
	if err != nil {
		return nil, err
	}
	resp, err := s.register(ctx, req)
	if err != nil {
		return nil, m.rpcError(err)
	}
	resp.Access = m.grants()
	resp.ClusterId = m.d.clusterID()
	return resp, nil
}

func (s *services) register(ctx context.Context, req *rspb.RegisterServerRequest) (*rspb.RegisterServerResponse, error) {
	id := req.GetServerId()
	s.regMu.Lock()
	old, had, err := getServer(s.reader(), id)
	if err != nil {
		s.regMu.Unlock()
		return nil, err
	}
	ref := ServerRef{id, s.nextStartCode()}
	if had && ref.StartCode <= old.StartCode {
		// Services rebuilt within one term restart the counter: a start
		// code must never come back, or an old incarnation's crash
		// procedure would expire the new one.
		ref.StartCode = old.StartCode + 1
	}
	if d := req.GetDroppedStartCode(); ref.StartCode <= d {
		// The server held a start code this state never recorded: a
		// cluster restored from a snapshot hands out codes from the
		// snapshot's term on, and the old cluster may have given this
		// server higher ones after the save. The one it gave up is the
		// highest it held (each registration's is above the last), so
		// going above it never repeats one of its own.
		ref.StartCode = d + 1
	}
	rec := Server{Address: req.GetAddress(), StartCode: ref.StartCode, State: ServerLive, Dropped: req.GetDroppedStartCode(),
		Version: req.GetVersion(), MaxFormat: version.Format(req.GetMaxFormat())}
	if rec.MaxFormat == 0 {
		// A version without a level says nothing a reader can count on
		// (0.1.0 sends neither): the incarnation is unreported, as a
		// master's report is (version.DecodeReport).
		rec.Version = ""
	}
	// The server counts its self-fence from the moment it sent this
	// request: a registration is a renewal.
	s.noteRenewal(ref)
	if err := s.commit(ctx, raftfsm.Put(ServerKey(id), mustJSON(rec))); err != nil {
		s.regMu.Unlock()
		return nil, err
	}
	if had {
		// The old incarnation is fenced now (its start code is no longer
		// the live one): ops still held or buffered for it may fail, and
		// their procedures go elsewhere or re-send to the new one.
		s.disp.RemoveServer(id)
	}
	s.leases.Grant(holderOf(ref))
	s.mu.Lock()
	delete(s.revoke, id)
	s.mu.Unlock()
	s.regMu.Unlock()
	if had {
		s.leases.Release(holderOf(ServerRef{id, old.StartCode}))
	}
	s.log.Info("region server registered", "server", ref.String(), "address", req.GetAddress(),
		"previous_start_code", old.StartCode, "version", rec.Version, "max_format", uint32(rec.MaxFormat))

	if had {
		oldRef := ServerRef{id, old.StartCode}
		held := false
		if err := scanRegions(s.reader(), func(_ string, rg Region) bool {
			held = rg.onServer(oldRef)
			return !held
		}); err != nil {
			s.log.Warn("register: reading regions", "error", err)
		}
		if held {
			s.submitCrash(oldRef, "re-registered with a new start code")
		}
	}
	return &rspb.RegisterServerResponse{
		StartCode:           ref.StartCode,
		HeartbeatIntervalMs: s.toldInterval().Milliseconds(),
		Term:                s.term,
	}, nil
}

// Heartbeat implements rspb.MasterServer: it renews the incarnation's
// lease. An incarnation that is not the live one, whose lease expired or is
// unknown, or that the dispatcher gave up on, is told expired = true: it
// drops its regions and registers again.
//
// A renewal is what lets a region server go on serving (it counts its
// self-fence period from the heartbeat it sent), so the leader records it
// (noteRenewal) before its last liveness check, and answers it only after
// verifying its leadership with a quorum: a deposed leader that has not
// noticed yet (a paused process, a partition) must not extend a server's
// serving past what the new leader can see (services.presenceOf).
func (m *masterService) Heartbeat(ctx context.Context, req *rspb.HeartbeatRequest) (*rspb.HeartbeatResponse, error) {
	s, err := m.leader()
	if err != nil {
		return nil, err
	}
	if len(req.GetRefusals()) > 0 || req.GetRefusalsDropped() > 0 {
		// Whatever the lease's fate: they happened.
		m.refusals(ctx, req.GetServerId(), req.GetRefusals(), req.GetRefusalsDropped())
	}
	ref := ServerRef{req.GetServerId(), req.GetStartCode()}
	expired, alive, err := s.renewable(ref)
	if err != nil {
		return nil, m.rpcError(err)
	}
	if !expired {
		if err := s.leases.Renew(holderOf(ref)); err != nil {
			expired = true
		}
	}
	if expired {
		s.log.Info("heartbeat from an expired region server: telling it", "server", ref.String())
		if alive {
			// Revoked, or its lease ran out ahead of the monitor: make it
			// official now. Its crash procedure reassigns the regions only
			// once the server has certainly stopped serving them: this
			// answer may be lost.
			s.background(func() { s.expire(ref, "told expired at heartbeat") })
		}
		return &rspb.HeartbeatResponse{Expired: true, Term: s.term, ClusterId: m.d.clusterID()}, nil
	}
	if err := s.verifyLeader(ctx); err != nil {
		return nil, m.rpcError(err)
	}
	resp := &rspb.HeartbeatResponse{Term: s.term, ClusterId: m.d.clusterID()}
	// Read after the leadership check: a revocation committed before the
	// heartbeat arrived is in what the server is told.
	g := m.grants()
	resp.AccessVersion = g.GetVersion()
	if g.GetVersion() != req.GetAccessVersion() {
		resp.Access = g
	}
	return resp, nil
}

// renewable decides whether incarnation ref may be renewed. alive: it is
// the live incarnation in the replicated state.
func (s *services) renewable(ref ServerRef) (expired, alive bool, err error) {
	if _, alive, err = serverAlive(s.reader(), ref); err != nil || !alive {
		return true, alive, err
	}
	if s.revoked(ref) {
		return true, true, nil
	}
	s.noteRenewal(ref)
	// Checked again after noting: an expiry committed before this read is
	// seen here, one committed after it sees the note.
	if _, alive, err = serverAlive(s.reader(), ref); err != nil || !alive {
		return true, alive, err
	}
	return s.revoked(ref), true, nil
}

// verifyLeader confirms with a quorum that this node still leads the
// services' term.
func (s *services) verifyLeader(ctx context.Context) error {
	return s.awaitRaft(ctx, "verifying leadership", s.n.Raft().VerifyLeader())
}

// ReportTransition implements rspb.MasterServer.
//
// The dispatcher's per-op result is the authority on an operation a
// procedure asked for: it comes exactly once, for that very send. A report
// carries neither term nor attempt and may be late, belonging to an
// earlier send: a stale FAILED_OPEN taken for the answer to a later,
// successful open would send the region to a second server, and a stale
// OPEN (of an earlier open on the same incarnation, closed since: moved
// away and back, or closed by the server) taken for the answer to a later
// open still on its way would record the region OPEN where it is not
// (IoTDB #17908's shape; TestScenarioIOTDB17908StaleOpenAnswerConfirmsNothing).
// So no report answers a waiting procedure; a report about a region in
// transition is only logged. A region that closed by itself
// while recorded OPEN there, with no procedure on it, is reopened: closed
// first (idempotent), then opened, so even a stale report cannot make it
// open twice.
func (m *masterService) ReportTransition(ctx context.Context, req *rspb.ReportTransitionRequest) (_ *rspb.ReportTransitionResponse, err error) {
	if t := m.d.tracer; t != nil {
		// The region server sends the span of the operation the report is
		// about, when it has one: the report joins that trace.
		var span trace.Span
		_, span = t.Start(tracectx.Extract(ctx), "Master/ReportTransition",
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(
				attribute.String("rpc.system", "grpc"),
				attribute.String("rpc.service", rspb.Master_ServiceDesc.ServiceName),
				attribute.String("rpc.method", "ReportTransition"),
				attribute.String("baton.server", ServerRef{req.GetServerId(), req.GetStartCode()}.String()),
				attribute.String("baton.region", req.GetRegion()),
				attribute.String("baton.region.state", req.GetState()),
			))
		defer func() {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(otelcodes.Error, err.Error())
			}
			span.End()
		}()
	}
	s, err := m.leader()
	if err != nil {
		return nil, err
	}
	switch req.GetState() {
	case "OPEN", "FAILED_OPEN", "CLOSED":
	default:
		return nil, status.Errorf(codes.InvalidArgument, "report: unknown state %q", req.GetState())
	}
	ref := ServerRef{req.GetServerId(), req.GetStartCode()}
	rg, ok, err := getRegion(s.reader(), req.GetRegion())
	if err != nil {
		return nil, m.rpcError(err)
	}
	if !ok || rg.Server != ref.ID || rg.StartCode != ref.StartCode {
		s.log.Debug("transition report about a region not recorded there; ignored", "region", req.GetRegion(), "server", ref.String(), "state", req.GetState())
		return &rspb.ReportTransitionResponse{}, nil
	}
	switch {
	case rg.ProcID != 0:
		s.log.Info("transition report for a region in transition; the dispatcher's result decides",
			"region", req.GetRegion(), "server", ref.String(), "state", req.GetState(), "proc_id", rg.ProcID, "error", req.GetError())
	case req.GetState() == "CLOSED" && rg.State == RegionOpen:
		ns, table := SplitTableName(rg.Table)
		p := &TransitRegionState{Region: req.GetRegion(), Namespace: ns, Table: table, Kind: KindReopen}
		id, err := s.x.Submit(p, procedure.SubmitOptions{Owner: "master"})
		if err != nil {
			return nil, m.rpcError(err)
		}
		s.log.Info("region closed by its server: reopening", "region", req.GetRegion(), "server", ref.String(), "proc_id", id)
	}
	return &rspb.ReportTransitionResponse{}, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
