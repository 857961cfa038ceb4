package admin

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/reqlimit"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// Every refusal on a master's ports is recorded in the audit trail (in
// the refusals' space, within its quotas): those of access control on the
// admin API (UnaryInterceptor), those of the identity policy on every
// gRPC service of the port (RefusalInterceptor: a region server's
// certificate calling the admin API, a client's calling the Master
// service) and those of the HTTP authorizer.

// refusalNoteKey carries a call's refusalNote.
type refusalNoteKey struct{}

// refusalNote says the call's refusal, if any, was recorded already (by
// access control, which knows more of the caller).
type refusalNote struct{ recorded atomic.Bool }

func markRefusalRecorded(ctx context.Context) {
	if n, ok := ctx.Value(refusalNoteKey{}).(*refusalNote); ok {
		n.recorded.Store(true)
	}
}

// RefusalInterceptor records the refusals of the interceptors after it
// in a gRPC server's chain: it goes first, before the identity policy.
// Nil without access control (no audit trail).
func (s *Server) RefusalInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if s.audit == nil {
			return handler(ctx, req)
		}
		note := &refusalNote{}
		resp, err := handler(context.WithValue(ctx, refusalNoteKey{}, note), req)
		if err != nil && !note.recorded.Load() && policyRefusal(err) {
			method := refusedMethod(info.FullMethod)
			err = s.limitRefusal(ctx, access.Principal{}, method, err)
			s.recordRefusal(ctx, callerPrincipal(ctx), method, req, err)
		}
		return resp, err
	}
}

// RefusalStreamInterceptor is RefusalInterceptor for streams.
func (s *Server) RefusalStreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if s.audit == nil {
			return handler(srv, ss)
		}
		note := &refusalNote{}
		ctx := ss.Context()
		err := handler(srv, principalStream{ServerStream: ss, ctx: context.WithValue(ctx, refusalNoteKey{}, note)})
		if err != nil && !note.recorded.Load() && policyRefusal(err) {
			method := refusedMethod(info.FullMethod)
			err = s.limitRefusal(ctx, access.Principal{}, method, err)
			s.recordRefusal(ctx, callerPrincipal(ctx), method, nil, err)
		}
		return err
	}
}

// policyRefusal: err refuses the caller (not a rate limit, which counts
// what callers may do, not who they are; the admin API's are recorded by
// access control, and the change limit's answers to a refusal by the
// interceptor that limited it).
func policyRefusal(err error) bool {
	c := status.Code(err)
	return c == codes.PermissionDenied || c == codes.Unauthenticated
}

// refusedMethod is a record's method: the short name on the admin API,
// the full one on any other service.
func refusedMethod(full string) string {
	if m, ok := strings.CutPrefix(full, security.AdminService); ok {
		return m
	}
	return full
}

// callerPrincipal is the caller as its certificate names it.
func callerPrincipal(ctx context.Context) access.Principal {
	if id, ok := security.CallerOf(ctx); ok {
		return access.Principal{Kind: string(id.Role), ID: id.ID}
	}
	return access.Principal{Kind: access.KindAnonymous}
}

// recordRefusal records a call refused to p, and waits for the record
// (a flood of refusals goes no faster than they are recorded).
func (s *Server) recordRefusal(ctx context.Context, p access.Principal, method string, req any, err error) {
	if s.audit == nil {
		return
	}
	markRefusalRecorded(ctx)
	rec := s.auditRecord(ctx, p, method, req, nil, err)
	rec.Refused = true
	if aerr := s.audit.Append(ctx, rec); aerr != nil {
		s.log.Warn("refusal not recorded in the audit trail", "method", method, "principal", p.String(), "code", rec.GetCode(), "error", aerr)
	}
}

// recordHTTPRefusal records an HTTP request refused to p, without
// waiting: the answer is not held for it.
func (s *Server) recordHTTPRefusal(r *http.Request, p access.Principal, code int, why string) {
	if s.audit == nil {
		return
	}
	if p.Kind == "" {
		p = access.Principal{Kind: access.KindAnonymous}
	}
	rec := &adminpb.AuditRecord{
		AtUnixMs: s.acc.Clock.Now().UnixMilli(), Principal: p.String(), Name: p.Name, Method: access.HTTPMethod(r), Args: access.HTTPArgs(r),
		Message: access.Cut(why, access.FieldMax), Node: s.b.ID(), Peer: r.RemoteAddr, Refused: true,
	}
	switch code {
	case http.StatusUnauthorized:
		rec.Code = codes.Unauthenticated.String()
	case http.StatusTooManyRequests:
		rec.Code = codes.ResourceExhausted.String()
	default:
		rec.Code = codes.PermissionDenied.String()
	}
	done := s.audit.Start(rec)
	go func() {
		if err := s.audit.Wait(done); err != nil {
			s.log.Warn("HTTP refusal not recorded in the audit trail", "path", reqlimit.Escape(r.URL.Path), "principal", p.String(), "error", err)
		}
	}()
}
