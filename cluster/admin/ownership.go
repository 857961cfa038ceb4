package admin

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/security"
)

// submitterOf is what a procedure records of the caller that submitted it
// (procedure.SubmitOptions.Submitter): who the call was served for,
// "" when there is no one to name (access control off).
func submitterOf(ctx context.Context) string {
	p, ok := principalOf(ctx)
	if !ok || p.Kind == access.KindAnonymous {
		return ""
	}
	return p.String()
}

// ownerOf names the identity that submitted procedure id's tree (its
// root's submitter: a child acts for its root's submitter), read from the
// committed record. known is false for a procedure this leader has no
// record of; "" is no one's: one the cluster submitted itself, or one
// written by 0.1.0 or by a master of that version, which drops the field.
func (s *Server) ownerOf(x Procedures, id uint64) (owner string, known bool) {
	root := id
	if info, err := x.Get(id); err == nil {
		root = info.RootID
	}
	if data, ok := s.b.StoredProcedure(root); ok {
		if sum, err := procedure.DecodeSummary(data); err == nil {
			return string(sum.Submitter), true
		}
	}
	// Submitted, its record not yet applied here.
	if info, err := x.Get(root); err == nil {
		return info.Submitter, true
	}
	return "", false
}

// actOn decides, on the leader, whether the caller of ctx may act on what
// (a procedure, or an external lock: the procedure of that id) whose
// identity it is: the identity that submitted it may; another needs
// force and permission admin, and is logged (its audit record holds the
// request, force included). Masters may: they act for the cluster, or
// forward for a caller named to them (principalOf is that caller). With
// access control off, or for no one's, everyone may, as before owners
// were recorded.
func (s *Server) actOn(ctx context.Context, x Procedures, what string, id uint64, force bool) error {
	if s.cfg.Access == nil || !s.acc.Enforce {
		return nil
	}
	p, ok := principalOf(ctx)
	if !ok || p.Kind == access.KindMaster {
		return nil
	}
	owner, known := s.ownerOf(x, id)
	if !known || owner == "" || owner == p.String() {
		return nil
	}
	if !force {
		return status.Errorf(codes.PermissionDenied, "admin: %s belongs to %s, not %s: acting on another's needs --force, with permission admin", what, owner, p)
	}
	if !p.Perm.Covers(security.PermAdmin) {
		return status.Errorf(codes.PermissionDenied, "admin: %s belongs to %s: --force needs permission admin; %s holds %s", what, owner, p, heldText(p.Perm))
	}
	s.log.Warn("acting on another identity's procedure (forced)", "target", what, "owner", owner, "principal", p.String())
	return nil
}

// heldText says what permission a caller holds, as refusals do.
func heldText(perm security.Permission) string {
	if perm == security.PermNone {
		return "no permission"
	}
	return "permission " + perm.String()
}
