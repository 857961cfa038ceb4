package master

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/adminpb"
	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/cluster/rspb"
	"github.com/baton-dev/baton/procedure"
)

var _ admin.Domain = (*Domain)(nil)

// CreateNamespaceProcedure implements admin.Domain.
func (d *Domain) CreateNamespaceProcedure(name string) (procedure.Procedure, error) {
	return NewCreateNamespace(name)
}

// DeleteNamespaceProcedure implements admin.Domain.
func (d *Domain) DeleteNamespaceProcedure(name string) (procedure.Procedure, error) {
	return NewDeleteNamespace(name)
}

// CreateTableProcedure implements admin.Domain.
func (d *Domain) CreateTableProcedure(ns, name string, regions int) (procedure.Procedure, error) {
	return NewCreateTable(ns, name, regions)
}

// DeleteTableProcedure implements admin.Domain.
func (d *Domain) DeleteTableProcedure(ns, name string) (procedure.Procedure, error) {
	return NewDeleteTable(ns, name)
}

// EnableTableProcedure implements admin.Domain.
func (d *Domain) EnableTableProcedure(ns, name string) (procedure.Procedure, error) {
	return NewEnableTable(ns, name)
}

// DisableTableProcedure implements admin.Domain.
func (d *Domain) DisableTableProcedure(ns, name string) (procedure.Procedure, error) {
	return NewDisableTable(ns, name)
}

// MoveRegionProcedure implements admin.Domain: a MOVE TransitRegionState
// of region to toServer ("" for the least loaded other live server).
func (d *Domain) MoveRegionProcedure(region, toServer string) (procedure.Procedure, error) {
	r, err := d.fsmReader()
	if err != nil {
		return nil, err
	}
	rg, ok, err := getRegion(r, region)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: region %q", ErrNotFound, region)
	}
	if toServer != "" {
		if _, ok, err := getServer(r, toServer); err != nil || !ok {
			if err == nil {
				err = fmt.Errorf("%w: region server %q", ErrNotFound, toServer)
			}
			return nil, err
		}
	}
	ns, table := SplitTableName(rg.Table)
	return &TransitRegionState{Region: region, Namespace: ns, Table: table, Kind: KindMove, Target: toServer}, nil
}

// BalanceProcedure implements admin.Domain.
func (d *Domain) BalanceProcedure() (procedure.Procedure, error) { return &Balance{}, nil }

// ListNamespaces implements admin.Domain.
func (d *Domain) ListNamespaces() ([]string, error) {
	r, err := d.fsmReader()
	if err != nil {
		return nil, err
	}
	return scanNamespaces(r)
}

func regionProto(name string, rg Region) *adminpb.Region {
	return &adminpb.Region{Name: name, Table: rg.Table, State: rg.State, Server: rg.Server, ProcId: rg.ProcID}
}

func (d *Domain) tableProto(r reader, full string, t Table) (*adminpb.Table, error) {
	ns, name := SplitTableName(full)
	out := &adminpb.Table{Namespace: ns, Name: name, State: t.State}
	for _, rn := range t.Regions {
		rg, ok, err := getRegion(r, rn)
		if err != nil {
			return nil, err
		}
		if ok {
			out.Regions = append(out.Regions, regionProto(rn, rg))
		}
	}
	return out, nil
}

// DescribeTable implements admin.Domain.
func (d *Domain) DescribeTable(ns, name string) (*adminpb.Table, error) {
	r, err := d.fsmReader()
	if err != nil {
		return nil, err
	}
	full := FullTableName(ns, name)
	t, ok, err := getTable(r, full)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: table %s", ErrNotFound, full)
	}
	return d.tableProto(r, full, t)
}

// ListTables implements admin.Domain.
func (d *Domain) ListTables(ns string) ([]*adminpb.Table, error) {
	r, err := d.fsmReader()
	if err != nil {
		return nil, err
	}
	ts, err := scanTables(r, ns)
	if err != nil {
		return nil, err
	}
	out := make([]*adminpb.Table, 0, len(ts))
	for _, full := range sortedKeys(ts) {
		t, err := d.tableProto(r, full, ts[full])
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// ListRegions implements admin.Domain: every region, or those of table
// ("ns:name" or "name").
func (d *Domain) ListRegions(table string) ([]*adminpb.Region, error) {
	r, err := d.fsmReader()
	if err != nil {
		return nil, err
	}
	if table != "" && !strings.Contains(table, ":") {
		table = FullTableName(DefaultNamespace, table)
	}
	var out []*adminpb.Region
	err = scanRegions(r, func(name string, rg Region) bool {
		if table == "" || rg.Table == table {
			out = append(out, regionProto(name, rg))
		}
		return true
	})
	return out, err
}

// ListServers implements admin.Domain. Only the leader knows the leases
// (renewals are not replicated); elsewhere it fails with a
// *cluster.NotLeaderError.
func (d *Domain) ListServers() ([]*adminpb.Server, error) {
	svc := d.services()
	if svc == nil {
		if n := d.nodeOrNil(); n != nil && !n.IsLeader() {
			id, addr := n.Leader()
			return nil, &cluster.NotLeaderError{LeaderID: id, LeaderAddr: addr}
		}
		return nil, ErrNoServices
	}
	r := svc.reader()
	servers, err := scanServers(r)
	if err != nil {
		return nil, err
	}
	counts := map[ServerRef]int{}
	if err := scanRegions(r, func(_ string, rg Region) bool {
		if rg.State == RegionOpen || rg.State == RegionOpening {
			counts[ServerRef{rg.Server, rg.StartCode}]++
		}
		return true
	}); err != nil {
		return nil, err
	}
	out := make([]*adminpb.Server, 0, len(servers))
	for _, id := range sortedKeys(servers) {
		srv := servers[id]
		ref := ServerRef{id, srv.StartCode}
		ps := &adminpb.Server{Id: id, Address: srv.Address, StartCode: srv.StartCode, RegionCount: int32(counts[ref]), LeaseState: ServerExpired}
		if srv.State == ServerLive {
			if info, ok := svc.leases.Get(holderOf(ref)); ok {
				ps.LastRenewalUnixMs = info.LastRenewal.UnixMilli()
				if info.State == lease.Live || info.State == lease.Suspect {
					ps.LeaseState = info.State.String()
				}
			}
			if svc.revoked(ref) {
				ps.LeaseState = ServerExpired
			}
		}
		out = append(out, ps)
	}
	return out, nil
}

// ServerRegions implements admin.Domain: what the region server says it
// hosts, and what the replicated state assigns to its live incarnation.
func (d *Domain) ServerRegions(ctx context.Context, server string) (*adminpb.ServerRegionsResponse, error) {
	r, err := d.fsmReader()
	if err != nil {
		return nil, err
	}
	srv, ok, err := getServer(r, server)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: region server %q", ErrNotFound, server)
	}
	out := &adminpb.ServerRegionsResponse{Server: server}
	ref := ServerRef{server, srv.StartCode}
	if err := scanRegions(r, func(name string, rg Region) bool {
		if rg.onServer(ref) {
			out.Assigned = append(out.Assigned, name)
		}
		return true
	}); err != nil {
		return nil, err
	}
	c, err := d.rsClient(srv.Address)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.ListRegions(cctx, &rspb.ListRegionsRequest{})
	if err != nil {
		// Not UNAVAILABLE: that would send the client to another master,
		// which cannot reach the region server any better.
		return nil, status.Errorf(codes.FailedPrecondition, "master: region server %s at %s: %v", server, srv.Address, err)
	}
	for _, h := range resp.GetRegions() {
		out.Hosted = append(out.Hosted, h.GetRegion())
	}
	sort.Strings(out.Hosted)
	return out, nil
}

// lockState says where external lock id stands.
func (d *Domain) lockState(x admin.Procedures, id uint64) (string, error) {
	info, err := x.Get(id)
	if err != nil {
		return "", err
	}
	if info.Type != TypeLock {
		return "", fmt.Errorf("%w: lock %d (procedure %d is a %s)", ErrNotFound, id, id, info.Type)
	}
	if info.State.Terminal() {
		switch s := string(info.Result); s {
		case LockReleased, LockExpired:
			return s, nil
		}
		return LockReleased, nil // rolled back: nothing is held
	}
	r, err := d.fsmReader()
	if err != nil {
		return "", err
	}
	if _, held, _ := r.get(LockKey(id)); held {
		return LockAcquired, nil
	}
	return LockWaiting, nil
}

func (d *Domain) lockResponse(x admin.Procedures, id uint64) (*adminpb.LockResponse, error) {
	st, err := d.lockState(x, id)
	if err != nil {
		return nil, err
	}
	return &adminpb.LockResponse{LockId: id, State: st, LeaseTimeoutMs: d.cfg.LockLease.Milliseconds()}, nil
}

// AcquireLock implements admin.Domain: it submits a LockProcedure (the
// nonce makes a retry return the same lock) and grants it a lease. The
// answer is ACQUIRED, or WAITING while a conflicting lock is held.
func (d *Domain) AcquireLock(x admin.Procedures, req *adminpb.AcquireLockRequest) (*adminpb.LockResponse, error) {
	svc := d.services()
	if svc == nil {
		return nil, ErrNoServices
	}
	r, err := d.fsmReader()
	if err != nil {
		return nil, err
	}
	p, err := newLockProcedure(r, req.GetKind(), req.GetNames(), req.GetExclusive(), req.GetHolder(), req.GetDescription())
	if err != nil {
		return nil, err
	}
	id, err := x.Submit(p, procedure.SubmitOptions{Nonce: req.GetNonce(), Owner: "admin/lock"})
	if err != nil {
		return nil, err
	}
	if _, ok := svc.lockLeases.Get(lockHolder(id)); !ok {
		svc.lockLeases.Grant(lockHolder(id))
	}
	// Give an uncontended lock a moment to be taken, so the common answer
	// is ACQUIRED rather than a WAITING the holder must poll past.
	deadline := time.Now().Add(time.Second)
	for {
		resp, err := d.lockResponse(x, id)
		if err != nil || resp.GetState() != LockWaiting || time.Now().After(deadline) {
			return resp, err
		}
		if w, err := x.Why(id); err == nil && w.Reason == "waiting for lock" {
			return resp, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// LockHeartbeat implements admin.Domain: it renews the lock's lease. A
// finished lock is not revived.
func (d *Domain) LockHeartbeat(x admin.Procedures, id uint64) (*adminpb.LockResponse, error) {
	svc := d.services()
	if svc == nil {
		return nil, ErrNoServices
	}
	resp, err := d.lockResponse(x, id)
	if err != nil || (resp.GetState() != LockAcquired && resp.GetState() != LockWaiting) {
		return resp, err
	}
	if err := svc.lockLeases.Renew(lockHolder(id)); err != nil {
		if !errors.Is(err, lease.ErrUnknownHolder) || svc.lockExpired(id) {
			resp.State = LockExpired // the monitor lets it go shortly
			return resp, nil
		}
		// A new leader that has not granted it yet: the heartbeat is a
		// sign of life as good as a grant.
		svc.lockLeases.Grant(lockHolder(id))
	}
	return resp, nil
}

// ReleaseLock implements admin.Domain: it wakes the lock procedure to let
// go, and waits until it has.
func (d *Domain) ReleaseLock(ctx context.Context, x admin.Procedures, id uint64) (*adminpb.LockResponse, error) {
	svc := d.services()
	if svc == nil {
		return nil, ErrNoServices
	}
	resp, err := d.lockResponse(x, id)
	if err != nil || (resp.GetState() != LockAcquired && resp.GetState() != LockWaiting) {
		return resp, err
	}
	svc.setLock(id, true, false)
	if resp.GetState() == LockWaiting {
		// Nothing is held yet, and the procedure cannot be taken out of
		// the lock's wait queue: it lets go the moment it gets the lock.
		resp.State = LockReleased
		return resp, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		info, err := x.Get(id)
		if err != nil {
			return nil, err
		}
		if info.State.Terminal() {
			return d.lockResponse(x, id)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("master: release lock %d: %w", id, ctx.Err())
		case <-t.C:
		}
	}
}

// NamespaceExists implements admin.Domain.
func (d *Domain) NamespaceExists(name string) (bool, error) {
	r, err := d.fsmReader()
	if err != nil {
		return false, err
	}
	return namespaceExists(r, name)
}
