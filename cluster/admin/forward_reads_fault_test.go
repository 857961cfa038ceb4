package admin

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

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

func (l *slowLeader) GetProcedure(ctx context.Context, req *adminpb.GetProcedureRequest) (*adminpb.Procedure, error) {
	time.Sleep(l.delay)
	return l.fakeLeader.GetProcedure(ctx, req)
}

func (l *slowLeader) ForwardReads(ctx context.Context, in *adminpb.ForwardReadsRequest) (*adminpb.ForwardReadsResponse, error) {
	time.Sleep(l.delay)
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
