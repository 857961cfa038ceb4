package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness"
)

// nodeBin is the baton binary every process test runs, built once by
// TestMain (or given as BATON_NODE_BIN).
var nodeBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	return harness.RunWithBinary(m, "baton-it-bin-", &nodeBin)
}

// newCluster starts an n-node cluster of agent processes for t.
func newCluster(t *testing.T, n int) *harness.Cluster {
	t.Helper()
	return harness.New(t, harness.Options{Binary: nodeBin, Nodes: n})
}

// leadingCluster starts an n-node cluster of agent processes for t and
// waits for its leader, whose id it returns; its context ends after timeout
// or with t.
func leadingCluster(t *testing.T, n int, timeout time.Duration) (context.Context, *harness.Cluster, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	c := newCluster(t, n)
	return ctx, c, c.WaitLeader(ctx)
}

// submitRetrying submits with a fixed nonce until the cluster acknowledges
// it with an id or ctx ends, retrying errors the client library gives up
// on (its own retries cover UNAVAILABLE within one call timeout). Errors
// that no retry can fix (INVALID_ARGUMENT) end it at once.
func submitRetrying(ctx context.Context, cl *client.Client, typ string, args map[string]string, nonce string) (id uint64, attempts int, err error) {
	for {
		attempts++
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		id, err = cl.Submit(cctx, typ, args, nonce, "it", 0)
		cancel()
		if err == nil {
			return id, attempts, nil
		}
		if status.Code(err) == codes.InvalidArgument {
			return 0, attempts, err
		}
		select {
		case <-ctx.Done():
			return 0, attempts, fmt.Errorf("submit %s (nonce %s) after %d attempts: %w", typ, nonce, attempts, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// terminalWithin is waitTerminal for at most d.
func terminalWithin(ctx context.Context, cl *client.Client, id uint64, d time.Duration) (state string, finishedMs int64, errText string, err error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return waitTerminal(ctx, cl, id)
}

// waitTerminal waits for procedure id to be terminal, re-watching through
// errors until ctx ends.
func waitTerminal(ctx context.Context, cl *client.Client, id uint64) (state string, finishedMs int64, errText string, err error) {
	for {
		p, err := cl.Wait(ctx, id)
		if err == nil && client.Terminal(p.GetState()) {
			return p.GetState(), p.GetFinishedUnixMs(), p.GetError(), nil
		}
		if ctx.Err() != nil {
			return "", 0, "", fmt.Errorf("procedure %d not terminal: %w", id, errors.Join(err, ctx.Err()))
		}
		if status.Code(err) == codes.NotFound {
			return "", 0, "", fmt.Errorf("procedure %d: %w", id, err)
		}
		// Spaces the re-watches while no node can answer (an election).
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// effectKey splits a domain key effects/<proc_id>/<step> into its parts.
func effectKey(k string) (proc, step string, ok bool) {
	rest, ok := strings.CutPrefix(k, "effects/")
	if !ok {
		return "", "", false
	}
	proc, step, ok = strings.Cut(rest, "/")
	return proc, step, ok && proc != "" && step != ""
}

// domainOrSkip reads the effects/ prefix of every running node's domain
// state; it skips the test if the agents do not serve /debug/domain yet.
func domainOrSkip(t *testing.T, ctx context.Context, c *harness.Cluster) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		d, err := c.Domain(ctx, n.ID, "effects/")
		if errors.Is(err, harness.ErrNoDomainEndpoint) {
			t.Skip("agents do not serve GET /debug/domain yet (404): exactly-once effect assertions skipped")
		}
		if err != nil {
			t.Fatalf("domain of %s: %v", n.ID, err)
		}
		if len(d) == 0 {
			t.Skipf("%s: /debug/domain has no effects/ keys: diagnostic steps do not record their effects yet; exactly-once effect assertions skipped", n.ID)
		}
		out[n.ID] = d
	}
	return out
}

// sameDomains fails t unless every node holds the same entries.
func sameDomains(t *testing.T, doms map[string]map[string]string) (ref map[string]string) {
	t.Helper()
	var refID string
	for id, d := range doms {
		if ref == nil {
			ref, refID = d, id
			continue
		}
		if len(d) != len(ref) {
			t.Errorf("domain state differs: %s has %d effects/ keys, %s has %d", id, len(d), refID, len(ref))
		}
		n := 0
		for k, v := range ref {
			if w, ok := d[k]; !ok || w != v {
				if n++; n <= 10 {
					t.Errorf("domain state differs at %s: %s has %q (present %v), %s has %q", k, id, w, ok, refID, v)
				}
			}
		}
	}
	return ref
}
