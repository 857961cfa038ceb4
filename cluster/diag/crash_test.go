package diag_test

import (
	"testing"

	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/procedure/proceduretest"
)

// appliedEffects are the effect counts that are not zero: a step applied
// and rolled back counts as never applied.
func appliedEffects(keys map[string]string) any {
	out := map[string]string{}
	for k, v := range keys {
		if v != "0" {
			out[k] = v
		}
	}
	return out
}

// TestDiagnosticProceduresSurviveEveryCrash proves the diagnostic types,
// which the cluster's failover tests lean on, with the public harness:
// each step's effect (a count per step, committed with it) applied once
// whatever crashes, and undone by a rollback run twice.
func TestDiagnosticProceduresSurviveEveryCrash(t *testing.T) {
	for name, newProc := range map[string]func() procedure.Procedure{
		"sleep":  func() procedure.Procedure { return &diag.Sleep{Steps: 3} },
		"fail":   func() procedure.Procedure { return &diag.Fail{Steps: 4, FailAt: 2} },
		"fanout": func() procedure.Procedure { return &diag.Fanout{Children: 2, Steps: 2} },
	} {
		t.Run(name, func(t *testing.T) {
			c := proceduretest.Case{Register: diag.Register, New: newProc, Keys: appliedEffects}
			proceduretest.RecoveryAndDoubleExecution(t, c)
			proceduretest.RollbackAndDoubleExecution(t, c)
		})
	}
}
