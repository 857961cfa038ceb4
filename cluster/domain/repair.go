package domain

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/scheduler"
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
		rec.Outcome, rec.Code, rec.Result = RepairRefused, apiCode(cluster.Code(err)), err.Error()
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
		rec.Outcome, rec.Code, rec.Result = RepairFailed, apiCode(cluster.Code(aerr)), aerr.Error()
	}
	if _, err := s.writeRepair(seq, rec); err != nil {
		s.log.Warn("repair done; recording its outcome failed (its record says started)", "seq", seq, "error", err)
	}
	return seq, result, aerr
}

// writeRepair commits rec as record seq, or as the next record if seq is
// 0, and returns its sequence number. It outlives the caller's context:
// an outcome must be written even when the client went away.
func (s *services) writeRepair(seq uint64, rec RepairRecord) (uint64, error) {
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
	}
	rec.Seq = seq
	ctx, cancel := context.WithTimeout(context.Background(), s.d.cfg.ApplyTimeout)
	defer cancel()
	return seq, s.commit(ctx, raftfsm.Put(RepairKey(seq), mustJSON(rec)))
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
			derr = fmt.Errorf("master: decoding %s: %w", k, derr)
			return false
		}
		out = append(out, rec.catalog())
		return limit <= 0 || len(out) < limit
	})
	if err == nil {
		err = derr
	}
	return out, err
}

// apiCode spells a gRPC code as the API documents it: FAILED_PRECONDITION.
func apiCode(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// callerName is how maintenance mode names who turned it on or off.
func callerName(c catalog.Caller) string {
	switch {
	case c.Name != "" && c.Peer != "":
		return c.Name + " (" + c.Peer + ")"
	case c.Name != "":
		return c.Name
	}
	return c.Peer
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

// regionWhere says where a region stands: "OPENING on rs2/4294967297 (a
// dead server)".
func (s *services) regionWhere(r reader, rg Region) string {
	if rg.Server == "" {
		return rg.State
	}
	ref := ServerRef{rg.Server, rg.StartCode}
	_, pres, left, err := s.presenceOf(r, ref)
	word := "a dead server"
	switch {
	case err != nil:
		word = "unknown: " + err.Error()
	case pres == present:
		word = "a live server"
	case pres == fencing:
		word = fmt.Sprintf("a fenced server that may serve it for %v more", left.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s on %s (%s)", rg.State, ref, word)
}

// maintenanceNote warns, in a summary, that what the repair starts will
// wait for maintenance mode to end.
func (s *services) maintenanceNote() string {
	if s.dispatchPaused() == nil {
		return ""
	}
	return " (maintenance mode is on: nothing is sent to the region servers until it is off)"
}

// ---- region assign and unassign

// AssignRegion opens region (on server, or any live server) through a
// TransitRegionState (HBCK2's assigns). See RepairOptions and the API's
// AssignRegion for what override does.
func (d *Domain) AssignRegion(ctx context.Context, region, server string, o catalog.RepairOptions) (catalog.RepairResult, error) {
	return d.regionRepair(ctx, KindAssign, region, server, o)
}

// UnassignRegion closes region through a TransitRegionState (HBCK2's
// unassigns).
func (d *Domain) UnassignRegion(ctx context.Context, region string, o catalog.RepairOptions) (catalog.RepairResult, error) {
	return d.regionRepair(ctx, KindUnassign, region, "", o)
}

func (d *Domain) regionRepair(ctx context.Context, kind, region, server string, o catalog.RepairOptions) (catalog.RepairResult, error) {
	if region == "" {
		return catalog.RepairResult{}, fmt.Errorf("%w: region %s: no region named", errInvalid, kind)
	}
	svc, err := d.leaderServices()
	if err != nil {
		return catalog.RepairResult{}, err
	}
	args := map[string]string{"region": region}
	if server != "" {
		args["server"] = server
	}
	if o.Override {
		args["override"] = "true"
	}
	out := catalog.RepairResult{DryRun: o.DryRun}
	seq, summary, err := svc.repair(ctx, "region "+kind, args, o, func() (repairPlan, error) {
		return svc.planRegion(kind, region, server, o, &out)
	})
	out.Summary, out.Record = summary, seq
	return out, err
}

// planRegion plans a region repair. What may stand in the way:
//
//   - the region's own procedures: a TransitRegionState recorded on it
//     (its proc_id) or holding its lock. Without override, a refusal; with
//     override they are bypassed (they finish at their next turn without
//     another step, a step under way completing first) and the new
//     procedure queues behind their lock, so it runs after them and reads
//     the region's record as they left it.
//   - the region in transition with no procedure left to finish it
//     (OPENING, CLOSING or FAILED_OPEN; a proc_id whose procedure ended,
//     was bypassed or is gone): only override repairs it.
//   - another procedure holding a lock the new one needs (a table
//     procedure, an external lock): without override a refusal; with it
//     the new procedure waits for that lock.
//
// A procedure that is rolling back is never bypassed: its rollback puts
// the region back itself. Whatever the plan, the new TransitRegionState
// decides under the region's lock from the record it reads then: a region
// recorded on a live server is closed there first; one recorded on a
// fenced server waits for the proof that the server stopped serving; only
// then is it opened. So an override can never open a region twice.
func (s *services) planRegion(kind, region, server string, o catalog.RepairOptions, out *catalog.RepairResult) (repairPlan, error) {
	r := s.reader()
	rg, ok, err := getRegion(r, region)
	if err != nil {
		return repairPlan{}, err
	}
	if !ok {
		return repairPlan{}, fmt.Errorf("%w: region %q", ErrNotFound, region)
	}
	if o.Nonce != "" && !o.DryRun {
		// A retry of a call that got through: its procedure answers.
		for _, info := range s.x.List(procedure.Filter{Type: TypeTransitRegionState, RootsOnly: true}) {
			if info.Owner == repairOwner && info.Nonce == o.Nonce {
				out.ProcIDs = []uint64{info.ID}
				return repairPlan{noop: true, summary: fmt.Sprintf("region %s %s: already started as procedure %d", kind, region, info.ID)}, nil
			}
		}
	}
	ns, table := SplitTableName(rg.Table)
	if server != "" {
		if _, ok, err := getServer(r, server); err != nil {
			return repairPlan{}, err
		} else if !ok {
			return repairPlan{}, fmt.Errorf("%w: region server %q", ErrNotFound, server)
		}
		live, err := s.liveTargets(r)
		if err != nil {
			return repairPlan{}, err
		}
		if _, ok := live[server]; !ok {
			return repairPlan{}, refuse("region server %s is not live (expired, suspect or unconfirmed): regions are opened on live servers only; pick one from 'baton rs list', or leave the choice to the master", server)
		}
	}
	if kind == KindAssign {
		t, tok, err := getTable(r, rg.Table)
		if err != nil {
			return repairPlan{}, err
		}
		switch {
		case !tok:
			return repairPlan{}, refuse("region %s belongs to table %s, which does not exist", region, rg.Table)
		case t.State == TableEnabled:
		case t.State == TableEnabling || t.State == TableCreating:
			if !o.Override {
				return repairPlan{}, refuse("table %s is %s: its own procedure opens its regions; --override assigns this one now", rg.Table, t.State)
			}
		default:
			return repairPlan{}, refuse("table %s is %s: its regions stay closed (assign opens regions of enabled tables; 'baton table enable %s')", rg.Table, t.State, rg.Table)
		}
	}

	owners, others := s.regionObstacles(ns, table, region, rg)
	where := s.regionWhere(r, rg)
	inTransition := rg.ProcID != 0 || rg.State == RegionOpening || rg.State == RegionClosing || rg.State == RegionFailedOpen
	if !o.Override {
		switch {
		case len(owners) > 0:
			return repairPlan{}, refuse("region %s is in transition (%s): %s moves it. Wait for it ('baton proc get %d'), or take over with --override: it is bypassed, and a new procedure closes the region wherever it may be open before opening it",
				region, where, s.describeProc(owners[0]), owners[0])
		case inTransition:
			owner := "no procedure"
			if rg.ProcID != 0 {
				owner = s.describeProc(rg.ProcID)
			}
			return repairPlan{}, refuse("region %s is in transition (%s) and nothing will finish it (%s moved it last): --override repairs it", region, where, owner)
		case len(others) > 0:
			return repairPlan{}, refuse("region %s is locked by %s: wait for it, or --override to queue behind it", region, s.describeProc(others[0]))
		}
	}
	for _, id := range owners {
		if w, err := s.x.Why(id); err == nil && w.Reason == "rolling back" {
			return repairPlan{}, refuse("%s is rolling back: its rollback puts region %s back itself; let it finish ('baton proc wait %d')", s.describeProc(id), region, w.RootID)
		}
	}
	if len(owners) == 0 && !inTransition {
		_, pres, _, err := s.presenceOf(r, ServerRef{rg.Server, rg.StartCode})
		if err != nil {
			return repairPlan{}, err
		}
		switch {
		case kind == KindAssign && rg.State == RegionOpen && pres == present:
			if server != "" && server != rg.Server {
				return repairPlan{}, refuse("region %s is already OPEN on %s: assign opens a closed region; move it with 'baton region move %s --to %s'", region, rg.Server, region, server)
			}
			return repairPlan{noop: true, summary: fmt.Sprintf("region %s is already OPEN on %s: nothing to do", region, rg.Server)}, nil
		case kind == KindUnassign && rg.Server == "" && (rg.State == RegionClosed || rg.State == RegionOffline):
			return repairPlan{noop: true, summary: fmt.Sprintf("region %s is already %s: nothing to do", region, rg.State)}, nil
		}
	}

	summary := fmt.Sprintf("close region %s (now %s)", region, where)
	if kind == KindAssign {
		to := "any live server"
		if server != "" {
			to = server
		}
		summary = fmt.Sprintf("open region %s on %s (now %s)", region, to, where)
	}
	if len(owners) > 0 {
		var ds []string
		for _, id := range owners {
			ds = append(ds, s.describeProc(id))
		}
		summary = fmt.Sprintf("bypass %s, then %s", strings.Join(ds, " and "), summary)
	}
	if len(others) > 0 {
		summary += fmt.Sprintf("; it waits for the lock %s holds", s.describeProc(others[0]))
	}
	summary += s.maintenanceNote()
	out.Bypassed = owners
	return repairPlan{summary: summary, act: func(context.Context) (string, error) {
		var bypassed []uint64
		for _, id := range owners {
			// Force: a region procedure still waiting for its lock has
			// done nothing yet.
			if err := s.x.Bypass(id, procedure.BypassOptions{Force: true}); err != nil {
				if info, gerr := s.x.Get(id); gerr == nil && info.State.Terminal() {
					continue // it finished meanwhile
				}
				out.Bypassed = bypassed
				return "", fmt.Errorf("repair: bypassing procedure %d: %w", id, err)
			}
			s.forget(id)
			bypassed = append(bypassed, id)
		}
		out.Bypassed = bypassed
		p := &TransitRegionState{Region: region, Namespace: ns, Table: table, Kind: kind, Target: server}
		id, err := s.x.Submit(p, procedure.SubmitOptions{Nonce: o.Nonce, Owner: repairOwner})
		if err != nil {
			return "", err
		}
		out.ProcIDs = []uint64{id}
		return fmt.Sprintf("%s: procedure %d", summary, id), nil
	}}, nil
}

// regionObstacles finds what stands between a new TransitRegionState and
// region: owners, the region's own unfinished procedures (recorded on it,
// or holding its lock); others, unfinished procedures holding a lock it
// would wait for (the region's, its table's exclusively, its namespace's
// exclusively).
func (s *services) regionObstacles(ns, table, region string, rg Region) (owners, others []uint64) {
	seen := map[uint64]bool{}
	unfinished := func(id uint64) (procedure.Info, bool) {
		info, err := s.x.Get(id)
		return info, err == nil && !info.State.Terminal()
	}
	if rg.ProcID != 0 {
		if info, ok := unfinished(rg.ProcID); ok && info.Type == TypeTransitRegionState {
			owners = append(owners, rg.ProcID)
			seen[rg.ProcID] = true
		}
	}
	full := FullTableName(ns, table)
	for _, li := range s.x.Scheduler().Locks() {
		var holders []uint64
		switch {
		case li.Type == scheduler.LockRegion && li.Name == region:
			holders = li.Shared
			if li.Exclusive {
				holders = append(holders, li.Holder)
			}
		case li.Type == scheduler.LockTable && li.Name == full && li.Exclusive,
			li.Type == scheduler.LockNamespace && li.Name == ns && li.Exclusive:
			holders = []uint64{li.Holder}
		}
		for _, id := range holders {
			if seen[id] {
				continue
			}
			seen[id] = true
			info, ok := unfinished(id)
			switch {
			case !ok:
			case li.Type == scheduler.LockRegion && info.Type == TypeTransitRegionState:
				owners = append(owners, id)
			default:
				others = append(others, id)
			}
		}
	}
	return owners, others
}

// ---- server recovery

// RecoverServer submits the ServerCrash procedures server is owed (HBCK2's
// scheduleRecoveries): one for every incarnation of it that is not the
// live one and still has regions recorded on it, and for its recorded
// incarnation if that one expired. A live server is left alone unless
// override: its recovery would open its regions twice while it serves
// them. With override it is first recorded expired, as the lease monitor
// would do at the hard limit: it is fenced (nothing new is sent to it, its
// start code is refused, its next heartbeat is told to drop everything),
// and its crash procedure moves its regions only once it has provably
// stopped serving them (it registered again, or its self-fence deadline
// passed).
func (d *Domain) RecoverServer(ctx context.Context, server string, o catalog.RepairOptions) (catalog.RepairResult, error) {
	if server == "" {
		return catalog.RepairResult{}, fmt.Errorf("%w: rs recover: no server named", errInvalid)
	}
	svc, err := d.leaderServices()
	if err != nil {
		return catalog.RepairResult{}, err
	}
	args := map[string]string{"server": server}
	if o.Override {
		args["override"] = "true"
	}
	out := catalog.RepairResult{DryRun: o.DryRun}
	seq, summary, err := svc.repair(ctx, "rs recover", args, o, func() (repairPlan, error) {
		return svc.planRecover(server, o, &out)
	})
	out.Summary, out.Record = summary, seq
	return out, err
}

func (s *services) planRecover(server string, o catalog.RepairOptions, out *catalog.RepairResult) (repairPlan, error) {
	r := s.reader()
	srv, ok, err := getServer(r, server)
	if err != nil {
		return repairPlan{}, err
	}
	if !ok {
		return repairPlan{}, fmt.Errorf("%w: region server %q", ErrNotFound, server)
	}
	cur := ServerRef{server, srv.StartCode}
	live := srv.State == ServerLive
	owed := map[uint64]int{} // start code → regions recorded there
	if !live {
		owed[cur.StartCode] = 0
	}
	liveRegions := 0
	if err := scanRegions(r, func(_ string, rg Region) bool {
		if rg.Server != server || !regionBusy(rg) {
			return true
		}
		if live && rg.StartCode == cur.StartCode {
			liveRegions++
		} else {
			owed[rg.StartCode]++
		}
		return true
	}); err != nil {
		return repairPlan{}, err
	}
	expire := false
	if live {
		lease := ServerLive
		if info, ok := s.leases.Get(holderOf(cur)); ok {
			lease = info.State.String()
		}
		heard := "not heard from by this leader yet"
		if at, ok := s.heartbeatAt(cur); ok {
			heard = fmt.Sprintf("last heartbeat %v ago", max(s.d.cfg.Clock.Now().Sub(at), 0).Round(time.Millisecond))
		}
		switch {
		case o.Override:
			expire = true
			owed[cur.StartCode] = liveRegions
		case len(owed) == 0:
			return repairPlan{}, refuse("region server %s is live (%s; lease %s, %s) and serves %s: recovering them now would open them twice. If it is wedged, --override expires it first (it is fenced and told to drop its regions), and they move once it has provably stopped serving them",
				server, cur, lease, heard, countOf(liveRegions, "region"))
		}
	}
	refs := sortedStartCodes(owed)
	var parts []string
	for _, sc := range refs {
		parts = append(parts, fmt.Sprintf("%s (%s)", ServerRef{server, sc}, countOf(owed[sc], "region")))
	}
	summary := "recover " + strings.Join(parts, ", ")
	switch {
	case expire:
		summary = fmt.Sprintf("expire the live %s first (fenced, told to drop its regions at its next heartbeat), then %s once it has stopped serving", cur, summary)
	case live:
		summary += fmt.Sprintf("; the live %s is left alone", cur)
	}
	summary += s.maintenanceNote()
	return repairPlan{summary: summary, act: func(context.Context) (string, error) {
		if expire {
			if err := s.markExpired(cur); err != nil {
				return "", fmt.Errorf("repair: expiring %s: %w", cur, err)
			}
		}
		var ids []string
		for _, sc := range refs {
			id, err := s.submitCrashOnce(ServerRef{server, sc}, "operator: rs recover")
			if err != nil {
				return "", err
			}
			out.ProcIDs = append(out.ProcIDs, id)
			ids = append(ids, strconv.FormatUint(id, 10))
		}
		return fmt.Sprintf("%s: procedure %s", summary, strings.Join(ids, ", ")), nil
	}}, nil
}

func sortedStartCodes(m map[uint64]int) []uint64 { return slices.Sorted(maps.Keys(m)) }

// ---- cancel by filter

// cancellable are the states CancelProcedures accepts as a filter: those
// of procedures that are not finished and not already rolling back.
var cancellable = []procedure.State{procedure.Initializing, procedure.Runnable, procedure.Waiting, procedure.WaitingTimeout}

// CancelProcedures aborts every unfinished root procedure that matches f
// (a cancelled root rolls back its children): queued, running (the abort
// takes effect at its next step boundary) or waiting. Procedures that
// retry until done cannot roll back and are skipped, saying so.
func (d *Domain) CancelProcedures(ctx context.Context, f catalog.CancelFilter, o catalog.RepairOptions) (catalog.CancelResult, error) {
	var state procedure.State
	var states []procedure.State
	if f.State != "" {
		st, err := procedure.ParseState(strings.ToUpper(f.State))
		if err != nil {
			return catalog.CancelResult{}, fmt.Errorf("%w: proc cancel: %w", errInvalid, err)
		}
		if !slices.Contains(cancellable, st) {
			return catalog.CancelResult{}, fmt.Errorf("%w: proc cancel: state %s: only unfinished procedures can be cancelled (INITIALIZING, RUNNABLE, WAITING, WAITING_TIMEOUT); a FAILED one is rolling back already", errInvalid, st)
		}
		state, states = st, []procedure.State{st}
	}
	switch {
	case f.OlderThan < 0:
		return catalog.CancelResult{}, fmt.Errorf("%w: proc cancel: negative age %v", errInvalid, f.OlderThan)
	case f.Type == "" && f.State == "" && f.Owner == "" && f.OlderThan == 0:
		return catalog.CancelResult{}, fmt.Errorf("%w: proc cancel: no filter: give at least one of type, state, owner, older than (cancelling everything is not a filter)", errInvalid)
	}
	svc, err := d.leaderServices()
	if err != nil {
		return catalog.CancelResult{}, err
	}
	args := map[string]string{}
	if f.Type != "" {
		args["type"] = f.Type
	}
	if f.State != "" {
		args["state"] = state.String()
	}
	if f.Owner != "" {
		args["owner"] = f.Owner
	}
	if f.OlderThan > 0 {
		args["older_than"] = f.OlderThan.String()
	}
	out := catalog.CancelResult{DryRun: o.DryRun}
	seq, _, err := svc.repair(ctx, "proc cancel", args, o, func() (repairPlan, error) {
		if len(states) == 0 {
			states = cancellable
		}
		now := d.cfg.Clock.Now()
		var match []procedure.Info
		for _, info := range svc.x.List(procedure.Filter{Type: f.Type, States: states, RootsOnly: true}) {
			if (f.Owner == "" || info.Owner == f.Owner) && (f.OlderThan == 0 || now.Sub(info.Submitted) >= f.OlderThan) {
				match = append(match, info)
			}
		}
		out.Cancelled, out.Skipped = nil, nil
		for _, info := range match {
			if info.UntilDone {
				out.Skipped = append(out.Skipped, catalog.Skipped{Info: info, Reason: "it retries until done and cannot roll back (bypass it if it must go)"})
			} else {
				out.Cancelled = append(out.Cancelled, info)
			}
		}
		summary := fmt.Sprintf("cancel %s", countOf(len(out.Cancelled), "procedure"))
		if len(out.Skipped) > 0 {
			summary += fmt.Sprintf(" (%d more match but cannot be cancelled)", len(out.Skipped))
		}
		if len(match) == 0 {
			return repairPlan{noop: true, summary: "no unfinished procedure matches"}, nil
		}
		return repairPlan{summary: summary, act: func(context.Context) (string, error) {
			want := out.Cancelled
			out.Cancelled = nil
			var ids []string
			for _, info := range want {
				if err := svc.x.Abort(info.ID); err != nil {
					// Finished meanwhile, or turned out not to roll back.
					out.Skipped = append(out.Skipped, catalog.Skipped{Info: info, Reason: err.Error()})
					continue
				}
				// As it was when it matched, its abort now asked for.
				info.AbortRequested = true
				out.Cancelled = append(out.Cancelled, info)
				ids = append(ids, strconv.FormatUint(info.ID, 10))
			}
			res := fmt.Sprintf("cancelled %s", countOf(len(ids), "procedure"))
			if len(ids) > 0 {
				res += ": " + strings.Join(ids, ", ")
			}
			if len(out.Skipped) > 0 {
				res += fmt.Sprintf("; %d not cancelled", len(out.Skipped))
			}
			return res, nil
		}}, nil
	})
	out.Record = seq
	return out, err
}

// ---- the guarded bypass

// BypassProcedure is Executor.Bypass behind guards: without override it
// refuses a procedure (or, recursive, a descendant) that is running a step
// (the step's changes would land after it was declared finished), waiting
// for a lock (the holder is not touched), rolling back, or holding entity
// locks (bypassing releases them with the entity half changed); one with
// unfinished children needs recursive.
func (d *Domain) BypassProcedure(ctx context.Context, id uint64, recursive bool, o catalog.RepairOptions) (catalog.RepairResult, error) {
	if id == 0 {
		return catalog.RepairResult{}, fmt.Errorf("%w: proc bypass: no procedure id", errInvalid)
	}
	svc, err := d.leaderServices()
	if err != nil {
		return catalog.RepairResult{}, err
	}
	args := map[string]string{"id": strconv.FormatUint(id, 10)}
	if o.Override {
		args["override"] = "true"
	}
	if recursive {
		args["recursive"] = "true"
	}
	out := catalog.RepairResult{DryRun: o.DryRun}
	seq, summary, err := svc.repair(ctx, "proc bypass", args, o, func() (repairPlan, error) {
		return svc.planBypass(id, recursive, o, &out)
	})
	out.Summary, out.Record = summary, seq
	return out, err
}

func (s *services) planBypass(id uint64, recursive bool, o catalog.RepairOptions, out *catalog.RepairResult) (repairPlan, error) {
	w, err := s.x.Why(id)
	if err != nil {
		return repairPlan{}, err
	}
	if w.State.Terminal() {
		if w.Bypassed {
			return repairPlan{noop: true, summary: fmt.Sprintf("procedure %d was bypassed: it ended %s", id, w.State)}, nil
		}
		return repairPlan{}, refuse("procedure %d is already %s: nothing to bypass", id, w.State)
	}
	var targets []uint64
	var visit func(w procedure.Why) error
	visit = func(w procedure.Why) error {
		targets = append(targets, w.ID)
		if !o.Override {
			switch w.Reason {
			case "running":
				return refuse("procedure %d (%s) is running a step: bypassed now, that step's changes would land after it was declared finished. Wait until it waits for something ('baton proc get %d' says what), or pass --override: it then finishes at the end of the current step",
					w.ID, w.Type, w.ID)
			case "waiting for lock":
				lock := "a lock"
				if w.Sched.Lock != nil {
					lock = w.Sched.Lock.String()
				}
				return refuse("procedure %d (%s) waits for %s held by procedure %v: release or finish the holder, or pass --override (the holder is not touched)",
					w.ID, w.Type, lock, w.Sched.Holders)
			case "rolling back":
				return refuse("procedure %d (%s) is rolling back: a bypass skips the rest of its rollback and leaves what it did in place; let it finish ('baton proc wait %d'), or pass --override",
					w.ID, w.Type, w.RootID)
			}
			if w.Locked {
				var held []string
				for _, l := range w.Sched.Held {
					held = append(held, l.String())
				}
				return refuse("procedure %d (%s) holds its locks (%s): a bypass releases them with whatever it was changing half done. For a region in transition, 'baton region assign|unassign REGION --override' takes over safely; otherwise pass --override",
					w.ID, w.Type, strings.Join(held, ", "))
			}
		}
		if len(w.Children) > 0 {
			if !recursive {
				return refuse("procedure %d (%s) has unfinished children %v: pass --recursive to bypass them too, or bypass them first", w.ID, w.Type, w.Children)
			}
			for _, c := range w.Children {
				cw, err := s.x.Why(c)
				if err != nil || cw.State.Terminal() {
					continue
				}
				if err := visit(cw); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := visit(w); err != nil {
		return repairPlan{}, err
	}
	summary := fmt.Sprintf("bypass %s", s.describeProc(id))
	if n := len(targets) - 1; n > 0 {
		summary += fmt.Sprintf(" and its %s", countOf(n, "unfinished descendant"))
	}
	summary += ": it finishes as SUCCESS at its next turn without running another step, and what it changed stays as it is"
	out.Bypassed = targets
	return repairPlan{summary: summary, act: func(context.Context) (string, error) {
		if err := s.x.Bypass(id, procedure.BypassOptions{Recursive: recursive, Force: o.Override}); err != nil {
			out.Bypassed = nil
			return "", err
		}
		for _, t := range targets {
			s.forget(t) // a region procedure's wait for its op
		}
		return summary, nil
	}}, nil
}

// ---- maintenance mode

// SetMaintenance turns maintenance mode on or off (see the package doc).
// The state is replicated, so it survives failovers and restarts.
func (d *Domain) SetMaintenance(ctx context.Context, on bool, reason string, o catalog.RepairOptions) (catalog.RepairResult, error) {
	svc, err := d.leaderServices()
	if err != nil {
		return catalog.RepairResult{}, err
	}
	action, args := "maintenance off", map[string]string{}
	if on {
		action = "maintenance on"
	}
	if reason != "" {
		args["reason"] = reason
	}
	out := catalog.RepairResult{DryRun: o.DryRun}
	seq, summary, err := svc.repair(ctx, action, args, o, func() (repairPlan, error) {
		cur, err := getMaintenance(svc.reader())
		if err != nil {
			return repairPlan{}, err
		}
		c := cur.catalog()
		out.Maintenance = &c
		if cur.On == on {
			return repairPlan{noop: true, summary: "maintenance mode is already " + cur.describe()}, nil
		}
		summary := "turn maintenance mode on: the leader sends no region open or close (procedures that would, wait), and new procedures are refused until it is turned off"
		if !on {
			summary = fmt.Sprintf("turn maintenance mode off (it is %s): dispatch resumes and new procedures are accepted", cur.describe())
		}
		return repairPlan{summary: summary, act: func(ctx context.Context) (string, error) {
			m := Maintenance{On: on, Since: d.cfg.Clock.Now().UTC(), By: callerName(o.Caller), Reason: reason}
			if err := svc.setMaintenance(ctx, m); err != nil {
				return "", err
			}
			c := m.catalog()
			out.Maintenance = &c
			return "maintenance mode " + m.describe(), nil
		}}, nil
	})
	out.Summary, out.Record = summary, seq
	return out, err
}
