package admin

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// TestForwardedReadsInBulkSeeAcknowledgedWrites: linearizable reads sent
// to a standby together go to the leader in bulk, and each still sees
// every write acknowledged before it was sent, answered by the leader.
func TestForwardedReadsInBulkSeeAcknowledgedWrites(t *testing.T) {
	nodes := startCluster(t, 3)
	li := converged(t, nodes)
	leader, standby := nodes[li], nodes[(li+1)%3]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const rounds, readers = 8, 16
	leaderRounds, _ := leader.node.ReadRounds()
	for round := range rounds {
		r, err := leader.cl.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}})
		if err != nil {
			t.Fatal(err)
		}
		// The submission is acknowledged: every read sent from now on
		// must find it.
		var wg sync.WaitGroup
		errs := make(chan error, readers)
		for range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := standby.cl.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: r.GetId()})
				switch {
				case err != nil:
					errs <- fmt.Errorf("round %d: procedure %d through the standby: %w", round, r.GetId(), err)
				case p.GetRead().GetServedBy() != leader.node.ID() || p.GetRead().GetConsistency() != adminpb.Consistency_LINEARIZABLE:
					errs <- fmt.Errorf("round %d: served %+v, want linearizable by the leader %s", round, p.GetRead(), leader.node.ID())
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	b := &standby.srv.bulk
	t.Logf("%d reads in %d ForwardReads calls, %d alone", b.inBulk.Load(), b.calls.Load(), b.alone.Load())
	if b.inBulk.Load() < rounds*readers || b.alone.Load() != 0 {
		t.Errorf("%d reads answered in bulk and %d alone, want all %d in bulk", b.inBulk.Load(), b.alone.Load(), rounds*readers)
	}
	// Of three, the standby's word and the leader are a quorum: no call
	// needed a round (cluster.Voucher).
	if v, calls := leader.node.VouchedReads(), b.calls.Load(); v != calls {
		t.Errorf("%d of %d ForwardReads calls confirmed on the standby's word, want all", v, calls)
	}
	if now, _ := leader.node.ReadRounds(); now != leaderRounds {
		t.Errorf("the leader ran %d rounds for reads in bulk, want none", now-leaderRounds)
	}
}

// TestForwardReadsServesEachReadAsItsCaller: the leader judges each read
// of a ForwardReads call as the read forwarded alone, by the principal its
// own metadata names, never as the master that sent the call; it serves
// only reads, and only to masters.
func TestForwardReadsServesEachReadAsItsCaller(t *testing.T) {
	sc, ctx, li, standby := startSecureTrio(t, Access{InitialGrants: map[string]security.Permission{"ops": security.PermAdmin, "reader": security.PermRead}}, 30*time.Second)
	waitBound(t, ctx, sc.as(li, "reader", ""), "read")
	standbyID := sc.nodes[standby].node.ID()
	asStandby := sc.dial(li, sc.pki.MustCredentials(security.Identity{Role: security.RoleMaster, ID: standbyID}), "")
	list, err := proto.Marshal(&adminpb.ListProceduresRequest{PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	read := func(method string, req []byte, principal string) *adminpb.ForwardedRead {
		return &adminpb.ForwardedRead{Method: method, Request: req, Metadata: []*adminpb.ForwardedHeader{
			{Key: forwardedKey, Value: standbyID}, {Key: principalKey, Value: principal},
		}}
	}
	resp, err := asStandby.ForwardReads(ctx, &adminpb.ForwardReadsRequest{Reads: []*adminpb.ForwardedRead{
		read(adminpb.Admin_ListProcedures_FullMethodName, list, "client/reader"),
		read(adminpb.Admin_ListProcedures_FullMethodName, list, "client/nobody"),
		read(adminpb.Admin_SubmitProcedure_FullMethodName, nil, "client/ops"),
		read(adminpb.Admin_ListProcedures_FullMethodName, []byte{0xff, 0xff}, "client/reader"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetAnswers()) != 4 {
		t.Fatalf("%d answers, want 4", len(resp.GetAnswers()))
	}
	var got adminpb.ListProceduresResponse
	if a := resp.GetAnswers()[0]; len(a.GetStatus()) != 0 {
		t.Errorf("reader's read: %v, want an answer", answerErr(t, a))
	} else if err := proto.Unmarshal(a.GetResponse(), &got); err != nil {
		t.Fatal(err)
	} else if ri := got.GetRead(); ri.GetServedBy() != sc.nodes[li].node.ID() || ri.GetConsistency() != adminpb.Consistency_LINEARIZABLE {
		t.Errorf("reader's read served %+v, want linearizable by the leader", ri)
	}
	for i, want := range []codes.Code{codes.PermissionDenied, codes.InvalidArgument, codes.InvalidArgument} {
		if err := answerErr(t, resp.GetAnswers()[i+1]); status.Code(err) != want {
			t.Errorf("read %d: %v, want %v", i+2, err, want)
		}
	}
	// A client, even one that may read everything, may not call it.
	_, err = sc.as(li, "ops", "").ForwardReads(ctx, &adminpb.ForwardReadsRequest{Reads: []*adminpb.ForwardedRead{
		read(adminpb.Admin_ListProcedures_FullMethodName, list, "client/ops"),
	}})
	if code := status.Code(err); code != codes.PermissionDenied && code != codes.Unauthenticated {
		t.Errorf("a client's ForwardReads: %v, want it refused", err)
	}
}

// TestForwardReadsCountsOnlyTheSendersWord: the leader counts a
// ForwardReads call's word of its term (cluster.Voucher) only from the
// master that sends it, as its forwarded header and its certificate name
// it; a word in another master's name runs the round as before.
func TestForwardReadsCountsOnlyTheSendersWord(t *testing.T) {
	t.Run("node", func(t *testing.T) { testForwardReadsCountsOnlyTheSendersWord(t, NodeBackend) })
	// As the agent builds its servers: the word must count through the
	// domain's wrapper too.
	t.Run("agent", func(t *testing.T) { testForwardReadsCountsOnlyTheSendersWord(t, asAgent) })
}

func testForwardReadsCountsOnlyTheSendersWord(t *testing.T, backend func(*cluster.Node) Backend) {
	sc, ctx, li, standby := startSecureTrioOn(t, Access{}, 30*time.Second, backend)
	leader := sc.nodes[li].node
	standbyID, otherID := sc.nodes[standby].node.ID(), sc.nodes[3-li-standby].node.ID()
	asStandby := sc.dial(li, sc.pki.MustCredentials(security.Identity{Role: security.RoleMaster, ID: standbyID}), "")
	term := leader.ReadState().Term
	for _, c := range []struct {
		name, header, member string
		counts               bool
	}{
		{"its own word", standbyID, standbyID, true},
		{"another master's word", standbyID, otherID, false},
		{"another master's word and header", otherID, otherID, false},
		{"no header", "", standbyID, false},
	} {
		cctx := ctx
		if c.header != "" {
			cctx = metadata.AppendToOutgoingContext(ctx, forwardedKey, c.header)
		}
		before := leader.VouchedReads()
		rounds, _ := leader.ReadRounds()
		if _, err := asStandby.ForwardReads(cctx, &adminpb.ForwardReadsRequest{Member: c.member, Term: term}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		after, _ := leader.ReadRounds()
		if counted := leader.VouchedReads() > before; counted != c.counts || counted == (after > rounds) {
			t.Errorf("%s: counted %v with %d rounds, want counted %v (and a round only if not)", c.name, counted, after-rounds, c.counts)
		}
	}
}

func answerErr(t *testing.T, a *adminpb.ForwardedAnswer) error {
	t.Helper()
	st := new(spb.Status)
	if err := proto.Unmarshal(a.GetStatus(), st); err != nil {
		t.Fatal(err)
	}
	return status.ErrorProto(st)
}

// bulkLeader is a fake leader that serves ForwardReads: GetProcedure reads
// answered with their id, at most serve of them (0: all), the first call
// held until release is closed.
type bulkLeader struct {
	fakeLeader
	serve   int
	calls   atomic.Int32
	sizes   chan int
	holdOne chan struct{}
}

func (l *bulkLeader) ForwardReads(ctx context.Context, in *adminpb.ForwardReadsRequest) (*adminpb.ForwardReadsResponse, error) {
	if l.calls.Add(1) == 1 && l.holdOne != nil {
		<-l.holdOne
	}
	l.sizes <- len(in.GetReads())
	return answerGets(in, l.serve)
}

// answerGets answers the GetProcedure reads of in, the first n of them
// (0: all), each with its id and the state "bulk".
func answerGets(in *adminpb.ForwardReadsRequest, n int) (*adminpb.ForwardReadsResponse, error) {
	out := &adminpb.ForwardReadsResponse{}
	for i, r := range in.GetReads() {
		if n > 0 && i == n {
			break
		}
		var req adminpb.GetProcedureRequest
		if err := proto.Unmarshal(r.GetRequest(), &req); err != nil {
			return nil, err
		}
		raw, _ := proto.Marshal(&adminpb.Procedure{Id: req.GetId(), State: "bulk"})
		out.Answers = append(out.Answers, &adminpb.ForwardedAnswer{Response: raw})
	}
	return out, nil
}

// bulkStandby is a standby of the fake leader l at cluster format 2.
func bulkStandby(t *testing.T, l *bulkLeader) (*Server, adminpb.AdminClient) {
	t.Helper()
	l.sizes = make(chan int, 64)
	s, b := standby(t, serveFake(t, l, &l.fakeLeader), Config{RegisterInterval: time.Hour})
	b.mu.Lock()
	b.kv[cluster.ClusterFormatKey] = version.EncodeClusterFormat(version.Format2)
	b.mu.Unlock()
	cl, _ := serve(t, s, b)
	return s, cl
}

// queueBehindFirstCall reads 100 with get, waits for its call to reach
// the leader l (which holds it), reads 1..later meanwhile, and releases
// the first call once they are queued behind it on s.
func queueBehindFirstCall(t *testing.T, s *Server, l *bulkLeader, later int, get func(id uint64)) {
	t.Helper()
	go get(100)
	testwait.For(t, 10*time.Second, "the first call to reach the leader", func() bool { return l.calls.Load() == 1 })
	for i := range later {
		go get(uint64(i + 1))
	}
	testwait.For(t, 10*time.Second, "the later reads to queue", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, b := range s.batchers {
			b.mu.Lock()
			n := len(b.queue)
			b.mu.Unlock()
			if n == later {
				return true
			}
		}
		return false
	})
	close(l.holdOne)
}

// TestForwardReadsGathersWaitingReads: the reads that arrive while a call
// is in flight go together in the next, each answered with its own.
func TestForwardReadsGathersWaitingReads(t *testing.T) {
	l := &bulkLeader{holdOne: make(chan struct{})}
	l.fakeLeader.state = "alone"
	s, cl := bulkStandby(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const later = 8
	errs := make(chan error, later+1)
	get := func(id uint64) {
		p, err := cl.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: id})
		if err == nil && (p.GetId() != id || p.GetState() != "bulk") {
			err = fmt.Errorf("read of %d answered %d (%s)", id, p.GetId(), p.GetState())
		}
		errs <- err
	}
	queueBehindFirstCall(t, s, l, later, get)
	for range later + 1 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if first, second := <-l.sizes, <-l.sizes; first != 1 || second != later {
		t.Errorf("calls carried %d and %d reads, want 1 and %d", first, second, later)
	}
	if n := l.fakeLeader.forwarded.Load(); n != 0 {
		t.Errorf("%d reads forwarded alone, want none", n)
	}
}

// TestForwardReadsSendsTheRestAlone: reads the leader's answer stops short
// of (its budget) are forwarded alone, and answered.
func TestForwardReadsSendsTheRestAlone(t *testing.T) {
	l := &bulkLeader{serve: 2, holdOne: make(chan struct{})}
	l.fakeLeader.state = "alone"
	s, cl := bulkStandby(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const later = 6
	states := make(chan string, later+1)
	get := func(id uint64) {
		p, err := cl.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: id})
		if err != nil {
			t.Errorf("read of %d: %v", id, err)
			states <- ""
			return
		}
		states <- p.GetState()
	}
	queueBehindFirstCall(t, s, l, later, get)
	count := map[string]int{}
	for range later + 1 {
		count[<-states]++
	}
	if count["bulk"] != 3 || count["alone"] != later-2 {
		t.Errorf("answers %v, want 3 in bulk (1, then 2 of %d) and %d alone", count, later, later-2)
	}
	if n := s.bulk.alone.Load(); n != later-2 {
		t.Errorf("standby counted %d alone, want %d", n, later-2)
	}
}

// TestForwardReadsFallsBackAlone: a leader without ForwardReads (an older
// build) answers UNIMPLEMENTED; the read is forwarded alone, and so are
// the next ones, without asking again meanwhile. Below cluster format 2 no
// read goes in bulk at all.
func TestForwardReadsFallsBackAlone(t *testing.T) {
	l := &fakeLeader{state: "alone"}
	addr := startLeader(t, l)
	reg := prometheus.NewRegistry()
	s, b := standby(t, addr, Config{RegisterInterval: time.Hour, Metrics: reg})
	b.mu.Lock()
	b.kv[cluster.ClusterFormatKey] = version.EncodeClusterFormat(version.Format1)
	b.mu.Unlock()
	cl, _ := serve(t, s, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := func() {
		t.Helper()
		if p, err := cl.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: 7}); err != nil || p.GetState() != "alone" {
			t.Fatalf("read through the standby: %v %v", p, err)
		}
	}
	read() // format 1
	if n := s.bulk.calls.Load(); n != 0 {
		t.Fatalf("%d ForwardReads calls below format 2, want none", n)
	}
	b.mu.Lock()
	b.kv[cluster.ClusterFormatKey] = version.EncodeClusterFormat(version.Format2)
	b.mu.Unlock()
	read()
	read()
	if calls, alone, fwd := s.bulk.calls.Load(), s.bulk.alone.Load(), l.forwarded.Load(); calls != 1 || alone != 1 || fwd != 3 {
		t.Errorf("%d ForwardReads calls, %d reads sent alone after one, %d reads at the leader; want 1, 1, 3", calls, alone, fwd)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"baton_admin_forward_reads_calls_total", nil, 1},
		{"baton_admin_forwarded_reads_total", map[string]string{"how": "alone"}, 1},
		{"baton_admin_forwarded_reads_total", map[string]string{"how": "bulk"}, 0},
	} {
		if v := counterValue(t, reg, c.name, c.labels); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
}

// TestForwardedReadsInBulkAcrossLeaderChanges: while the leadership moves
// from master to master, reads sent to every master together (in bulk
// from the standbys) either fail UNAVAILABLE or see every submission
// acknowledged before they were sent, answered linearizable by the master
// that led then.
func TestForwardedReadsInBulkAcrossLeaderChanges(t *testing.T) {
	nodes := startCluster(t, 3)
	converged(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const rounds, readers = 12, 6
	var served, unavailable atomic.Int64
	var mu sync.Mutex
	leaders := map[string]bool{}
	var moves sync.WaitGroup
	defer moves.Wait()
	for round := range rounds {
		var id uint64
		testwait.ForNil(t, 30*time.Second, "a submission acknowledged", func() error {
			r, err := nodes[round%3].cl.SubmitProcedure(ctx, &adminpb.SubmitProcedureRequest{Type: "sleep", Arguments: map[string]string{"steps": "0"}, Nonce: fmt.Sprintf("r%d", round)})
			id = r.GetId()
			return err
		})
		if round%3 == 1 {
			// Move the leadership while this round's reads are in flight.
			moves.Add(1)
			go func() {
				defer moves.Done()
				for _, n := range nodes {
					if _, err := n.node.Executor(); err == nil {
						_ = n.node.TransferLeadership(ctx, "")
						return
					}
				}
			}()
		}
		var wg sync.WaitGroup
		for i := range readers * 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := nodes[i%3].cl.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: id})
				switch {
				case status.Code(err) == codes.Unavailable:
					unavailable.Add(1)
				case err != nil:
					t.Errorf("round %d: procedure %d through %s: %v", round, id, nodes[i%3].node.ID(), err)
				case p.GetRead().GetConsistency() != adminpb.Consistency_LINEARIZABLE || p.GetRead().GetRaftState() != "Leader":
					t.Errorf("round %d: answered %+v, want linearizable by a leader", round, p.GetRead())
				default:
					served.Add(1)
					mu.Lock()
					leaders[p.GetRead().GetServedBy()] = true
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	var inBulk int64
	for _, n := range nodes {
		inBulk += n.srv.bulk.inBulk.Load()
	}
	t.Logf("%d reads served by %d leaders (%d of them forwarded in bulk), %d UNAVAILABLE", served.Load(), len(leaders), inBulk, unavailable.Load())
	if inBulk == 0 {
		t.Error("no read was forwarded in bulk")
	}
	if len(leaders) < 2 {
		t.Errorf("reads served by %v: the leadership never moved", leaders)
	}
}

// TestForwardableReadsAreTheReads: forwardableReads, derived from
// admin.proto (the unary methods clients call that take a consistency and
// are not audited), is exactly these reads of replicated state: a method
// added to admin.proto that the rule takes in (or a read it leaves out)
// fails this until the list says why.
func TestForwardableReadsAreTheReads(t *testing.T) {
	want := map[string]bool{}
	for _, m := range []string{
		adminpb.Admin_AclList_FullMethodName, adminpb.Admin_ListAudit_FullMethodName, adminpb.Admin_ListLocks_FullMethodName,
		adminpb.Admin_ListNamespaces_FullMethodName, adminpb.Admin_GetNamespace_FullMethodName,
		adminpb.Admin_GetProcedure_FullMethodName, adminpb.Admin_ListProcedures_FullMethodName, adminpb.Admin_ProcedureStats_FullMethodName,
		adminpb.Admin_GetMaintenance_FullMethodName, adminpb.Admin_ListRepairs_FullMethodName,
		adminpb.Admin_ListServers_FullMethodName, adminpb.Admin_ServerRegions_FullMethodName,
		adminpb.Admin_DescribeTable_FullMethodName, adminpb.Admin_ListTables_FullMethodName, adminpb.Admin_ListRegions_FullMethodName,
	} {
		want[m] = true
	}
	for m := range want {
		if !forwardableReads[m] {
			t.Errorf("%s reads replicated state (a consistency, not audited) but is not in forwardableReads", m)
		}
	}
	for m := range forwardableReads {
		if !want[m] {
			t.Errorf("forwardableReads takes in %s, which is not one of the unary reads of replicated state", m)
		}
	}
}
