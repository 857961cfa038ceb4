package domain_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/cluster/lease"
	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/rspb"
)

// A create of 8 regions opens each on exactly one server, as the servers
// themselves answer, and spreads them evenly (fewest regions first).
func TestCreateTableOpensEveryRegionOnce(t *testing.T) {
	h := newHarness(t, harnessOpts{servers: 3})
	id := h.createTable("", "t1", 8)
	h.mustSucceed(id, 20*time.Second)
	counts := h.checkTableOpen("default:t1", 8)
	if lo, hi := spread(counts); len(counts) != 3 || hi-lo > 1 {
		t.Errorf("regions spread %v, want 3 servers within one of each other", counts)
	}
	// A second create of the same table fails and leaves the first alone.
	id2 := h.createTable("", "t1", 2)
	if info := h.wait(id2, 10*time.Second); info.State != procedure.RolledBack {
		t.Fatalf("second create ended %v, want ROLLEDBACK", info.State)
	}
	h.checkTableOpen("default:t1", 8)
}

// A create that fails after every region opened rolls back completely: the
// regions are closed on their servers and the layout deleted.
func TestCreateTableFailureRollsBack(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	h := newHarness(t, harnessOpts{servers: 3, domain: func(c *domain.Config) {
		c.FailPoint = func(p string) error {
			if p == "create.enable" && fail.Load() {
				return errors.New("injected")
			}
			return nil
		}
	}})
	id := h.createTable("", "bad", 8)
	info := h.wait(id, 30*time.Second)
	if info.State != procedure.RolledBack {
		t.Fatalf("create ended %v, want ROLLEDBACK", info.State)
	}
	h.checkTableGone("default:bad")
	if n := len(h.hosted()); n != 0 {
		t.Errorf("%d regions still open after the rollback: %v", n, h.hosted())
	}
	// The same create succeeds once the fault is gone: nothing was left.
	fail.Store(false)
	h.mustSucceed(h.createTable("", "bad", 8), 20*time.Second)
	h.checkTableOpen("default:bad", 8)
}

// Region servers that refuse every open: the create gives up after
// MaxOpenAttempts and rolls back; no table is left.
func TestCreateTableUnopenableRollsBack(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, failRate: 1, domain: func(c *domain.Config) { c.MaxOpenAttempts = 3 }})
	info := h.wait(h.createTable("", "never", 4), 20*time.Second)
	if info.State != procedure.RolledBack {
		t.Fatalf("create ended %v, want ROLLEDBACK", info.State)
	}
	h.checkTableGone("default:never")
}

// Disable closes every region, enable reopens them, delete removes a
// disabled table (and refuses an enabled one); a namespace holding a table
// cannot be deleted.
func TestTableLifecycleAndNamespaces(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2})
	mustProc := func(p procedure.Procedure, err error) procedure.Procedure {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	h.mustSucceed(h.submit(mustProc(domain.NewCreateNamespace("app")), ""), 5*time.Second)
	if info := h.wait(h.submit(mustProc(domain.NewCreateNamespace("app")), ""), 5*time.Second); info.State != procedure.RolledBack {
		t.Errorf("second create namespace ended %v, want ROLLEDBACK", info.State)
	}
	if info := h.wait(h.createTable("nope", "t", 1), 5*time.Second); info.State != procedure.RolledBack {
		t.Errorf("create in a missing namespace ended %v, want ROLLEDBACK", info.State)
	}
	h.mustSucceed(h.createTable("app", "t", 4), 10*time.Second)
	h.checkTableOpen("app:t", 4)

	if info := h.wait(h.submit(mustProc(domain.NewDeleteTable("app", "t")), ""), 5*time.Second); info.State != procedure.RolledBack {
		t.Errorf("delete of an enabled table ended %v, want ROLLEDBACK", info.State)
	}
	if info := h.wait(h.submit(mustProc(domain.NewDeleteNamespace("app")), ""), 5*time.Second); info.State != procedure.RolledBack {
		t.Errorf("delete of a non-empty namespace ended %v, want ROLLEDBACK", info.State)
	}

	h.mustSucceed(h.submit(mustProc(domain.NewDisableTable("app", "t")), ""), 10*time.Second)
	r := h.reader()
	tb, _, _ := domain.GetTable(r, "app:t")
	if tb.State != domain.TableDisabled {
		t.Errorf("table is %s after disable", tb.State)
	}
	names := domain.TableRegionNames(tb, "app:t")
	if len(names) == 0 {
		t.Error("the disabled table has no regions")
	}
	for _, rn := range names {
		if rg, _, _ := domain.GetRegion(r, rn); rg.State != domain.RegionClosed || rg.Server != "" {
			t.Errorf("region %s is %s on %q after disable", rn, rg.State, rg.Server)
		}
	}
	if n := len(h.hosted()); n != 0 {
		t.Errorf("%d regions still open after disable", n)
	}

	h.mustSucceed(h.submit(mustProc(domain.NewEnableTable("app", "t")), ""), 10*time.Second)
	h.checkTableOpen("app:t", 4)

	h.mustSucceed(h.submit(mustProc(domain.NewDisableTable("app", "t")), ""), 10*time.Second)
	h.mustSucceed(h.submit(mustProc(domain.NewDeleteTable("app", "t")), ""), 10*time.Second)
	h.checkTableGone("app:t")
	h.mustSucceed(h.submit(mustProc(domain.NewDeleteNamespace("app")), ""), 5*time.Second)
	if ok, _ := domain.NamespaceExists(h.reader(), "app"); ok {
		t.Error("namespace app still exists")
	}
	if _, err := domain.NewDeleteNamespace(domain.DefaultNamespace); !errors.Is(err, procedure.ErrInvalid) {
		t.Errorf("deleting the default namespace: %v, want ErrInvalid", err)
	}
}

// A region server that dies: its lease expires, the crash procedure
// reassigns its regions to the others, and none is open twice.
func TestServerCrashReassigns(t *testing.T) {
	h := newHarness(t, harnessOpts{servers: 3})
	h.mustSucceed(h.createTable("", "t", 9), 20*time.Second)
	before := h.checkTableOpen("default:t", 9)
	if before["rs2"] == 0 {
		t.Fatalf("rs2 holds no region: %v", before)
	}
	h.stopRS("rs2")
	start := time.Now()
	testwait.For(t, 20*time.Second, "the regions of rs2 to be reassigned", func() bool {
		n := 0
		domain.ScanRegions(h.reader(), func(_ string, rg domain.Region) bool {
			if rg.State == domain.RegionOpen && rg.Server != "rs2" && rg.ProcID == 0 {
				n++
			}
			return true
		})
		return n == 9
	})
	t.Logf("reassigned %d regions %v after the crash (hard limit %v)", before["rs2"], time.Since(start), testHardLimit)
	counts := h.checkTableOpen("default:t", 9)
	if counts["rs2"] != 0 || counts["rs1"]+counts["rs3"] != 9 {
		t.Errorf("placement after the crash: %v", counts)
	}
	srv, _, _ := domain.GetServer(h.reader(), "rs2")
	if srv.State != domain.ServerExpired {
		t.Errorf("rs2 is %s, want expired", srv.State)
	}
	// The crash procedure finishes (it looks once more after its
	// children are done: the regions may be placed a moment before).
	_, x := h.leader()
	for _, info := range x.List(procedure.Filter{Type: domain.TypeServerCrash}) {
		if info := h.wait(info.ID, 10*time.Second); info.State != procedure.Success {
			t.Errorf("server crash %d ended %v", info.ID, info.State)
		}
	}
}

// watchDoubles polls the region servers' own answers until check is
// called, which fails the test if any sample saw a region open on two
// servers at once.
func (h *harness) watchDoubles() (check func()) {
	stop := make(chan struct{})
	out := make(chan []string, 1)
	go func() {
		var bad []string
		for {
			for r, srvs := range h.hostedQuiet() {
				if len(srvs) > 1 {
					bad = append(bad, r+" on "+strings.Join(srvs, ","))
				}
			}
			select {
			case <-stop:
				out <- bad
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() {
		h.t.Helper()
		close(stop)
		if bad := <-out; len(bad) > 0 {
			h.t.Errorf("%d samples found a region open on two servers; the first: %v", len(bad), bad[:min(len(bad), 5)])
		}
	}
}

// The leader dies in the middle of a create: the new leader resumes the
// half-finished procedure (its children re-send their opens, which the
// servers take idempotently) and finishes it; no region is ever open twice.
func TestLeaderFailoverDuringCreate(t *testing.T) {
	h := newHarness(t, harnessOpts{servers: 3, opLatency: 30 * time.Millisecond})
	checkDoubles := h.watchDoubles()
	id := h.createTable("", "big", 24)
	testwait.For(t, 10*time.Second, "the create to open its first regions", func() bool {
		n := 0
		domain.ScanRegions(h.reader(), func(_ string, rg domain.Region) bool {
			if rg.State == domain.RegionOpen {
				n++
			}
			return true
		})
		return n > 0
	})
	old := h.leaderIndex()
	h.killMaster(old)
	info := h.mustSucceed(id, 30*time.Second)
	if h.leaderIndex() == old {
		t.Fatal("the old leader still leads")
	}
	checkDoubles()
	h.checkTableOpen("default:big", 24)
	t.Logf("create %d finished on the new leader: %s", id, info.Result)
}

// A region server dies and the leader dies with it: the new leader knows
// the server only from the replicated grant, gives it a fresh lease, and
// expires it a hard limit later; its crash procedure reassigns the regions.
func TestServerCrashDuringMasterFailover(t *testing.T) {
	h := newHarness(t, harnessOpts{servers: 3})
	h.mustSucceed(h.createTable("", "t", 6), 20*time.Second)
	h.checkTableOpen("default:t", 6)
	h.stopRS("rs1")
	h.killMaster(h.leaderIndex())
	testwait.For(t, 20*time.Second, "the regions of rs1 to be reassigned", func() bool {
		n := 0
		domain.ScanRegions(h.reader(), func(_ string, rg domain.Region) bool {
			if rg.State == domain.RegionOpen && rg.Server != "rs1" && rg.ProcID == 0 {
				n++
			}
			return true
		})
		return n == 6
	})
	counts := h.checkTableOpen("default:t", 6)
	if counts["rs1"] != 0 {
		t.Errorf("placement after the crash: %v", counts)
	}
}

// Move sends a region where it is asked to; balance evens out the counts
// after a new server joins.
func TestMoveAndBalance(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2})
	h.mustSucceed(h.createTable("", "t", 8), 20*time.Second)
	counts := h.checkTableOpen("default:t", 8)
	if counts["rs1"] != 4 || counts["rs2"] != 4 {
		t.Fatalf("placement %v, want 4 and 4", counts)
	}
	// Move one region from rs1 to rs2.
	var name string
	domain.ScanRegions(h.reader(), func(n string, rg domain.Region) bool {
		if rg.Server == "rs1" {
			name = n
			return false
		}
		return true
	})
	lm, _ := h.leader()
	p, err := lm.dom.MoveRegionProcedure(name, "rs2")
	if err != nil {
		t.Fatal(err)
	}
	h.mustSucceed(h.submit(p, ""), 10*time.Second)
	if rg, _, _ := domain.GetRegion(h.reader(), name); rg.Server != "rs2" || rg.State != domain.RegionOpen {
		t.Errorf("after the move region %s is %s on %s, want OPEN on rs2", name, rg.State, rg.Server)
	}
	counts = h.checkTableOpen("default:t", 8)
	if counts["rs1"] != 3 || counts["rs2"] != 5 {
		t.Errorf("placement after the move %v, want 3 and 5", counts)
	}

	// A third server: balance moves regions to it until within one.
	h.startRS("rs3", 0, 0)
	testwait.For(t, 5*time.Second, "rs3's lease", func() bool {
		svc := lm.dom.Services()
		live, _ := svc.LiveTargets(h.reader())
		return len(live) == 3
	})
	info := h.mustSucceed(h.submit(&domain.Balance{}, ""), 20*time.Second)
	counts = h.checkTableOpen("default:t", 8)
	if lo, hi := spread(counts); len(counts) != 3 || hi-lo > 1 {
		t.Errorf("placement after balance %v (%s)", counts, info.Result)
	}
	// Balanced already: nothing moves.
	info = h.mustSucceed(h.submit(&domain.Balance{}, ""), 10*time.Second)
	if string(info.Result) != "0 regions moved over 3 servers" {
		t.Errorf("second balance: %s", info.Result)
	}
}

// blockingTransport fails every batch to the servers in block, as a network
// that lets heartbeats through but not the master's calls would.
type blockingTransport struct {
	inner dispatch.Transport
	mu    sync.Mutex
	block map[string]bool
}

func (b *blockingTransport) ExecuteBatch(ctx context.Context, t dispatch.Target, req *rspb.BatchRequest) (*rspb.BatchResponse, error) {
	b.mu.Lock()
	blocked := b.block[t.ServerID]
	b.mu.Unlock()
	if blocked {
		return nil, status.Error(codes.Unavailable, "test: blocked")
	}
	return b.inner.ExecuteBatch(ctx, t, req)
}

// A server the dispatcher cannot reach (while its heartbeats get through)
// is not expired behind its back: its lease is revoked, its next heartbeat
// tells it so, it drops its regions and registers again, and only then are
// the regions meant for it opened elsewhere.
func TestUnreachableServerIsFenced(t *testing.T) {
	bt := &blockingTransport{inner: dispatch.NewGRPCTransport(dispatch.GRPCTransportConfig{}), block: map[string]bool{"rs2": true}}
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, domain: func(c *domain.Config) {
		c.Transport = bt
		c.Dispatch.MaxFailures = 3
	}})
	sc := h.rs("rs2").StartCode()
	id := h.createTable("", "t", 6)
	h.mustSucceed(id, 20*time.Second)
	counts := h.checkTableOpen("default:t", 6)
	if counts["rs1"] != 6 {
		t.Errorf("placement %v, want every region on rs1", counts)
	}
	testwait.For(t, 5*time.Second, "rs2 to register again", func() bool {
		return h.rs("rs2").StartCode() != 0 && h.rs("rs2").StartCode() != sc
	})
	// Reachable again: balance can use it.
	bt.mu.Lock()
	bt.block = nil
	bt.mu.Unlock()
	h.mustSucceed(h.submit(&domain.Balance{}, ""), 20*time.Second)
	counts = h.checkTableOpen("default:t", 6)
	if counts["rs1"] != 3 || counts["rs2"] != 3 {
		t.Errorf("placement after balance %v, want 3 and 3", counts)
	}
}

// An abort in the middle of a create (some regions open, others opening)
// rolls the whole tree back: nothing is left open or recorded.
func TestAbortCreateRollsBack(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, opLatency: 300 * time.Millisecond})
	id := h.createTable("", "t", 40)
	testwait.For(t, 10*time.Second, "some regions to open", func() bool {
		return len(h.hosted()) > 0
	})
	_, x := h.leader()
	if err := x.Abort(id); err != nil {
		t.Fatal(err)
	}
	info := h.wait(id, 20*time.Second)
	if info.State != procedure.RolledBack {
		t.Fatalf("aborted create ended %v", info.State)
	}
	h.checkTableGone("default:t")
	if hs := h.hosted(); len(hs) != 0 {
		t.Errorf("regions still open after the rollback: %v", hs)
	}
}

// A region server that restarts registers again with a new start code
// long before its old lease would expire: the old incarnation is treated
// as crashed at once (it closed everything before registering) and its
// regions are reassigned.
func TestServerRestartReassignsAtOnce(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 2, domain: func(c *domain.Config) {
		c.ServerLease = lease.Config{SoftLimit: 20 * time.Second, HardLimit: time.Minute, MonitorInterval: 50 * time.Millisecond}
	}})
	h.mustSucceed(h.createTable("", "t", 6), 10*time.Second)
	h.checkTableOpen("default:t", 6)
	old := h.rs("rs1").StartCode()
	h.stopRS("rs1")
	start := time.Now()
	s := h.startRS("rs1", 0, 0)
	if s.StartCode() == old {
		t.Fatal("same start code after a restart")
	}
	testwait.For(t, 10*time.Second, "the old incarnation's regions to be reassigned", func() bool {
		n := 0
		domain.ScanRegions(h.reader(), func(_ string, rg domain.Region) bool {
			if rg.State == domain.RegionOpen && rg.ProcID == 0 && rg.StartCode != old {
				n++
			}
			return true
		})
		return n == 6
	})
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("reassignment took %v", el)
	}
	h.checkTableOpen("default:t", 6)
}
