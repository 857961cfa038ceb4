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
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
)

// The states a create ran, as its history's transitions name them.
func createSteps(info procedure.Info) []int32 {
	var out []int32
	for _, tr := range info.History {
		if len(out) == 0 || out[len(out)-1] != tr.Step {
			out = append(out, tr.Step)
		}
	}
	return out
}

// From cluster version 2 a create writes its layout in PRE_OPERATION, the
// step that checks for the table, and never runs WRITE_LAYOUT (2); its
// rollback deletes the layout all the same, and a create refused because
// the table exists deletes nothing. Below version 2 it runs WRITE_LAYOUT,
// as 0.1.0 does: a 0.1.0 master rolling it back undoes that state alone.
func TestCreateTableWritesItsLayoutWithItsChecksFromVersion2(t *testing.T) {
	const writeLayout = 2
	t.Run("version 1", func(t *testing.T) {
		// Masters that say they read format 1 at most keep the cluster
		// there, as a 0.1.0 member does.
		h := newHarness(t, harnessOpts{servers: 2, node: func(c *cluster.Config) {
			c.Build = version.Build{Version: "0.1.0", MaxFormat: version.Format1}
		}})
		info := h.mustSucceed(h.createTable("", "v1", 4), 20*time.Second)
		if steps := createSteps(info); !slices.Contains(steps, writeLayout) {
			t.Fatalf("at cluster version 1 the create ran %v, want WRITE_LAYOUT (%d) among them", steps, writeLayout)
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
		if steps := createSteps(info); slices.Contains(steps, writeLayout) {
			t.Fatalf("at cluster version 2 the create ran %v, want no WRITE_LAYOUT (%d)", steps, writeLayout)
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
