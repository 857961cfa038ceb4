package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/client/clienttest"
	"github.com/baton-dev/baton/proto/adminpb"
)

func newClient(t *testing.T, addrs []string, opts ...client.Option) *client.Client {
	t.Helper()
	opts = append([]client.Option{client.WithBackoff(5*time.Millisecond, 50*time.Millisecond), client.WithCallTimeout(3 * time.Second)}, opts...)
	c, err := client.New(addrs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
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
	fc := clienttest.Start(t, 3)
	fc.SetLeader(2)
	// Only a standby is known: its hint leads to the leader.
	c := newClient(t, fc.Addrs()[:1])
	id, err := c.Submit(ctx(t), "sleep", nil, "", "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Leader() != fc.Node(2).Addr {
		t.Fatalf("leader %q, want %q", c.Leader(), fc.Node(2).Addr)
	}
	p, err := c.Wait(ctx(t), id)
	if err != nil || p.State != client.StateSuccess {
		t.Fatalf("Wait: %v %v", p, err)
	}
	// Failover: the next call is answered with a hint to the new leader.
	fc.SetLeader(1)
	if _, err := c.Get(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	if c.Leader() != fc.Node(1).Addr {
		t.Fatalf("after failover leader %q, want %q", c.Leader(), fc.Node(1).Addr)
	}
}

func TestDeadFirstAddress(t *testing.T) {
	fc := clienttest.Start(t, 1)
	c := newClient(t, []string{clienttest.DeadAddr(t), fc.Addrs()[0]})
	st, err := c.Status(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.LeaderId != "n1" || len(st.Peers) != 1 {
		t.Fatalf("status %v", st)
	}
}

func TestNoLeaderThenLeader(t *testing.T) {
	fc := clienttest.Start(t, 2)
	fc.SetLeader(-1)
	time.AfterFunc(100*time.Millisecond, func() { fc.SetLeader(1) })
	c := newClient(t, fc.Addrs())
	if _, err := c.Status(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestSubmitRetriedWithSameNonce(t *testing.T) {
	fc := clienttest.Start(t, 2)
	fc.LoseSubmitReplies(1)
	fc.Inject("SubmitProcedure", status.Error(codes.Unavailable, "blip"))
	c := newClient(t, fc.Addrs())
	for _, nonce := range []string{"", "n-42"} {
		id, err := c.Submit(ctx(t), "sleep", map[string]string{"steps": "2"}, nonce, "", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		subs := fc.Submits()
		if nonce == "" {
			// First: an injected error (not counted), then the lost reply,
			// then the retry that finds the nonce.
			if len(subs) != 2 || subs[0].Nonce == "" || subs[0].Nonce != subs[1].Nonce {
				t.Fatalf("submits %v", subs)
			}
			if subs[0].TimeoutMs != 60000 || subs[0].Arguments["steps"] != "2" {
				t.Fatalf("request %v", subs[0])
			}
		}
		if n := len(fc.Procedures()); nonce == "" && n != 1 {
			t.Fatalf("%d procedures, want 1", n)
		}
		again, err := c.Submit(ctx(t), "sleep", nil, subs[len(subs)-1].Nonce, "", 0)
		if err != nil || again != id {
			t.Fatalf("resubmit: id %d err %v, want %d", again, err, id)
		}
	}
}

func TestErrorsKeepTheirCode(t *testing.T) {
	fc := clienttest.Start(t, 1)
	c := newClient(t, fc.Addrs())
	if _, err := c.Get(ctx(t), 99); status.Code(err) != codes.NotFound {
		t.Fatalf("Get(99): %v", err)
	}
	if _, err := c.Submit(ctx(t), "nope", nil, "", "", 0); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Submit(nope): %v", err)
	}
	// Not retried: the first FailedPrecondition comes back.
	fc.Inject("PauseProcedure", status.Error(codes.FailedPrecondition, "x"), status.Error(codes.FailedPrecondition, "y"))
	id, _ := c.Submit(ctx(t), "manual", nil, "", "", 0)
	if _, err := c.Pause(ctx(t), id); status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != "x" {
		t.Fatalf("Pause: %v", err)
	}
}

func TestUnavailableGivesUp(t *testing.T) {
	dead := []string{clienttest.DeadAddr(t), clienttest.DeadAddr(t)}
	c := newClient(t, dead, client.WithCallTimeout(300*time.Millisecond))
	start := time.Now()
	_, err := c.Status(context.Background())
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Status: %v", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Fatalf("gave up after %v, want about the call timeout", d)
	}
	// The caller's context bounds the call too.
	cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Status(cctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("Status(ctx): %v", err)
	}
}

func TestCanceledIsNotUnavailable(t *testing.T) {
	c := newClient(t, []string{clienttest.DeadAddr(t)})
	cctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := c.Status(cctx); status.Code(err) != codes.Canceled {
		t.Fatalf("Status: %v", err)
	}
}

func TestListPages(t *testing.T) {
	fc := clienttest.Start(t, 1)
	for i := uint64(1); i <= 7; i++ {
		st := "SUCCESS"
		if i%2 == 0 {
			st = "RUNNABLE"
		}
		fc.Add(&adminpb.Procedure{Id: i, RootId: i, Type: "sleep", State: st})
	}
	c := newClient(t, fc.Addrs())
	page, next, err := c.List(ctx(t), client.ListOptions{PageSize: 3})
	if err != nil || len(page) != 3 || next == "" {
		t.Fatalf("page %v next %q err %v", page, next, err)
	}
	all, err := c.ListAll(ctx(t), client.ListOptions{PageSize: 2, State: "SUCCESS"})
	if err != nil || len(all) != 4 || all[0].Id != 1 || all[3].Id != 7 {
		t.Fatalf("ListAll: %v %v", all, err)
	}
}

func TestWatchDeliversEveryChange(t *testing.T) {
	fc := clienttest.Start(t, 1)
	c := newClient(t, fc.Addrs())
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

// TestWatchResumesAfterFailover kills the node serving a watch mid-way; the
// watch carries on on the new leader.
func TestWatchResumesAfterFailover(t *testing.T) {
	fc := clienttest.Start(t, 3)
	c := newClient(t, fc.Addrs())
	id, err := c.Submit(ctx(t), "manual", nil, "", "", 0)
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
			case <-time.After(10 * time.Second):
				t.Fatalf("the watch did not report %s; seen %v", want, seen)
			}
		}
	}
	await("RUNNABLE")
	fc.Node(0).Stop() // ends the stream; n1 reports nothing more
	fc.SetLeader(2)
	fc.SetState(id, "WAITING", "")
	await("WAITING") // so the watch resumed on the new leader
	fc.SetState(id, "SUCCESS", "")
	await("SUCCESS")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if seen[0] != "RUNNABLE" {
		t.Fatalf("seen %v", seen)
	}
	if fc.Requests("n3") == 0 {
		t.Fatal("the new leader served nothing")
	}
}

// TestWatchResumesAfterLeadershipChange: the serving node stays up but
// loses leadership, ending the stream with a hint.
func TestWatchResumesAfterLeadershipChange(t *testing.T) {
	fc := clienttest.Start(t, 2)
	c := newClient(t, fc.Addrs())
	id, _ := c.Submit(ctx(t), "manual", nil, "", "", 0)
	served := fc.Requests("n1") // the submission
	done := make(chan *adminpb.Procedure, 1)
	go func() {
		p, _ := c.Wait(ctx(t), id)
		done <- p
	}()
	// The watch is on n1 before it loses leadership.
	for deadline := time.Now().Add(5 * time.Second); fc.Requests("n1") == served; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Wait never called n1")
		}
	}
	fc.SetLeader(1)
	fc.SetState(id, "ROLLEDBACK", "aborted")
	if p := <-done; p == nil || p.State != client.StateRolledBack {
		t.Fatalf("Wait: %v", p)
	}
	if fc.Requests("n2") == 0 {
		t.Fatal("the new leader served nothing")
	}
}

func TestProcedureOps(t *testing.T) {
	fc := clienttest.Start(t, 1)
	c := newClient(t, fc.Addrs())
	id, _ := c.Submit(ctx(t), "manual", nil, "", "", 0)
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
	st, err := c.AddPeer(ctx(t), "n9", "127.0.0.1:9", "127.0.0.1:10")
	if err != nil || len(st.Peers) != 2 {
		t.Fatalf("AddPeer: %v %v", st, err)
	}
	if st, err = c.RemovePeer(ctx(t), "n9"); err != nil || len(st.Peers) != 1 {
		t.Fatalf("RemovePeer: %v %v", st, err)
	}
}
