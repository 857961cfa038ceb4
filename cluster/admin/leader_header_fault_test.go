package admin

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
)

// recordedDomain answers a standby's recorded server list.
type recordedDomain struct{ stubDomain }

func (d *recordedDomain) ListRecordedServersPage(catalog.ServerQuery) (catalog.ServerPage, error) {
	return catalog.ServerPage{Servers: []catalog.Server{{ID: "rs1", Address: "rs1:1", StartCode: 1}}}, nil
}

func refusedAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// A stale read that a standby answers from its recorded state, because
// the leader it knows did not answer (serveLeaderReadOr), names no leader:
// a client given both addresses stays on the standby rather than move to
// a leader that cannot be reached and pay a failed attempt there on every
// later call.
func TestStaleFallbackNamesNoLeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		addr func(t *testing.T) string
	}{
		{"refused", refusedAddr},
		{"silent", func(t *testing.T) string { return testnet.SilentAddr(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dead := tc.addr(t)
			b := &fakeBackend{id: "m0", leaderID: "m1", procsErr: &cluster.NotLeaderError{LeaderID: "m1"}, kv: map[string][]byte{
				cluster.AdminAddrKey("m1"): []byte(dead),
			}}
			s, err := New(WithDomain(b, &recordedDomain{}), Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Stop(context.Background()) })
			_, self := serve(t, s, b)

			c, ctx := standbyFirst(t, self, dead)
			for i := range 3 {
				start := time.Now()
				r, err := c.ListServersPage(ctx, &adminpb.ListServersRequest{}, client.Stale())
				t.Logf("stale read %d: %v servers, err %v, took %v, client now targets %q", i, len(r.GetServers()), err, time.Since(start), c.Leader())
				if err != nil {
					t.Fatal(err)
				}
				if got := c.Leader(); got == dead {
					t.Errorf("stale read %d, answered by the standby from its recorded state, moved the client to the unreachable leader %s", i, dead)
				}
			}
		})
	}
}

// A held call whose forward found the leader unreachable, and which this
// node then served as the leader it became, names no leader: the client
// stays on the node that served it.
func TestHeldCallServedHereNamesNoLeader(t *testing.T) {
	t.Parallel()
	x, _ := newExecutor(t)
	ln, accepted := droppingListener(t)
	dead := ln.Addr().String()
	b := followerOf("m1", map[string]string{"m1": dead})
	s := newHoldServer(t, b)
	_, self := serve(t, s, b)
	c, ctx := standbyFirst(t, self, dead)
	type res struct {
		id  uint64
		err error
	}
	got := make(chan res, 1)
	go func() {
		id, err := c.Submit(ctx, "sleep", map[string]string{"steps": "0"}, "", "", 0)
		got <- res{id, err}
	}()
	testwait.For(t, 10*time.Second, "the standby's forward to the unreachable leader", func() bool { return accepted.Load() >= 1 })
	becomeLeader(b, x)
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("submitted %d, served by this node (now the leader); client targets %q", r.id, c.Leader())
	if c.Leader() == dead {
		t.Errorf("a call served by the new leader itself moved the client to the old, unreachable leader %s", dead)
	}
}

// standbyFirst is a client given the standby self first and the leader's
// address dead second, with attempts of a second, and a context for its
// calls; both end with the test.
func standbyFirst(t *testing.T, self, dead string) (*client.Client, context.Context) {
	t.Helper()
	c, err := client.New([]string{self, dead}, client.WithAttemptTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c, ctx
}
