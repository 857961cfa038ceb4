package admin

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/security"
)

// Access configures a Server's access control and audit trail.
type Access struct {
	// Enforce makes every client call need its method's permission
	// (MethodPermission), held by the client's certificate identity
	// (AclGrant) or a bearer token (AclCreateToken). Off, every caller may
	// call everything; calls are audited all the same.
	Enforce bool
	// InitialGrants are client names (baton://client/<name>) bound to a
	// permission whenever this master leads and finds them unbound: the
	// way in for automation (a Prometheus that scrapes, an operator's
	// certificate), and back in for an operator who lost the bootstrap
	// token. This master honours them from its start; a revoked one comes
	// back while it is listed here; a binding changed by AclGrant is left
	// as it is.
	InitialGrants map[string]security.Permission
	// BootstrapTokenTTL, if not 0, is how long the bootstrap token is
	// accepted after it is made (agent --acl-bootstrap-token-ttl). Default
	// 0: until deleted.
	BootstrapTokenTTL time.Duration
	// OnBootstrap is told the bootstrap token, an admin token made by the
	// first leader of a cluster that enforces access control, once it is
	// committed: the only time its secret is seen. Default: logged at
	// WARN.
	OnBootstrap func(token string)
	// AuditRetention drops audit records older than this. Default 30
	// days.
	AuditRetention time.Duration
	// AuditMaxRecords is the ceiling of the served calls' records (a
	// tenth of it, of the refusals'): past it, the oldest record of the
	// principal holding the most goes. Default 100,000.
	AuditMaxRecords int
	// AuditMaxPerPrincipal bounds the served calls' records each
	// principal keeps: past it, that principal's oldest goes, never
	// another's. Default 10,000.
	AuditMaxPerPrincipal int
	// AuditMaxRefusedPerCaller bounds the refusals kept for each
	// principal, and for each source address: past it, the oldest
	// refusal of that principal (or address) goes. Default 1,000.
	AuditMaxRefusedPerCaller int
	// AuditFile, if set, is where this master exports every audit record
	// it commits, one JSON line each (AuditExport).
	AuditFile *AuditExport
	// ChangeLimit bounds how fast each caller may make the calls the
	// audit trail records (Audited) and be refused (change_limit.go);
	// its zero value limits nothing. The agent's default is
	// DefaultChangeRate and DefaultChangeBurst.
	ChangeLimit RateLimit
	// Metrics, if set, receives baton_acl_denied_total and the audit
	// trail's metrics.
	Metrics prometheus.Registerer
	// Clock stamps records and grants. Default real.
	Clock clock.Clock
	// ClientAuth is how clients are authenticated (the agent's
	// --client-auth): by certificate (the default), by token, or by
	// either. The masters always know each other, and region servers, by
	// certificate. Token or either needs Enforce: without it a caller
	// with no certificate would be no one at all, and may call anything.
	ClientAuth security.ClientAuth
}

// Defaults of Access.
const (
	DefaultAuditRetention  = 30 * 24 * time.Hour
	DefaultAuditMaxRecords = 100_000
	// DefaultAuditMaxPerPrincipal and DefaultAuditMaxRefusedPerCaller
	// are the per-principal quotas of the trail.
	DefaultAuditMaxPerPrincipal     = 10_000
	DefaultAuditMaxRefusedPerCaller = 1_000
	// maxAuditRecords bounds AuditMaxRecords: a record is up to ~2 KiB,
	// and every one is in every snapshot.
	maxAuditRecords = 10_000_000
)

// Validate reports a bad setting.
func (a Access) Validate() error {
	if a.AuditRetention < 0 {
		return fmt.Errorf("admin: negative audit retention %v", a.AuditRetention)
	}
	if a.BootstrapTokenTTL < 0 {
		return fmt.Errorf("admin: negative bootstrap token TTL %v", a.BootstrapTokenTTL)
	}
	if err := a.ChangeLimit.Validate(); err != nil {
		return fmt.Errorf("admin: change limit: %w", err)
	}
	if a.AuditMaxRecords < 0 || a.AuditMaxRecords > maxAuditRecords {
		return fmt.Errorf("admin: audit max records %d: want 1 to %d (0: the default %d)", a.AuditMaxRecords, maxAuditRecords, DefaultAuditMaxRecords)
	}
	if a.AuditMaxPerPrincipal < 0 || a.AuditMaxPerPrincipal > maxAuditRecords {
		return fmt.Errorf("admin: audit max records per principal %d: want 1 to %d (0: the default %d)", a.AuditMaxPerPrincipal, maxAuditRecords, DefaultAuditMaxPerPrincipal)
	}
	if a.AuditMaxRefusedPerCaller < 0 || a.AuditMaxRefusedPerCaller > maxAuditRecords {
		return fmt.Errorf("admin: audit max refusals per caller %d: want 1 to %d (0: the default %d)", a.AuditMaxRefusedPerCaller, maxAuditRecords, DefaultAuditMaxRefusedPerCaller)
	}
	for n, p := range a.InitialGrants {
		if err := (security.Identity{Role: security.RoleClient, ID: n}).Validate(); err != nil {
			return fmt.Errorf("admin: initial grant: %w", err)
		}
		if p < security.PermRead || p > security.PermAdmin {
			return fmt.Errorf("admin: initial grant of %s: no permission", n)
		}
	}
	if _, err := security.ParseClientAuth(string(a.ClientAuth)); err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	if a.ClientAuth.CertOptional() && !a.Enforce {
		return fmt.Errorf("admin: client auth %s needs access control enforced: a caller without a certificate would otherwise be anyone, and may call everything", a.ClientAuth)
	}
	return nil
}

func (a Access) withDefaults() Access {
	if a.AuditRetention == 0 {
		a.AuditRetention = DefaultAuditRetention
	}
	if a.AuditMaxRecords == 0 {
		a.AuditMaxRecords = DefaultAuditMaxRecords
	}
	if a.AuditMaxPerPrincipal == 0 {
		a.AuditMaxPerPrincipal = DefaultAuditMaxPerPrincipal
	}
	if a.AuditMaxRefusedPerCaller == 0 {
		a.AuditMaxRefusedPerCaller = DefaultAuditMaxRefusedPerCaller
	}
	if a.Clock == nil {
		a.Clock = clock.Real{}
	}
	if a.ClientAuth == "" {
		a.ClientAuth = security.ClientAuthCert
	}
	return a
}

// MasterOnlyMethods are the admin methods (short names) only masters
// call (access.MasterOnlyMethods): a gRPC server admitting callers
// without a certificate keeps them certificate-only
// (security.MasterPolicyFor).
func MasterOnlyMethods() []string { return access.MasterOnlyMethods() }

// principalKey carries, on a call a master forwards, the client
// certificate the call came with ("client/<name>"): the leader takes a
// master's word for it, as it does for its console's user.
const principalKey = "x-baton-principal"

type principalCtxKey struct{}

// principalOf is the principal the access interceptor found for ctx's
// call, if it ran.
func principalOf(ctx context.Context) (access.Principal, bool) {
	p, ok := ctx.Value(principalCtxKey{}).(access.Principal)
	return p, ok
}

// forwardPrincipal is what a forwarded call carries of its principal.
func forwardPrincipal(ctx context.Context) []string {
	p, ok := principalOf(ctx)
	if !ok {
		return nil
	}
	switch {
	case p.Token != "":
		return []string{"authorization", "Bearer " + p.Token}
	case p.Kind == access.KindMaster:
		if id, self := security.CallerOf(ctx); self && id.Role == security.RoleMaster && id.ID == p.ID && !actingForMaster(ctx) {
			return nil // the forwarding master's own call (or its caller's, who used its certificate)
		}
		// Another master's certificate, at this master's console: the
		// leader names that one (an older leader ignores the key and
		// names this master, as before).
		return []string{security.OnBehalfKey, (security.Identity{Role: security.RoleMaster, ID: p.ID}).String()}
	}
	// A client, or anonymous: the leader judges the call as that, never
	// as the master forwarding it.
	return []string{principalKey, p.String()}
}

// actingForMaster says ctx's call is a master's on behalf of a master
// identity (a console's user holding a master's certificate).
func actingForMaster(ctx context.Context) bool {
	u, ok := security.ActingFor(ctx)
	return ok && u.Role == security.RoleMaster
}

func incomingOne(ctx context.Context, key string) (string, bool) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return "", false
	}
	v := md.Get(key)
	if len(v) != 1 {
		return "", len(v) > 1
	}
	return v[0], true
}

// resolve names the caller of ctx's call and what it may do. Its error
// is an UNAUTHENTICATED status: a token not recognized, a forwarded
// principal malformed.
func (s *Server) resolve(ctx context.Context) (access.Principal, error) {
	caller, tls := security.CallerOf(ctx)
	tok, hasTok := security.TokenOf(ctx)
	if !tls && !hasTok && security.OverTLS(ctx) {
		// No certificate (the handshake let it through: --client-auth
		// token or either) and no token: no one.
		return access.Principal{Kind: access.KindAnonymous}, status.Error(codes.Unauthenticated, "admin: "+s.acc.ClientAuth.NoCredentialsAdvice())
	}
	var p access.Principal
	switch {
	case tls && caller.Role == security.RoleMaster:
		if v, ok := incomingOne(ctx, principalKey); ok {
			if v == access.KindAnonymous {
				return access.Principal{Kind: access.KindAnonymous}, nil
			}
			name, isClient := strings.CutPrefix(v, access.KindClient+"/")
			if !isClient || (security.Identity{Role: security.RoleClient, ID: name}).Validate() != nil {
				return access.Principal{Kind: access.KindAnonymous}, status.Errorf(codes.Unauthenticated, "admin: master %s forwarded a call for %q, which names no client", caller.ID, v)
			}
			p = access.Principal{Kind: access.KindClient, ID: name}
		} else if user, ok := security.ActingFor(ctx); ok && user.Role == security.RoleClient {
			p = access.Principal{Kind: access.KindClient, ID: user.ID}
		} else if ok && user.Role == security.RoleMaster {
			// A person holding a master's certificate, at a master's
			// console (or passed on by a standby): named as that master,
			// not as the one whose console or forward carried the call.
			return access.Principal{Kind: access.KindMaster, ID: user.ID, Perm: security.PermAdmin}, nil
		} else if hasTok {
			return s.acl.TokenPrincipal(tok)
		} else {
			return access.Principal{Kind: access.KindMaster, ID: caller.ID, Perm: security.PermAdmin}, nil
		}
	case hasTok:
		p, err := s.acl.TokenPrincipal(tok)
		if err != nil && p.Kind == access.KindAnonymous && tls {
			// A token malformed or not verified: the record names the
			// certificate.
			p = access.Principal{Kind: string(caller.Role), ID: caller.ID}
		}
		return p, err
	case tls && caller.Role == security.RoleClient:
		p = access.Principal{Kind: access.KindClient, ID: caller.ID}
	case tls:
		// A region server: the identity policy admits none to the admin
		// service; a stray one holds nothing here either.
		return access.Principal{Kind: string(caller.Role), ID: caller.ID}, nil
	default:
		return access.Principal{Kind: access.KindAnonymous}, nil
	}
	if !s.acc.ClientAuth.CertsGrant() && s.acc.Enforce {
		// --client-auth token: a client's certificate (its own, or the one
		// a master passes on for it) says who it is but holds nothing.
		return p, status.Errorf(codes.Unauthenticated, "admin: %s presented a client certificate without a token; this cluster authenticates clients by token only (--client-auth token): give --token or BATON_TOKEN", p)
	}
	return s.acl.ClientPrincipal(p.ID), nil
}

// accessMetrics are the counters of refusals.
type accessMetrics struct {
	denied *prometheus.CounterVec
}

func newAccessMetrics(reg prometheus.Registerer) (*accessMetrics, error) {
	m := &accessMetrics{denied: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_acl_denied_total",
		Help: "Admin calls refused by access control, by method, the permission it needs and the status code answered (PERMISSION_DENIED, UNAUTHENTICATED).",
	}, []string{"method", "needed", "code"})}
	if reg != nil {
		if err := reg.Register(m.denied); err != nil {
			return nil, fmt.Errorf("admin: access metrics: %w", err)
		}
	}
	return m, nil
}

func (m *accessMetrics) deny(method string, err error) {
	need, ok := access.MethodPermission(method)
	label := need.String()
	if !ok {
		label = "master"
	} else if label == "" {
		label = "none"
	}
	m.denied.WithLabelValues(method, label, status.Code(err).String()).Inc()
}

// UnaryInterceptor enforces Config.Access on the admin service's unary
// calls and records the audited ones. A server built by Serve has it; one
// registered on a gRPC server of the caller's (RegisterServices) needs it
// in that server's chain, after the identity policy.
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx = s.proveRelay(ctx)
		method, ok := strings.CutPrefix(info.FullMethod, security.AdminService)
		if ok {
			if err := s.refuseRemoved(method); err != nil {
				return nil, err
			}
		}
		if !ok || s.cfg.Access == nil {
			return handler(ctx, req)
		}
		p, err := s.resolve(ctx)
		if err == nil {
			ctx = context.WithValue(ctx, principalCtxKey{}, p)
			err = access.Authorize(p, method, s.acc.Enforce)
		}
		if err != nil {
			s.accessM.deny(method, err)
			err = s.limitRefusal(ctx, p, method, err)
		}
		// A master's own calls too (a person holding a master's
		// certificate is still someone): masters' machinery calls only
		// master-only methods, which are not audited.
		audited := access.Audited(method)
		var note *auditNote
		if audited {
			markRefusalRecorded(ctx) // the record below is the call's
			note = &auditNote{}
			ctx = context.WithValue(ctx, auditNoteKey{}, note)
		}
		if !audited {
			if err != nil {
				// Not audited when served (a read, masters' own calls),
				// but a refusal is someone trying what they may not.
				s.recordRefusal(ctx, p, method, req, err)
				return nil, err
			}
			return handler(ctx, req)
		}
		if err == nil {
			err = s.limitChange(ctx, method)
		}
		// A call this node serves as the leader is recorded as it
		// starts, while it runs: the answer then waits for the later of
		// the two commits, not for both in turn. Its outcome is written
		// over the record after (not waited for: if the leader dies
		// first, the record says PENDING). Any other is recorded once
		// its outcome is known.
		var begun <-chan error
		var first *adminpb.AuditRecord
		if err == nil && s.b.IsLeader() && !note.isRemote() {
			first = s.auditRecord(ctx, p, method, req, nil, nil)
			first.Code = access.AuditPending
			note.start = &auditStart{ch: s.audit.Start(first)}
			begun = note.start.ch
		}
		var resp any
		if err == nil {
			resp, err = handler(ctx, req)
		}
		rec := s.auditRecord(ctx, p, method, req, resp, err)
		if note.isRemote() {
			if first == nil {
				return resp, err // the leader it was forwarded to recorded it
			}
			// Lost the leadership while holding the call, then forwarded
			// it: the new leader records it too.
			rec.Message = access.Cut("forwarded to the new leader, whose record is the call's: "+rec.GetMessage(), access.FieldMax)
		}
		var aerr error
		if begun != nil {
			if aerr = note.start.wait(s.audit); aerr == nil {
				rec.Id, rec.AtUnixMs, rec.CommittedUnixMs = first.GetId(), first.GetAtUnixMs(), first.GetCommittedUnixMs()
				s.audit.Update(rec)
			}
		} else {
			aerr = s.audit.Append(ctx, rec)
		}
		if aerr != nil {
			s.log.Error("audit record not committed", "method", method, "principal", p.String(), "code", rec.GetCode(), "error", aerr)
			if err == nil {
				return nil, s.unavailable(fmt.Sprintf("admin: %s was served, but its audit record could not be committed (%v): its outcome is not acknowledged; retry (with the same nonce a submission answers the same procedure)", method, aerr))
			}
		}
		return resp, err
	}
}

// principalStream is a server stream whose context carries the principal.
type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s principalStream) Context() context.Context { return s.ctx }

// StreamInterceptor enforces Config.Access on the admin service's streams
// (reads only: none is audited).
func (s *Server) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		method, ok := strings.CutPrefix(info.FullMethod, security.AdminService)
		if ok {
			if err := s.refuseRemoved(method); err != nil {
				return err
			}
		}
		if !ok || s.cfg.Access == nil {
			return handler(srv, ss)
		}
		ctx := ss.Context()
		p, err := s.resolve(ctx)
		if err == nil {
			err = access.Authorize(p, method, s.acc.Enforce)
		}
		if err != nil {
			s.accessM.deny(method, err)
			err = s.limitRefusal(ctx, p, method, err)
			s.recordRefusal(ctx, p, method, nil, err)
			return err
		}
		return handler(srv, principalStream{ServerStream: ss, ctx: context.WithValue(ctx, principalCtxKey{}, p)})
	}
}

// Authorizer decides HTTP requests to a master's endpoints (status,
// metrics, console, debug) by the certificate the client presented: read
// for everything but /debug/ (admin) and /readyz (anyone). With access
// control enforced, it puts the caller's permission in the request's
// context (security.WithPermission) for the console to hide what the
// caller may not do; the calls the console makes for it are checked
// again by the admin API.
func (s *Server) Authorizer(next http.Handler) http.Handler {
	return authorizeHTTP(s, next)
}

// WhoAmI implements adminpb.AdminServer.
func (s *Server) WhoAmI(ctx context.Context, _ *adminpb.WhoAmIRequest) (*adminpb.WhoAmIResponse, error) {
	p, ok := principalOf(ctx)
	if !ok {
		var err error
		if p, err = s.resolve(ctx); err != nil {
			return nil, err
		}
	}
	return &adminpb.WhoAmIResponse{Principal: p.String(), Permission: access.Effective(p, s.acc.Enforce).String(), Enforced: s.acc.Enforce, Name: p.Name}, nil
}

// aclWrite commits muts at the leader, forwarding from a standby.
func aclWrite[T any](s *Server, ctx context.Context, local func() ([]raftfsm.Mutation, T, error), remote func(context.Context, adminpb.AdminClient) (T, error)) (T, error) {
	return onLeader(s, ctx, func(Procedures) (T, error) {
		var zero T
		muts, v, err := local()
		if err != nil {
			return zero, err
		}
		if len(muts) > 0 {
			if err := s.b.Mutate(ctx, muts); err != nil {
				return zero, err
			}
		}
		return v, nil
	}, remote)
}

func (s *Server) createdBy(ctx context.Context) string {
	if p, ok := principalOf(ctx); ok {
		return p.String()
	}
	return access.KindAnonymous
}

func parsePerm(call, s string) (security.Permission, error) {
	p, err := security.ParsePermission(s)
	if err != nil {
		return p, status.Errorf(codes.InvalidArgument, "admin: %s: permission %q: want read, operate or admin", call, s)
	}
	return p, nil
}

func checkClientName(call, name string) error {
	if err := (security.Identity{Role: security.RoleClient, ID: name}).Validate(); err != nil {
		return status.Errorf(codes.InvalidArgument, "admin: %s: client %q: want the name in the client certificate's baton://client/<name>: 1–128 letters, digits, '.', '_' or '-'", call, name)
	}
	return nil
}

// AclGrant implements adminpb.AdminServer.
func (s *Server) AclGrant(ctx context.Context, req *adminpb.AclGrantRequest) (*adminpb.AclBinding, error) {
	if err := checkClientName("acl grant", req.GetClient()); err != nil {
		return nil, err
	}
	perm, err := parsePerm("acl grant", req.GetPermission())
	if err != nil {
		return nil, err
	}
	return aclWrite(s, ctx, func() ([]raftfsm.Mutation, *adminpb.AclBinding, error) {
		muts, e := s.acl.GrantWrites(req.GetClient(), perm, s.createdBy(ctx))
		return muts, e.Binding(req.GetClient()), nil
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.AclBinding, error) {
		return c.AclGrant(ctx, req)
	})
}

// AclRevoke implements adminpb.AdminServer.
func (s *Server) AclRevoke(ctx context.Context, req *adminpb.AclRevokeRequest) (*adminpb.AclRemoveResponse, error) {
	if err := checkClientName("acl revoke", req.GetClient()); err != nil {
		return nil, err
	}
	return aclRemove(s, ctx, s.acl.RevokeWrites(req.GetClient(), s.createdBy(ctx)),
		func(ctx context.Context, c adminpb.AdminClient) (*adminpb.AclRemoveResponse, error) {
			return c.AclRevoke(ctx, req)
		})
}

// AclDeleteToken implements adminpb.AdminServer.
func (s *Server) AclDeleteToken(ctx context.Context, req *adminpb.AclDeleteTokenRequest) (*adminpb.AclRemoveResponse, error) {
	if !security.ValidAccessor(req.GetAccessor()) {
		return nil, status.Errorf(codes.InvalidArgument, "admin: acl token delete: accessor %q: want the 16 hex digits 'baton acl list' shows", req.GetAccessor())
	}
	return aclRemove(s, ctx, access.DeleteTokenWrites(req.GetAccessor()),
		func(ctx context.Context, c adminpb.AdminClient) (*adminpb.AclRemoveResponse, error) {
			return c.AclDeleteToken(ctx, req)
		})
}

// aclRemove commits muts, whose first deletes the entry removed, in one
// entry, and says whether that entry existed.
func aclRemove(s *Server, ctx context.Context, muts []raftfsm.Mutation, remote func(context.Context, adminpb.AdminClient) (*adminpb.AclRemoveResponse, error)) (*adminpb.AclRemoveResponse, error) {
	return aclWrite(s, ctx, func() ([]raftfsm.Mutation, *adminpb.AclRemoveResponse, error) {
		_, existed := s.b.DomainGet(muts[0].Key)
		return muts, &adminpb.AclRemoveResponse{Existed: existed}, nil
	}, remote)
}

// AclCreateToken implements adminpb.AdminServer.
func (s *Server) AclCreateToken(ctx context.Context, req *adminpb.AclCreateTokenRequest) (*adminpb.AclCreateTokenResponse, error) {
	if err := (security.Identity{Role: security.RoleClient, ID: req.GetName()}).Validate(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "admin: acl token create: name %q: want 1–128 letters, digits, '.', '_' or '-'", req.GetName())
	}
	perm, err := parsePerm("acl token create", req.GetPermission())
	if err != nil {
		return nil, err
	}
	ttl, err := msDuration("acl token create", "ttl_ms", req.GetTtlMs())
	if err != nil {
		return nil, err
	}
	return aclWrite(s, ctx, func() ([]raftfsm.Mutation, *adminpb.AclCreateTokenResponse, error) {
		return s.newToken(req.GetName(), perm, s.createdBy(ctx), ttl)
	}, func(ctx context.Context, c adminpb.AdminClient) (*adminpb.AclCreateTokenResponse, error) {
		return c.AclCreateToken(ctx, req)
	})
}

// newToken makes a token that lasts ttl (0: until deleted), and the
// answer that tells it.
func (s *Server) newToken(name string, perm security.Permission, by string, ttl time.Duration) ([]raftfsm.Mutation, *adminpb.AclCreateTokenResponse, error) {
	muts, acc, secret, e, err := s.acl.NewToken(name, perm, by, ttl)
	if err != nil {
		return nil, nil, err
	}
	return muts, &adminpb.AclCreateTokenResponse{Secret: secret, Token: e.Token(acc)}, nil
}

// domainScannerFrom is a backend that can walk its domain keys in order
// from a key on.
type domainScannerFrom interface {
	DomainScanFrom(prefix, after string, fn func(string, []byte) bool)
}

// bootstrapACL runs on the leader's registration tick: the first leader of
// a cluster enforcing access control makes the bootstrap token, and every
// leader binds the clients of Access.InitialGrants that are unbound.
func (s *Server) bootstrapACL(ctx context.Context) {
	if !s.acc.Enforce || !s.b.IsLeader() {
		return
	}
	if _, err := s.b.Procedures(); err != nil {
		return // not established: the state may not be caught up yet
	}
	now := s.acc.Clock.Now().UnixMilli()
	muts, granted := s.acl.InitialGrantWrites(s.b.ID(), now)
	muts = append(muts, s.acl.TokenUseWrites()...)
	boot, bootMuts, err := s.acl.BootstrapWrites(s.b.ID(), now, s.acc.BootstrapTokenTTL)
	if err != nil {
		s.log.Error("bootstrap token", "error", err)
		return
	}
	muts = append(muts, bootMuts...)
	if len(muts) > 0 {
		if err := s.b.Mutate(ctx, muts); err != nil {
			// It may commit all the same: the next tick finds out.
			s.log.Warn("access control bootstrap not committed; will look again", "error", err)
			return
		}
	}
	if len(granted) > 0 {
		s.log.Info("initial grants bound", "clients", granted)
	}
	if boot == nil {
		return
	}
	if !s.acl.MarkBootTold() {
		s.log.Info("bootstrap token made", "accessor", boot.Accessor)
		if s.acc.OnBootstrap != nil {
			s.acc.OnBootstrap(boot.Secret)
		} else {
			s.log.Warn("bootstrap token (admin; shown once)", "token", boot.Secret)
		}
	}
	// Told: say so in the replicated state, so that no later leader
	// replaces it. If this write fails, the next tick makes it again.
	if err := s.b.Mutate(ctx, access.BootToldWrites(s.b.ID(), boot.Accessor, now)); err != nil {
		s.log.Warn("bootstrap token told, but not yet recorded as told; will retry", "error", err)
		return
	}
	s.acl.BootRecorded()
}
