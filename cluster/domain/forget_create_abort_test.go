package domain_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
)

// A create forgetting its region children, then its server lost: the server that
// opened the forgotten children's regions is lost (stopped, or restarted
// with a new start code), with or without a failover of the leader, and
// the create is then aborted while a slow server's children still run.
// Nothing else knows what the forgotten children opened: the rollback of
// WRITE_LAYOUT must find it in the store alone, wait out the lost
// server's self-fence where it must, and end with nothing of the table
// recorded or hosted.
func TestForgottenChildrensServerLostThenAbort(t *testing.T) {
	const regions = 24
	for _, tc := range []struct {
		name     string
		restart  bool
		failover bool
	}{
		{name: "server stopped"},
		{name: "server restarted", restart: true},
		{name: "server stopped, leader lost", failover: true},
		{name: "server restarted, leader lost", restart: true, failover: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{servers: 2, opLatency: 20 * time.Millisecond})
			h.startRS("rs3", 3*time.Second, 0)
			id := h.createTable("", "t", regions)
			_, x := h.leader()
			// A region a forgotten child opened: recorded OPEN on a fast
			// server, its child gone from the executor.
			var lost string
			testwait.For(t, 20*time.Second, "a forgotten child's region open on a fast server while others run", func() bool {
				info, err := x.Get(id)
				if err != nil || info.State.Terminal() {
					return false
				}
				live := 0
				for _, c := range info.Children {
					if ci, err := x.Get(c); err == nil && !ci.State.Terminal() {
						live++
					}
				}
				if live == 0 {
					return false
				}
				lost = ""
				_ = domain.ScanRegions(h.reader(), func(name string, rg domain.Region) bool {
					if rg.Table == "default:t" && rg.State == domain.RegionOpen && rg.Server != "rs3" {
						lost = rg.Server
						return false
					}
					return true
				})
				return lost != ""
			})
			h.stopRS(lost)
			if tc.restart {
				h.startRS(lost, 20*time.Millisecond, 0)
			}
			if tc.failover {
				old := h.leaderIndex()
				h.killMaster(old)
				testwait.For(t, 30*time.Second, "a new leader to load the create", func() bool {
					if h.leaderIndex() == old {
						return false
					}
					_, nx := h.leader()
					_, err := nx.Get(id)
					return err == nil
				})
				// Its progress counts the regions the forgotten children
				// opened, which the new leader never held.
				_, nx := h.leader()
				if info, err := nx.Get(id); err == nil && !info.State.Terminal() {
					kept := 0
					for _, c := range info.Children {
						if ci, err := nx.Get(c); err == nil && ci.State.Terminal() {
							kept++
						}
					}
					if info.Progress.Done <= int64(kept) {
						t.Errorf("after the failover the create's progress is %d of %d: the %d regions its children opened before it are not counted",
							info.Progress.Done, info.Progress.Total, regions-len(info.Children))
					}
				}
			}
			testwait.For(t, 30*time.Second, "the abort to be taken", func() bool {
				_, lx := h.leader()
				err := lx.Abort(id)
				return err == nil || errors.Is(err, procedure.ErrNotFound)
			})
			info := h.wait(id, 90*time.Second)
			if info.State != procedure.RolledBack {
				t.Fatalf("create ended %s (%s), want ROLLEDBACK", info.State, info.Error)
			}
			h.checkTableGone("default:t")
			for rn, srvs := range h.hosted() {
				if strings.HasPrefix(rn, "default:t,") {
					t.Errorf("region %s still hosted on %v", rn, srvs)
				}
			}
		})
	}
}
