// Package catalog holds the plain Go values the master's domain answers
// with (tables, regions, region servers, external locks) and the executor
// calls its lock operations need.
//
// It sits below both the domain (cluster/domain), which fills these values
// from its replicated state, and the admin API (cluster/admin), which
// translates them into its wire messages. Neither of those imports the
// other: the domain knows nothing of the API it is served through, and the
// API does not pull the domain's procedures and state machinery in (the
// domain's in-package tests drive it through the admin API, so an import
// of the domain from the admin layer would be a cycle).
package catalog

import (
	"context"
	"time"

	"github.com/baton-dev/baton/procedure"
)

// Table is one table and how its regions stand. Regions holds at most a
// first page of them (DescribeTable's), none in a list of tables: the
// counts cover them all.
type Table struct {
	Namespace string
	Name      string
	State     string
	Regions   []Region
	// RegionCount counts every region of the table; RegionsByState and
	// Groups (by state and server) split that count.
	RegionCount    int
	RegionsByState map[string]int
	Groups         []RegionGroup
	// RegionsTruncated: Regions holds only the first regions; NextRegion
	// is the last of them, where a RegionQuery for the table resumes.
	RegionsTruncated bool
	NextRegion       string
}

// RegionGroup counts a table's regions in one state on one server (""
// for none).
type RegionGroup struct {
	State  string
	Server string
	Count  int
}

// Region is one region and where it stands.
type Region struct {
	Name   string
	Table  string // "ns:name"
	State  string
	Server string
	// ProcID is the procedure moving the region, 0 when none.
	ProcID uint64
}

// Server is one region server as the leader sees it.
type Server struct {
	ID          string
	Address     string
	StartCode   uint64
	RegionCount int
	// LeaseState is live or suspect while the lease holds, unconfirmed
	// while it holds on a new leader's grace alone, else expired.
	LeaseState string
	// LastRenewal is the lease's last renewal, zero when none is known.
	LastRenewalUnixMs int64
	// HeartbeatSeen: the leader has heard from the server this term,
	// LastHeartbeatAgeMs ago.
	HeartbeatSeen      bool
	LastHeartbeatAgeMs int64
	// SoftLimitMs and HardLimitMs are the lease's limits.
	SoftLimitMs, HardLimitMs int64
	// Version and MaxFormat are the recorded incarnation's binary as it
	// registered; "" and 0 when it did not say (0.1.0).
	Version   string
	MaxFormat uint32
}

// LockHolder is who holds an external lock and why, as its holder said.
type LockHolder struct {
	Holder      string
	Description string
}

// ServerRegions is what a region server says it hosts beside what the
// replicated state assigns to its live incarnation.
type ServerRegions struct {
	Server   string
	Assigned []string
	Hosted   []string
	// Next is the last name this page covers when there are more (both
	// lists resume after it), "" when both are done.
	Next string
}

// ServerRegionsQuery asks for a page of ServerRegions: the names of both
// lists after After, at most PageSize of each.
type ServerRegionsQuery struct {
	Server   string
	After    string
	PageSize int
}

// LockRequest asks for an external lock.
type LockRequest struct {
	Kind        string
	Names       []string
	Exclusive   bool
	Holder      string
	Description string
	// Nonce makes a retried request return the lock of the first.
	Nonce string
	// Lease is how long the lock outlives its holder's last heartbeat:
	// 0 for the cluster's default, else within the domain's bounds
	// (rounded up to one of its steps).
	Lease time.Duration
	// Submitter is the authenticated identity acquiring it, recorded with
	// its procedure (procedure.SubmitOptions.Submitter): its heartbeats
	// and its release are that identity's. Holder is a label the caller
	// chooses.
	Submitter string
}

// Lock is where an external lock stands.
type Lock struct {
	ID    uint64
	State string
	// LeaseTimeoutMs is how long the lock lives without a heartbeat.
	LeaseTimeoutMs int64
}

// Executor is what the lock calls use of the leader's executor;
// *procedure.Executor implements it.
type Executor interface {
	Submit(p procedure.Procedure, opts procedure.SubmitOptions) (uint64, error)
	Get(id uint64) (procedure.Info, error)
	Why(id uint64) (procedure.Why, error)
	// Wait returns once procedure id is terminal, so a caller waiting for
	// an outcome needs no polling.
	Wait(ctx context.Context, id uint64) (procedure.Info, error)
	// LookupNonce finds the procedure a submission with owner and nonce
	// created, so that a retry is told apart from new work.
	LookupNonce(owner, nonce string) (uint64, bool)
	// Abort rolls procedure id back; one waiting for its locks leaves
	// their queue at once.
	Abort(id uint64) error
}

var _ Executor = (*procedure.Executor)(nil)
