package domain_test

import (
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/rspb"
)

// Leadership goes A, B, then A again while a create's rollback cannot
// finish (its closes to rs1 lost). A's first term confirmed rs2's
// regions closed and remembered it; its second term must not trust that
// memory (anything may have happened under B): it closes rs2's regions
// again before the records go, and the rollback ends with nothing left.
func TestCreateRollbackMemoryNotReusedAcrossTerms(t *testing.T) {
	const regions = 12
	h := newHarness(t, harnessOpts{masters: 3, servers: 2,
		domain: func(c *domain.Config) {
			c.DispatchTimeout = time.Second
			c.FailPoint = refuseOpens(nil)
		},
		node: oneWorker})
	checkDoubles := h.watchDoubles()
	rs1, rs2 := h.rs("rs1").Addr(), h.rs("rs2").Addr()
	type key struct {
		master string
		term   uint64
	}
	var mu sync.Mutex
	toRS2 := map[key]map[string]bool{} // the create's closes reaching rs2, by master and term
	lost, err := h.faults.Add(rpcfault.Rule{
		Name:    "the create's closes to rs1 lost",
		Methods: []string{rspb.RegionServer_ExecuteBatch_FullMethodName},
		Fault:   rpcfault.DropRequest,
		Delay:   1500 * time.Millisecond,
		When: func(c rpcfault.Call) bool {
			own := ownCloses(c.Request)
			if c.Peer == rs2 {
				b := c.Request.(*rspb.BatchRequest)
				k := key{b.GetMasterId(), b.GetTerm()}
				mu.Lock()
				for rn := range own {
					if toRS2[k] == nil {
						toRS2[k] = map[string]bool{}
					}
					toRS2[k][rn] = true
				}
				mu.Unlock()
				return false
			}
			return c.Peer == rs1 && len(own) > 0
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	a := h.leaderIndex()
	b := (a + 1) % 3
	id := h.createTable("", "t", regions)
	aID := h.masters[a].id
	testwait.For(t, 30*time.Second, "A's rollback step to fail (rs2's regions seen closed)", func() bool {
		return h.failedRollbacks(aID, id) >= 1
	})
	h.c.TransferLeadership(b)
	testwait.For(t, 30*time.Second, "B's rollback step to fail", func() bool {
		return h.failedRollbacks(h.masters[b].id, id) >= 1
	})
	before := h.failedRollbacks(aID, id)
	h.c.TransferLeadership(a)
	testwait.For(t, 30*time.Second, "A's rollback step to fail again, in its new term", func() bool {
		return h.failedRollbacks(aID, id) > before
	})
	if all, _ := h.tableRegions("default:t", ""); all != regions {
		t.Fatalf("rs1's closes lost: %d region records, want all %d kept", all, regions)
	}
	lost.Remove()
	info := h.wait(id, 30*time.Second)
	h.checkRolledBack(info, "default:t")
	checkDoubles()
	mu.Lock()
	defer mu.Unlock()
	var aTerms []uint64
	var want int
	for k, rs := range toRS2 {
		if k.master == aID {
			aTerms = append(aTerms, k.term)
			want = max(want, len(rs))
		}
	}
	if want == 0 {
		t.Fatal("no close of the create's reached rs2 from A: the case is not reached")
	}
	full := 0
	for _, term := range aTerms {
		if len(toRS2[key{aID, term}]) == want {
			full++
		}
	}
	if full < 2 {
		t.Errorf("A closed rs2's %d regions in %d of its terms %v, want 2: its new term trusted the old term's memory", want, full, aTerms)
	}
}
