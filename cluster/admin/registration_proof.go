package admin

import (
	"context"
	"net"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/security"
)

// adminAddrProvenKey holds the admin address of node id as a proven
// registration last gave it (one made by the node itself, or passed on
// with a master's certificate or the cluster secret): only there does a
// master send the cluster secret. An address from anywhere else (AddPeer,
// which anyone may call in plaintext; a registration accepted by a master
// of 0.1.0) is dialled without it. A new key: older masters replicate it
// without reading it.
func adminAddrProvenKey(id string) string { return "nodes/" + id + "/admin_addr_proven" }

// hostLookupTimeout bounds resolving a member's Raft host to judge a
// plaintext caller without a cluster secret.
const hostLookupTimeout = 2 * time.Second

// ownCall says ctx is this node's own call of its handler (the
// registration tick, the audit trail's shipping), not one over gRPC.
func ownCall(ctx context.Context) bool {
	_, remote := peer.FromContext(ctx)
	return !remote
}

// masterProven says ctx's call is this node's own or proven a master's:
// by its certificate, or without TLS by the cluster secret.
func masterProven(ctx context.Context) bool {
	return ownCall(ctx) || relayTrusted(ctx)
}

// admitMasterCall lets a call of a masters-only method through, or says
// why not. A master proves itself by its certificate or the cluster
// secret; in plaintext without a secret nothing proves one, so the call
// must come from the host of a Raft member's address (of member id, if
// not ""): a caller elsewhere must not redirect where the masters
// forward, nor write the audit trail.
func (s *Server) admitMasterCall(ctx context.Context, method, id string) error {
	if masterProven(ctx) {
		return nil
	}
	var err error
	switch {
	case security.OverTLS(ctx):
		err = status.Errorf(codes.PermissionDenied, "admin: %s is called only by masters: the call carries no master's certificate", method)
	case s.cfg.ClusterSecret != "":
		err = status.Errorf(codes.PermissionDenied, "admin: %s is called only by masters: the call does not carry this cluster's secret (--cluster-secret)", method)
	case !s.fromMemberHost(ctx, id):
		who := "a Raft member's address"
		if id != "" {
			who = "member " + id + "'s Raft address"
		}
		err = status.Errorf(codes.PermissionDenied, "admin: %s is called only by masters: without TLS or a cluster secret, only from the host of %s (give the masters --cluster-secret where their source address differs)", method, who)
	default:
		return nil
	}
	p, _ := principalOf(ctx)
	if p.Kind == "" {
		p = access.Principal{Kind: access.KindAnonymous}
	}
	s.log.Warn("masters-only call refused", "method", method, "id", id, "peer", peerAddr(ctx), "error", err)
	s.recordRefusal(ctx, p, method, nil, err)
	return err
}

// fromMemberHost says ctx's caller's IP is the host of a Raft member's
// address (member id's, if id is not "").
func (s *Server) fromMemberHost(ctx context.Context, id string) bool {
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	tcp, ok := pr.Addr.(*net.TCPAddr)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, hostLookupTimeout)
	defer cancel()
	peers := s.b.Status().Peers
	judged := false
	for _, m := range peers {
		if id != "" && m.ID != id {
			continue
		}
		host, _, err := net.SplitHostPort(m.Address)
		if err != nil {
			continue
		}
		judged = true
		for _, ip := range lookupIPs(ctx, host) {
			if ip.Equal(tcp.IP) {
				return true
			}
		}
	}
	// An embedder's Raft transport whose addresses name no host (one in
	// memory) gives nothing to judge by: such a process is not reachable
	// as a master from elsewhere anyway. An agent's always does.
	return !judged && len(peers) > 0 && !slices.ContainsFunc(peers, func(m cluster.PeerStatus) bool {
		_, _, err := net.SplitHostPort(m.Address)
		return err == nil
	})
}

func lookupIPs(ctx context.Context, host string) []net.IP {
	if ip := net.ParseIP(host); ip != nil {
		return []net.IP{ip}
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil
	}
	out := make([]net.IP, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.IP)
	}
	return out
}

// secretMayGo says this master may send its cluster secret to addr, the
// admin address registered for node id: there is none to send, or a
// proven registration gave that address.
func (s *Server) secretMayGo(id, addr string) bool {
	if s.cfg.ClusterSecret == "" {
		return true
	}
	v, _ := s.b.DomainGet(adminAddrProvenKey(id))
	return string(v) == addr
}

// unprovenConnKey keys, in Server.conns, a connection dialled without the
// cluster secret.
const unprovenConnKey = "unproven "

// connTo is this server's connection to the admin API at addr, shared
// with forwarding and probes: with the cluster secret if withSecret.
// s.mu is held.
func (s *Server) connTo(addr string, withSecret bool) (*grpc.ClientConn, error) {
	key, opts := addr, s.cfg.DialOptions
	if !withSecret {
		key, opts = unprovenConnKey+addr, s.unprovenDial
	}
	if cc := s.conns[key]; cc != nil {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	s.conns[key] = cc
	return cc, nil
}
