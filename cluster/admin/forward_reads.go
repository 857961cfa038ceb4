package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// Linearizable reads a standby forwards go to the leader in bulk
// (ForwardReads), as the Raft thesis batches read-index requests: a read
// forwarded alone costs the leader a stream of its own and a seat in a
// confirmation round, and the standby a second gRPC call, which made a
// forwarded read cost three times a stale one.
//
// The standby (readBatcher) queues the reads it forwards to one leader;
// one ForwardReads call is in flight at a time, and every read that
// arrived while it was carries the next, so the call that carries a read
// always starts after the read arrived. The leader (serveForwardedReads)
// confirms its leadership once for the call, with a quorum round that
// starts after the call arrived, and then serves each read as the read
// forwarded alone would be served: through the same interceptors (the
// identity policy, access control, request limits, the rate limit) with
// the metadata the standby would have sent with it, and answered from
// the state that round confirmed. So each read keeps its guarantee (it
// reflects every write acknowledged before it arrived at the standby) and
// its access checks, and the leader still serves it (served_by).
//
// What is never batched: a stale read (the standby answers it), a read
// that is not in forwardableReads, a read over a connection without the
// cluster secret where one is set (the leader would refuse the call as
// not a master's), and any read while the cluster is below format 2 (a
// 0.1.0 leader has no ForwardReads). A leader that refuses the call
// (UNIMPLEMENTED, or its access control) gets the reads alone for
// batchRefusedFor.

// forwardableReads are the reads whose linearizable form a standby may
// forward in bulk: the unary methods clients call that take a
// consistency and are not audited (they change nothing), which serveRead
// serves.
var forwardableReads = unaryReads()

func unaryReads() map[string]bool {
	svc := adminpb.File_admin_proto.Services().ByName("Admin")
	out := map[string]bool{}
	for _, md := range adminpb.Admin_ServiceDesc.Methods {
		m := svc.Methods().ByName(protoreflect.Name(md.MethodName))
		_, clients := access.MethodPermission(md.MethodName)
		if m != nil && clients && !access.Audited(md.MethodName) && m.Input().Fields().ByName("consistency") != nil {
			out["/"+adminpb.Admin_ServiceDesc.ServiceName+"/"+md.MethodName] = true
		}
	}
	return out
}

const (
	// maxBatchedReads bounds the reads of one ForwardReads call
	// (the request's limit is 256).
	maxBatchedReads = 64
	// batchRequestBudget bounds the requests of a call's reads but its
	// first (a read's request is far below it).
	batchRequestBudget = 1 << 20
	// The limits of a ForwardedRead (admin.proto): a read beyond them
	// goes alone.
	maxForwardedRequest = 1 << 20
	maxForwardedHeaders = 32
	maxForwardedKey     = 128
	maxForwardedValue   = 8192
	// batchAnswerBudget ends the leader's answers once they hold this
	// many bytes: a page of a read ends at 1 MiB, so the answer stays
	// under gRPC's 4 MiB receive limit; the reads left are forwarded
	// alone.
	batchAnswerBudget = 1 << 20
	// batchAnswerCap is what an answer never exceeds, its first read's
	// aside (which alone would exceed the limit too).
	batchAnswerCap = 3 << 20
	// batchRefusedFor is how long a standby forwards reads alone after
	// the leader refused a ForwardReads call: long enough not to try on
	// every read, short enough to find an upgraded leader at the same
	// address.
	batchRefusedFor = 30 * time.Second
)

// bulkCounts counts a standby's ForwardReads calls and the reads it
// forwarded through them: answered in bulk, or sent alone after all (for
// tests and BenchmarkReads).
type bulkCounts struct{ calls, inBulk, alone atomic.Int64 }

// registerBulkMetrics exports s.bulk to reg (nil: nowhere).
func (s *Server) registerBulkMetrics(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	reads := func(how string, n *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "baton_admin_forwarded_reads_total",
			Help:        "Linearizable reads this master forwarded to the leader in ForwardReads calls, by how they were answered: bulk (in the call) or alone (sent again by themselves: the leader refused the call or its answer stopped short).",
			ConstLabels: prometheus.Labels{"how": how},
		}, func() float64 { return float64(n.Load()) })
	}
	calls := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "baton_admin_forward_reads_calls_total",
		Help: "ForwardReads calls this master made to the leader: bulk reads over calls is how many reads shared a call.",
	}, func() float64 { return float64(s.bulk.calls.Load()) })
	for _, c := range []prometheus.Collector{reads("bulk", &s.bulk.inBulk), reads("alone", &s.bulk.alone), calls} {
		err := reg.Register(c)
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			// A server started again in the same process (a test's
			// restart): this one's counters replace the last one's.
			reg.Unregister(are.ExistingCollector)
			err = reg.Register(c)
		}
		if err != nil {
			return fmt.Errorf("admin: forwarded reads metrics: %w", err)
		}
	}
	return nil
}

// batchReadKey marks the context of a linearizable read that serveRead
// forwards: the leader's connection may carry it in bulk.
type batchReadKey struct{}

// confirmedReadKey marks the context of a read the leader serves within
// a ForwardReads call: its quorum round is the call's, already done.
type confirmedReadKey struct{}

// linearizableRead is Backend.LinearizableRead for a read of ctx: a read
// served within a ForwardReads call was confirmed with the call.
func (s *Server) linearizableRead(ctx context.Context) (cluster.ReadInfo, error) {
	if by, _ := ctx.Value(confirmedReadKey{}).(*Server); by == s {
		ri := s.b.ReadState()
		ri.Linearizable = true
		return ri, nil
	}
	return s.b.LinearizableRead(ctx)
}

// batchingConn is the leader's connection a standby forwards with: a
// marked read of forwardableReads goes in bulk, anything else as is.
type batchingConn struct {
	grpc.ClientConnInterface
	b *readBatcher
}

func (c batchingConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if ctx.Value(batchReadKey{}) == nil || !forwardableReads[method] || !c.b.open() {
		return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	}
	req, ok := args.(proto.Message)
	out, ok2 := reply.(proto.Message)
	if !ok || !ok2 {
		return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	}
	alone, err := c.b.read(ctx, method, req, out)
	if alone {
		return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	}
	return err
}

// readBatcher gathers the reads a standby forwards to one leader (see the
// top of the file).
type readBatcher struct {
	s  *Server
	cc *grpc.ClientConn
	to leaderView

	format2 atomic.Bool // the cluster is at format 2 or above

	mu           sync.Mutex
	queue        []*batchedRead
	running      bool
	refusedUntil time.Time
}

// batchedRead is a read waiting in a readBatcher.
type batchedRead struct {
	ctx    context.Context
	method string
	req    []byte
	md     metadata.MD
	done   chan struct{}

	// Set before done is closed.
	sent  bool // it left in a call (under readBatcher.mu)
	alone bool // not served in bulk: forward it alone
	resp  []byte
	err   error
}

// readBatcherFor is the batcher of the leader to over cc. s.mu is held.
func (s *Server) readBatcherFor(cc *grpc.ClientConn, to leaderView) *readBatcher {
	key := to.id + " " + to.addr
	if b := s.batchers[key]; b != nil && b.cc == cc {
		return b
	}
	b := &readBatcher{s: s, cc: cc, to: to}
	s.batchers[key] = b
	return b
}

// open says reads may go in bulk now: the cluster is at format 2 (every
// member serves ForwardReads) and the leader has not refused it lately.
func (b *readBatcher) open() bool {
	if !b.format2.Load() {
		// The cluster version never goes down: once seen, kept.
		if clusterFormatOf(b.s.b) < version.Format2 {
			return false
		}
		b.format2.Store(true)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Now().After(b.refusedUntil)
}

// read forwards req in the next call and waits for its answer (into out),
// or for ctx. alone says the read was not served in bulk and is to be
// forwarded by itself.
func (b *readBatcher) read(ctx context.Context, method string, req, out proto.Message) (alone bool, err error) {
	raw, err := proto.Marshal(req)
	if err != nil {
		return true, nil
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	if !fitsForwardedRead(raw, md) {
		return true, nil
	}
	r := &batchedRead{ctx: ctx, method: method, req: raw, md: md, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, r)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.run()
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		b.mu.Lock()
		sent := r.sent
		b.mu.Unlock()
		err := status.FromContextError(ctx.Err()).Err()
		if !sent {
			return false, &errUnsent{statusCause{err}}
		}
		var lc *leaderChangedError
		if !errors.As(context.Cause(ctx), &lc) {
			return false, err
		}
		// Cut by this node's change of leader, which cuts every read of
		// the call (they share its view) and so the call: once it ends,
		// it says whether anything of it left this node. If nothing did,
		// a held read goes on to the new leader, as one forwarded alone
		// does (markUnsent).
		<-r.done
		if isUnsent(r.err) {
			return false, &errUnsent{statusCause{err}}
		}
		return false, err
	}
	switch {
	case r.alone:
		return true, nil
	case r.err != nil:
		return false, r.err
	}
	if err := proto.Unmarshal(r.resp, out); err != nil {
		return false, status.Errorf(codes.Internal, "admin: the leader's answer to a forwarded %s: %v", method, err)
	}
	return false, nil
}

// fitsForwardedRead says a read of request req with metadata md is within
// ForwardedRead's limits (admin.proto): one that is not goes alone, as it
// would have, rather than have the leader refuse the call that carries it
// and every other read with it.
func fitsForwardedRead(req []byte, md metadata.MD) bool {
	if len(req) > maxForwardedRequest {
		return false
	}
	n := 0
	for k, vs := range md {
		if len(k) > maxForwardedKey {
			return false
		}
		for _, v := range vs {
			if n++; n > maxForwardedHeaders || len(v) > maxForwardedValue {
				return false
			}
		}
	}
	return true
}

// run sends the queued reads, a call at a time, until none is left.
func (b *readBatcher) run() {
	for {
		b.mu.Lock()
		var batch []*batchedRead
		size := 0
		for len(b.queue) > 0 && len(batch) < maxBatchedReads {
			r := b.queue[0]
			if len(batch) > 0 && size+len(r.req) > batchRequestBudget {
				break // the next call takes it
			}
			b.queue[0] = nil
			b.queue = b.queue[1:]
			if r.ctx.Err() != nil {
				continue // its caller is gone
			}
			r.sent = true
			batch = append(batch, r)
			size += len(r.req)
		}
		if len(batch) == 0 {
			b.queue = nil
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.send(batch)
	}
}

// send forwards batch in one ForwardReads call and hands each read its
// answer.
func (b *readBatcher) send(batch []*batchedRead) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	// The term is read now, after every read of the batch arrived: the
	// leader counts it as this node's answer (cluster.Voucher).
	in := &adminpb.ForwardReadsRequest{Reads: make([]*adminpb.ForwardedRead, len(batch)), Member: b.s.b.ID(), Term: b.s.b.ReadState().Term}
	for i, r := range batch {
		fr := &adminpb.ForwardedRead{Method: r.method, Request: r.req}
		for k, vs := range r.md {
			for _, v := range vs {
				fr.Metadata = append(fr.Metadata, &adminpb.ForwardedHeader{Key: k, Value: v})
			}
		}
		in.Reads[i] = fr
	}
	// The call lasts while one of its reads waits for it: each read's
	// context ends with its caller, its deadline (the caller's, or
	// ForwardTimeout: forwardCall), or this node's change of leader. So
	// its deadline is the latest of theirs.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if last, ok := latestDeadline(batch); ok {
		var cancelAt context.CancelFunc
		ctx, cancelAt = context.WithDeadlineCause(ctx, last, errForwardTimeout)
		defer cancelAt()
	}
	var waiting atomic.Int32
	waiting.Store(int32(len(batch)))
	for _, r := range batch {
		stop := context.AfterFunc(r.ctx, func() {
			var lc *leaderChangedError
			switch cause := context.Cause(r.ctx); {
			case errors.As(cause, &lc):
				// This node no longer sees the call's leader: the
				// call ends now, so that the read learns at once
				// whether it left (read), and the others go alone.
				cancel(cause)
			case waiting.Add(-1) == 0:
				cancel(errReadsGone)
			}
		})
		defer stop()
	}
	ctx = metadata.AppendToOutgoingContext(ctx, forwardedKey, b.s.b.ID())
	b.s.bulk.calls.Add(1)
	resp, err := adminpb.NewAdminClient(b.cc).ForwardReads(ctx, in)
	defer func() {
		for _, r := range batch {
			switch {
			case r.alone:
				b.s.bulk.alone.Add(1)
			case err == nil:
				b.s.bulk.inBulk.Add(1)
			}
		}
	}()
	if err != nil {
		var lc *leaderChangedError
		if errors.As(context.Cause(ctx), &lc) {
			// Cut for a read whose forward was cut: each read still
			// waiting goes alone (it may be one this node forwarded
			// after it saw the change); the others learn whether the
			// call left.
			for _, r := range batch {
				if r.ctx.Err() == nil {
					r.alone = true
				} else if isUnsent(err) {
					r.err = err
				}
			}
			return
		}
		switch status.Code(err) {
		case codes.Unimplemented, codes.PermissionDenied, codes.Unauthenticated:
			// A leader without ForwardReads, or one that does not take
			// this node for a master: not asked again for a while.
			b.s.log.Debug("forwarded reads: the leader refused a batch; forwarding reads alone", "leader", b.to.id, "error", err)
			b.mu.Lock()
			b.refusedUntil = time.Now().Add(batchRefusedFor)
			b.mu.Unlock()
			fallthrough
		case codes.InvalidArgument, codes.ResourceExhausted:
			// The call refused as a whole (also for its size, or a
			// read's bytes the leader's limits count and these do
			// not): each read alone gets its own answer.
			for _, r := range batch {
				r.alone = true
			}
			return
		}
		if ctx.Err() != nil {
			// Every read gave up, or the deadline: like a read forwarded
			// alone, a failure to reach the leader (no hint), which a
			// held read retries; never sent if the connection never
			// carried it (markUnsent, on b.cc).
			unavailable := status.Error(codes.Unavailable, fmt.Sprintf("admin: forwarded reads to %s: %v", b.to, context.Cause(ctx)))
			if isUnsent(err) {
				unavailable = &errUnsent{statusCause{unavailable}}
			}
			err = unavailable
		}
		for _, r := range batch {
			r.err = err
		}
		return
	}
	answers := resp.GetAnswers()
	for i, r := range batch {
		if i >= len(answers) {
			r.alone = true // not served: over the leader's budget
			continue
		}
		a := answers[i]
		if len(a.GetStatus()) == 0 {
			r.resp = a.GetResponse()
			continue
		}
		st := new(spb.Status)
		if err := proto.Unmarshal(a.GetStatus(), st); err != nil {
			r.err = status.Errorf(codes.Internal, "admin: the leader's status for a forwarded %s: %v", r.method, err)
			continue
		}
		r.err = status.ErrorProto(st) // nil for OK: an empty answer
	}
}

// errReadsGone ends a ForwardReads call none of whose reads waits any
// more.
var errReadsGone = errors.New("admin: every read of the call gave up")

// latestDeadline is the latest deadline of the reads of batch, if each
// has one.
func latestDeadline(batch []*batchedRead) (time.Time, bool) {
	var last time.Time
	for _, r := range batch {
		d, ok := r.ctx.Deadline()
		if !ok {
			return time.Time{}, false
		}
		if d.After(last) {
			last = d
		}
	}
	return last, true
}

// forwardReadsHandler is ForwardReads' method handler: it runs the call
// through the server's interceptors as the generated handler would, and
// keeps them for the reads it serves (serveForwardedReads). handlers are
// the service's other method handlers, by full name.
func (s *Server) forwardReadsHandler(handlers map[string]grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(adminpb.ForwardReadsRequest)
		if err := dec(in); err != nil {
			return nil, err
		}
		outer := ctx
		call := func(ctx context.Context, req any) (any, error) {
			return s.serveForwardedReads(ctx, outer, srv, req.(*adminpb.ForwardReadsRequest), handlers, interceptor)
		}
		if interceptor == nil {
			return call(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: adminpb.Admin_ForwardReads_FullMethodName}, call)
	}
}

// serveForwardedReads confirms this node's leadership once, then serves
// each read of in as it would serve the read forwarded alone: each from a
// context of outer (the call as it arrived, before any interceptor) with
// the read's own metadata, through the server's interceptors.
func (s *Server) serveForwardedReads(ctx, outer context.Context, srv any, in *adminpb.ForwardReadsRequest,
	handlers map[string]grpc.MethodHandler, interceptor grpc.UnaryServerInterceptor) (*adminpb.ForwardReadsResponse, error) {
	// Held as a read forwarded alone is, while this node establishes
	// itself; never forwarded again (the call came forwarded).
	if _, err := heldCall(s, ctx, func() (struct{}, bool, error) {
		_, err := s.vouchedRead(ctx, in)
		return struct{}{}, err == nil, err
	}, func(context.Context, adminpb.AdminClient) (struct{}, error) {
		return struct{}{}, s.unavailable("admin: this node is not the leader (forwarded reads; not forwarding again)")
	}); err != nil {
		return nil, err
	}
	base, _ := metadata.FromIncomingContext(outer)
	out := &adminpb.ForwardReadsResponse{}
	size := 0
	for _, r := range in.GetReads() {
		if ctx.Err() != nil || size >= batchAnswerBudget {
			break // the rest are forwarded alone
		}
		var a *adminpb.ForwardedAnswer
		h := handlers[r.GetMethod()]
		if !forwardableReads[r.GetMethod()] || h == nil {
			a = answerStatus(status.New(codes.InvalidArgument, fmt.Sprintf("admin: forwarded reads: %q is not a read served in bulk", r.GetMethod())))
		} else {
			a = s.serveForwardedRead(outer, base, srv, r, h, interceptor)
		}
		n := len(a.GetResponse()) + len(a.GetStatus())
		if len(out.Answers) > 0 && size+n > batchAnswerCap {
			break // served, but the standby forwards it alone
		}
		size += n
		out.Answers = append(out.Answers, a)
	}
	return out, nil
}

// vouchedRead confirms the reads of in, counting the standby's word of
// its term (cluster.Voucher) where the backend can. The word counts only
// from the master that sends the call, as it names itself (the forwarded
// header, which a standby sets on every call it passes on) and, over TLS,
// as its certificate does. A word can only spare the round of the reads
// of its own call.
func (s *Server) vouchedRead(ctx context.Context, in *adminpb.ForwardReadsRequest) (cluster.ReadInfo, error) {
	if vr, ok := s.b.(vouchedReader); ok && in.GetMember() != "" && in.GetTerm() != 0 && s.sentBy(ctx, in.GetMember()) {
		return vr.LinearizableReadVouched(ctx, cluster.Voucher{ID: in.GetMember(), Term: in.GetTerm()})
	}
	return s.b.LinearizableRead(ctx)
}

// sentBy says ctx's call comes from master id: its forwarded header names
// id, and its certificate, if any, is id's.
func (s *Server) sentBy(ctx context.Context, id string) bool {
	if via, ok := incomingOne(ctx, forwardedKey); !ok || via != id {
		return false
	}
	if caller, ok := security.CallerOf(ctx); ok {
		return caller.Role == security.RoleMaster && caller.ID == id
	}
	return true
}

// serveForwardedRead serves one read of a ForwardReads call.
func (s *Server) serveForwardedRead(outer context.Context, base metadata.MD, srv any, r *adminpb.ForwardedRead,
	h grpc.MethodHandler, interceptor grpc.UnaryServerInterceptor) *adminpb.ForwardedAnswer {
	md := base.Copy()
	for _, kv := range r.GetMetadata() {
		delete(md, kv.GetKey())
	}
	for _, kv := range r.GetMetadata() {
		if k := kv.GetKey(); !reservedHeader(k) {
			md.Append(k, kv.GetValue())
		}
	}
	ctx := metadata.NewIncomingContext(outer, md)
	ctx = grpc.NewContextWithServerTransportStream(ctx, readStream{method: r.GetMethod()})
	ctx = context.WithValue(ctx, confirmedReadKey{}, s)
	dec := func(m any) error {
		msg, ok := m.(proto.Message)
		if !ok {
			return status.Errorf(codes.Internal, "admin: forwarded reads: %T is no message", m)
		}
		if err := proto.Unmarshal(r.GetRequest(), msg); err != nil {
			return status.Errorf(codes.InvalidArgument, "admin: forwarded reads: %s: bad request: %v", r.GetMethod(), err)
		}
		return nil
	}
	resp, err := h(srv, ctx, dec, interceptor)
	if err != nil {
		return answerStatus(status.Convert(err))
	}
	msg, ok := resp.(proto.Message)
	if !ok {
		return answerStatus(status.New(codes.Internal, fmt.Sprintf("admin: forwarded reads: %s answered %T", r.GetMethod(), resp)))
	}
	raw, err := proto.Marshal(msg)
	if err != nil {
		return answerStatus(status.New(codes.Internal, fmt.Sprintf("admin: forwarded reads: %s: %v", r.GetMethod(), err)))
	}
	return &adminpb.ForwardedAnswer{Response: raw}
}

// reservedHeader says k is metadata gRPC itself sets (pseudo-headers, its
// own grpc- keys, the content type): a forwarded read's copy of those
// would not be what its call carried.
func reservedHeader(k string) bool {
	return k == "" || k[0] == ':' || k == "content-type" || k == "te" || strings.HasPrefix(k, "grpc-")
}

func answerStatus(st *status.Status) *adminpb.ForwardedAnswer {
	if st.Code() == codes.OK {
		st = status.New(codes.Internal, "admin: forwarded reads: a failure without a code")
	}
	raw, err := proto.Marshal(st.Proto())
	if err != nil {
		raw, _ = proto.Marshal(status.New(codes.Internal, "admin: forwarded reads: unmarshallable status").Proto())
	}
	return &adminpb.ForwardedAnswer{Status: raw}
}

// readStream is the grpc.ServerTransportStream of a read served within a
// ForwardReads call: it names the read's method (grpc.Method), and drops
// the headers a handler sets, as the standby sets its own on its answer.
type readStream struct{ method string }

func (r readStream) Method() string               { return r.method }
func (r readStream) SetHeader(metadata.MD) error  { return nil }
func (r readStream) SendHeader(metadata.MD) error { return nil }
func (r readStream) SetTrailer(metadata.MD) error { return nil }
