package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/procedure"
)

// faultSeed is BATON_FAULT_SEED if set (to replay a failure), else 0 (the
// injector picks one, which the test logs).
func faultSeed(t *testing.T) uint64 {
	t.Helper()
	v := os.Getenv("BATON_FAULT_SEED")
	if v == "" {
		return 0
	}
	seed, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("BATON_FAULT_SEED=%q: %v", v, err)
	}
	return seed
}

// Clients submit through admin APIs that lose a third of the submissions'
// answers after the leader accepted them, deliver a third of them twice,
// and lose answers of procedure reads, while the leader crashes half-way:
// the client's retries carry the submission's nonce, so every nonce starts
// exactly one procedure (its id the one the client got), which runs every
// step exactly once and succeeds.
func TestLostSubmitAnswersStartOneProcedureEach(t *testing.T) {
	c, _ := newIPCluster(t, 3, false, nil)
	faults := c.Faults()
	t.Logf("fault seed %d (replay with BATON_FAULT_SEED=%d)", faults.Seed(), faults.Seed())
	submit := []string{"/baton.admin.v1.Admin/SubmitProcedure"}
	lost := faults.MustAdd(rpcfault.Rule{Name: "submit answer lost", Methods: submit, Fault: rpcfault.DropAnswer, Probability: 0.35})
	twice := faults.MustAdd(rpcfault.Rule{Name: "submit delivered twice", Methods: submit, Fault: rpcfault.Duplicate, Probability: 0.35})
	faults.MustAdd(rpcfault.Rule{Name: "read answer lost", Methods: []string{"/baton.admin.v1.Admin/GetProcedure"}, Fault: rpcfault.DropAnswer, Probability: 0.3})

	cl := c.Client(client.WithCallTimeout(30 * time.Second))

	const perRound, steps = 12, 3
	ids := map[string]uint64{}
	var mu sync.Mutex
	round := func(r int) {
		var wg sync.WaitGroup
		for i := range perRound {
			nonce := fmt.Sprintf("n-%d-%d", r, i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				id, err := cl.Submit(ctx, diag.TypeSleep, map[string]string{"steps": strconv.Itoa(steps), "delay": "5ms"}, nonce, "faults-test", 0)
				if err != nil {
					t.Errorf("submit %s: %v", nonce, err)
					return
				}
				// Read it back through the lossy API too.
				if p, err := cl.Get(ctx, id); err != nil || p.GetNonce() != nonce {
					t.Errorf("get %d (%s): nonce %q, %v", id, nonce, p.GetNonce(), err)
				}
				mu.Lock()
				ids[nonce] = id
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	round(0)
	li, _ := c.WaitLeader()
	c.Kill(li)
	round(1)
	c.Restart(li)
	if t.Failed() {
		t.FailNow()
	}

	_, x := c.WaitLeader()
	byNonce := map[string][]uint64{}
	for _, info := range x.List(procedure.Filter{Type: diag.TypeSleep, RootsOnly: true}) {
		byNonce[info.Nonce] = append(byNonce[info.Nonce], info.ID)
	}
	for nonce, id := range ids {
		if got := byNonce[nonce]; len(got) != 1 || got[0] != id {
			t.Errorf("nonce %s: procedures %v, want exactly the one the client got (%d)", nonce, got, id)
		}
	}
	if len(byNonce) != len(ids) {
		t.Errorf("%d nonces among the procedures, %d submitted", len(byNonce), len(ids))
	}
	var all []uint64
	for _, id := range ids {
		all = append(all, id)
	}
	waitSuccess(t, x, all)
	dom, _ := fsmState(c.Leader().Node().FSM())
	for _, id := range all {
		for s := range steps {
			if v := dom[diag.EffectKey(id, s)]; v != "1" {
				t.Errorf("effect %s = %q, want \"1\"", diag.EffectKey(id, s), v)
			}
		}
	}
	// The faults this test is about did happen.
	if lost.Fired() == 0 || twice.Fired() == 0 {
		t.Errorf("faults injected: %v; want lost and duplicated submissions", faults.Counts())
	}
	t.Logf("faults injected: %v", faults.Counts())
}
