package domain

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/internal/textcut"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// The repair kit: HBCK2's jobs (assigns, unassigns, scheduleRecoveries,
// bypass) and maintenance mode, done so that they cannot break what the
// rest of the domain guarantees. Each call runs on the leader, serialized
// with the others (services.repairMu), in two halves: a plan, which reads
// the state and either refuses (FAILED_PRECONDITION, saying what stands in
// the way and what to do) or says what it would do; and an act. A dry run
// stops after the plan. Otherwise the call is recorded at repair/<seq>:
// a refusal once refused, an act as "started" before it acts and with its
// outcome after, so no repair happens without a record. The act itself
// never touches a region: region repairs submit a TransitRegionState,
// server recoveries a ServerCrash, and those procedures keep the
// invariant that a region is open on at most one server (see the package
// doc).
//
// This file holds the flow and the records; the calls are in
// repair_region.go (assign, unassign), repair_server.go (recover),
// repair_procs.go (cancel, bypass) and maintenance.go.

// repairPrefix is the key prefix of the repair records.
const repairPrefix = "repair/"

// RepairKey is the key of repair record seq.
func RepairKey(seq uint64) string { return fmt.Sprintf("%s%020d", repairPrefix, seq) }

// repairOwner owns the procedures the repair kit submits (part of their
// nonce key).
const repairOwner = "admin/repair"

// Outcomes of a repair record.
const (
	RepairStarted = "started" // recorded before acting; the outcome was never written
	RepairDone    = "done"
	RepairRefused = "refused"
	RepairFailed  = "failed"
)

// RepairRecord is the value at repair/<seq>.
type RepairRecord struct {
	Seq     uint64            `json:"seq"`
	At      time.Time         `json:"at"`
	Action  string            `json:"action"`
	Args    map[string]string `json:"args,omitempty"`
	Caller  string            `json:"caller,omitempty"`
	Peer    string            `json:"peer,omitempty"`
	Via     string            `json:"via,omitempty"`
	Node    string            `json:"node"`
	Outcome string            `json:"outcome"`
	Code    string            `json:"code,omitempty"`
	Result  string            `json:"result,omitempty"`
}

func (r RepairRecord) catalog() catalog.Repair {
	return catalog.Repair{Seq: r.Seq, At: r.At, Action: r.Action, Args: r.Args,
		Caller: catalog.Caller{Name: r.Caller, Peer: r.Peer, Via: r.Via},
		Node:   r.Node, Outcome: r.Outcome, Code: r.Code, Result: r.Result}
}

// Bounds of the repair kit's inputs and records. An over-long argument is
// refused (INVALID_ARGUMENT) before anything is recorded; what is recorded
// (arguments, the caller's names, the result) is cut to a bound, so a
// record stays small whatever a client sends. The records themselves are
// kept for the last maxRepairRecords calls.
const (
	// MaxRegionNameLen is the longest region name a repair call takes:
	// a full table name (two names and ':'), a region index and a
	// procedure id, with room to spare (see RegionName).
	MaxRegionNameLen = 2*MaxNameLen + 64
	// MaxReasonLen is the longest maintenance reason.
	MaxReasonLen = 1024
	// maxRecordValue bounds each argument and each of the caller's names
	// in a record; maxRecordResult its result (a cancel's list of ids is
	// cut there; the call's answer has it whole).
	maxRecordValue  = 1024
	maxRecordResult = 8 << 10
	// maxRepairRecords is how many records are kept: each new record
	// deletes, in its own write, up to repairPruneBatch of those that
	// fall out of the window (a backlog drains over a few calls).
	maxRepairRecords = 10000
	repairPruneBatch = 64
)

// checkLen refuses s, argument what of call, if it is longer than max.
func checkLen(call, what, s string, max int) error {
	if len(s) > max {
		return procedure.Errorf(errInvalid, "%s %.20q... is %d bytes long, longer than %d (%s)", what, s, len(s), max, call)
	}
	return nil
}

// cut bounds s to about max bytes (on a rune boundary), saying how long
// it was.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", textcut.Prefix(s, max), len(s))
}

// bounded is rec with every field cut to its bound: how records are
// written, and how records written before the bounds existed are read.
func (r RepairRecord) bounded() RepairRecord {
	if len(r.Args) > 0 {
		args := make(map[string]string, len(r.Args))
		for k, v := range r.Args {
			args[cut(k, maxRecordValue)] = cut(v, maxRecordValue)
		}
		r.Args = args
	}
	r.Action, r.Caller, r.Peer, r.Via, r.Node = cut(r.Action, maxRecordValue), cut(r.Caller, maxRecordValue), cut(r.Peer, maxRecordValue), cut(r.Via, maxRecordValue), cut(r.Node, maxRecordValue)
	r.Code, r.Result = cut(r.Code, maxRecordValue), cut(r.Result, maxRecordResult)
	return r
}

// refuse is a repair's refusal: FAILED_PRECONDITION, saying why.
func refuse(format string, args ...any) error {
	return status.Errorf(codes.FailedPrecondition, "repair: "+format, args...)
}

// leaderServices returns the leader services, or the error that sends the
// caller to the leader.
func (d *Domain) leaderServices() (*services, error) {
	if svc := d.services(); svc != nil {
		return svc, nil
	}
	if n := d.nodeOrNil(); n != nil && !n.IsLeader() {
		id, addr := n.Leader()
		return nil, &cluster.NotLeaderError{LeaderID: id, LeaderAddr: addr}
	}
	return nil, ErrNoServices
}

// repairPlan is what a repair call would do: act does it; a noop plan
// has nothing to do (it is recorded done, with its summary).
type repairPlan struct {
	summary string
	noop    bool
	act     func(ctx context.Context) (result string, err error)
}

// repair runs one repair call (see the file comment) and returns its
// record's sequence number (0 for a dry run) and what it did, or would do.
func (s *services) repair(ctx context.Context, action string, args map[string]string, o catalog.RepairOptions,
	plan func() (repairPlan, error)) (uint64, string, error) {
	s.repairMu.Lock()
	defer s.repairMu.Unlock()
	p, err := plan()
	if o.DryRun {
		return 0, p.summary, err
	}
	rec := RepairRecord{Action: action, Args: args, Caller: o.Caller.Name, Peer: o.Caller.Peer, Via: o.Caller.Via, Node: s.n.ID(),
		At: s.d.cfg.Clock.Now().UTC()}
	if err != nil {
		rec.Outcome, rec.Code, rec.Result = RepairRefused, adminpb.CodeName(cluster.Code(err)), err.Error()
		if c := cluster.Code(err); c != codes.FailedPrecondition && c != codes.NotFound && c != codes.InvalidArgument {
			rec.Outcome = RepairFailed
		}
		if _, rerr := s.writeRepair(0, rec); rerr != nil {
			s.log.Warn("repair refused; recording it failed", "action", action, "error", rerr)
		}
		return 0, "", err
	}
	rec.Outcome, rec.Result = RepairStarted, p.summary
	if p.noop {
		rec.Outcome = RepairDone
	}
	seq, err := s.writeRepair(0, rec)
	if err != nil {
		return 0, "", fmt.Errorf("repair: recording %q before acting failed, so nothing was done: %w", action, err)
	}
	s.log.Warn("repair", "action", action, "args", args, "caller", o.Caller.Name, "peer", o.Caller.Peer, "seq", seq, "plan", p.summary)
	if p.noop {
		return seq, p.summary, nil
	}
	result, aerr := p.act(ctx)
	rec.Outcome, rec.Result = RepairDone, result
	if aerr != nil {
		rec.Outcome, rec.Code, rec.Result = RepairFailed, adminpb.CodeName(cluster.Code(aerr)), aerr.Error()
	}
	if _, err := s.writeRepair(seq, rec); err != nil {
		s.log.Warn("repair done; recording its outcome failed (its record says started)", "seq", seq, "error", err)
	}
	return seq, result, aerr
}

// writeRepair commits rec as record seq, or as the next record if seq is
// 0, and returns its sequence number. It outlives the caller's context:
// an outcome must be written even when the client went away. A new record
// takes the oldest ones out of the window of maxRepairRecords with it.
func (s *services) writeRepair(seq uint64, rec RepairRecord) (uint64, error) {
	var prune []raftfsm.Mutation
	if seq == 0 {
		if s.repairSeq == 0 {
			last, err := lastRepairSeq(s.reader())
			if err != nil {
				return 0, err
			}
			s.repairSeq = last
		}
		s.repairSeq++
		seq = s.repairSeq
		var err error
		if prune, err = repairsToPrune(s.reader(), seq); err != nil {
			return 0, err
		}
	}
	rec = rec.bounded()
	rec.Seq = seq
	ctx, cancel := context.WithTimeout(context.Background(), s.d.cfg.ApplyTimeout)
	defer cancel()
	return seq, s.commit(ctx, append(prune, raftfsm.Put(RepairKey(seq), mustJSON(rec)))...)
}

// repairsToPrune deletes the oldest records that record seq pushes out of
// the window of maxRepairRecords, at most repairPruneBatch of them.
func repairsToPrune(r reader, seq uint64) ([]raftfsm.Mutation, error) {
	if seq <= maxRepairRecords {
		return nil, nil
	}
	oldestKept := seq - maxRepairRecords + 1
	var out []raftfsm.Mutation
	err := r.scan(repairPrefix, func(k string, _ []byte) bool {
		n, err := strconv.ParseUint(strings.TrimPrefix(k, repairPrefix), 10, 64)
		switch {
		case err != nil:
			return true // not a record: not this code's to delete
		case n >= oldestKept:
			return false // keys are in sequence order
		}
		out = append(out, raftfsm.Del(k))
		return len(out) < repairPruneBatch
	})
	return out, err
}

func lastRepairSeq(r reader) (uint64, error) {
	var last uint64
	err := r.scan(repairPrefix, func(k string, _ []byte) bool {
		if n, err := strconv.ParseUint(strings.TrimPrefix(k, repairPrefix), 10, 64); err == nil && n > last {
			last = n
		}
		return true
	})
	return last, err
}

// ListRepairs lists the repair records with a sequence number above after,
// oldest first, at most limit of them (0: all), from this node's state.
func (d *Domain) ListRepairs(after uint64, limit int) ([]catalog.Repair, error) {
	r, err := d.fsmReader()
	if err != nil {
		return nil, err
	}
	var out []catalog.Repair
	var derr error
	err = r.scan(repairPrefix, func(k string, v []byte) bool {
		n, perr := strconv.ParseUint(strings.TrimPrefix(k, repairPrefix), 10, 64)
		if perr != nil || n <= after {
			return true
		}
		var rec RepairRecord
		if derr = json.Unmarshal(v, &rec); derr != nil {
			derr = fmt.Errorf("decoding %s: %w", k, derr)
			return false
		}
		out = append(out, rec.bounded().catalog())
		return limit <= 0 || len(out) < limit
	})
	if err == nil {
		err = derr
	}
	return out, err
}

// callerName is how maintenance mode names who turned it on or off (cut
// as a record's names are).
func callerName(c catalog.Caller) string {
	name, peer := cut(c.Name, maxRecordValue), cut(c.Peer, maxRecordValue)
	switch {
	case name != "" && peer != "":
		return name + " (" + peer + ")"
	case name != "":
		return name
	}
	return peer
}

// describeProc says what procedure id is and does: "procedure 7
// (TransitRegionState, WAITING_TIMEOUT: retrying after an error: ...)".
func (s *services) describeProc(id uint64) string {
	w, err := s.x.Why(id)
	if err != nil {
		return fmt.Sprintf("procedure %d (gone)", id)
	}
	if w.State.Terminal() {
		return fmt.Sprintf("procedure %d (%s, %s)", id, w.Type, w.State)
	}
	what := w.Reason
	switch {
	case w.Note != "":
		what += ": " + w.Note
	case w.Reason == "retrying after an error" && w.Error != "":
		what += ": " + w.Error
	}
	return fmt.Sprintf("procedure %d (%s, %s: %s)", id, w.Type, w.State, what)
}

// maintenanceNote warns, in a summary, that what the repair starts will
// wait for maintenance mode to end.
func (s *services) maintenanceNote() string {
	if s.dispatchPaused() == nil {
		return ""
	}
	return " (maintenance mode is on: nothing is sent to the region servers until it is off)"
}
