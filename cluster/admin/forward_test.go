package admin

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
)

// freezer is a TCP proxy that relays bytes both ways until freeze, after
// which it drops everything and keeps its connections open: a leader
// whose host died with connections established (no FIN, no RST).
type freezer struct {
	lis    net.Listener
	target string
	frozen chan struct{}
	once   sync.Once
	closed chan struct{}
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{lis: lis, target: target, frozen: make(chan struct{}), closed: make(chan struct{})}
	go f.run()
	t.Cleanup(func() {
		close(f.closed)
		lis.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.conns {
			c.Close()
		}
	})
	return f
}

func (f *freezer) addr() string { return f.lis.Addr().String() }
func (f *freezer) freeze()      { f.once.Do(func() { close(f.frozen) }) }

func (f *freezer) run() {
	for {
		c, err := f.lis.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, u)
		f.mu.Unlock()
		go f.pipe(c, u)
		go f.pipe(u, c)
	}
}

func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-f.frozen:
			<-f.closed // dead: swallow, hold the connections open
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

// fakeLeader is a leader's admin service: WatchProcedure sends state and,
// unless it is terminal, blocks; GetProcedure blocks (hung) if hang, else
// answers.
type fakeLeader struct {
	adminpb.UnimplementedAdminServer
	state   string
	hang    bool
	release chan struct{}
	// forwarded and direct count the GetProcedure calls that came through
	// a standby and those that came straight from a client.
	forwarded, direct atomic.Int32
}

func (l *fakeLeader) GetProcedure(ctx context.Context, req *adminpb.GetProcedureRequest) (*adminpb.Procedure, error) {
	if isForwarded(ctx) {
		l.forwarded.Add(1)
	} else {
		l.direct.Add(1)
	}
	if l.hang {
		select {
		case <-l.release:
			return nil, status.Error(codes.Internal, "released")
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return &adminpb.Procedure{Id: req.GetId(), State: l.state}, nil
}

func (l *fakeLeader) WatchProcedure(req *adminpb.WatchProcedureRequest, s grpc.ServerStreamingServer[adminpb.Procedure]) error {
	if err := s.Send(&adminpb.Procedure{Id: req.GetId(), State: l.state}); err != nil {
		return err
	}
	if l.state == client.StateSuccess || l.state == client.StateRolledBack {
		return nil
	}
	select {
	case <-l.release:
	case <-s.Context().Done():
	}
	return nil
}

// startLeader serves l and returns its address.
func startLeader(t *testing.T, l *fakeLeader) string { return serveFake(t, l, l) }

// serveFake serves srv, a fake leader built on l (l itself, or a type
// embedding it), and returns its address.
func serveFake(t *testing.T, srv adminpb.AdminServer, l *fakeLeader) string {
	t.Helper()
	l.release = make(chan struct{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(KeepaliveEnforcement())
	adminpb.RegisterAdminServer(gs, srv)
	go gs.Serve(lis)
	t.Cleanup(func() { close(l.release); gs.Stop() })
	return lis.Addr().String()
}

// standby returns a server on a fake backend that follows m1 at
// leaderAddr.
func standby(t *testing.T, leaderAddr string, cfg Config) (*Server, *fakeBackend) {
	t.Helper()
	b := &fakeBackend{id: "m0", leaderID: "m1", procsErr: &cluster.NotLeaderError{LeaderID: "m1"}, kv: map[string][]byte{
		cluster.AdminAddrKey("m1"): []byte(leaderAddr),
	}}
	s, err := New(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	return s, b
}

// serve serves s on a fresh listener, registered as m0's admin address
// with its binary's report beside it (so it does not register itself: a
// registration forwarded meanwhile would count among the calls a test
// waits to see forwarded), and returns a client of it and the address.
func serve(t *testing.T, s *Server, b *fakeBackend) (adminpb.AdminClient, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	b.mu.Lock()
	b.kv[cluster.AdminAddrKey("m0")] = []byte(addr)
	b.kv[cluster.VersionKey("m0")] = version.EncodeReport(buildOf(b))
	b.mu.Unlock()
	go s.Serve(lis)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return adminpb.NewAdminClient(cc), addr
}

func (f *fakeBackend) setLeader(id, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaderID = id
	if addr != "" {
		f.kv[cluster.AdminAddrKey(id)] = []byte(addr)
	}
}

func wantUnavailable(t *testing.T, err error, hintID, hintAddr, msg string) {
	t.Helper()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want UNAVAILABLE", err)
	}
	if !strings.Contains(err.Error(), msg) {
		t.Errorf("message %q does not contain %q", err, msg)
	}
	h, ok := LeaderHintOf(err)
	if !ok {
		t.Fatalf("no LeaderHint in %v", err)
	}
	if h.LeaderId != hintID || h.LeaderAdminAddress != hintAddr {
		t.Errorf("hint %v, want %q at %q", h, hintID, hintAddr)
	}
}

// TestForwardToUnresponsiveLeader: a forwarded unary call whose caller set
// no deadline fails within seconds with UNAVAILABLE (and a hint), whether
// the leader's host never speaks HTTP/2 or its server hangs.
func TestForwardToUnresponsiveLeader(t *testing.T) {
	t.Parallel()
	t.Run("silent host", func(t *testing.T) {
		t.Parallel()
		addr := testnet.SilentAddr(t)
		s, _ := standby(t, addr, Config{})
		start := time.Now()
		_, err := s.GetProcedure(context.Background(), &adminpb.GetProcedureRequest{Id: 1})
		took := time.Since(start)
		t.Logf("failed after %v: %v", took, err)
		wantUnavailable(t, err, "m1", addr, "forwarding to leader")
		if took > 5*time.Second {
			t.Errorf("took %v", took)
		}
	})
	t.Run("hung server", func(t *testing.T) {
		t.Parallel()
		addr := startLeader(t, &fakeLeader{hang: true})
		s, _ := standby(t, addr, Config{ForwardTimeout: time.Second})
		start := time.Now()
		_, err := s.GetProcedure(context.Background(), &adminpb.GetProcedureRequest{Id: 1})
		took := time.Since(start)
		t.Logf("failed after %v: %v", took, err)
		wantUnavailable(t, err, "m1", addr, "did not answer a forwarded call within 1s")
		if took < 900*time.Millisecond || took > 4*time.Second {
			t.Errorf("took %v, want about 1s", took)
		}
		// The caller's own deadline wins, and is reported as such.
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if _, err := s.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: 1}); status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("with the caller's deadline: %v, want DEADLINE_EXCEEDED", err)
		}
	})
	t.Run("default timeout", func(t *testing.T) {
		s, _ := standby(t, "x:1", Config{})
		if s.cfg.ForwardTimeout != DefaultForwardTimeout {
			t.Errorf("ForwardTimeout %v", s.cfg.ForwardTimeout)
		}
	})
}

// TestForwardCancelledOnLeaderChange: calls forwarded to a leader whose
// host died with the connection established (nothing is answered, nothing
// is reset) end as soon as the standby's view of the leader changes.
func TestForwardCancelledOnLeaderChange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, s *Server, b *fakeBackend, self string) (hintID, hintAddr, msg string)
	}{
		{"standby becomes leader", func(t *testing.T, s *Server, b *fakeBackend, self string) (string, string, string) {
			b.setLeader("m0", "")
			return "m0", self, "this node became the leader"
		}},
		{"new leader elsewhere", func(t *testing.T, s *Server, b *fakeBackend, self string) (string, string, string) {
			b.setLeader("m2", "10.0.0.2:7000")
			return "m2", "10.0.0.2:7000", `now leader "m2" at 10.0.0.2:7000`
		}},
		{"leader lost", func(t *testing.T, s *Server, b *fakeBackend, self string) (string, string, string) {
			b.setLeader("", "")
			return "", "", "now no leader known"
		}},
		{"server stops", func(t *testing.T, s *Server, b *fakeBackend, self string) (string, string, string) {
			go s.Stop(context.Background())
			return "m1", "", "server stopping"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxy := newFreezer(t, startLeader(t, &fakeLeader{state: client.StateRunnable}))
			s, b := standby(t, proxy.addr(), Config{RegisterInterval: 20 * time.Millisecond})
			cl, self := serve(t, s, b)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			ws, err := cl.WatchProcedure(ctx, &adminpb.WatchProcedureRequest{Id: 7})
			if err != nil {
				t.Fatal(err)
			}
			if p, err := ws.Recv(); err != nil || p.GetState() != client.StateRunnable {
				t.Fatalf("first message through the standby: %v %v", p, err)
			}
			proxy.freeze() // the leader's host dies
			unary := make(chan error, 1)
			go func() {
				_, err := cl.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: 7})
				unary <- err
			}()
			testwait.For(t, 5*time.Second, "both calls forwarded", func() bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				return len(s.fwd) == 2
			})
			select { // nothing moves while the view holds
			case err := <-unary:
				t.Fatalf("unary call ended before the leader changed: %v", err)
			default:
			}
			id, addr, msg := tc.change(t, s, b, self)
			start := time.Now()
			// Both calls end because of the change, as its message says
			// (not at ForwardTimeout, nor when a keepalive gives up).
			_, err = ws.Recv()
			t.Logf("stream ended %v after the change: %v", time.Since(start), err)
			if id == "m1" { // stopping: the hint is the unchanged view
				addr = proxy.addr()
			}
			wantUnavailable(t, err, id, addr, msg)
			select {
			case err := <-unary:
				t.Logf("unary call: %v", err)
				wantUnavailable(t, err, id, addr, msg)
			case <-ctx.Done():
				t.Fatal("unary call still stuck when the test's deadline passed")
			}
		})
	}
}

// TestClientWatchSurvivesDeadLeader is the failover demo in miniature: a
// client's watch, forwarded by a standby to a leader that then dies
// without a trace, moves to the new leader once the standby learns of it.
func TestClientWatchSurvivesDeadLeader(t *testing.T) {
	t.Parallel()
	proxy := newFreezer(t, startLeader(t, &fakeLeader{state: client.StateRunnable}))
	next := startLeader(t, &fakeLeader{state: client.StateSuccess})
	s, b := standby(t, proxy.addr(), Config{RegisterInterval: 20 * time.Millisecond})
	_, self := serve(t, s, b)
	c, err := client.New([]string{self}, client.WithCallTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	seen := make(chan string, 10)
	var changed time.Time
	done := make(chan error, 1)
	go func() {
		p, err := c.Watch(ctx, 7, func(p *adminpb.Procedure) error {
			seen <- p.GetState()
			return nil
		})
		if err == nil && p.GetState() != client.StateSuccess {
			err = io.ErrUnexpectedEOF
		}
		done <- err
	}()
	if st := <-seen; st != client.StateRunnable {
		t.Fatalf("first state %s", st)
	}
	proxy.freeze()
	changed = time.Now()
	b.setLeader("m2", next)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("watch finished at the new leader %v after the standby learnt of it", time.Since(changed))
		if d := time.Since(changed); d > 3*time.Second {
			t.Errorf("took %v", d)
		}
	case <-ctx.Done():
		t.Fatal("watch stuck")
	}
}
