package admin

import (
	"context"
	"crypto/sha256"
	"encoding/binary"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/security"
)

// RegionServerGrants is what this master's access control grants clients
// by certificate, for the region servers to judge the clients that call
// them as the masters would (domain.RegisterMasterService tells them).
// Tokens are left out, hashes and all: region servers take none, so that
// nothing a token's holder needs is kept beyond the masters.
func (s *Server) RegionServerGrants() *rspb.AccessGrants {
	g := &rspb.AccessGrants{}
	if s.cfg.Access != nil && s.acc.Enforce {
		g.Enforced = true
		if s.acc.ClientAuth.CertsGrant() {
			g.Clients = s.acl.CertGrants(scannerOf(s.b))
		} else {
			g.TokensOnly = true
		}
	}
	g.Version = grantsVersion(g)
	return g
}

// grantsVersion is a digest of g's content, never 0 (which says "none" on
// the wire).
func grantsVersion(g *rspb.AccessGrants) uint64 {
	h := sha256.New()
	flag := func(b bool) {
		if b {
			h.Write([]byte{1})
		} else {
			h.Write([]byte{0})
		}
	}
	flag(g.GetEnforced())
	flag(g.GetTokensOnly())
	for _, c := range g.GetClients() {
		// Names and permissions hold no NUL: the fields cannot run into
		// one another.
		h.Write([]byte(c.GetClient() + "\x00" + c.GetPermission() + "\x00"))
	}
	v := binary.BigEndian.Uint64(h.Sum(nil))
	if v == 0 {
		v = 1
	}
	return v
}

// RegionServerRefusals records, on the leader, the refusals a region
// server reported in a heartbeat (domain.RefusalsFunc): in the refusals'
// space, under each caller's quota and its source address's, with via
// naming the region server as its certificate does (its word for its
// name is not taken). Not waited for: the heartbeat renews a lease.
func (s *Server) RegionServerRefusals(ctx context.Context, serverID string, reps []*rspb.RefusalReport, dropped uint64) {
	if s.audit == nil {
		return
	}
	via := "regionserver/" + serverID
	if id, ok := security.CallerOf(ctx); ok {
		via = string(id.Role) + "/" + id.ID
	}
	if dropped > 0 {
		s.log.Warn("a region server dropped refusals before reporting them to the audit trail (its buffer was full)", "via", via, "dropped", dropped)
	}
	if len(reps) > maxRefusalReports {
		reps = reps[:maxRefusalReports]
	}
	dones := make([]<-chan error, 0, len(reps))
	for _, r := range reps {
		rec := &adminpb.AuditRecord{
			AtUnixMs: r.GetAtUnixMs(), Principal: access.Cut(r.GetCaller(), 200), Method: access.Cut(r.GetMethod(), 200),
			Code: access.Cut(r.GetCode(), 40), Message: access.Cut(r.GetMessage(), access.FieldMax), Node: s.b.ID(),
			Peer: access.Cut(r.GetPeer(), 100), Via: via, Refused: true,
		}
		if rec.Principal == "" {
			rec.Principal = access.KindAnonymous
		}
		dones = append(dones, s.audit.Start(rec))
	}
	go func() {
		for _, d := range dones {
			if err := s.audit.Wait(d); err != nil {
				s.log.Warn("a region server's refusal not recorded in the audit trail", "via", via, "error", err)
				return
			}
		}
	}()
}

// maxRefusalReports bounds the refusals taken from one heartbeat, as a
// region server sends them (regionserver.refusalBatch).
const maxRefusalReports = 128
