package client

import (
	"context"
	"strconv"
	"time"

	"github.com/baton-dev/baton/proto/adminpb"
)

// The repair kit (admin.proto, "Repair kit"): region assign and unassign
// with override, server recovery, cancelling by filter, the guarded bypass
// and maintenance mode. Every call takes RepairOptions; with DryRun the
// answer says what the call would do and nothing is done or recorded.

// RepairOptions qualify a repair call.
type RepairOptions struct {
	// Caller names who asks, for the call's record (the CLI sends
	// user@host:pid).
	Caller   string
	Override bool
	DryRun   bool
}

func (o RepairOptions) caller() *adminpb.RepairCaller { return &adminpb.RepairCaller{Caller: o.Caller} }

// AssignRegion opens region on server (any live one if empty) through a
// new procedure; nonce makes a retry return the same one (a random one
// when empty).
func (c *Client) AssignRegion(ctx context.Context, region, server, nonce string, o RepairOptions) (*adminpb.RepairResponse, error) {
	req := &adminpb.RepairRegionRequest{Region: region, Server: server, Override: o.Override, DryRun: o.DryRun, Nonce: orNonce(nonce), Caller: o.caller()}
	return call(ctx, c, adminpb.AdminClient.AssignRegion, req)
}

// UnassignRegion closes region through a new procedure.
func (c *Client) UnassignRegion(ctx context.Context, region, nonce string, o RepairOptions) (*adminpb.RepairResponse, error) {
	req := &adminpb.RepairRegionRequest{Region: region, Override: o.Override, DryRun: o.DryRun, Nonce: orNonce(nonce), Caller: o.caller()}
	return call(ctx, c, adminpb.AdminClient.UnassignRegion, req)
}

// RecoverServer submits the crash procedures server is owed; a live server
// needs Override (it is expired first). A retry finds the procedures
// under way.
func (c *Client) RecoverServer(ctx context.Context, server string, o RepairOptions) (*adminpb.RepairResponse, error) {
	req := &adminpb.RecoverServerRequest{Server: server, Override: o.Override, DryRun: o.DryRun, Caller: o.caller()}
	return call(ctx, c, adminpb.AdminClient.RecoverServer, req)
}

// CancelFilter selects the procedures CancelProcedures cancels (at least
// one of Type, State, Owner, OlderThan and IDs must be set).
type CancelFilter struct {
	Type, State, Owner string
	OlderThan          time.Duration
	// IDs and MaxID bind a confirmation to what its dry run listed: only
	// these procedures, or only those whose id is at most MaxID (ids grow
	// with submission), so that none submitted since is cancelled.
	IDs   []uint64
	MaxID uint64
}

// CancelProcedures aborts every unfinished root procedure matching f.
func (c *Client) CancelProcedures(ctx context.Context, f CancelFilter, o RepairOptions) (*adminpb.CancelProceduresResponse, error) {
	req := &adminpb.CancelProceduresRequest{Type: f.Type, State: f.State, Owner: f.Owner, OlderThanMs: f.OlderThan.Milliseconds(),
		Ids: f.IDs, MaxId: f.MaxID, DryRun: o.DryRun, Caller: o.caller()}
	return call(ctx, c, adminpb.AdminClient.CancelProcedures, req)
}

// BypassProcedure bypasses procedure id (and with recursive its unfinished
// descendants), where the guards allow it.
func (c *Client) BypassProcedure(ctx context.Context, id uint64, recursive bool, o RepairOptions) (*adminpb.RepairResponse, error) {
	req := &adminpb.BypassProcedureRequest{Id: id, Override: o.Override, Recursive: recursive, DryRun: o.DryRun, Caller: o.caller()}
	return call(ctx, c, adminpb.AdminClient.BypassProcedure, req)
}

// SetMaintenance turns maintenance mode on (with a reason) or off.
func (c *Client) SetMaintenance(ctx context.Context, on bool, reason string, o RepairOptions) (*adminpb.RepairResponse, error) {
	req := &adminpb.SetMaintenanceRequest{On: on, Reason: reason, DryRun: o.DryRun, Caller: o.caller()}
	return call(ctx, c, adminpb.AdminClient.SetMaintenance, req)
}

// GetMaintenance reads maintenance mode.
func (c *Client) GetMaintenance(ctx context.Context, opts ...ReadOption) (*adminpb.Maintenance, error) {
	ro := readOpts(opts)
	return unary(ctx, c, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.Maintenance, error) {
		r, err := a.GetMaintenance(ctx, &adminpb.GetMaintenanceRequest{Consistency: ro.consistency})
		ro.served(r.GetRead())
		return r, err
	})
}

// ListRepairs returns every repair record after the one numbered after
// (0: from the first), oldest first, following the pages.
func (c *Client) ListRepairs(ctx context.Context, after uint64, opts ...ReadOption) ([]*adminpb.RepairRecord, error) {
	ro := readOpts(opts)
	var all []*adminpb.RepairRecord
	token := ""
	if after > 0 {
		token = strconv.FormatUint(after, 10)
	}
	for {
		req := &adminpb.ListRepairsRequest{PageToken: token, Consistency: ro.consistency}
		r, err := unary(ctx, c, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.ListRepairsResponse, error) {
			return a.ListRepairs(ctx, req)
		})
		if err != nil {
			return all, err
		}
		ro.served(r.GetRead())
		all = append(all, r.GetRecords()...)
		if token = r.GetNextPageToken(); token == "" {
			return all, nil
		}
	}
}
