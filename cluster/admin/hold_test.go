package admin

import (
	"context"
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

// countingBackend counts the calls that ask whether this node can serve:
// a held call asks again at each turn of its hold.
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

func (c *countingBackend) IsLeader() bool {
	c.asks.Add(1)
	return c.fakeBackend.IsLeader()
}

// followerOf is the backend of a master that sees leaderID leading (none
// if empty), with the leaders' admin addresses in addrs. (forward_test.go's
// standby builds its server too; these tests wrap the backend first.)
func followerOf(leaderID string, addrs map[string]string) *fakeBackend {
	kv := map[string][]byte{}
	for id, a := range addrs {
		kv[cluster.AdminAddrKey(id)] = []byte(a)
	}
	return &fakeBackend{id: "m0", leaderID: leaderID, procsErr: &cluster.NotLeaderError{LeaderID: leaderID}, kv: kv}
}

// becomeLeader makes b's node the ready leader, with executor x.
func becomeLeader(b *fakeBackend, x Procedures) {
	b.mu.Lock()
	b.leaderID, b.procsErr, b.procs = b.id, nil, x
	b.mu.Unlock()
}

// seeLeader makes b's node see id leading.
func seeLeader(b *fakeBackend, id string) {
	b.mu.Lock()
	b.leaderID = id
	b.mu.Unlock()
}

// newHoldServer is an admin server on b that holds calls for a minute,
// stopped at the test's end. extra adjusts its Config.
func newHoldServer(t *testing.T, b Backend, extra ...func(*Config)) *Server {
	t.Helper()
	cfg := Config{AdvertiseAddr: "self:1", LeaderHold: time.Minute}
	for _, f := range extra {
		f(&cfg)
	}
	s, err := New(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	return s
}

// serveLeader serves an admin server for leader id with executor x on a
// loopback listener (ln, if given), not holding calls; it returns the
// address.
func serveLeader(t *testing.T, id string, x Procedures, ln net.Listener) string {
	t.Helper()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(&fakeBackend{id: id, leaderID: id, procs: x, kv: map[string][]byte{}}, Config{AdvertiseAddr: ln.Addr().String(), LeaderHold: -1})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Stop(context.Background()) })
	return ln.Addr().String()
}

// droppingListener accepts connections and drops them at once, as a dying
// process's port would; accepted counts them.
func droppingListener(t *testing.T) (ln net.Listener, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted = new(atomic.Int64)
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
	return ln, accepted
}

// submitted is the answer of a submission made by submitAsync.
type submitted struct {
	r   *adminpb.SubmitProcedureResponse
	err error
}

// submitAsync submits a one-step procedure to s in the background, with
// a 30 s deadline; answered is set once the answer is in the channel.
func submitAsync(t *testing.T, s *Server) (got <-chan submitted, answered *atomic.Bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	ch, done := make(chan submitted, 1), new(atomic.Bool)
	go func() {
		r, err := s.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}})
		ch <- submitted{r, err}
		done.Store(true)
	}()
	return ch, done
}

// procsOn counts the procedures on executor x.
func procsOn(x *procedure.Executor) int { return len(x.List(procedure.Filter{})) }

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
			b := &countingBackend{fakeBackend: followerOf(tc.leader, nil)}
			b.procsErr = tc.procsErr
			got, answered := submitAsync(t, newHoldServer(t, b))
			testwait.For(t, 30*time.Second, "the call held (asking again) or answered", func() bool { return b.asks.Load() >= 3 || answered.Load() })
			if answered.Load() {
				a := <-got
				t.Fatalf("answered before a leader was ready: %v, %v", a.r, a.err)
			}
			becomeLeader(b.fakeBackend, x)
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
// another leader (here itself), then goes there.
func TestLeaderHoldWaitsOutAnUnreachableLeader(t *testing.T) {
	x, _ := newExecutor(t)
	ln, accepted := droppingListener(t)
	b := followerOf("m1", map[string]string{"m1": ln.Addr().String()})
	got, _ := submitAsync(t, newHoldServer(t, b))
	testwait.For(t, 30*time.Second, "a forward to the unreachable leader", func() bool { return accepted.Load() >= 1 })
	becomeLeader(b, x)
	if a := <-got; a.err != nil {
		t.Fatalf("held submit: %v", a.err)
	}
}

// The hold ends in time for the caller to get UNAVAILABLE (and its hint)
// before its own deadline, and not at all with LeaderHold negative.
func TestLeaderHoldEndsBeforeTheDeadline(t *testing.T) {
	for _, hold := range []time.Duration{time.Hour, -1} {
		s := newHoldServer(t, followerOf("", nil), func(c *Config) { c.LeaderHold = hold })
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := s.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep"})
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			t.Errorf("hold %v: %v (caller's context: %v), want UNAVAILABLE within the deadline", hold, err, ctx.Err())
		}
		if _, ok := LeaderHintOf(err); !ok {
			t.Errorf("hold %v: no LeaderHint in %v", hold, err)
		}
		cancel()
	}
}

// The registration loop's calls are not held: its next tick tries again,
// and a held call would hold up the health updates of the ticks between.
func TestLeaderHoldSparesTheRegistrationLoop(t *testing.T) {
	b := &countingBackend{fakeBackend: followerOf("", nil)}
	s := newHoldServer(t, b, func(c *Config) { c.LeaderHold = time.Hour })
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), noHoldKey{}, true), time.Minute)
	defer cancel()
	_, err := s.RegisterNode(ctx, &adminpb.RegisterNodeRequest{Id: "m0", AdminAddress: "self:1"})
	if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
		t.Fatalf("registration without a leader: %v (context: %v), want UNAVAILABLE", err, ctx.Err())
	}
	if n := b.asks.Load(); n != 1 {
		t.Fatalf("registration asked whether this node leads %d times, want once (not held)", n)
	}
}

// A read held while no leader is known is served by this node once it is
// the leader, not forwarded (to itself) until the hold ends.
func TestLeaderHoldServesAReadOnceThisNodeLeads(t *testing.T) {
	for _, c := range []adminpb.Consistency{adminpb.Consistency_LINEARIZABLE, adminpb.Consistency_STALE} {
		t.Run(c.String(), func(t *testing.T) {
			x, _ := newExecutor(t)
			b := &countingBackend{fakeBackend: followerOf("", nil)}
			s := newHoldServer(t, b)
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
			becomeLeader(b.fakeBackend, x)
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
	dropping, accepted := droppingListener(t)
	addr := dropping.Addr().String()
	got, _ := submitAsync(t, newHoldServer(t, followerOf("m1", map[string]string{"m1": addr})))
	testwait.For(t, 20*time.Second, "a forward refused", func() bool { return accepted.Load() >= 1 })
	dropping.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the leader's port was taken meanwhile: %v", err)
	}
	serveLeader(t, "m1", x, ln)
	if a := <-got; a.err != nil {
		t.Fatalf("held submit: %v", a.err)
	}
	if n := procsOn(x); n != 1 {
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
	b := followerOf("m1", map[string]string{"m1": oldLn.Addr().String(), "m2": serveLeader(t, "m2", x, nil)})
	got, _ := submitAsync(t, newHoldServer(t, b))
	<-old.died
	seeLeader(b, "m2")
	gs.Stop()
	if a := <-got; status.Code(a.err) != codes.Unavailable {
		t.Fatalf("submit whose leader died with it: %v, want UNAVAILABLE", a.err)
	}
	if n := procsOn(x); n != 0 || old.ran.Load() != 1 {
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
	var dials atomic.Int64
	b := followerOf("m1", map[string]string{"m1": "192.0.2.1:9", "m2": serveLeader(t, "m2", x, nil)})
	s := newHoldServer(t, b, func(c *Config) {
		c.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), blackholeDialer(&dials)}
	})
	got, _ := submitAsync(t, s)
	testwait.For(t, 10*time.Second, "a forward connecting to the vanished leader", func() bool { return dials.Load() >= 1 })
	// The dial is the call's own (the connection is made on its first
	// call), so the call is tracked and waiting in gRPC's pick.
	seeLeader(b, "m2")
	s.cancelStaleForwards() // what watchLeader does every RegisterInterval
	if a := <-got; a.err != nil {
		t.Errorf("held submit, never sent to the vanished leader, after this node saw a new one: %v (want it sent to m2)", a.err)
	}
	if n := procsOn(x); n != 1 {
		t.Errorf("the new leader has %d procedures, want 1", n)
	}
}
