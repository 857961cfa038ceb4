package domain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/scheduler"
)

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
		return catalog.RepairResult{}, procedure.Errorf(errInvalid, "no region named to %s", kind)
	}
	if err := checkLen("region "+kind, "region name", region, MaxRegionNameLen); err != nil {
		return catalog.RepairResult{}, err
	}
	if err := checkLen("region "+kind, "server", server, MaxNameLen); err != nil {
		return catalog.RepairResult{}, err
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
// the region back itself. That is checked at the plan, again before the
// act bypasses anything, and by the bypass itself (KeepRollbacks), so a
// procedure that fails in between is not missed. Whatever the plan, the
// new TransitRegionState decides under the region's lock from the record
// it reads then: a region recorded on a live server is closed there
// first; one recorded on a fenced server waits for the proof that the
// server stopped serving; only then is it opened. So an override can
// never open a region twice.
func (s *services) planRegion(kind, region, server string, o catalog.RepairOptions, out *catalog.RepairResult) (repairPlan, error) {
	r := s.reader()
	rg, err := knownRegion(r, region)
	if err != nil {
		return repairPlan{}, err
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
		if _, err := knownServer(r, server); err != nil {
			return repairPlan{}, err
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
		// Looked at again before any is bypassed, so that one that failed
		// since the plan stops the act before it changes anything.
		for _, id := range owners {
			if w, err := s.x.Why(id); err == nil && w.Reason == "rolling back" {
				out.Bypassed = nil
				return "", refuse("%s started rolling back: its rollback puts region %s back itself; let it finish ('baton proc wait %d')", s.describeProc(id), region, w.RootID)
			}
		}
		var bypassed []uint64
		for _, id := range owners {
			// Force: a region procedure still waiting for its lock has
			// done nothing yet. KeepRollbacks: one that failed since the
			// plan looked is refused now, its rollback left to finish.
			if err := s.x.Bypass(id, procedure.BypassOptions{Force: true, KeepRollbacks: true}); err != nil {
				// It finished meanwhile: ended (or its end being
				// written), or (a crash recovery's child) forgotten as
				// it succeeded.
				if errors.Is(err, procedure.ErrFinishing) {
					continue
				}
				if info, gerr := s.x.Get(id); (gerr == nil && info.State.Terminal()) || errors.Is(gerr, procedure.ErrNotFound) {
					continue
				}
				out.Bypassed = bypassed
				if w, werr := s.x.Why(id); werr == nil && w.Reason == "rolling back" {
					return "", refuse("%s started rolling back: its rollback puts region %s back itself; let it finish ('baton proc wait %d')%s",
						s.describeProc(id), region, w.RootID, bypassedNote(bypassed))
				}
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

// bypassedNote says which procedures an act that stopped midway had
// bypassed already.
func bypassedNote(ids []uint64) string {
	if len(ids) == 0 {
		return ""
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return fmt.Sprintf(" (procedure %s bypassed already; nothing new was submitted)", strings.Join(s, ", "))
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
