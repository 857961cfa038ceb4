package chaos

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness"
)

// The sharpest case of a read path: a deposed leader that still believes
// it leads. Each round creates a namespace through the new leader, waits
// for its procedure's SUCCESS, and only then asks the old leader alone for
// the namespaces. Its answer must include the new one, or be an error
// (UNAVAILABLE: it cannot vouch for its state); a list without it is a
// stale read, a violation of invariant 7.

const staleRounds = 3

// TestNoStaleReadFromPausedLeader pauses the leader (SIGSTOP; every thread
// stopped), lets the others elect a new one, and sends the list to the
// paused node over a connection opened before the pause: the request waits
// in its socket (the test checks that it arrived there) and is served on
// SIGCONT, before any of its timers fire.
func TestNoStaleReadFromPausedLeader(t *testing.T) {
	staleRoundsTest(t, false)
}

// TestNoStaleReadFromIsolatedLeader cuts the leader's Raft traffic from
// its peers with iptables while its admin port stays reachable, lets the
// others elect a new one, and sends it the list.
func TestNoStaleReadFromIsolatedLeader(t *testing.T) {
	staleRoundsTest(t, true)
}

func staleRoundsTest(t *testing.T, isolate bool) {
	var fw *Firewall
	base := uint32(0)
	if isolate {
		fw = NewFirewall(t) // skips unless root with iptables
		base = uidBase()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := harness.New(t, harness.Options{Binary: nodeBin, Nodes: 3, UIDBase: base})
	c.WaitLeader(ctx)
	nem, err := NewNemesis(c, fw, Plan{}, t.Logf) // its helpers only: no schedule
	if err != nil {
		t.Fatal(err)
	}
	defer nem.Close()

	stale, errs := 0, 0
	for round := range staleRounds {
		old, term, err := nem.leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("stale-%d", round)
		// A client of the old leader alone, connected before the fault,
		// whose call waits as long as it takes (no retry elsewhere).
		oc, err := client.New([]string{c.Node(old).GRPCAddr}, client.WithCallTimeout(30*time.Second), client.WithAttemptTimeout(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := oc.ListNamespaces(wctx); err != nil {
			t.Fatalf("round %d: warm-up list on %s: %v", round, old, err)
		}
		wcancel()

		var heal func() error
		if isolate {
			heal, err = fw.Cut(nem.raftCut(c.Node(old), false))
			if err != nil {
				t.Fatalf("round %d: cut %s: %v", round, old, errJoin(err, heal))
			}
		} else {
			c.Pause(old)
		}
		nl, err := nem.NewLeaderAmong(ctx, others(nem.masterIDs(), old), term, 30*time.Second)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var newAddrs []string
		for _, id := range others(nem.masterIDs(), old) {
			newAddrs = append(newAddrs, c.Node(id).GRPCAddr)
		}
		nc, err := client.New(newAddrs, client.WithCallTimeout(10*time.Second), client.WithAttemptTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		id, err := nc.CreateNamespace(ctx, name, "")
		if err != nil {
			t.Fatalf("round %d: create %s through %s: %v", round, name, nl, err)
		}
		p, err := nc.Wait(ctx, id)
		if err != nil || p.GetState() != client.StateSuccess {
			t.Fatalf("round %d: create %s (procedure %d): %v %v %s", round, name, id, err, p.GetState(), p.GetError())
		}
		nc.Close()

		port := Port(c.Node(old).GRPCAddr)
		before, _ := queuedTo(port)
		type answer struct {
			names []string
			err   error
		}
		got := make(chan answer, 1)
		// A node that cannot confirm its leadership keeps answering
		// UNAVAILABLE (and the client retrying) while it is cut off:
		// bound the read, an error is an acceptable answer.
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		go func() {
			defer rcancel()
			names, err := oc.ListNamespaces(rctx)
			got <- answer{names, err}
		}()
		if !isolate {
			// The request must be in the paused node's socket before
			// SIGCONT, or this would test a read sent after the pause.
			if err := waitQueued(ctx, port, before); err != nil {
				t.Logf("round %d: %v (the read may reach %s only after SIGCONT)", round, err, old)
			}
			c.Resume(old)
		}
		a := <-got
		oc.Close()
		switch {
		case a.err != nil:
			errs++
			t.Logf("round %d: old leader %s answered an error (acceptable): %v", round, old, a.err)
		case !slices.Contains(a.names, name):
			stale++
			t.Errorf("round %d: STALE READ: old leader %s listed %v after the create of %s succeeded through %s", round, old, a.names, name, nl)
		default:
			t.Logf("round %d: old leader %s listed %s", round, old, name)
		}
		if heal != nil {
			if err := heal(); err != nil {
				t.Fatal(err)
			}
		}
		if err := nem.rejoined(ctx, old); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds: %d stale reads, %d errors", staleRounds, stale, errs)
}

func errJoin(err error, heal func() error) error {
	if heal == nil {
		return err
	}
	return fmt.Errorf("%w (heal: %v)", err, heal())
}

// queuedTo sums the bytes waiting, unread, in the receive queues of the
// TCP sockets whose local port is port (/proc/net/tcp): what clients sent
// a process that has not read it.
func queuedTo(port int) (int64, error) {
	var total int64
	for _, path := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue ...
			fields := strings.Fields(sc.Text())
			if len(fields) < 5 {
				continue
			}
			_, lport, ok := strings.Cut(fields[1], ":")
			if !ok {
				continue
			}
			p, err := strconv.ParseInt(lport, 16, 32)
			if err != nil || int(p) != port {
				continue
			}
			_, rx, _ := strings.Cut(fields[4], ":")
			q, err := strconv.ParseInt(rx, 16, 64)
			if err == nil {
				total += q
			}
		}
		f.Close()
	}
	return total, nil
}

// waitQueued waits (at most 10 s) until more than before bytes wait in
// the receive queues of port.
func waitQueued(ctx context.Context, port int, before int64) error {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		q, _ := queuedTo(port)
		if q > before {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("no request queued to port %d: %w", port, wctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
