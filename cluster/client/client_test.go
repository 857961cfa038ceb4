package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/rpcfault"
	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/proto/adminpb"
)

func newClient(t *testing.T, addrs []string, opts ...client.Option) *client.Client {
	t.Helper()
	opts = append([]client.Option{client.WithBackoff(5*time.Millisecond, 50*time.Millisecond), client.WithCallTimeout(10 * time.Second)}, opts...)
	c, err := client.New(addrs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// start runs a real cluster of masters masters (no region servers).
func start(t *testing.T, masters int) *clustertest.Cluster {
	t.Helper()
	return clustertest.New(t, clustertest.Config{Masters: masters})
}

// Arguments of the diagnostic procedures the tests submit: quick ones,
// and one that stays WAITING (suspended) until aborted, as a procedure a
// test drives by hand.
var (
	quick = map[string]string{"steps": "1", "delay": "1ms"}
	held  = map[string]string{"steps": "1", "delay": "1h"}
)

func method(name string) string { return "/baton.admin.v1.Admin/" + name }

// hintOnce makes the next call of the method that a standby forwards to
// the leader fail on the way, so that the standby answers UNAVAILABLE
// with a LeaderHint, as a standby that cannot forward does: the calls
// come one at a time, the client's to the standby first, then the
// standby's to the leader. Every master must know the leader
// (WaitLeaderKnown), else the standby refuses instead of forwarding.
func hintOnce(fc *clustertest.Cluster, name string) *rpcfault.Handle {
	var mu sync.Mutex
	n := 0
	return fc.Faults().MustAdd(rpcfault.Rule{Name: "hint", Methods: []string{method(name)}, Fault: rpcfault.DropRequest, Times: 1,
		When: func(c rpcfault.Call) bool {
			if c.Side != rpcfault.Server {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			n++
			return n == 2
		}})
}

// record returns the requests of the method the masters receive from now
// on (after the rules added before it, whose faults hide a call from it).
func record(fc *clustertest.Cluster, name string) func() []proto.Message {
	var mu sync.Mutex
	var got []proto.Message
	fc.Faults().MustAdd(rpcfault.Rule{Name: "record", Methods: []string{method(name)}, Fault: rpcfault.DropRequest,
		When: func(c rpcfault.Call) bool {
			if m, ok := c.Request.(proto.Message); ok && c.Side == rpcfault.Server {
				mu.Lock()
				got = append(got, proto.Clone(m))
				mu.Unlock()
			}
			return false
		}})
	return func() []proto.Message {
		mu.Lock()
		defer mu.Unlock()
		return append([]proto.Message(nil), got...)
	}
}

func TestNewNeedsAnAddress(t *testing.T) {
	if _, err := client.New([]string{" ", ""}); !errors.Is(err, client.ErrNoAddresses) {
		t.Fatalf("New(blank): %v", err)
	}
	if _, err := client.New([]string{"x:1"}, client.WithBackoff(time.Second, time.Millisecond)); err == nil {
		t.Fatal("New accepted min backoff > max")
	}
}

func TestFollowsLeaderHint(t *testing.T) {
	fc := start(t, 3)
	fc.TransferLeadership(2)
	addrs := fc.AdminAddrs()
	// Only a standby is known: its hint leads to the leader.
	c := newClient(t, addrs[:1])
	hintOnce(fc, "SubmitProcedure")
	id, err := c.Submit(ctx(t), "sleep", quick, "", "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Leader() != addrs[2] {
		t.Fatalf("leader %q, want %q", c.Leader(), addrs[2])
	}
	p, err := c.Wait(ctx(t), id)
	if err != nil || p.State != client.StateSuccess {
		t.Fatalf("Wait: %v %v", p, err)
	}
	// Failover: the next call is answered with a hint to the new leader.
	fc.TransferLeadership(1)
	hintOnce(fc, "GetProcedure")
	if _, err := c.Get(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	if c.Leader() != addrs[1] {
		t.Fatalf("after failover leader %q, want %q", c.Leader(), addrs[1])
	}
}

func TestDeadFirstAddress(t *testing.T) {
	fc := start(t, 1)
	c := newClient(t, []string{clustertest.DeadAddr(t), fc.AdminAddrs()[0]})
	st, err := c.Status(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.LeaderId != "m1" || len(st.Peers) != 1 {
		t.Fatalf("status %v", st)
	}
}

// TestNoLeaderThenLeader: a real master answers ClusterStatus without a
// leader, so the call that waits for one is a submission.
func TestNoLeaderThenLeader(t *testing.T) {
	fc := start(t, 2)
	li, _ := fc.WaitLeader()
	fc.Kill(li) // the other master alone has no quorum
	c := newClient(t, fc.AdminAddrs(), client.WithCallTimeout(time.Minute))
	refused := fc.CountCalls(method("SubmitProcedure"))
	done := make(chan error, 1)
	go func() {
		_, err := c.Submit(ctx(t), "sleep", quick, "", "", 0)
		done <- err
	}()
	fc.WaitFor("a submission refused for want of a leader", func() bool { return refused() > 0 })
	fc.Restart(li)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestSubmitRetriedWithSameNonce(t *testing.T) {
	fc := start(t, 1)
	fc.Faults().MustAdd(rpcfault.Rule{Name: "blip", Methods: []string{method("SubmitProcedure")}, Fault: rpcfault.DropRequest, Times: 1})
	submits := record(fc, "SubmitProcedure")
	// The leader dies between commit and reply, as far as the client can
	// tell.
	fc.Faults().MustAdd(rpcfault.Rule{Name: "lost", Methods: []string{method("SubmitProcedure")}, Fault: rpcfault.DropAnswer, Times: 1})
	c := newClient(t, fc.AdminAddrs())
	for _, nonce := range []string{"", "n-42"} {
		id, err := c.Submit(ctx(t), "sleep", map[string]string{"steps": "2", "delay": "1ms"}, nonce, "", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var subs []*adminpb.SubmitProcedureRequest
		for _, m := range submits() {
			subs = append(subs, m.(*adminpb.SubmitProcedureRequest))
		}
		if nonce == "" {
			// First: the request lost (not recorded), then the lost
			// reply, then the retry that finds the nonce.
			if len(subs) != 2 || subs[0].Nonce == "" || subs[0].Nonce != subs[1].Nonce {
				t.Fatalf("submits %v", subs)
			}
			if subs[0].TimeoutMs != 60000 || subs[0].Arguments["steps"] != "2" {
				t.Fatalf("request %v", subs[0])
			}
		}
		all, err := c.ListAll(ctx(t), client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(all); nonce == "" && n != 1 {
			t.Fatalf("%d procedures, want 1", n)
		}
		again, err := c.Submit(ctx(t), "sleep", nil, subs[len(subs)-1].Nonce, "", 0)
		if err != nil || again != id {
			t.Fatalf("resubmit: id %d err %v, want %d", again, err, id)
		}
	}
}

func TestErrorsKeepTheirCode(t *testing.T) {
	fc := start(t, 1)
	c := newClient(t, fc.AdminAddrs())
	if _, err := c.Get(ctx(t), 99); status.Code(err) != codes.NotFound {
		t.Fatalf("Get(99): %v", err)
	}
	if _, err := c.Submit(ctx(t), "nope", nil, "", "", 0); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Submit(nope): %v", err)
	}
	// Not retried: the first FailedPrecondition comes back.
	for _, name := range []string{"x", "y"} {
		fc.Faults().MustAdd(rpcfault.Rule{Name: name, Methods: []string{method("PauseProcedure")}, Fault: rpcfault.DropRequest, Times: 1, Code: codes.FailedPrecondition})
	}
	id, _ := c.Submit(ctx(t), "sleep", held, "", "", 0)
	if _, err := c.Pause(ctx(t), id); status.Code(err) != codes.FailedPrecondition || !strings.HasSuffix(status.Convert(err).Message(), "(rule x)") {
		t.Fatalf("Pause: %v", err)
	}
}

func TestUnavailableGivesUp(t *testing.T) {
	// Hung nodes may come back: retried until the call timeout.
	hung := []string{testnet.SilentAddr(t), testnet.SilentAddr(t)}
	c := newClient(t, hung, client.WithCallTimeout(300*time.Millisecond))
	start := time.Now()
	_, err := c.Status(context.Background())
	if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
		t.Fatalf("Status: %v", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Fatalf("gave up after %v, want about the call timeout", d)
	}
	// The caller's context bounds the call too.
	cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Status(cctx); status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Status(ctx): %v", err)
	}
}

// TestRefusedEverywhereGivesUpAtOnce: when every address refuses
// connections, waiting will not help: the call fails long before its
// timeout, naming each address refused.
func TestRefusedEverywhereGivesUpAtOnce(t *testing.T) {
	dead := []string{clustertest.DeadAddr(t), clustertest.DeadAddr(t)}
	c := newClient(t, dead, client.WithCallTimeout(time.Minute))
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Status(cctx)
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.Unavailable || cctx.Err() != nil || !strings.Contains(msg, "waiting will not change that") ||
		!strings.Contains(msg, dead[0]+": connection refused") || !strings.Contains(msg, dead[1]+": connection refused") {
		t.Fatalf("Status: %v (context: %v), want UNAVAILABLE at once naming both addresses refused", err, cctx.Err())
	}
}

func TestCanceledIsNotUnavailable(t *testing.T) {
	c := newClient(t, []string{testnet.SilentAddr(t)})
	cctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := c.Status(cctx); status.Code(err) != codes.Canceled {
		t.Fatalf("Status: %v", err)
	}
}

func TestListPages(t *testing.T) {
	fc := start(t, 1)
	c := newClient(t, fc.AdminAddrs())
	// Seven procedures: the odd ones end SUCCESS, the even ones stay
	// WAITING.
	var ids []uint64
	for i := 1; i <= 7; i++ {
		args := quick
		if i%2 == 0 {
			args = held
		}
		id, err := c.Submit(ctx(t), "sleep", args, "", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			mustSucceed(t, c, id, nil)
		}
		ids = append(ids, id)
	}
	page, next, err := c.List(ctx(t), client.ListOptions{PageSize: 3})
	if err != nil || len(page) != 3 || next == "" {
		t.Fatalf("page %v next %q err %v", page, next, err)
	}
	all, err := c.ListAll(ctx(t), client.ListOptions{PageSize: 2, State: "SUCCESS"})
	if err != nil || len(all) != 4 || all[0].Id != ids[0] || all[3].Id != ids[6] {
		t.Fatalf("ListAll: %v %v", all, err)
	}
}

func TestWatchDeliversEveryChange(t *testing.T) {
	fc := start(t, 1)
	c := newClient(t, fc.AdminAddrs())
	id, err := c.Submit(ctx(t), "fail", nil, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	p, err := c.Watch(ctx(t), id, func(p *adminpb.Procedure) error {
		states = append(states, p.State)
		return nil
	})
	if err != nil || p.State != client.StateRolledBack || p.Error == "" {
		t.Fatalf("Watch: %v %v", p, err)
	}
	if len(states) == 0 || states[len(states)-1] != "ROLLEDBACK" {
		t.Fatalf("states %v", states)
	}
	if _, err := c.Wait(ctx(t), 12345); status.Code(err) != codes.NotFound {
		t.Fatalf("Wait(unknown): %v", err)
	}
	stop := errors.New("enough")
	if _, err := c.Watch(ctx(t), id, func(*adminpb.Procedure) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("Watch with failing callback: %v", err)
	}
}

// TestWatchResumesAfterFailover kills the leader serving a watch mid-way;
// the watch carries on on the new leader.
func TestWatchResumesAfterFailover(t *testing.T) {
	fc := start(t, 3)
	li := fc.WaitLeaderKnown()
	addrs := fc.AdminAddrs()
	// The leader first, so that the watch is served by it.
	c := newClient(t, append([]string{addrs[li]}, addrs...))
	// Suspended for a second: long enough for the test to kill the
	// leader first, then it succeeds wherever it then runs.
	id, err := c.Submit(ctx(t), "sleep", map[string]string{"steps": "1", "delay": "1s"}, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	states := make(chan string, 16)
	done := make(chan error, 1)
	go func() {
		p, err := c.Watch(ctx(t), id, func(p *adminpb.Procedure) error {
			states <- p.State
			return nil
		})
		if err == nil && p.State != client.StateSuccess {
			err = errors.New("final state " + p.State)
		}
		done <- err
	}()
	var seen []string
	await := func(want string) {
		t.Helper()
		for {
			select {
			case st := <-states:
				seen = append(seen, st)
				if st == want {
					return
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("the watch did not report %s; seen %v", want, seen)
			}
		}
	}
	await("WAITING_TIMEOUT")
	watches := fc.CountCalls(method("WatchProcedure"))
	fc.Kill(li) // ends the stream; the old leader reports nothing more
	await("SUCCESS")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if seen[0] != "RUNNABLE" && seen[0] != "WAITING_TIMEOUT" {
		t.Fatalf("seen %v", seen)
	}
	if watches() == 0 {
		t.Fatal("the watch was not reopened after the leader died")
	}
}

// TestWatchResumesAfterLeadershipChange: the serving node stays up but
// loses leadership, ending the stream with a hint.
func TestWatchResumesAfterLeadershipChange(t *testing.T) {
	fc := start(t, 2)
	li := fc.WaitLeaderKnown()
	c := newClient(t, fc.AdminAddrs())
	id, _ := c.Submit(ctx(t), "sleep", held, "", "", 0)
	watches := fc.CountCalls(method("WatchProcedure"))
	done := make(chan *adminpb.Procedure, 1)
	go func() {
		p, _ := c.Wait(ctx(t), id)
		done <- p
	}()
	// The watch is open before the leader loses leadership.
	fc.WaitFor("a watch", func() bool { return watches() > 0 })
	opened := watches()
	fc.TransferLeadership(1 - li)
	fc.WaitFor("the watch reopened", func() bool { return watches() > opened })
	if _, err := c.Abort(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	if p := <-done; p == nil || p.State != client.StateRolledBack {
		t.Fatalf("Wait: %v", p)
	}
}

func TestProcedureOps(t *testing.T) {
	// Three masters: a fourth voter that never answers leaves a quorum.
	fc := start(t, 3)
	c := newClient(t, fc.AdminAddrs())
	id, _ := c.Submit(ctx(t), "sleep", held, "", "", 0)
	if p, err := c.Pause(ctx(t), id); err != nil || !p.Paused {
		t.Fatalf("Pause: %v %v", p, err)
	}
	if p, err := c.Resume(ctx(t), id); err != nil || p.Paused {
		t.Fatalf("Resume: %v %v", p, err)
	}
	if _, err := c.Ack(ctx(t), id); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Ack(running): %v", err)
	}
	if p, err := c.Abort(ctx(t), id); err != nil || !p.AbortRequested {
		t.Fatalf("Abort: %v %v", p, err)
	}
	if p, err := c.Wait(ctx(t), id); err != nil || p.State != client.StateRolledBack {
		t.Fatalf("Wait: %v %v", p, err)
	}
	if _, err := c.Ack(ctx(t), id); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	st, err := c.AddPeer(ctx(t), "m9", "127.0.0.1:9", "127.0.0.1:10")
	if err != nil || len(st.Peers) != 4 {
		t.Fatalf("AddPeer: %v %v", st, err)
	}
	if st, err = c.RemovePeer(ctx(t), "m9"); err != nil || len(st.Peers) != 3 {
		t.Fatalf("RemovePeer: %v %v", st, err)
	}
}
