package domain_test

import (
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
)

// regionSteps is how many steps the leader's executor ran of region
// procedures (TransitRegionState).
func regionSteps(t *testing.T, h *harness) float64 {
	t.Helper()
	return stepsOf(t, h, domain.TypeTransitRegionState)
}

// stepsOf is how many steps the leader's executor ran of procedures of
// type typ.
func stepsOf(t *testing.T, h *harness, typ string) float64 {
	t.Helper()
	li := h.leaderIndex()
	mfs, err := h.c.Masters()[li].Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "baton_procedure_steps_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == typ {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestPreparedRegionsOpenInOneStep: a create's regions are prepared by
// their parent's step and their open sent once its spawn is written
// (firstOpens), so each region procedure runs one step, woken by the
// answer, instead of a step that only sends and another that records it.
// A crashed server's go in batches (AssignBatch, from format 2), prepared
// by the crash's step: no region procedure runs, and a batch runs two
// steps, one that sends and one that records. Every region opens once, on
// one server.
func TestPreparedRegionsOpenInOneStep(t *testing.T) {
	const regions = 120
	// No answer's timeout on a loaded machine: a child it woke would run
	// a step more.
	h := newHarness(t, harnessOpts{masters: 1, servers: 3, domain: func(c *domain.Config) { c.DispatchTimeout = time.Minute }})
	before := regionSteps(t, h)
	h.mustSucceed(h.createTable("", "onestep", regions), time.Minute)
	h.checkTableOpen("default:onestep", regions)
	created := regionSteps(t, h) - before
	// A step each: never the two each took before.
	if created < regions || created > regions*5/4 {
		t.Fatalf("%v region procedure steps for %d regions created, want about one each", created, regions)
	}

	perServer := map[string]int{} // hosted is by region
	for _, srvs := range h.hosted() {
		for _, srv := range srvs {
			perServer[srv]++
		}
	}
	victim := ""
	for srv, n := range perServer {
		if victim == "" || n > perServer[victim] {
			victim = srv
		}
	}
	moved := perServer[victim]
	before = regionSteps(t, h)
	batchesBefore := stepsOf(t, h, domain.TypeAssignBatch)
	h.stopRS(victim)
	_, x := h.leader()
	testwait.For(t, time.Minute, "the crash of "+victim+" handled", func() bool {
		for _, i := range x.List(procedure.Filter{Type: domain.TypeServerCrash}) {
			if i.State == procedure.Success {
				return true
			}
		}
		return false
	})
	h.checkNoDoubles()
	h.checkTableOpen("default:onestep", regions)
	crashed := regionSteps(t, h) - before
	batchSteps := stepsOf(t, h, domain.TypeAssignBatch) - batchesBefore
	// Two servers left, batches of up to 1,000: two batches, or one per
	// wave and server.
	if moved == 0 || crashed != 0 || batchSteps < 2 || batchSteps > 8 {
		t.Fatalf("%v region procedure steps and %v batch steps for the %d regions of the crashed %s, want none and two per batch", crashed, batchSteps, moved, victim)
	}
}
