package security

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Policy says which roles may call which gRPC methods. A method no rule
// names is refused: a service added later is closed until someone decides
// who may call it.
type Policy struct {
	rules []rule
	// OnDeny, if set, is told of every call the policy refuses (for a
	// metric): the method, the caller's role ("" when it presented no
	// identity) and the status code answered. It must not block.
	OnDeny func(method string, role Role, code codes.Code)
	// certless says which methods a caller without a client certificate
	// may call (MasterPolicyFor); none without it, and then the TLS
	// handshake itself asks every peer for a certificate.
	certless []certlessRule
	// noCredentials is what a call with neither a certificate nor a
	// token is told where a token would have let it in.
	noCredentials string
}

// certlessMode is what a caller without a client certificate may do.
type certlessMode int

const (
	certlessRefused   certlessMode = iota // nothing: a certificate is needed
	certlessWithToken                     // call, carrying a bearer token
	certlessAnyone                        // call
)

type certlessRule struct {
	prefix string
	mode   certlessMode
}

// certlessFor is the mode of the longest certless prefix method matches.
func (p *Policy) certlessFor(method string) certlessMode {
	best, n := certlessRefused, -1
	for _, r := range p.certless {
		if strings.HasPrefix(method, r.prefix) && len(r.prefix) > n {
			best, n = r.mode, len(r.prefix)
		}
	}
	return best
}

// CertOptional says some calls are admitted without a client
// certificate: the TLS handshake must let such a connection through.
func (p *Policy) CertOptional() bool {
	for _, r := range p.certless {
		if r.mode != certlessRefused {
			return true
		}
	}
	return false
}

type rule struct {
	prefix string
	roles  []Role
	// self: the request's server id must be the caller's own id.
	self bool
}

// Admit lets roles call the methods whose full name starts with prefix
// ("/pkg.Service/" for a whole service, or one method's full name). The
// longest matching prefix decides.
func (p *Policy) Admit(prefix string, roles ...Role) *Policy {
	p.rules = append(p.rules, rule{prefix: prefix, roles: roles})
	return p
}

// AdmitSelf lets role call the methods under prefix only about itself:
// each request must carry a server id (a GetServerId method) equal to
// the caller's id. A region server may heartbeat and report only as
// itself.
func (p *Policy) AdmitSelf(prefix string, role Role) *Policy {
	p.rules = append(p.rules, rule{prefix: prefix, roles: []Role{role}, self: true})
	return p
}

func (p *Policy) match(method string) (rule, bool) {
	var best rule
	found := false
	for _, r := range p.rules {
		if strings.HasPrefix(method, r.prefix) && (!found || len(r.prefix) > len(best.prefix)) {
			best, found = r, true
		}
	}
	return best, found
}

// serverIDer is a request about one region server.
type serverIDer interface{ GetServerId() string }

// check decides one call: nil, or a PermissionDenied/Unauthenticated
// status saying why.
func (p *Policy) check(ctx context.Context, method string, req any) error {
	id, ok := CallerOf(ctx)
	if !ok {
		switch p.certlessFor(method) {
		case certlessAnyone:
			return nil
		case certlessWithToken:
			// The token itself is checked by access control, above.
			if _, has := TokenOf(ctx); has {
				return nil
			}
			return status.Errorf(codes.Unauthenticated, "%s: %s", method, p.noCredentials)
		}
		if p.CertOptional() {
			return status.Errorf(codes.Unauthenticated, "%s: the caller presented no baton certificate, and this method needs one whatever token a call carries", method)
		}
		return status.Errorf(codes.Unauthenticated, "%s: the caller presented no baton certificate", method)
	}
	r, found := p.match(method)
	if !found {
		return status.Errorf(codes.PermissionDenied, "%s: no role may call this method (caller %s)", method, id)
	}
	if !slices.Contains(r.roles, id.Role) {
		return status.Errorf(codes.PermissionDenied, "%s: role %s may not call this method (caller %s; admitted: %v)", method, id.Role, id, r.roles)
	}
	if r.self {
		if req == nil {
			return status.Errorf(codes.PermissionDenied, "%s: a stream cannot be checked to act only as its caller", method)
		}
		s, ok := req.(serverIDer)
		if !ok {
			return status.Errorf(codes.PermissionDenied, "%s: the request names no server, and %s may act only as itself", method, id)
		}
		if s.GetServerId() != id.ID {
			return status.Errorf(codes.PermissionDenied, "%s: %s may act only as itself, not as server %q", method, id, s.GetServerId())
		}
	}
	return nil
}

// CountDenials counts the calls p refuses in reg, as
// baton_rpc_denied_total{method, role, code} (role "none" for a caller
// without an identity): every process serving gRPC with a policy exports
// the same series. It sets p.OnDeny.
func (p *Policy) CountDenials(reg prometheus.Registerer) error {
	denied := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_rpc_denied_total",
		Help: "gRPC calls refused by the TLS identity policy, by method, the caller's role (none: no identity) and the status code answered.",
	}, []string{"method", "role", "code"})
	if err := reg.Register(denied); err != nil {
		return fmt.Errorf("security: denial metric: %w", err)
	}
	p.OnDeny = func(method string, role Role, code codes.Code) {
		r := string(role)
		if r == "" {
			r = "none"
		}
		denied.WithLabelValues(method, r, code.String()).Inc()
	}
	return nil
}

// decide is check, telling OnDeny of a refusal.
func (p *Policy) decide(ctx context.Context, method string, req any) error {
	err := p.check(ctx, method, req)
	if err != nil && p.OnDeny != nil {
		id, _ := CallerOf(ctx)
		p.OnDeny(method, id.Role, status.Code(err))
	}
	return err
}

// UnaryInterceptor enforces p on unary calls.
func (p *Policy) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := p.decide(ctx, info.FullMethod, req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor enforces p on streams. A stream's messages are not
// seen here, so a self rule refuses streams outright (check, with no
// request).
func (p *Policy) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := p.decide(ss.Context(), info.FullMethod, nil); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// ServerOptions are the options of a gRPC server that speaks mutual TLS
// with c and enforces p: TLS with a client certificate optional when p
// admits some calls without one (CertOptional).
func (p *Policy) ServerOptions(c *Credentials) []grpc.ServerOption {
	cfg := c.ServerConfig()
	if p.CertOptional() {
		cfg = c.ServerConfigCertOptional()
	}
	return []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(cfg)),
		grpc.ChainUnaryInterceptor(p.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(p.StreamInterceptor()),
	}
}

// DialOption is the transport credentials of a gRPC client that speaks
// mutual TLS with c to a server of one of the roles accept.
func (c *Credentials) DialOption(accept ...Role) grpc.DialOption {
	return grpc.WithTransportCredentials(credentials.NewTLS(c.ClientConfig(accept...)))
}

// DialOptionFor is the transport credentials of a gRPC client that speaks
// mutual TLS with c to exactly the server want.
func (c *Credentials) DialOptionFor(want Identity) grpc.DialOption {
	return grpc.WithTransportCredentials(credentials.NewTLS(c.ClientConfigFor(want)))
}

// CallerOf is the identity of a gRPC call's TLS peer, if it has one.
func CallerOf(ctx context.Context) (Identity, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return Identity{}, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return Identity{}, false
	}
	id, err := PeerIdentity(info.State)
	if err != nil {
		return Identity{}, false
	}
	return id, true
}

// OnBehalfKey is the gRPC metadata key by which a master calling for
// someone else (its web console, for the user whose browser asked) names
// that user's identity. Only a master's word is taken for it
// (ActingFor).
const OnBehalfKey = "x-baton-on-behalf-of"

// PeerKey is the gRPC metadata key by which a master passing a call on
// (a standby forwarding it, the console acting for a browser) names the
// address the call came from. Only a master's word is taken for it.
const PeerKey = "x-baton-peer"

// FromPeer returns ctx carrying addr as the address the call a master
// passes on came from.
func FromPeer(ctx context.Context, addr string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, PeerKey, addr)
}

// OnBehalfOf returns ctx carrying id as the identity a call is made for.
func OnBehalfOf(ctx context.Context, id Identity) context.Context {
	return metadata.AppendToOutgoingContext(ctx, OnBehalfKey, id.String())
}

// ActingFor is the identity a master's call says it makes for someone
// else (OnBehalfOf), if the caller is a master and names a valid one.
func ActingFor(ctx context.Context) (Identity, bool) {
	caller, ok := CallerOf(ctx)
	if !ok || caller.Role != RoleMaster {
		return Identity{}, false
	}
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return Identity{}, false
	}
	vals := md.Get(OnBehalfKey)
	if len(vals) != 1 {
		return Identity{}, false
	}
	u, err := url.Parse(vals[0])
	if err != nil || u.Scheme != uriScheme {
		return Identity{}, false
	}
	id, err := parseIdentityURI(u)
	if err != nil {
		return Identity{}, false
	}
	return id, true
}
