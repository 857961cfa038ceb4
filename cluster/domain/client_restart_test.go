package domain_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/internal/testwait"
)

// Found by review; before the fix, a client given one address that it has already talked to gives
// up on the first refused connection. Client.Wait (what 'baton proc wait'
// and --wait use) on a single-master cluster, or with BATON_MASTERS naming
// one master, no longer rides out that master's restart: the watch stream
// breaks, the reconnect is refused once, and the wait fails "waiting will
// not change that", where 0.1.0 retried within the call timeout. A refused
// connection at an address that answered moments ago is a restart, not a
// mistyped address.
func TestSingleAddressWaitRidesOutARestart(t *testing.T) {
	h := newHarness(t, harnessOpts{masters: 1, servers: 1})
	id := h.submit(&diag.Sleep{Steps: 1, Delay: 3 * time.Second}, "")
	var retries atomic.Int32
	cl := h.c.Client(client.WithRetryNotice(func(string, error) { retries.Add(1) }))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cl.Get(ctx, id); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := cl.Wait(ctx, id)
		done <- err
	}()
	testwait.For(t, 10*time.Second, "the wait's stream open", func() bool {
		p, err := cl.Get(ctx, id)
		return err == nil && p.GetState() != ""
	})
	h.killMaster(0)
	var early error
	returned := false
	testwait.For(t, 10*time.Second, "the wait retrying against the stopped master (or giving up)", func() bool {
		select {
		case early = <-done:
			returned = true
			return true
		default:
		}
		return retries.Load() >= 3
	})
	if returned {
		t.Fatalf("the wait gave up while its one master restarted: %v", early)
	}
	h.c.Restart(0)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("wait across a restart: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("wait did not end")
	}
}
