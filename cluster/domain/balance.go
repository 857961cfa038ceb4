package domain

import (
	"fmt"
	"sort"

	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/adminpb"
)

// TypeBalance names Balance in the procedure registry.
const TypeBalance = "Balance"

func init() {
	registerType(TypeBalance, func() procedure.Procedure { return &Balance{} })
	registerBuilder(adminpb.Admin_Balance_FullMethodName, func(d *Domain, _ *adminpb.BalanceRequest) (procedure.Procedure, error) {
		return d.BalanceProcedure()
	})
}

// BalanceProcedure builds a balancing round.
func (d *Domain) BalanceProcedure() (procedure.Procedure, error) { return &Balance{}, nil }

// Balance evens out region counts: it plans moves from the most loaded to
// the least loaded live servers until their counts differ by at most one,
// and runs them as MOVE TransitRegionState children (each with its
// target, each under its own region lock). Only OPEN regions of ENABLED
// tables on live (not suspect) servers count and move. A region busy with
// another procedure when its move runs is re-checked by the move itself
// (a move of a region no longer open is a no-op).
type Balance struct {
	procedure.StateMachine
	Moves int `json:"moves"`
}

const balancePlan int32 = 1

// InitialState implements procedure.StateSteps.
func (p *Balance) InitialState() int32 { return balancePlan }

// ExecuteState implements procedure.StateSteps.
func (p *Balance) ExecuteState(ctx *procedure.Context, state int32) (procedure.Flow, error) {
	if state != balancePlan {
		return procedure.NoMoreState, fmt.Errorf("balance: unknown state %d", state)
	}
	_, svc, flow, err := servicesOf(ctx)
	if svc == nil {
		return flow, err
	}
	r := ctxReader{ctx}
	live, err := svc.liveTargets(r)
	if err != nil {
		return procedure.NoMoreState, err
	}
	moves, err := planBalance(r, live)
	if err != nil {
		return procedure.NoMoreState, err
	}
	for _, m := range moves {
		ns, table := SplitTableName(m.table)
		ctx.AddChild(&TransitRegionState{Region: m.region, Namespace: ns, Table: table, Kind: KindMove, Target: m.to})
	}
	p.Moves = len(moves)
	ctx.SetResult([]byte(fmt.Sprintf("%s moved over %s", countOf(len(moves), "region"), countOf(len(live), "server"))))
	ctx.Logger.Info("balance planned", "moves", len(moves), "servers", len(live))
	return procedure.NoMoreState, nil
}

// RollbackState implements procedure.StateSteps: nothing of its own.
func (p *Balance) RollbackState(*procedure.Context, int32) error { return nil }

type move struct{ region, table, from, to string }

// planBalance plans moves from the most to the least loaded of live until
// counts differ by at most one.
func planBalance(r reader, live map[string]Server) ([]move, error) {
	if len(live) < 2 {
		return nil, nil
	}
	tables, err := scanTables(r, "")
	if err != nil {
		return nil, err
	}
	type regionRef struct{ name, table string }
	on := map[string][]regionRef{}
	for id := range live {
		on[id] = nil
	}
	err = scanRegions(r, func(name string, rg Region) bool {
		srv, ok := live[rg.Server]
		if ok && rg.State == RegionOpen && rg.ProcID == 0 && srv.StartCode == rg.StartCode && tables[rg.Table].State == TableEnabled {
			on[rg.Server] = append(on[rg.Server], regionRef{name, rg.Table})
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	ids := sortedKeys(live)
	var out []move
	for {
		sort.SliceStable(ids, func(i, j int) bool { return len(on[ids[i]]) > len(on[ids[j]]) })
		hi, lo := ids[0], ids[len(ids)-1]
		if len(on[hi])-len(on[lo]) <= 1 {
			return out, nil
		}
		rr := on[hi][len(on[hi])-1]
		on[hi] = on[hi][:len(on[hi])-1]
		on[lo] = append(on[lo], rr)
		out = append(out, move{region: rr.name, table: rr.table, from: hi, to: lo})
	}
}
