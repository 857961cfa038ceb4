package domain

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/procedure"
)

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
		return catalog.RepairResult{}, procedure.Errorf(errInvalid, "no region server named to recover")
	}
	if err := checkLen("rs recover", "server", server, MaxNameLen); err != nil {
		return catalog.RepairResult{}, err
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
	srv, err := knownServer(r, server)
	if err != nil {
		return repairPlan{}, err
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
