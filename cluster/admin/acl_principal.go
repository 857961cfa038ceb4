package admin

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/security"
)

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
			p, err := s.acl.TokenPrincipal(tok)
			if v, ok := incomingOne(ctx, tokenHolderKey); ok && err != nil && p.Kind == access.KindAnonymous {
				// A standby handed on a call whose token it did not hold:
				// the refusal names the certificate that presented it,
				// as the standby's would.
				if name, isClient := strings.CutPrefix(v, access.KindClient+"/"); isClient && (security.Identity{Role: security.RoleClient, ID: name}).Validate() == nil {
					p = access.Principal{Kind: access.KindClient, ID: name}
				}
			}
			return p, err
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

func (s *Server) createdBy(ctx context.Context) string {
	if p, ok := principalOf(ctx); ok {
		return p.String()
	}
	return access.KindAnonymous
}
