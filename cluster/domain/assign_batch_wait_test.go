package domain_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/rspb"
)

// A batch settles with some regions refused and others still unanswered
// by its live target. The refused wait in the batch until the last answer
// is in: handed to children at once, they would hold the batch's next
// step, and so the answers it waits for, until they all end, and a region
// refused everywhere (a crash's assignment never gives up) would keep the
// batch's other regions OPENING for good, though their target opened
// them. At format 1 (a procedure per region) they are recorded OPEN at
// once, and must be from format 2 too.
//
// The dispatcher is made to split the batch's opens into calls of 2
// (MaxBatch); the first call to the survivor (the poison region and one
// other) is refused, and every later call carrying the poison region is
// too; the next call is answered 3 s late (DispatchTimeout is 500 ms), so
// its regions are unanswered when the batch first settles.
func TestCrashBatchRegionRefusedEverywhereHoldsBackNoOther(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format version.Format
	}{{"format 1", version.Format1}, {"format 2", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			const regions = 8
			h := newHarness(t, harnessOpts{masters: 1, servers: 2,
				node: func(c *cluster.Config) {
					if tc.format != 0 {
						c.Build.MaxFormat = tc.format
					}
				},
				domain: func(c *domain.Config) {
					c.DispatchTimeout = 500 * time.Millisecond
					c.Dispatch.MinBatch, c.Dispatch.MaxBatch = 1, 2
				}})
			per, victim := openTable(t, h, regions)
			survivor := otherServer(per, victim)
			if per[victim] < 3 {
				t.Skipf("regions per server %v: the victim needs 3 regions at least", per)
			}
			var (
				mu     sync.Mutex
				armed  bool
				poison string
			)
			ref := domain.ServerRef{ID: survivor, StartCode: h.rs(survivor).StartCode()}
			opens := func(c rpcfault.Call) []string { return opensTo(c, ref) }
			h.faults.MustAdd(rpcfault.Rule{
				Name:    "test: the poison region refused",
				Methods: []string{rspb.RegionServer_ExecuteBatch_FullMethodName},
				Fault:   rpcfault.DropRequest,
				Code:    codes.InvalidArgument,
				When: func(c rpcfault.Call) bool {
					rs := opens(c)
					mu.Lock()
					defer mu.Unlock()
					if !armed || len(rs) == 0 {
						return false
					}
					if poison == "" {
						poison = rs[0]
					}
					return slices.Contains(rs, poison)
				},
			})
			slow := h.faults.MustAdd(rpcfault.Rule{
				Name:    "test: the next call answered late",
				Methods: []string{rspb.RegionServer_ExecuteBatch_FullMethodName},
				Fault:   rpcfault.DelayAnswer,
				Delay:   3 * time.Second,
				Times:   1,
				When: func(c rpcfault.Call) bool {
					rs := opens(c)
					mu.Lock()
					defer mu.Unlock()
					return armed && poison != "" && len(rs) > 0
				},
			})
			mu.Lock()
			armed = true
			mu.Unlock()
			h.stopRS(victim)
			select {
			case <-slow.Done():
			case <-time.After(time.Minute):
				t.Fatal("no open answered late: the case is not reached")
			}
			mu.Lock()
			p := poison
			mu.Unlock()

			var bad []string
			ok := testwait.Until(30*time.Second, func() bool {
				bad = bad[:0]
				r := h.reader()
				tb, _, err := domain.GetTable(r, "default:t")
				if err != nil {
					return false
				}
				for _, rn := range domain.TableRegionNames(tb, "default:t") {
					if rn == p {
						continue
					}
					rg, _, err := domain.GetRegion(r, rn)
					if err != nil || rg.State != domain.RegionOpen || rg.ProcID != 0 {
						bad = append(bad, fmt.Sprintf("%s %s on %s (proc %d)", rn, rg.State, rg.Server, rg.ProcID))
					}
				}
				return len(bad) == 0
			})
			if !ok {
				hosted := h.hosted()
				for _, b := range bad {
					rn := strings.Fields(b)[0]
					t.Errorf("30 s after the crash, region %s; hosted by %v (poison region %s)", b, hosted[rn], p)
				}
			}
			if tc.format == 0 && !strings.Contains(h.c.Logs("m1"), "settled in part") {
				t.Error("no batch settled in part: the case is not reached")
			}
			h.checkNoDoubles()
		})
	}
}

// A live target answers a batch's opens after DispatchTimeout.
// The batch waits for the answers (extend), never sends an open twice in
// the term, hands nothing on, and records every region OPEN once the late
// answer is in; it re-checks the target once per DispatchTimeout, not in
// a loop of steps. (The answer comes 1.5 s late: the harness's dispatcher
// CallTimeout is 2 s.)
func TestCrashBatchWaitsForALateAnswer(t *testing.T) {
	const regions = 6
	h := newHarness(t, harnessOpts{masters: 1, servers: 2,
		domain: func(c *domain.Config) { c.DispatchTimeout = 500 * time.Millisecond }})
	per, victim := openTable(t, h, regions)
	survivor := otherServer(per, victim)
	opens := logOpens(t, h)
	var mu sync.Mutex
	armed := false
	slow := h.faults.MustAdd(rpcfault.Rule{
		Name:    "test: the batch's opens answered late",
		Methods: []string{rspb.RegionServer_ExecuteBatch_FullMethodName},
		Fault:   rpcfault.DelayAnswer,
		Delay:   1500 * time.Millisecond, // under the harness's CallTimeout (2 s): no dispatcher retry
		Times:   1,
		When: func(c rpcfault.Call) bool {
			b, ok := c.Request.(*rspb.BatchRequest)
			mu.Lock()
			defer mu.Unlock()
			return ok && armed && c.Side == rpcfault.Client && b.GetServerId() == survivor && len(b.GetOps()) > 0 &&
				b.GetOps()[0].GetKind() == rspb.OpKind_OP_KIND_OPEN
		},
	})
	mu.Lock()
	armed = true
	mu.Unlock()
	h.stopRS(victim)
	select {
	case <-slow.Done():
	case <-time.After(time.Minute):
		t.Fatal("no open answered late: the case is not reached")
	}
	crash, x := crashOf(t, h, victim, time.Minute)
	if types := crashTree(t, x, crash.ID); types[domain.TypeTransitRegionState] != 0 {
		t.Errorf("the crash's tree %v: a live target's late answer handed regions on", types)
	}
	h.checkTableOpen("default:t", regions)
	if r := opens.resent(); len(r) > 0 {
		t.Errorf("opens sent twice in a term: %v", r)
	}
	n := strings.Count(h.c.Logs("m1"), "settled in part")
	if n == 0 {
		t.Error("no batch waited: the case is not reached")
	}
	if n > 10 {
		t.Errorf("%d partial settles in about 1.5 s of waiting with DispatchTimeout 500 ms: the batch spins", n)
	}
}

// A batch is woken by its last answer, not by DispatchTimeout
// (onResult wakes the batch's event): with DispatchTimeout 30 s, a crash
// whose opens all succeed at once ends well before it.
func TestCrashBatchIsWokenByItsAnswers(t *testing.T) {
	const regions = 6
	h := newHarness(t, harnessOpts{masters: 1, servers: 2,
		domain: func(c *domain.Config) { c.DispatchTimeout = 30 * time.Second }})
	_, victim := openTable(t, h, regions)
	h.stopRS(victim)
	// The deadline is the assertion: a batch that waited for its
	// DispatchTimeout would end after 30 s.
	crashOf(t, h, victim, 25*time.Second)
}
