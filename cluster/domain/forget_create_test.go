package domain_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
)

// A create forgets its region children as they succeed (its rollback
// covers them), and a leader lost meanwhile leaves the next one a tree
// with part of its children gone from the store: it resumes it with the
// children still stored, and the create ends as without the failover,
// the table open with each region once; or, when MARK_ENABLED fails after
// every child was forgotten, rolled back with no region left open,
// recorded or hosted (the create's own rollback closing the regions the
// forgotten children opened).
func TestCreateResumesWithForgottenChildrenAfterAFailover(t *testing.T) {
	const regions = 24
	for _, tc := range []struct {
		name    string
		failEnd bool
	}{
		{"succeeds", false},
		{"fails in MARK_ENABLED", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var failEnd atomic.Bool
			failEnd.Store(tc.failEnd)
			h := newHarness(t, harnessOpts{servers: 2, opLatency: 30 * time.Millisecond, domain: func(c *domain.Config) {
				c.FailPoint = func(p string) error {
					if p == "create.enable" && failEnd.Load() {
						return errors.New("injected")
					}
					return nil
				}
			}})
			// A slow third server keeps its regions' children live while
			// the others' succeed and are forgotten.
			h.startRS("rs3", 2*time.Second, 0)
			checkDoubles := h.watchDoubles()
			id := h.createTable("", "t", regions)
			_, x := h.leader()
			var spawned int
			testwait.For(t, 20*time.Second, "the create to have forgotten some children and kept others", func() bool {
				info, err := x.Get(id)
				if err != nil {
					return false
				}
				forgotten, live := 0, 0
				for _, c := range info.Children {
					ci, err := x.Get(c)
					switch {
					case errors.Is(err, procedure.ErrNotFound), err == nil && ci.SummaryOnly:
						// Gone from the executor's table: answered from
						// the summary the tree keeps (at record format 2),
						// else not at all.
						forgotten++
					case err == nil && !ci.State.Terminal():
						live++
					}
				}
				spawned = len(info.Children)
				return forgotten > 0 && live > 0
			})
			old := h.leaderIndex()
			h.killMaster(old)
			var info procedure.Info
			testwait.For(t, 30*time.Second, "a new leader to load the create", func() bool {
				if h.leaderIndex() == old {
					return false
				}
				_, nx := h.leader()
				i, err := nx.Get(id)
				info = i
				return err == nil
			})
			// Loaded from the store: the children forgotten before the
			// failover are not there (nor listed) for the new leader.
			if info.State.Terminal() {
				t.Logf("the create ended before the new leader was asked (%s)", info.State)
			} else if len(info.Children) >= spawned {
				t.Errorf("the new leader lists %d children of the %d the old one spawned: none forgotten", len(info.Children), spawned)
			}
			info = h.wait(id, 60*time.Second)
			checkDoubles()
			if !tc.failEnd {
				if info.State != procedure.Success {
					t.Fatalf("create ended %s (%s)", info.State, info.Error)
				}
				// A server's lease can run out during the failover on a
				// loaded machine: its crash procedure then moves its
				// regions after the create ended, onto the slow server.
				testwait.For(t, 30*time.Second, "every region of the table open once", func() bool {
					problems, _ := h.tableOpenProblems("default:t", regions)
					return len(problems) == 0
				})
				h.checkTableOpen("default:t", regions)
				return
			}
			if info.State != procedure.RolledBack {
				t.Fatalf("create ended %s (%s), want ROLLEDBACK", info.State, info.Error)
			}
			h.checkTableGone("default:t")
			if hs := h.hosted(); len(hs) != 0 {
				t.Errorf("regions still open after the rollback: %v", hs)
			}
		})
	}
}
