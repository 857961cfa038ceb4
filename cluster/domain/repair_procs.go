package domain

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/procedure"
)

// cancellable are the states CancelProcedures accepts as a filter: those
// of procedures that are not finished and not already rolling back.
var cancellable = []procedure.State{procedure.Initializing, procedure.Runnable, procedure.Waiting, procedure.WaitingTimeout}

// CancelProcedures aborts every unfinished root procedure that matches f
// (a cancelled root rolls back its children): queued, running (the abort
// takes effect at its next step boundary) or waiting. Procedures that
// retry until done cannot roll back and are skipped, saying so. f.IDs and
// f.MaxID bind a confirmation to its dry run: the filter is evaluated
// again when the call is made, and without a bound it would take in what
// was submitted in between.
func (d *Domain) CancelProcedures(ctx context.Context, f catalog.CancelFilter, o catalog.RepairOptions) (catalog.CancelResult, error) {
	if err := checkLen("proc cancel", "type", f.Type, MaxNameLen); err != nil {
		return catalog.CancelResult{}, err
	}
	if err := checkLen("proc cancel", "owner", f.Owner, MaxNameLen); err != nil {
		return catalog.CancelResult{}, err
	}
	if err := checkLen("proc cancel", "state", f.State, MaxNameLen); err != nil {
		return catalog.CancelResult{}, err
	}
	var state procedure.State
	var states []procedure.State
	if f.State != "" {
		st, err := procedure.ParseState(strings.ToUpper(f.State))
		if err != nil {
			return catalog.CancelResult{}, procedure.WithKind(errInvalid, err)
		}
		if !slices.Contains(cancellable, st) {
			return catalog.CancelResult{}, procedure.Errorf(errInvalid, "state %s: only unfinished procedures can be cancelled (INITIALIZING, RUNNABLE, WAITING, WAITING_TIMEOUT); a FAILED one is rolling back already", st)
		}
		state, states = st, []procedure.State{st}
	}
	switch {
	case f.OlderThan < 0:
		return catalog.CancelResult{}, procedure.Errorf(errInvalid, "negative age %v", f.OlderThan)
	case f.Type == "" && f.State == "" && f.Owner == "" && f.OlderThan == 0 && len(f.IDs) == 0:
		// MaxID alone is no filter either: it takes in everything
		// submitted so far.
		return catalog.CancelResult{}, procedure.Errorf(errInvalid, "no filter: give at least one of type, state, owner, older than, ids (cancelling everything is not a filter)")
	}
	var only map[uint64]bool
	if len(f.IDs) > 0 {
		only = make(map[uint64]bool, len(f.IDs))
		for _, id := range f.IDs {
			only[id] = true
		}
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
	if len(f.IDs) > 0 {
		ids := slices.Clone(f.IDs)
		slices.Sort(ids)
		args["ids"] = joinIDs(slices.Compact(ids))
	}
	if f.MaxID > 0 {
		args["max_id"] = strconv.FormatUint(f.MaxID, 10)
	}
	out := catalog.CancelResult{DryRun: o.DryRun}
	seq, _, err := svc.repair(ctx, "proc cancel", args, o, func() (repairPlan, error) {
		if len(states) == 0 {
			states = cancellable
		}
		now := d.cfg.Clock.Now()
		var match []procedure.Info
		for _, info := range svc.x.List(procedure.Filter{Type: f.Type, States: states, RootsOnly: true}) {
			if (f.Owner == "" || info.Owner == f.Owner) && (f.OlderThan == 0 || now.Sub(info.Submitted) >= f.OlderThan) &&
				(only == nil || only[info.ID]) && (f.MaxID == 0 || info.ID <= f.MaxID) {
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

// BypassProcedure is Executor.Bypass behind guards: without override it
// refuses a procedure (or, recursive, a descendant) that is running a step
// (the step's changes would land after it was declared finished), waiting
// for a lock (the holder is not touched), rolling back, or holding entity
// locks (bypassing releases them with the entity half changed); one with
// unfinished children needs recursive.
func (d *Domain) BypassProcedure(ctx context.Context, id uint64, recursive bool, o catalog.RepairOptions) (catalog.RepairResult, error) {
	if id == 0 {
		return catalog.RepairResult{}, procedure.Errorf(errInvalid, "no procedure id given")
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

// joinIDs spells ids as a record's argument: "3,5,8".
func joinIDs(ids []uint64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, ",")
}
