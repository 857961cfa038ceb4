package admin

import (
	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/proto/adminpb"
)

// The domain answers in catalog values; these turn them into the API's
// messages, so the wire types stay out of the domain.

func regionMsg(r catalog.Region) *adminpb.Region {
	return &adminpb.Region{Name: r.Name, Table: r.Table, State: r.State, Server: r.Server, ProcId: r.ProcID}
}

func regionMsgs(rs []catalog.Region) []*adminpb.Region {
	if rs == nil {
		return nil
	}
	out := make([]*adminpb.Region, len(rs))
	for i, r := range rs {
		out[i] = regionMsg(r)
	}
	return out
}

func tableMsg(t catalog.Table) *adminpb.Table {
	return &adminpb.Table{Namespace: t.Namespace, Name: t.Name, State: t.State, Regions: regionMsgs(t.Regions)}
}

func tableMsgs(ts []catalog.Table) []*adminpb.Table {
	out := make([]*adminpb.Table, len(ts))
	for i, t := range ts {
		out[i] = tableMsg(t)
	}
	return out
}

func serverMsgs(ss []catalog.Server) []*adminpb.Server {
	out := make([]*adminpb.Server, len(ss))
	for i, s := range ss {
		out[i] = &adminpb.Server{
			Id: s.ID, Address: s.Address, StartCode: s.StartCode, RegionCount: int32(s.RegionCount),
			LeaseState: s.LeaseState, LastRenewalUnixMs: s.LastRenewalUnixMs,
			HeartbeatSeen: s.HeartbeatSeen, LastHeartbeatAgeMs: s.LastHeartbeatAgeMs,
			SoftLimitMs: s.SoftLimitMs, HardLimitMs: s.HardLimitMs,
		}
	}
	return out
}

// lockMsg is nil for the zero Lock a failed call returns, as the call's
// answer is then only its error.
func lockMsg(l catalog.Lock) *adminpb.LockResponse {
	if l == (catalog.Lock{}) {
		return nil
	}
	return &adminpb.LockResponse{LockId: l.ID, State: l.State, LeaseTimeoutMs: l.LeaseTimeoutMs}
}
