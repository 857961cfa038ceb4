package admin

import (
	"context"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// The repair kit's calls (admin.proto, "Repair kit"). The domain plans,
// guards, records and does them (cluster/domain, repair.go); this file
// checks the request, names the caller, and translates.

// peerKey carries, on a forwarded call, the address the call came from
// (the client's), so that the leader's repair record names the client and
// not the standby that forwarded it.
const peerKey = security.PeerKey

// peerAddr is the address ctx's call came from, "" if unknown.
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// callerOf names who makes a repair call: the principal access control
// found, the name the caller gave, the address the call came from, and
// the standby that forwarded it. The address and the standby are taken
// from a master only (callOrigin: its certificate, or the cluster secret
// without TLS); the name given is the caller's own word, kept beside the
// principal.
func callerOf(ctx context.Context, c *adminpb.RepairCaller) catalog.Caller {
	out := catalog.Caller{Name: c.GetCaller()}
	out.Peer, out.Via = callOrigin(ctx)
	// Who the access interceptor found is no one's word: it leads, and
	// the name the caller gave follows.
	if p, ok := principalOf(ctx); ok && p.Kind != access.KindAnonymous {
		out.Name = p.String()
		if given := c.GetCaller(); given != "" {
			out.Name += " (" + given + ")"
		}
	}
	return out
}

// checkSubmissions refuses a new submission while maintenance mode is on
// (FAILED_PRECONDITION), not the retry of one that got through; a node
// without the domain has no maintenance mode.
func (s *Server) checkSubmissions(x Procedures, owner, nonce string) error {
	if db, ok := s.b.(DomainBackend); ok && db.Domain() != nil {
		return db.Domain().CheckSubmissions(x, owner, nonce)
	}
	return nil
}

func repairMsg(r catalog.RepairResult) *adminpb.RepairResponse {
	out := &adminpb.RepairResponse{DryRun: r.DryRun, Summary: r.Summary, ProcIds: r.ProcIDs, Bypassed: r.Bypassed, Record: r.Record}
	if r.Maintenance != nil {
		out.Maintenance = maintenanceMsg(*r.Maintenance)
	}
	return out
}

func maintenanceMsg(m catalog.Maintenance) *adminpb.Maintenance {
	out := &adminpb.Maintenance{On: m.On, By: m.By, Reason: m.Reason}
	if !m.Since.IsZero() {
		out.SinceUnixMs = m.Since.UnixMilli()
	}
	return out
}

// repairCall runs a repair call on the leader (forwarding from a standby).
// Its permission (admin, where access control is enforced) was checked
// before it got here, by the access interceptor (MethodPermission).
func repairCall[T any](s *Server, ctx context.Context, action string, local func(Domain, Procedures) (T, error), remote func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	var zero T
	d, err := s.domain()
	if err != nil {
		return zero, err
	}
	return onLeader(s, ctx, func(x Procedures) (T, error) { return local(d, x) }, remote)
}

func repairOpts(ctx context.Context, c *adminpb.RepairCaller, override, dryRun bool, nonce string) catalog.RepairOptions {
	return catalog.RepairOptions{Caller: callerOf(ctx, c), Override: override, DryRun: dryRun, Nonce: nonce}
}

// AssignRegion implements adminpb.AdminServer.
func (s *Server) AssignRegion(ctx context.Context, req *adminpb.RepairRegionRequest) (*adminpb.RepairResponse, error) {
	if req.GetRegion() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: region assign: region is required")
	}
	return repairCall(s, ctx, "region assign", func(d Domain, _ Procedures) (*adminpb.RepairResponse, error) {
		r, err := d.AssignRegion(ctx, req.GetRegion(), req.GetServer(), repairOpts(ctx, req.GetCaller(), req.GetOverride(), req.GetDryRun(), req.GetNonce()))
		return repairMsg(r), err
	}, relayed(req, adminpb.AdminClient.AssignRegion))
}

// UnassignRegion implements adminpb.AdminServer.
func (s *Server) UnassignRegion(ctx context.Context, req *adminpb.RepairRegionRequest) (*adminpb.RepairResponse, error) {
	if req.GetRegion() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: region unassign: region is required")
	}
	if req.GetServer() != "" {
		return nil, status.Error(codes.InvalidArgument, "admin: region unassign: a server is for assign only (a region is closed where it is)")
	}
	return repairCall(s, ctx, "region unassign", func(d Domain, _ Procedures) (*adminpb.RepairResponse, error) {
		r, err := d.UnassignRegion(ctx, req.GetRegion(), repairOpts(ctx, req.GetCaller(), req.GetOverride(), req.GetDryRun(), req.GetNonce()))
		return repairMsg(r), err
	}, relayed(req, adminpb.AdminClient.UnassignRegion))
}

// RecoverServer implements adminpb.AdminServer.
func (s *Server) RecoverServer(ctx context.Context, req *adminpb.RecoverServerRequest) (*adminpb.RepairResponse, error) {
	if req.GetServer() == "" {
		return nil, status.Error(codes.InvalidArgument, "admin: rs recover: server is required")
	}
	return repairCall(s, ctx, "rs recover", func(d Domain, _ Procedures) (*adminpb.RepairResponse, error) {
		r, err := d.RecoverServer(ctx, req.GetServer(), repairOpts(ctx, req.GetCaller(), req.GetOverride(), req.GetDryRun(), ""))
		return repairMsg(r), err
	}, relayed(req, adminpb.AdminClient.RecoverServer))
}

// CancelProcedures implements adminpb.AdminServer.
func (s *Server) CancelProcedures(ctx context.Context, req *adminpb.CancelProceduresRequest) (*adminpb.CancelProceduresResponse, error) {
	olderThan, err := msDuration("proc cancel", "older_than_ms", req.GetOlderThanMs())
	if err != nil {
		return nil, err
	}
	f := catalog.CancelFilter{Type: req.GetType(), State: req.GetState(), Owner: req.GetOwner(),
		OlderThan: olderThan, IDs: req.GetIds(), MaxID: req.GetMaxId()}
	return repairCall(s, ctx, "proc cancel", func(d Domain, x Procedures) (*adminpb.CancelProceduresResponse, error) {
		r, err := d.CancelProcedures(ctx, f, repairOpts(ctx, req.GetCaller(), false, req.GetDryRun(), ""))
		if err != nil {
			return nil, err
		}
		out := &adminpb.CancelProceduresResponse{DryRun: r.DryRun, Record: r.Record}
		for _, info := range r.Cancelled {
			// What it waited for, on a dry run; once cancelled, it rolls
			// back.
			why := "rolling back"
			if r.DryRun {
				why = s.whyReason(x, info)
			}
			out.Cancelled = append(out.Cancelled, toProto(info, why))
		}
		for _, sk := range r.Skipped {
			out.Skipped = append(out.Skipped, &adminpb.SkippedProcedure{Procedure: toProto(sk.Info, s.whyReason(x, sk.Info)), Reason: sk.Reason})
		}
		return clipCancelled(out), nil
	}, relayed(req, adminpb.AdminClient.CancelProcedures))
}

// BypassProcedure implements adminpb.AdminServer.
func (s *Server) BypassProcedure(ctx context.Context, req *adminpb.BypassProcedureRequest) (*adminpb.RepairResponse, error) {
	if req.GetId() == 0 {
		return nil, status.Error(codes.InvalidArgument, "admin: proc bypass: id is required")
	}
	return repairCall(s, ctx, "proc bypass", func(d Domain, _ Procedures) (*adminpb.RepairResponse, error) {
		r, err := d.BypassProcedure(ctx, req.GetId(), req.GetRecursive(), repairOpts(ctx, req.GetCaller(), req.GetOverride(), req.GetDryRun(), ""))
		return repairMsg(r), err
	}, relayed(req, adminpb.AdminClient.BypassProcedure))
}

// SetMaintenance implements adminpb.AdminServer.
func (s *Server) SetMaintenance(ctx context.Context, req *adminpb.SetMaintenanceRequest) (*adminpb.RepairResponse, error) {
	action := "maintenance off"
	if req.GetOn() {
		action = "maintenance on"
	}
	return repairCall(s, ctx, action, func(d Domain, _ Procedures) (*adminpb.RepairResponse, error) {
		r, err := d.SetMaintenance(ctx, req.GetOn(), req.GetReason(), repairOpts(ctx, req.GetCaller(), false, req.GetDryRun(), ""))
		return repairMsg(r), err
	}, relayed(req, adminpb.AdminClient.SetMaintenance))
}

// GetMaintenance implements adminpb.AdminServer: a read of the replicated
// state at the asked consistency.
func (s *Server) GetMaintenance(ctx context.Context, req *adminpb.GetMaintenanceRequest) (*adminpb.Maintenance, error) {
	return domainRead(s, ctx, req.GetConsistency(), func(d Domain, ri *adminpb.ReadInfo) (*adminpb.Maintenance, error) {
		m, err := d.Maintenance()
		if err != nil {
			return nil, err
		}
		out := maintenanceMsg(m)
		out.Read = ri
		return out, nil
	}, relayed(req, adminpb.AdminClient.GetMaintenance))
}

// maxRepairPageBytes bounds a page of repair records, far below gRPC's
// default 4 MiB message limit: a page ends at page_size records or at
// this size, whichever comes first (the domain bounds a record too, to
// some 20 KiB).
const maxRepairPageBytes = 1 << 20

// ListRepairs implements adminpb.AdminServer: the records in sequence
// order; the page token is the last sequence number of the previous page.
func (s *Server) ListRepairs(ctx context.Context, req *adminpb.ListRepairsRequest) (*adminpb.ListRepairsResponse, error) {
	if err := checkPageSize("list repairs", req.GetPageSize()); err != nil {
		return nil, err
	}
	limit := pageSizeOr(req.GetPageSize(), DefaultPageSize, MaxPageSize)
	var after uint64
	if tok := req.GetPageToken(); tok != "" {
		var err error
		if after, err = strconv.ParseUint(tok, 10, 64); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "admin: list repairs: bad page_token %q (pass next_page_token of the previous page)", tok)
		}
	}
	return domainRead(s, ctx, req.GetConsistency(), func(d Domain, ri *adminpb.ReadInfo) (*adminpb.ListRepairsResponse, error) {
		recs, err := d.ListRepairs(after, limit)
		if err != nil {
			return nil, err
		}
		out := &adminpb.ListRepairsResponse{Read: ri}
		out.Records, out.NextPageToken = repairPage(recs, limit, maxRepairPageBytes)
		return out, nil
	}, relayed(req, adminpb.AdminClient.ListRepairs))
}

// repairPage is a page of recs, which ListRepairs read with limit: as
// many as fit in maxBytes (at least one), and the token of the next page
// if there may be one.
func repairPage(recs []catalog.Repair, limit, maxBytes int) ([]*adminpb.RepairRecord, string) {
	var out []*adminpb.RepairRecord
	size := 0
	for _, r := range recs {
		m := &adminpb.RepairRecord{Seq: r.Seq, AtUnixMs: r.At.UnixMilli(), Action: r.Action, Args: r.Args,
			Caller: r.Caller.Name, Peer: r.Caller.Peer, Via: r.Caller.Via, Node: r.Node, Outcome: r.Outcome, Code: r.Code, Result: r.Result}
		n := proto.Size(m)
		if len(out) > 0 && size+n > maxBytes {
			break
		}
		size += n
		out = append(out, m)
	}
	if len(out) > 0 && (len(out) < len(recs) || len(recs) == limit) {
		return out, strconv.FormatUint(out[len(out)-1].GetSeq(), 10)
	}
	return out, ""
}

// maintenanceOf is the answering node's maintenance mode for its status,
// nil without the domain or when it cannot be read.
func (s *Server) maintenanceOf() *adminpb.Maintenance {
	db, ok := s.b.(DomainBackend)
	if !ok || db.Domain() == nil {
		return nil
	}
	m, err := db.Domain().Maintenance()
	if err != nil {
		return nil
	}
	return maintenanceMsg(m)
}
