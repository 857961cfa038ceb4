package client

import (
	"context"

	"github.com/baton-dev/baton/proto/adminpb"
)

// Lock kinds, as AcquireLock spells them.
const (
	LockNamespace = "namespace"
	LockTable     = "table"
	LockRegion    = "region"
)

// Lock states, as the API spells them. A lock is WAITING while a
// conflicting one is held, ACQUIRED once granted; RELEASED and EXPIRED are
// final (EXPIRED: its holder stopped heartbeating for longer than the
// lease, and the lock was released without it).
const (
	LockWaiting  = "WAITING"
	LockAcquired = "ACQUIRED"
	LockReleased = "RELEASED"
	LockExpired  = "EXPIRED"
)

// LockHeld reports whether a lock in this state is still the holder's to
// keep by heartbeating (WAITING or ACQUIRED).
func LockHeld(state string) bool { return state == LockWaiting || state == LockAcquired }

// AcquireLock asks for a shared (or exclusive) lock of kind (LockNamespace,
// LockTable, LockRegion) on names: one namespace, one table ("ns:name"), or
// regions. The answer is ACQUIRED or, while a conflicting lock is held,
// WAITING; either way the lock is held by a lease that the holder must
// renew with LockHeartbeat within LeaseTimeoutMs, or it expires. holder and
// description are informational.
func (c *Client) AcquireLock(ctx context.Context, kind string, names []string, exclusive bool, holder, description, nonce string) (*adminpb.LockResponse, error) {
	return c.AcquireLockWith(ctx, &adminpb.AcquireLockRequest{Kind: kind, Names: names, Exclusive: exclusive, Holder: holder, Description: description, Nonce: nonce})
}

// AcquireLockWith is AcquireLock with the whole request, for what
// AcquireLock's arguments do not say (the lease's length). An empty nonce
// is filled in, so retries through failovers return the same lock.
func (c *Client) AcquireLockWith(ctx context.Context, req *adminpb.AcquireLockRequest) (*adminpb.LockResponse, error) {
	req.Nonce = orNonce(req.GetNonce())
	return call(ctx, c, adminpb.AdminClient.AcquireLock, req)
}

// LockHeartbeat renews the lease of lock id and returns its state. A lock
// that is RELEASED or EXPIRED is not revived: the holder has lost it.
func (c *Client) LockHeartbeat(ctx context.Context, id uint64, opts ...ActOption) (*adminpb.LockResponse, error) {
	return c.LockHeartbeatWith(ctx, &adminpb.LockRef{LockId: id, Force: actOpts(opts).force})
}

// LockHeartbeatWith is LockHeartbeat with the whole request: a holder
// that asked for its own lease length restates it (LeaseMs), so that a new
// leader, which knows only the default until then, learns it.
func (c *Client) LockHeartbeatWith(ctx context.Context, ref *adminpb.LockRef) (*adminpb.LockResponse, error) {
	return call(ctx, c, adminpb.AdminClient.LockHeartbeat, ref)
}

// ReleaseLock releases lock id (or gives up waiting for it) and returns its
// state: RELEASED, or EXPIRED if its lease had expired before.
func (c *Client) ReleaseLock(ctx context.Context, id uint64, opts ...ActOption) (*adminpb.LockResponse, error) {
	ref := &adminpb.LockRef{LockId: id, Force: actOpts(opts).force}
	return call(ctx, c, adminpb.AdminClient.ReleaseLock, ref)
}
