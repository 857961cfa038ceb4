package admin

import (
	"context"
	"fmt"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/proto/adminpb"
)

// AcquireLock implements adminpb.AdminServer (leader; forwarded).
func (s *Server) AcquireLock(ctx context.Context, req *adminpb.AcquireLockRequest) (*adminpb.LockResponse, error) {
	d, err := s.domain()
	if err != nil {
		return nil, err
	}
	leaseLen, err := msDuration("lock acquire", "lease_ms", req.GetLeaseMs())
	if err != nil {
		return nil, err
	}
	return onLeader(s, ctx, func(x Procedures) (*adminpb.LockResponse, error) {
		// Refused in maintenance mode unless a retry (Domain.AcquireLock).
		lk, err := d.AcquireLock(x, catalog.LockRequest{
			Kind: req.GetKind(), Names: req.GetNames(), Exclusive: req.GetExclusive(),
			Holder: req.GetHolder(), Description: req.GetDescription(), Nonce: req.GetNonce(),
			Lease:     leaseLen,
			Submitter: submitterOf(ctx),
		})
		return lockMsg(lk), err
	}, relayed(req, adminpb.AdminClient.AcquireLock))
}

// LockHeartbeat implements adminpb.AdminServer (leader; forwarded).
//
// Its opening (the domain, then the lease) is AcquireLock's, and other
// handlers', in shape only: early returns of two different checks, which
// a shared helper would move, not remove (duplicates lists the pair).
func (s *Server) LockHeartbeat(ctx context.Context, req *adminpb.LockRef) (*adminpb.LockResponse, error) {
	d, err := s.domain()
	if err != nil {
		return nil, err
	}
	leaseLen, err := msDuration("lock heartbeat", "lease_ms", req.GetLeaseMs())
	if err != nil {
		return nil, err
	}
	return onLeader(s, ctx, func(x Procedures) (*adminpb.LockResponse, error) {
		if err := s.actOnLock(ctx, x, req); err != nil {
			return nil, err
		}
		lk, err := d.LockHeartbeat(ctx, x, req.GetLockId(), leaseLen)
		return lockMsg(lk), err
	}, relayed(req, adminpb.AdminClient.LockHeartbeat))
}

// ReleaseLock implements adminpb.AdminServer (leader; forwarded).
func (s *Server) ReleaseLock(ctx context.Context, req *adminpb.LockRef) (*adminpb.LockResponse, error) {
	d, err := s.domain()
	if err != nil {
		return nil, err
	}
	return onLeader(s, ctx, func(x Procedures) (*adminpb.LockResponse, error) {
		if err := s.actOnLock(ctx, x, req); err != nil {
			return nil, err
		}
		lk, err := d.ReleaseLock(ctx, x, req.GetLockId())
		return lockMsg(lk), err
	}, relayed(req, adminpb.AdminClient.ReleaseLock))
}

// actOnLock decides whether the caller may heartbeat or release lock
// req names: the identity that acquired it may (see actOn).
func (s *Server) actOnLock(ctx context.Context, x Procedures, req *adminpb.LockRef) error {
	return s.actOn(ctx, x, fmt.Sprintf("lock %d", req.GetLockId()), req.GetLockId(), req.GetForce())
}
