package admin

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// A standby judges a call against its own copy of the grants, which may
// lag the leader's by its replication lag. Letting a revocation through
// for that long is documented (docs/security.md); refusing a grant the
// caller was just told is in place is not: 'acl grant ops' answered, then
// ops's next call refused, is a read older than an acknowledged write. So
// a standby does not answer a refusal that rests on that copy (a client
// or token holding too little, a token it does not know yet): it hands
// the call to the leader, which applied every acknowledged grant before
// acknowledging it, and answers what the leader answers. The leader
// judges, serves or refuses, and records it.
//
// Only unary calls a client may make are handed on, and only where the call's
// principal goes with it (leaderClient: to a master proven by its
// certificate or the cluster secret), never to be judged as the master
// forwarding it. A refusal that does not depend on the grants
// (master-only methods, a certificate where only tokens count, a
// malformed or expired token) is answered at once, and so is one the
// leader cannot be asked for (none known, not reachable), one over the
// caller's refusal limit (charged here).

// A stream (a watch, a snapshot save) is not handed on, nor is a
// leadership transfer or a peer removal, whose forwards must outlive the
// leader they reach (notHandedOn): their refusal at a standby first
// brings the standby's copy up to the leader's (caughtUp), and the call
// is judged again on it.

// refusalRestsOnGrants says the refusal err of a call by p (resolve's or
// Authorize's) could be lifted by a grant or token the leader holds and
// this node has not applied yet.
func refusalRestsOnGrants(ctx context.Context, p access.Principal, method string, err error) bool {
	if _, clientMay := access.MethodPermission(method); !clientMay {
		return false
	}
	switch status.Code(err) {
	case codes.PermissionDenied:
		return p.Kind == access.KindClient || p.Kind == access.KindToken
	case codes.Unauthenticated:
		// A well-formed token this node's copy does not hold: made at the
		// leader, perhaps, a moment ago. resolve named the caller by its
		// certificate, or anonymous, for it; one it holds that expired is
		// named as the token (and refused whatever the leader holds), and
		// a malformed one fails to parse.
		tok, ok := security.TokenOf(ctx)
		if !ok || p.Kind == access.KindToken {
			return false
		}
		_, _, perr := security.ParseToken(tok)
		return perr == nil
	}
	return false
}

// notHandedOn are the methods whose forward to the leader is special:
// the leader hands its leadership (or itself) away while serving them,
// and a forward tracked as any other's is cut when that happens.
var notHandedOn = map[string]bool{"TransferLeadership": true, "RemovePeer": true}

// mustCarryPrincipalKey marks the context of a call leaderJudges hands
// on: leaderClient refuses to send it where the call's principal would
// not go with it.
type mustCarryPrincipalKey struct{}

// tokenHolderKey names, on a call handed to the leader with a token this
// standby does not hold, the client certificate that presented it: the
// leader's record of a refusal names it, as the standby's would have
// (resolve). It names; it grants nothing.
const tokenHolderKey = "x-baton-token-holder"

// leaderJudges hands the unary call full (req) that this standby would
// refuse with refusal to the leader, when refusalRestsOnGrants: judged,
// and the leader's answer; not judged where it is this node's to refuse
// (it leads, the call was forwarded to it, the leader cannot be reached).
func (s *Server) leaderJudges(ctx context.Context, p access.Principal, full, method string, req any, refusal error) (resp any, judged bool, err error) {
	if !s.acc.Enforce || s.b.IsLeader() || isForwarded(ctx) || notHandedOn[method] || !refusalRestsOnGrants(ctx, p, method, refusal) {
		return nil, false, nil
	}
	in, ok := req.(proto.Message)
	if !ok {
		return nil, false, nil
	}
	out, ok := responseOf(method)
	if !ok {
		return nil, false, nil
	}
	fctx := ctx
	if tok, ok := security.TokenOf(ctx); ok && status.Code(refusal) == codes.Unauthenticated {
		// Not recognized here: the leader is given the token itself, as
		// a forward of a recognized one is (forwardPrincipal).
		if p.Kind == access.KindClient {
			fctx = metadata.AppendToOutgoingContext(fctx, tokenHolderKey, p.String())
		}
		p = access.Principal{Kind: access.KindToken, Token: tok}
	}
	fctx = context.WithValue(fctx, principalCtxKey{}, p)
	fctx = context.WithValue(fctx, mustCarryPrincipalKey{}, true)
	sent := false
	resp, err = forward(s, fctx, func(c context.Context, cl adminpb.AdminClient) (proto.Message, error) {
		sent = true
		return forwardByName(c, cl, full, in, out)
	})
	var ur *unreachableLeader
	if !sent || (errors.As(err, &ur) && ur.unsent) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	return resp, true, nil
}

// responseOf is a new, empty answer of the admin service's unary method
// (its short name), found by its descriptor.
func responseOf(method string) (proto.Message, bool) {
	md := adminService.Methods().ByName(protoreflect.Name(method))
	if md == nil || md.IsStreamingClient() || md.IsStreamingServer() {
		return nil, false
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil, false
	}
	return mt.New().Interface(), true
}

// catchUpWait bounds a stream's wait for its standby to catch up with the
// leader before it is judged again: the lag is normally a few
// milliseconds, and a refusal must not hang on a standby far behind.
const catchUpWait = 2 * time.Second

// caughtUp brings this standby's copy of the grants up to the leader's,
// for a stream or a call not handed on (notHandedOn) whose refusal rests
// on it (refusalRestsOnGrants): the leader's linearizable read gives its
// applied index, which covers every grant and token it acknowledged
// before the read, and this node waits to apply as much (at most
// catchUpWait). True if it did: the call is then judged again. The
// read goes as this master's own, not as the caller's: it reads nothing
// the caller gets.
func (s *Server) caughtUp(ctx context.Context, p access.Principal, method string, refusal error) bool {
	if !s.acc.Enforce || s.b.IsLeader() || isForwarded(ctx) || !refusalRestsOnGrants(ctx, p, method, refusal) {
		return false
	}
	w := appliedWaiterOf(s.b)
	if w == nil {
		return false
	}
	// A context of its own (not the call's metadata, so not its
	// principal), ended with the call.
	cctx, cancel := context.WithTimeout(context.Background(), min(catchUpWait, s.cfg.ForwardTimeout))
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	cl, fctx, _, err := s.leaderClient(cctx)
	if err != nil {
		return false
	}
	resp, err := cl.ListProcedures(fctx, &adminpb.ListProceduresRequest{PageSize: 1})
	if err != nil {
		s.log.Debug("refusal: the leader's applied index not learned; refused on this node's grants", "method", method, "error", err)
		return false
	}
	index := resp.GetRead().GetAppliedIndex()
	if f := s.catchingUp.Load(); f != nil {
		(*f)(index)
	}
	if err := w.WaitApplied(cctx, index); err != nil {
		s.log.Debug("refusal: not caught up with the leader; refused on this node's grants", "method", method, "index", index, "error", err)
		return false
	}
	return true
}
