package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness"
)

// tableWorker keeps region placement moving during a run: a few tables
// stay for the whole run (their regions moved and balanced), others are
// created, disabled and deleted over and over.
type tableWorker struct {
	t  *testing.T
	c  *harness.Cluster
	cl *client.Client

	mu      sync.Mutex
	fixed   []string        // tables of the whole run ("default:name")
	churn   []string        // created by the run and not deleted yet
	deleted map[string]bool // deleted for sure (delete SUCCESS)
	seq     int
	ok      int
	failed  int // rolled back
	unknown int
	regions map[string][]string // regions of the fixed tables
	acked   *acked
}

const (
	fixedTables  = 3
	tableRegions = 4
	maxChurn     = 3
)

func newTableWorker(t *testing.T, c *harness.Cluster, ak *acked) *tableWorker {
	return &tableWorker{t: t, c: c, deleted: map[string]bool{}, regions: map[string][]string{}, acked: ak,
		cl: c.NewClient(client.WithCallTimeout(5*time.Second), client.WithAttemptTimeout(time.Second), client.WithBackoff(20*time.Millisecond, 300*time.Millisecond))}
}

// setup creates the fixed tables before the faults start.
func (w *tableWorker) setup(ctx context.Context) {
	w.t.Helper()
	for i := range fixedTables {
		name := fmt.Sprintf("fixed-%d", i)
		state := w.proc(ctx, "create "+name, func(ctx context.Context, nonce string) (uint64, error) {
			return w.cl.CreateTable(ctx, "", name, tableRegions, nonce)
		})
		if state != client.StateSuccess {
			w.t.Fatalf("chaos: create table %s: %s", name, state)
		}
		w.fixed = append(w.fixed, "default:"+name)
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		tb, err := w.cl.DescribeTable(dctx, "", name)
		cancel()
		if err != nil {
			w.t.Fatalf("chaos: describe %s: %v", name, err)
		}
		for _, r := range tb.GetRegions() {
			w.regions[name] = append(w.regions[name], r.GetName())
		}
	}
}

// proc submits with a fixed nonce (retrying until acknowledged) and waits
// for the procedure; it returns the terminal state, or "" when unknown.
func (w *tableWorker) proc(ctx context.Context, what string, submit func(context.Context, string) (uint64, error)) string {
	nonce := client.NewNonce()
	id, err := submitRetrying(ctx, 30*time.Second, func(ctx context.Context) (uint64, error) { return submit(ctx, nonce) })
	var state string
	if err == nil {
		w.acked.add(id, what)
		p, werr := waitTerminal(ctx, w.cl, id, 90*time.Second)
		state, err = p.GetState(), werr
		if werr == nil {
			w.acked.done(id)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch state {
	case client.StateSuccess:
		w.ok++
	case client.StateRolledBack:
		w.failed++
	default:
		w.unknown++
		w.t.Logf("chaos: %s: outcome unknown: %v", what, err)
	}
	return state
}

func (w *tableWorker) counts() (ok, failed, unknown int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ok, w.failed, w.unknown
}

func (w *tableWorker) deletedTables() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]bool{}
	for k := range w.deleted {
		out[k] = true
	}
	return out
}

// run works until run ends (each procedure started before is finished,
// bounded by ctx).
func (w *tableWorker) run(run, ctx context.Context, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	for run.Err() == nil && ctx.Err() == nil {
		switch r := rng.IntN(10); {
		case r < 3 && len(w.churn) < maxChurn:
			w.seq++
			name := fmt.Sprintf("churn-%d", w.seq)
			if w.proc(ctx, "create "+name, func(ctx context.Context, nonce string) (uint64, error) {
				return w.cl.CreateTable(ctx, "", name, 1+rng.IntN(3), nonce)
			}) == client.StateSuccess {
				w.churn = append(w.churn, name)
			}
		case r < 6 && len(w.churn) > 0:
			i := rng.IntN(len(w.churn))
			name := w.churn[i]
			w.proc(ctx, "disable "+name, func(ctx context.Context, nonce string) (uint64, error) {
				return w.cl.DisableTable(ctx, "", name, nonce)
			})
			if w.proc(ctx, "delete "+name, func(ctx context.Context, nonce string) (uint64, error) {
				return w.cl.DeleteTable(ctx, "", name, nonce)
			}) == client.StateSuccess {
				w.churn = append(w.churn[:i], w.churn[i+1:]...)
				w.mu.Lock()
				w.deleted["default:"+name] = true
				w.mu.Unlock()
			}
		case r < 9:
			tb := fmt.Sprintf("fixed-%d", rng.IntN(fixedTables))
			rs := w.regions[tb]
			region := rs[rng.IntN(len(rs))]
			w.proc(ctx, "move "+region, func(ctx context.Context, nonce string) (uint64, error) {
				return w.cl.MoveRegion(ctx, region, "", nonce)
			})
		default:
			w.proc(ctx, "balance", func(ctx context.Context, nonce string) (uint64, error) {
				return w.cl.Balance(ctx, nonce)
			})
		}
		// Pacing: placement changes lightly, not as fast as possible.
		select {
		case <-run.Done():
		case <-time.After(time.Duration(100+rng.IntN(400)) * time.Millisecond):
		}
	}
}
