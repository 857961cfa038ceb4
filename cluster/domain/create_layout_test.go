package domain_test

import (
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
)

// The states a create went to, as its history's transitions name them
// (each the state that runs next).
func createSteps(info procedure.Info) []int32 {
	var out []int32
	for _, tr := range info.History {
		if len(out) == 0 || out[len(out)-1] != tr.Step {
			out = append(out, tr.Step)
		}
	}
	return out
}

// From cluster version 2 a create is written at state version 2, which
// 0.1.0 does not load, and writes its layout in PRE_OPERATION, the step
// that checks for the table, never running WRITE_LAYOUT (2); its rollback
// deletes the layout all the same, and a create refused because the table
// exists deletes nothing. Below version 2 it is written at version 1 and
// runs WRITE_LAYOUT, as 0.1.0 does: a 0.1.0 master rolling it back undoes
// that state alone.
func TestCreateTableWritesItsLayoutWithItsChecksFromVersion2(t *testing.T) {
	const writeLayout = 2
	t.Run("version 1", func(t *testing.T) {
		// Masters that say they read format 1 at most keep the cluster
		// there, as a 0.1.0 member does.
		h := newHarness(t, harnessOpts{servers: 2, node: func(c *cluster.Config) {
			c.Build = version.Build{Version: "0.1.0", MaxFormat: version.Format1}
		}})
		info := h.mustSucceed(h.createTable("", "v1", 4), 20*time.Second)
		if steps := createSteps(info); !slices.Contains(steps, writeLayout) || info.Version != 1 {
			t.Fatalf("at cluster version 1 the create went through %v at state version %d, want WRITE_LAYOUT (%d) among them at version 1", steps, info.Version, writeLayout)
		}
		h.checkTableOpen("default:v1", 4)
	})
	t.Run("version 2", func(t *testing.T) {
		var fail atomic.Bool
		h := newHarness(t, harnessOpts{servers: 3, domain: func(c *domain.Config) {
			c.FailPoint = func(p string) error {
				if p == "create.enable" && fail.Load() {
					return errors.New("injected")
				}
				return nil
			}
		}})
		info := h.mustSucceed(h.createTable("", "v2", 4), 20*time.Second)
		if steps := createSteps(info); slices.Contains(steps, writeLayout) || info.Version != 2 {
			t.Fatalf("at cluster version 2 the create went through %v at state version %d, want no WRITE_LAYOUT (%d), at version 2", steps, info.Version, writeLayout)
		}
		h.checkTableOpen("default:v2", 4)

		fail.Store(true)
		info = h.wait(h.createTable("", "bad", 4), 30*time.Second)
		if info.State != procedure.RolledBack {
			t.Fatalf("a create failing after its regions opened ended %v, want ROLLEDBACK", info.State)
		}
		h.checkTableGone("default:bad")
		for r := range h.hosted() {
			if strings.HasPrefix(r, "default:bad,") {
				t.Errorf("region %s still open after the rollback", r)
			}
		}
		fail.Store(false)

		info = h.wait(h.createTable("", "v2", 2), 20*time.Second)
		if info.State != procedure.RolledBack {
			t.Fatalf("a create of an existing table ended %v, want ROLLEDBACK", info.State)
		}
		h.checkTableOpen("default:v2", 4)
	})
}

// A create whose PRE_OPERATION wrote the layout and whose ASSIGN_REGIONS
// has not run (the region budget holds it back) is paused, its leader is
// lost, and the new leader, which resumed it (its next state is rolled
// back as if it had run), aborts it: the rollback deletes the layout
// PRE_OPERATION wrote. Creates refused afterwards (the table exists, the
// namespace does not) delete nothing of the existing table.
func TestCreateAbortedAfterItsLayoutAndAFailoverDeletesIt(t *testing.T) {
	h := newHarness(t, harnessOpts{servers: 2, opLatency: 400 * time.Millisecond, domain: func(c *domain.Config) {
		c.RegionBudget, c.RegionWave = 2, 2
	}})
	hog := h.createTable("", "hog", 6)
	testwait.For(t, 10*time.Second, "the hog to hold the budget", func() bool {
		_, ok, _ := domain.GetTable(h.reader(), "default:hog")
		return ok
	})
	id := h.createTable("", "t", 3)
	testwait.For(t, 10*time.Second, "t's layout written by PRE_OPERATION", func() bool {
		tb, ok, _ := domain.GetTable(h.reader(), "default:t")
		return ok && tb.State == domain.TableCreating
	})
	_, x := h.leader()
	info, _ := x.Get(id)
	t.Logf("t before pause: state %v history %v", info.State, createSteps(info))
	if err := x.Pause(id); err != nil {
		t.Fatal(err)
	}
	old := h.leaderIndex()
	h.killMaster(old)
	var nx *procedure.Executor
	testwait.For(t, 30*time.Second, "a new leader with t loaded", func() bool {
		if h.leaderIndex() == old {
			return false
		}
		_, nx = h.leader()
		_, err := nx.Get(id)
		return err == nil
	})
	if err := nx.Abort(id); err != nil {
		t.Fatal(err)
	}
	_ = nx.Resume(id)
	info = h.wait(id, 60*time.Second)
	if info.State != procedure.RolledBack {
		t.Fatalf("t ended %v (%s), want ROLLEDBACK", info.State, info.Error)
	}
	h.checkTableGone("default:t")
	h.mustSucceed(hog, 60*time.Second)

	// A refused create of an existing table (hog) deletes nothing of it.
	info = h.wait(h.createTable("", "hog", 2), 20*time.Second)
	if info.State != procedure.RolledBack {
		t.Fatalf("a create of an existing table ended %v", info.State)
	}
	h.checkTableOpen("default:hog", 6)
	// A create in a namespace that does not exist deletes nothing.
	info = h.wait(h.createTable("nope", "hog", 2), 20*time.Second)
	if info.State != procedure.RolledBack {
		t.Fatalf("a create in a missing namespace ended %v", info.State)
	}
	h.checkTableOpen("default:hog", 6)
}
