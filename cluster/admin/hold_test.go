package admin

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
)

// countingBackend counts the calls that ask for the leader's executor: a
// held call asks again at each turn of its hold.
type countingBackend struct {
	*fakeBackend
	asks atomic.Int64
}

func (c *countingBackend) Procedures() (Procedures, error) {
	c.asks.Add(1)
	return c.fakeBackend.Procedures()
}

// A call that finds no leader ready to take it waits for one: answered by
// the leader this node becomes, instead of UNAVAILABLE and a client
// backing off past the moment the leader was ready.
func TestLeaderHoldAnswersOnceALeaderIsReady(t *testing.T) {
	for _, tc := range []struct {
		name     string
		leader   string
		procsErr error
	}{
		{"election under way", "", &cluster.NotLeaderError{}},
		{"this node elected, still establishing", "m0", cluster.ErrNotReady},
		{"leader elected, admin address not registered yet", "m1", &cluster.NotLeaderError{LeaderID: "m1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, _ := newExecutor(t)
			b := &countingBackend{fakeBackend: &fakeBackend{id: "m0", leaderID: tc.leader, procsErr: tc.procsErr, kv: map[string][]byte{}}}
			s, err := New(b, Config{AdvertiseAddr: "self:1", LeaderHold: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			type answer struct {
				r   *adminpb.SubmitProcedureResponse
				err error
			}
			got := make(chan answer, 1)
			var answered atomic.Bool
			go func() {
				r, err := s.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}})
				answered.Store(true)
				got <- answer{r, err}
			}()
			testwait.For(t, 30*time.Second, "the call held (asking again) or answered", func() bool { return b.asks.Load() >= 3 || answered.Load() })
			if answered.Load() {
				a := <-got
				t.Fatalf("answered before a leader was ready: %v, %v", a.r, a.err)
			}
			b.mu.Lock()
			b.leaderID, b.procsErr, b.procs = "m0", nil, x
			b.mu.Unlock()
			a := <-got
			if a.err != nil || a.r.GetId() == 0 {
				t.Fatalf("held submit: %v, %v", a.r, a.err)
			}
			if _, err := x.Get(a.r.GetId()); err != nil {
				t.Fatalf("the submitted procedure is not on the leader: %v", err)
			}
		})
	}
}

// A call forwarded to a leader it cannot reach waits for this node to see
// another leader, then goes there.
func TestLeaderHoldWaitsOutAnUnreachableLeader(t *testing.T) {
	x, _ := newExecutor(t)
	// The old leader's address accepts connections and drops them, as a
	// dying process's would.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	b := &countingBackend{fakeBackend: &fakeBackend{id: "m0", leaderID: "m1", procsErr: &cluster.NotLeaderError{LeaderID: "m1"},
		kv: map[string][]byte{cluster.AdminAddrKey("m1"): []byte(ln.Addr().String())}}}
	s, err := New(b, Config{AdvertiseAddr: "self:1", LeaderHold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := s.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}})
		got <- err
	}()
	testwait.For(t, 30*time.Second, "a forward to the unreachable leader", func() bool { return accepted.Load() >= 1 })
	b.mu.Lock()
	b.leaderID, b.procsErr, b.procs = "m0", nil, x
	b.mu.Unlock()
	if err := <-got; err != nil {
		t.Fatalf("held submit: %v", err)
	}
}

// The hold ends in time for the caller to get UNAVAILABLE (and its hint)
// before its own deadline, and not at all with LeaderHold negative.
func TestLeaderHoldEndsBeforeTheDeadline(t *testing.T) {
	for _, hold := range []time.Duration{time.Hour, -1} {
		b := &fakeBackend{id: "m0", procsErr: &cluster.NotLeaderError{}, kv: map[string][]byte{}}
		s, err := New(b, Config{AdvertiseAddr: "self:1", LeaderHold: hold})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = s.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep"})
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			t.Errorf("hold %v: %v (caller's context: %v), want UNAVAILABLE within the deadline", hold, err, ctx.Err())
		}
		if _, ok := LeaderHintOf(err); !ok {
			t.Errorf("hold %v: no LeaderHint in %v", hold, err)
		}
		cancel()
	}
}
