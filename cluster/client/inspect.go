package client

import (
	"context"

	"github.com/baton-dev/baton/proto/adminpb"
)

// ListLocks returns the leader's lock table: every lock held or waited for,
// with its holders and queue. procID, when not 0, keeps only the locks
// that procedure holds or waits for. The table lives in the leader's
// memory: even a Stale read is answered by the leader. Every page is
// read; the answer holds them all, with the last page's Read.
func (c *Client) ListLocks(ctx context.Context, procID uint64, opts ...ReadOption) (*adminpb.ListLocksResponse, error) {
	ro := readOpts(opts)
	req := &adminpb.ListLocksRequest{ProcId: procID, Consistency: ro.consistency}
	all := &adminpb.ListLocksResponse{}
	err := readAllPages(ctx, c, ro, &req.PageToken, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.ListLocksResponse, error) {
		return a.ListLocks(ctx, req)
	}, func(r *adminpb.ListLocksResponse) {
		all.Locks, all.Read = append(all.Locks, r.GetLocks()...), r.GetRead()
	})
	if err != nil {
		return nil, err
	}
	return all, nil
}

// ProcedureStats counts the procedures by state and type and names the
// stuck ones (see adminpb.ProcedureStatsRequest; a zero request takes the
// defaults).
func (c *Client) ProcedureStats(ctx context.Context, req *adminpb.ProcedureStatsRequest, opts ...ReadOption) (*adminpb.ProcedureStatsResponse, error) {
	ro := readOpts(opts)
	req = &adminpb.ProcedureStatsRequest{StuckAfterMs: req.GetStuckAfterMs(), MaxStuck: req.GetMaxStuck(), Consistency: ro.consistency}
	r, err := call(ctx, c, adminpb.AdminClient.ProcedureStats, req)
	ro.served(r.GetRead())
	return r, err
}
