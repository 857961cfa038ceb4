package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness"
	"github.com/baton-dev/baton/proto/adminpb"
)

// StartWorkers starts n NamespaceWorkers on c, worker w seeded seed+w,
// each with a client of its own, and adds them to wg. The chaos and upgrade
// tests share it so that their load is the same: clients that retry
// quickly (a call of 5 s at most, attempts of 1 s, backoff from 20 ms to
// 300 ms), which keeps operations going through leader changes; the nodes
// named in hist's record are c's nodes as of this call. run, ctx, hist,
// acked and done are NamespaceWorker's.
func StartWorkers(run, ctx context.Context, wg *sync.WaitGroup, c *harness.Cluster, hist *History, n int, seed uint64, acked func(id uint64, what string), done func(id uint64)) {
	nodeOf := map[string]string{}
	for _, node := range c.Nodes {
		nodeOf[node.GRPCAddr] = node.ID
	}
	for w := range n {
		cl := c.NewClient(client.WithCallTimeout(5*time.Second), client.WithAttemptTimeout(time.Second), client.WithBackoff(20*time.Millisecond, 300*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			NamespaceWorker(run, ctx, hist, cl, seed+uint64(w), nodeOf, acked, done)
		}()
	}
}

// NamespaceWorker creates, deletes and lists the namespaces hist is kept
// of (NewHistory's keys) until run ends, recording each operation in hist.
// An operation started before the end is finished (bounded by ctx and its
// own deadlines). nodeOf names the node of an admin address (the one a
// client's call went to last, for the record). acked is told of each
// procedure the cluster acknowledged (its id, what it does), done of each
// the worker saw terminal.
func NamespaceWorker(run, ctx context.Context, hist *History, cl *client.Client, seed uint64, nodeOf map[string]string, acked func(id uint64, what string), done func(id uint64)) {
	rng := rand.New(rand.NewPCG(seed, 7))
	id := hist.NewClient()
	for run.Err() == nil && ctx.Err() == nil {
		key := hist.keys[rng.IntN(len(hist.keys))]
		switch r := rng.IntN(4); {
		case r < 2:
			call := hist.Now()
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			names, err := cl.ListNamespaces(lctx)
			cancel()
			ret := hist.Now()
			if err != nil {
				hist.Failed(OpRead) // a read that got no answer has no effect
				continue
			}
			hist.ListVia(id, call, ret, names, nodeOf[cl.Leader()])
		default:
			kind := OpCreate
			if r == 3 {
				kind = OpDelete
			}
			call := hist.Now()
			out := nsWrite(ctx, cl, kind, key, acked, done)
			hist.WriteVia(id, kind, key, call, hist.Now(), out, nodeOf[cl.Leader()])
			if out == Unknown {
				id = hist.NewClient() // its operation stays open
			}
		}
	}
}

// nsWrite submits a create or delete with one nonce, retrying until it is
// acknowledged (the nonce makes the retries one submission; acked hears
// of the id), waits for the procedure to be terminal, and says how it ended.
func nsWrite(ctx context.Context, cl *client.Client, kind OpKind, key string, acked func(uint64, string), done func(uint64)) Outcome {
	nonce := client.NewNonce()
	id, err := submitRetrying(ctx, 30*time.Second, func(ctx context.Context) (uint64, error) {
		if kind == OpCreate {
			return cl.CreateNamespace(ctx, key, nonce)
		}
		return cl.DeleteNamespace(ctx, key, nonce)
	})
	if err != nil {
		return Unknown
	}
	acked(id, fmt.Sprintf("namespace %v %s", kind, key))
	p, err := waitTerminal(ctx, cl, id, 60*time.Second)
	if err != nil {
		return Unknown
	}
	done(id)
	switch p.GetState() {
	case client.StateSuccess:
		return Done
	case client.StateRolledBack:
		msg := p.GetError()
		if kind == OpCreate && strings.HasSuffix(strings.TrimSpace(msg), " exists") {
			return NoOp
		}
		if kind == OpDelete && strings.Contains(msg, "does not exist") {
			return NoOp
		}
	}
	// Rolled back for another reason: a rollback undoes the procedure,
	// but "unknown" is the claim that needs no argument.
	return Unknown
}

// submitRetrying calls submit (which must reuse one nonce) until it
// returns an id, for at most within. Errors that no retry can fix end it
// at once.
func submitRetrying(ctx context.Context, within time.Duration, submit func(context.Context) (uint64, error)) (uint64, error) {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(wctx, 5*time.Second)
		id, err := submit(cctx)
		ccancel()
		if err == nil {
			return id, nil
		}
		switch status.Code(err) {
		case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound, codes.AlreadyExists:
			return 0, err
		}
		select {
		case <-wctx.Done():
			return 0, fmt.Errorf("not acknowledged: %w (last: %w)", wctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitTerminal waits (at most within) until procedure id is terminal,
// watching again after each broken watch.
func waitTerminal(ctx context.Context, cl *client.Client, id uint64, within time.Duration) (*adminpb.Procedure, error) {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		p, err := cl.Wait(wctx, id)
		if err == nil && client.Terminal(p.GetState()) {
			return p, nil
		}
		if wctx.Err() != nil {
			return nil, fmt.Errorf("procedure %d not terminal: %w", id, errors.Join(err, wctx.Err()))
		}
		select {
		case <-wctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
