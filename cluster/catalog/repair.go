package catalog

import (
	"time"

	"github.com/baton-dev/baton/procedure"
)

// MaintenanceRefusal begins the message of every submission refused in
// maintenance mode, so that clients can tell it from other failed
// preconditions.
const MaintenanceRefusal = "cluster in maintenance mode"

// MaintenanceNote is what a procedure that would send a region open or
// close says it waits for while maintenance mode pauses dispatch.
const MaintenanceNote = "maintenance mode: dispatch paused"

// Caller is who asks for a repair, as its record names them.
type Caller struct {
	// Name is the caller's own name for itself (the CLI sends
	// user@host:pid).
	Name string
	// Peer is the address the call came from: the client's, also when a
	// standby forwarded the call.
	Peer string
	// Via is the master that forwarded the call, empty if none did.
	Via string
}

// RepairOptions qualify a repair call.
type RepairOptions struct {
	Caller Caller
	// Override takes over from what stands in the way, where the call
	// allows it (see each call).
	Override bool
	// DryRun answers what the call would do, doing nothing and recording
	// nothing.
	DryRun bool
	// Nonce makes a call that starts a procedure idempotent: a retry gets
	// the first call's procedure.
	Nonce string
}

// RepairResult is what a repair call did or, on a dry run, would do.
type RepairResult struct {
	DryRun bool
	// Summary says it in words.
	Summary string
	// ProcIDs are the procedures started (or found under way).
	ProcIDs []uint64
	// Bypassed are the procedures bypassed.
	Bypassed []uint64
	// Record is the sequence number of the call's repair record, 0 for a
	// dry run.
	Record uint64
	// Maintenance is the state after a maintenance call.
	Maintenance *Maintenance
}

// CancelFilter selects the procedures CancelProcedures cancels; zero
// fields match everything, but at least one of Type, State, Owner,
// OlderThan and IDs must be set.
type CancelFilter struct {
	Type  string
	State string // INITIALIZING, RUNNABLE, WAITING or WAITING_TIMEOUT
	Owner string
	// OlderThan: submitted at least this long ago, on the leader's clock.
	OlderThan time.Duration
	// IDs: only these procedures (those of them the rest matches). A
	// confirmation sends the ids its dry run listed, so that it cancels
	// none submitted since.
	IDs []uint64
	// MaxID: only procedures whose id is at most MaxID (0: no bound). Ids
	// grow with submission: the highest id a dry run listed bounds its
	// confirmation as IDs do, in one number.
	MaxID uint64
}

// CancelResult is what CancelProcedures did, or would do.
type CancelResult struct {
	DryRun bool
	// Cancelled are the procedures whose abort was requested (or would
	// be), as they stand after the request.
	Cancelled []procedure.Info
	Skipped   []Skipped
	Record    uint64
}

// Skipped is a matching procedure that is not cancelled, and why.
type Skipped struct {
	Info   procedure.Info
	Reason string
}

// Maintenance is maintenance mode as the replicated state holds it:
// whether it is on, and when, by whom and why it was last turned on or
// off.
type Maintenance struct {
	On     bool
	Since  time.Time
	By     string
	Reason string
}

// Repair is one recorded repair call.
type Repair struct {
	Seq    uint64
	At     time.Time
	Action string
	Args   map[string]string
	Caller Caller
	// Node is the leader that recorded it.
	Node string
	// Outcome is started, done, refused or failed; Code the status code
	// (as the API spells it: FAILED_PRECONDITION) of a refusal or failure;
	// Result what was done, or why not.
	Outcome string
	Code    string
	Result  string
}
