package admin

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
)

// Faults of reads forwarded in bulk, each beside the same read forwarded
// alone (cluster format 1), which must fare the same. (Written by a
// reviewer of the change, who found the first two failing.)

// cutUnsentRead is the read analogue of
// TestLeaderHoldSendsACutUnsentForwardOn: a linearizable read whose forward is still waiting for a connection to a
// vanished leader (nothing sent), cut when this node sees a new leader,
// must go on to the new leader within the hold. format selects bulk (2)
// or alone (1).
func cutUnsentRead(t *testing.T, format version.Format) {
	x, _ := newExecutor(t)
	var dials atomic.Int64
	b := followerOf("m1", map[string]string{"m1": "192.0.2.1:9", "m2": serveLeader(t, "m2", x, nil)})
	b.kv[cluster.ClusterFormatKey] = version.EncodeClusterFormat(format)
	s := newHoldServer(t, b, func(c *Config) {
		c.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), blackholeDialer(&dials)}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := s.ListProcedures(ctx, &adminpb.ListProceduresRequest{})
		got <- err
	}()
	testwait.For(t, 10*time.Second, "a forward connecting to the vanished leader", func() bool { return dials.Load() >= 1 })
	seeLeader(b, "m2")
	s.cancelStaleForwards()
	if err := <-got; err != nil {
		t.Errorf("held linearizable read, never sent to the vanished leader, after this node saw a new one: %v (want it sent to m2)", err)
	}
	t.Logf("bulk: %d calls, %d in bulk, %d alone", s.bulk.calls.Load(), s.bulk.inBulk.Load(), s.bulk.alone.Load())
}

func TestForwardedReadCutUnsentGoesOnInBulk(t *testing.T) { cutUnsentRead(t, version.Format2) }
func TestForwardedReadCutUnsentGoesOnAlone(t *testing.T)  { cutUnsentRead(t, version.Format1) }

// slowLeader answers GetProcedure, alone or in bulk, after delay: a leader
// that takes a while (establishing itself, loaded) but answers.
type slowLeader struct {
	fakeLeader
	delay time.Duration
}

// answerLate holds the answer for delay, the fault under test (not a
// wait for something to settle): it must leave after the standby's
// ForwardTimeout and before the caller's deadline. A loaded machine only
// makes it later, and the caller's deadline (10 s) leaves that room. A
// call the standby cut (the defect the tests look for) ends the wait at
// once, with the standby's own error.
func (l *slowLeader) answerLate(ctx context.Context) error {
	t := time.NewTimer(l.delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

func (l *slowLeader) GetProcedure(ctx context.Context, req *adminpb.GetProcedureRequest) (*adminpb.Procedure, error) {
	if err := l.answerLate(ctx); err != nil {
		return nil, err
	}
	return l.fakeLeader.GetProcedure(ctx, req)
}

func (l *slowLeader) ForwardReads(ctx context.Context, in *adminpb.ForwardReadsRequest) (*adminpb.ForwardReadsResponse, error) {
	if err := l.answerLate(ctx); err != nil {
		return nil, err
	}
	return answerGets(in, 0)
}

// slowLeaderRead: a caller that set its own deadline, longer than
// ForwardTimeout, is waited for alone (forwardCall bounds only a call without a deadline);
// in bulk too (the ForwardReads call lasts to its reads' latest deadline).
func slowLeaderRead(t *testing.T, format version.Format) {
	l := &slowLeader{delay: 1500 * time.Millisecond}
	l.fakeLeader.state = "alone"
	s, b := standby(t, serveFake(t, l, &l.fakeLeader), Config{RegisterInterval: time.Hour, ForwardTimeout: 500 * time.Millisecond})
	b.mu.Lock()
	b.kv[cluster.ClusterFormatKey] = version.EncodeClusterFormat(format)
	b.mu.Unlock()
	cl, _ := serve(t, s, b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	p, err := cl.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: 7})
	t.Logf("after %v: %v %v (bulk calls %d)", time.Since(start).Round(time.Millisecond), p.GetState(), err, s.bulk.calls.Load())
	if err != nil {
		t.Errorf("read with a 10 s deadline of a leader answering in 1.5 s (ForwardTimeout 0.5 s): %v", err)
	}
}

func TestForwardedReadKeepsItsCallersDeadlineInBulk(t *testing.T) { slowLeaderRead(t, version.Format2) }
func TestForwardedReadKeepsItsCallersDeadlineAlone(t *testing.T)  { slowLeaderRead(t, version.Format1) }

// TestForwardedReadRetriesAnUnsentBatch: a read whose ForwardReads call is
// refused before it is sent (the leader's port drops connections) is held and tried again, and answered
// once the leader is back at the address.
func TestForwardedReadRetriesAnUnsentBatch(t *testing.T) {
	x, _ := newExecutor(t)
	dropping, accepted := droppingListener(t)
	addr := dropping.Addr().String()
	s := newHoldServer(t, followerOf("m1", map[string]string{"m1": addr}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		r, err := s.ListProcedures(ctx, &adminpb.ListProceduresRequest{})
		if err == nil && r.GetRead().GetServedBy() != "m1" {
			t.Errorf("served by %q, want m1", r.GetRead().GetServedBy())
		}
		got <- err
	}()
	testwait.For(t, 20*time.Second, "a forward refused", func() bool { return accepted.Load() >= 1 })
	dropping.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the leader's port was taken meanwhile: %v", err)
	}
	serveLeader(t, "m1", x, ln)
	if err := <-got; err != nil {
		t.Fatalf("held read: %v", err)
	}
	t.Logf("bulk: %d calls, %d in bulk, %d alone", s.bulk.calls.Load(), s.bulk.inBulk.Load(), s.bulk.alone.Load())
	if s.bulk.calls.Load() < 2 {
		t.Errorf("%d ForwardReads calls, want the read to have gone in bulk, retried", s.bulk.calls.Load())
	}
}

// withUnknown is req with an unknown field of n bytes: the request limits
// check known fields only, so the standby and a leader serving the read
// alone both take it.
func withUnknown(req *adminpb.GetProcedureRequest, n int) *adminpb.GetProcedureRequest {
	b := protowire.AppendTag(nil, 999, protowire.BytesType)
	b = protowire.AppendBytes(b, make([]byte, n))
	req.ProtoReflect().SetUnknown(b)
	return req
}

// TestForwardedBigReadGoesAloneNotPoisoningItsCall: one client's read whose
// marshalled request exceeds ForwardedRead.request's 1 MiB limit (an
// unknown field) makes the leader refuse the whole ForwardReads call, and
// every other client's read in that call fails with it. Alone, each read
// (the big one included) is answered.
func TestForwardedBigReadGoesAloneNotPoisoningItsCall(t *testing.T) {
	nodes := startCluster(t, 3)
	li := converged(t, nodes)
	leader, standby := nodes[li], nodes[(li+1)%3]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := leader.cl.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	// The big read alone, at the leader, is served.
	if _, err := leader.cl.GetProcedure(ctx, withUnknown(&adminpb.GetProcedureRequest{Id: r.GetId()}, 1200<<10)); err != nil {
		t.Fatalf("the big read at the leader: %v", err)
	}
	var bad, moved atomic.Int64
	var first atomic.Value
	for range 10 {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = standby.cl.GetProcedure(ctx, withUnknown(&adminpb.GetProcedureRequest{Id: r.GetId()}, 1200<<10))
		}()
		for range 15 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := standby.cl.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: r.GetId()})
				switch {
				case err == nil:
				case status.Code(err) == codes.Unavailable:
					// The leadership moved (an election on a loaded
					// machine): the read is refused as UNAVAILABLE, for
					// the client to retry, whatever shared its call. A
					// read poisoned by the big one fails with the
					// refusal of its call (its limits), not with this.
					moved.Add(1)
				default:
					bad.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}()
		}
		wg.Wait()
	}
	t.Logf("bulk: %d calls, %d in bulk, %d alone; %d reads refused while the leadership moved", standby.srv.bulk.calls.Load(),
		standby.srv.bulk.inBulk.Load(), standby.srv.bulk.alone.Load(), moved.Load())
	if moved.Load() == 150 {
		t.Skip("the leadership moved for every read: nothing was read in bulk")
	}
	if bad.Load() > 0 {
		t.Errorf("%d of 150 ordinary reads failed because another client's read shared their call; first: %v", bad.Load(), first.Load())
	}
}

// hangingBulkLeader's ForwardReads hangs until its call ends.
type hangingBulkLeader struct{ fakeLeader }

func (l *hangingBulkLeader) ForwardReads(ctx context.Context, in *adminpb.ForwardReadsRequest) (*adminpb.ForwardReadsResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestForwardedReadCutReturnsAtOnce: a read of a call cut by a change
// of leader waits for the call to end; if another read of that call was
// not cut (registered after cancelStaleForwards took its list, the view
// back at the same leader by the next tick), the cut read waits to that
// read's deadline, where a read forwarded alone returns at once.
func TestForwardedReadCutReturnsAtOnce(t *testing.T) {
	l := &hangingBulkLeader{}
	l.fakeLeader.state = "alone"
	addr := serveFake(t, l, &l.fakeLeader)
	s, b := standby(t, addr, Config{RegisterInterval: time.Hour})
	b.mu.Lock()
	b.kv[cluster.ClusterFormatKey] = version.EncodeClusterFormat(version.Format2)
	b.mu.Unlock()
	s.mu.Lock()
	cc, err := s.connTo(addr, true)
	if err != nil {
		s.mu.Unlock()
		t.Fatal(err)
	}
	rb := s.readBatcherFor(cc, leaderView{"m1", addr})
	s.mu.Unlock()
	read := func(ctx context.Context) chan error {
		ch := make(chan error, 1)
		go func() {
			var out adminpb.Procedure
			_, err := rb.read(ctx, adminpb.Admin_GetProcedure_FullMethodName, &adminpb.GetProcedureRequest{Id: 1}, &out)
			ch <- err
		}()
		return ch
	}
	ctx0, cancel0 := context.WithCancel(context.Background())
	r0 := read(ctx0)
	testwait.For(t, 5*time.Second, "call 0 in flight", func() bool { return s.bulk.calls.Load() == 1 })
	ctx1, cut1 := context.WithCancelCause(context.Background())
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	r1, r2 := read(ctx1), read(ctx2)
	testwait.For(t, 5*time.Second, "two reads queued", func() bool {
		rb.mu.Lock()
		defer rb.mu.Unlock()
		return len(rb.queue) == 2
	})
	cancel0()
	<-r0
	testwait.For(t, 5*time.Second, "call 1 in flight", func() bool { return s.bulk.calls.Load() == 2 })
	start := time.Now()
	cut1(&leaderChangedError{to: leaderView{"m2", "x"}})
	err1 := <-r1
	t.Logf("cut read returned after %v: %v", time.Since(start).Round(time.Millisecond), err1)
	if d := time.Since(start); d > time.Second {
		t.Errorf("a read cut by a change of leader took %v to return (its neighbour's deadline), want at once", d.Round(time.Millisecond))
	}
	if err := <-r2; err != nil {
		t.Errorf("the read not cut, sent alone: %v", err)
	}
}
