package admin

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/procedure"
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

func (c *countingBackend) LinearizableRead(ctx context.Context) (cluster.ReadInfo, error) {
	c.asks.Add(1)
	return c.fakeBackend.LinearizableRead(ctx)
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

// A read held while no leader is known is served by this node once it is
// the leader, not forwarded (to itself) until the hold ends.
func TestLeaderHoldServesAReadOnceThisNodeLeads(t *testing.T) {
	for _, c := range []adminpb.Consistency{adminpb.Consistency_LINEARIZABLE, adminpb.Consistency_STALE} {
		t.Run(c.String(), func(t *testing.T) {
			x, _ := newExecutor(t)
			b := &countingBackend{fakeBackend: &fakeBackend{id: "m0", procsErr: &cluster.NotLeaderError{}, kv: map[string][]byte{}}}
			s, err := New(b, Config{AdvertiseAddr: "self:1", LeaderHold: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got := make(chan error, 1)
			go func() {
				_, err := s.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: 42, Consistency: c})
				got <- err
			}()
			if c == adminpb.Consistency_LINEARIZABLE {
				testwait.For(t, 20*time.Second, "the read held", func() bool { return b.asks.Load() >= 3 })
			}
			b.mu.Lock()
			b.leaderID, b.procsErr, b.procs = "m0", nil, x
			b.mu.Unlock()
			if err := <-got; status.Code(err) != codes.NotFound {
				t.Fatalf("held read: %v, want NOT_FOUND from this node's executor", err)
			}
		})
	}
}

// A leader that refused a forward, and is back at the same address while
// this node still sees it leading, is tried again within the hold.
func TestLeaderHoldTriesTheSameLeaderAgain(t *testing.T) {
	x, _ := newExecutor(t)
	dropping, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dropping.Addr().String()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := dropping.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	leader, err := New(&fakeBackend{id: "m1", leaderID: "m1", procs: x, kv: map[string][]byte{}}, Config{AdvertiseAddr: addr, LeaderHold: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Stop(context.Background())
	b := &fakeBackend{id: "m0", leaderID: "m1", procsErr: &cluster.NotLeaderError{LeaderID: "m1"},
		kv: map[string][]byte{cluster.AdminAddrKey("m1"): []byte(addr)}}
	s, err := New(b, Config{AdvertiseAddr: "self:1", LeaderHold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := s.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}})
		got <- err
	}()
	testwait.For(t, 20*time.Second, "a forward refused", func() bool { return accepted.Load() >= 1 })
	dropping.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the leader's port was taken meanwhile: %v", err)
	}
	go leader.Serve(ln)
	if err := <-got; err != nil {
		t.Fatalf("held submit: %v", err)
	}
	if n := len(x.List(procedure.Filter{})); n != 1 {
		t.Fatalf("the leader has %d procedures, want 1", n)
	}
}

// runThenDie is a leader that takes a submission and dies before
// answering it.
type runThenDie struct {
	adminpb.UnimplementedAdminServer
	ran  atomic.Int64
	died chan struct{}
}

func (l *runThenDie) SubmitProcedure(ctx context.Context, _ *adminpb.SubmitProcedureRequest) (*adminpb.SubmitProcedureResponse, error) {
	l.ran.Add(1)
	close(l.died)
	<-ctx.Done()
	return nil, ctx.Err()
}

// A forward the old leader received is never sent again, even once this
// node sees a new leader within the hold: the old one may have acted on it
// (here a submission without a nonce would have run twice). The caller
// gets UNAVAILABLE and decides.
func TestLeaderHoldNeverSendsTwice(t *testing.T) {
	old := &runThenDie{died: make(chan struct{})}
	oldLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	adminpb.RegisterAdminServer(gs, old)
	go gs.Serve(oldLn)
	defer gs.Stop()

	x, _ := newExecutor(t)
	next, err := New(&fakeBackend{id: "m2", leaderID: "m2", procs: x, kv: map[string][]byte{}}, Config{AdvertiseAddr: "next:1", LeaderHold: -1})
	if err != nil {
		t.Fatal(err)
	}
	nextLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go next.Serve(nextLn)
	defer next.Stop(context.Background())

	b := &fakeBackend{id: "m0", leaderID: "m1", procsErr: &cluster.NotLeaderError{LeaderID: "m1"}, kv: map[string][]byte{
		cluster.AdminAddrKey("m1"): []byte(oldLn.Addr().String()),
		cluster.AdminAddrKey("m2"): []byte(nextLn.Addr().String()),
	}}
	s, err := New(b, Config{AdvertiseAddr: "self:1", LeaderHold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := s.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}})
		got <- err
	}()
	<-old.died
	b.mu.Lock()
	b.leaderID = "m2"
	b.mu.Unlock()
	gs.Stop()
	err = <-got
	if status.Code(err) != codes.Unavailable || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("submit whose leader died with it: %v, want UNAVAILABLE", err)
	}
	if n := len(x.List(procedure.Filter{})); n != 0 || old.ran.Load() != 1 {
		t.Fatalf("ran %d times on the old leader and %d on the new one, want 1 and 0", old.ran.Load(), n)
	}
}

// blackholeDialer dials "192.0.2.1:9" as a host that vanished without a
// reset would be: the SYN is never answered, the dial lasts until gRPC's
// connect deadline (MinConnectTimeout) or the call's end. Other addresses
// are dialed normally.
func blackholeDialer(dials *atomic.Int64) grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		if addr == "192.0.2.1:9" {
			dials.Add(1)
			<-ctx.Done()
			return nil, ctx.Err()
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	})
}

// A forward still waiting for a connection to the old leader (nothing sent:
// gRPC has no transport for it), cut when this node sees a new leader, goes
// on to the new one within the hold (found by review: it was answered
// UNAVAILABLE).
func TestLeaderHoldSendsACutUnsentForwardOn(t *testing.T) {
	x, _ := newExecutor(t)
	next, err := New(&fakeBackend{id: "m2", leaderID: "m2", procs: x, kv: map[string][]byte{}}, Config{AdvertiseAddr: "next:1", LeaderHold: -1})
	if err != nil {
		t.Fatal(err)
	}
	nextLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go next.Serve(nextLn)
	defer next.Stop(context.Background())

	var dials atomic.Int64
	b := &fakeBackend{id: "m0", leaderID: "m1", procsErr: &cluster.NotLeaderError{LeaderID: "m1"}, kv: map[string][]byte{
		cluster.AdminAddrKey("m1"): []byte("192.0.2.1:9"),
		cluster.AdminAddrKey("m2"): []byte(nextLn.Addr().String()),
	}}
	s, err := New(b, Config{AdvertiseAddr: "self:1", LeaderHold: time.Minute,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), blackholeDialer(&dials)}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := s.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}})
		got <- err
	}()
	testwait.For(t, 10*time.Second, "a forward connecting to the vanished leader", func() bool { return dials.Load() >= 1 })
	// The dial is the call's own (the connection is made on its first
	// call), so the call is tracked and waiting in gRPC's pick.
	b.mu.Lock()
	b.leaderID = "m2"
	b.mu.Unlock()
	s.cancelStaleForwards() // what watchLeader does every RegisterInterval
	err = <-got
	if err != nil {
		t.Errorf("held submit, never sent to the vanished leader, after this node saw a new one: %v (want it sent to m2)", err)
	}
	if n := len(x.List(procedure.Filter{})); n != 1 {
		t.Errorf("the new leader has %d procedures, want 1", n)
	}
}
