// Package client is the Go client of Baton's admin API (proto/adminpb/admin.proto).
//
// A Client is given the admin addresses of any members of a cluster. Every
// call goes to the node it believes is the leader; when a node answers
// UNAVAILABLE it follows the adminpb.LeaderHint in the error's details, or
// else tries the next address, backing off exponentially, until the call's
// context expires. A leader failover is therefore invisible to callers,
// except as latency. Submissions carry a nonce (one is generated when the
// caller gives none), so a submission retried after an UNAVAILABLE whose
// fate is unknown returns the id of the first one instead of starting a
// second procedure.
//
// Errors keep their gRPC status: status.Code(err) and status.FromError work
// on every error a Client returns. When retries run out the error is
// UNAVAILABLE (or DEADLINE_EXCEEDED) and names the addresses tried.
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
)

// Defaults of the options.
const (
	// DefaultCallTimeout bounds a unary call, retries included, when its
	// context has no deadline of its own, and each reconnection episode of
	// a Watch.
	DefaultCallTimeout = 5 * time.Second
	// DefaultMinBackoff and DefaultMaxBackoff bound the pause between two
	// attempts: it starts at the minimum and doubles up to the maximum.
	DefaultMinBackoff = 50 * time.Millisecond
	DefaultMaxBackoff = time.Second
	// DefaultAttemptTimeout bounds one attempt of a unary call, so that a
	// node that accepts connections but hangs does not use up the call's
	// whole deadline; the attempt is then retried elsewhere.
	DefaultAttemptTimeout = 3 * time.Second
)

// Procedure states, as the API spells them.
const (
	StateInitializing   = "INITIALIZING"
	StateRunnable       = "RUNNABLE"
	StateWaiting        = "WAITING"
	StateWaitingTimeout = "WAITING_TIMEOUT"
	StateFailed         = "FAILED"
	StateRolledBack     = "ROLLEDBACK"
	StateSuccess        = "SUCCESS"
)

// Terminal reports whether a procedure in this state will never run again:
// SUCCESS or ROLLEDBACK. (FAILED is not terminal: the procedure is rolling
// back.)
func Terminal(state string) bool { return state == StateSuccess || state == StateRolledBack }

// ErrNoAddresses is returned by New when given no address.
var ErrNoAddresses = errors.New("client: no admin address given")

// Option adjusts a Client.
type Option func(*options)

type options struct {
	callTimeout    time.Duration
	attemptTimeout time.Duration
	minBackoff     time.Duration
	maxBackoff     time.Duration
	dialOpts       []grpc.DialOption
	onRetry        func(addr string, err error)
	certRequired   func(ctx context.Context, addr string) bool
}

// WithCertificateCheck gives a client that presents no certificate of its
// own (a token over server-authenticated TLS) a way to tell, when a
// connection breaks as it opens, whether the server refused it for want
// of a certificate (security.Credentials.CertificateRequired): such a
// refusal is then UNAUTHENTICATED at once, not retried until the call
// times out. A refusal whose TLS alert came through is recognised without
// it, by the alert's text (the client package sits below security).
func WithCertificateCheck(check func(ctx context.Context, addr string) bool) Option {
	return func(o *options) { o.certRequired = check }
}

// WithCallTimeout sets the timeout given to calls whose context has no
// deadline (default DefaultCallTimeout). It also bounds how long a Watch
// keeps trying to reconnect after its stream broke.
func WithCallTimeout(d time.Duration) Option { return func(o *options) { o.callTimeout = d } }

// WithAttemptTimeout sets the bound of one attempt of a unary call
// (default DefaultAttemptTimeout).
func WithAttemptTimeout(d time.Duration) Option { return func(o *options) { o.attemptTimeout = d } }

// WithBackoff sets the pause between attempts: min, doubling up to max.
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff = min, max }
}

// WithDialOptions adds gRPC dial options, after the defaults: plaintext
// and FailoverDialOptions.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// WithRetryNotice sets a function told of each failed attempt that is
// retried, with the address and its error: a caller can say what it waits
// for (an election, say) while the Client waits. It may be called from
// several goroutines at once.
func WithRetryNotice(f func(addr string, err error)) Option {
	return func(o *options) { o.onRetry = f }
}

// Client talks to a Baton cluster. It is safe for concurrent use. Close
// releases its connections.
type Client struct {
	opts options

	leaders *LeaderTracker

	conns *Conns

	mu sync.Mutex // guards what follows
	// tlsPorts caches speaksTLS's probes, by address.
	tlsPorts map[string]bool
	// answered holds the addresses a master has answered at: one that
	// refuses connections afterwards is restarting, not mistyped.
	answered map[string]bool
}

// New returns a Client for the cluster whose members' admin (gRPC)
// addresses include addrs (host:port; any subset of the members will do).
// Connections are made lazily, on the first call.
func New(addrs []string, opts ...Option) (*Client, error) {
	o := options{callTimeout: DefaultCallTimeout, attemptTimeout: DefaultAttemptTimeout, minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff}
	for _, opt := range opts {
		opt(&o)
	}
	if o.callTimeout <= 0 || o.attemptTimeout <= 0 {
		return nil, fmt.Errorf("client: call timeout %v and attempt timeout %v must be positive", o.callTimeout, o.attemptTimeout)
	}
	if o.minBackoff <= 0 || o.maxBackoff < o.minBackoff {
		return nil, fmt.Errorf("client: backoff %v..%v: want 0 < min ≤ max", o.minBackoff, o.maxBackoff)
	}
	var list []string
	for _, a := range addrs {
		a = strings.TrimSpace(a)
		if a != "" && !slices.Contains(list, a) {
			list = append(list, a)
		}
	}
	if len(list) == 0 {
		return nil, ErrNoAddresses
	}
	return &Client{opts: o, leaders: NewLeaderTracker(list), conns: NewConns("client: closed", "client: ", append(slices.Clone(o.dialOpts), grpc.WithChainUnaryInterceptor(captureHeader))...), tlsPorts: map[string]bool{}, answered: map[string]bool{}}, nil
}

// Close closes the Client's connections. Calls made afterwards fail.
func (c *Client) Close() error { return c.conns.Close() }

// Leader returns the address the Client currently sends calls to, "" if it
// has not found the leader yet.
func (c *Client) Leader() string { return c.leaders.Leader() }

func (c *Client) conn(addr string) (adminpb.AdminClient, error) {
	cc, err := c.conns.Get(addr)
	if err != nil {
		return nil, err
	}
	return adminpb.NewAdminClient(cc), nil
}

// Retryable reports whether err means "try elsewhere or later".
func Retryable(ctx context.Context, err error) bool {
	switch status.Code(err) {
	case codes.Unavailable:
		return true
	case codes.DeadlineExceeded:
		// An attempt that ran out while the call's context still has time
		// (a hung node); not when the caller's context ended.
		return ctx.Err() == nil
	}
	return false
}

// backoff sleeps for *d (doubling it up to the maximum) or until ctx ends.
func (c *Client) backoff(ctx context.Context, d *time.Duration) error {
	t := time.NewTimer(*d)
	defer t.Stop()
	*d = min(*d*2, c.opts.maxBackoff)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// giveUp builds the error returned when ctx ended while retrying: it names
// each address tried and how its last try failed, since "unavailable" for
// the whole list does not tell a refused port from a standby without a
// leader.
func (c *Client) giveUp(ctx context.Context, f *FollowFailure) error {
	if f.Last == nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	code := codes.Unavailable
	if errors.Is(ctx.Err(), context.Canceled) {
		code = codes.Canceled
	}
	parts := make([]string, 0, len(f.Tried))
	for _, addr := range f.Tried {
		err := f.Errs[addr]
		if err == nil {
			err = f.Last
		}
		parts = append(parts, addr+": "+whyFailed(err))
	}
	if f.Permanent {
		return status.Errorf(code, "no leader answered, and waiting will not change that: %s", strings.Join(parts, "; "))
	}
	return status.Errorf(code, "no leader answered: %s", strings.Join(parts, "; "))
}

// whyFailed says in a few words how one try failed: refused, timed out,
// not the leader, else the server's own message.
func whyFailed(err error) string {
	st := status.Convert(err)
	msg := st.Message()
	answered := false // a master's own answer carries a LeaderHint, maybe empty
	for _, d := range st.Details() {
		if _, ok := d.(*adminpb.LeaderHint); ok {
			answered = true
		}
	}
	switch {
	case answered:
		// Checked first: a standby that failed to forward says why
		// (maybe "connection refused"), which is not about itself.
		if h := LeaderHint(err); h != "" {
			return "not the leader (it names " + h + "): " + msg
		}
		return "not the leader: " + msg
	case strings.Contains(msg, "connection refused"):
		return "connection refused"
	case st.Code() == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case strings.Contains(msg, "server preface"):
		// gRPC gave up the connection after MinConnectTimeout without
		// the server's first frame.
		return "timed out: connected, but no gRPC handshake (hung, or not an admin port)"
	}
	return msg
}

// do runs call against the leader, retrying as the package comment says.
func (c *Client) do(ctx context.Context, call func(ctx context.Context, a adminpb.AdminClient) error) error {
	return c.doAt(ctx, func(ctx context.Context, a adminpb.AdminClient, _ string) error { return call(ctx, a) })
}

// doAt is do for a call that wants to know which address it asks.
func (c *Client) doAt(ctx context.Context, call func(ctx context.Context, a adminpb.AdminClient, addr string) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.callTimeout)
		defer cancel()
	}
	var served, leader string
	err := c.retry(ctx, func(addr string) error {
		a, err := c.conn(addr)
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, c.opts.attemptTimeout)
		defer cancel()
		var header metadata.MD
		err = call(context.WithValue(actx, headerKey{}, &header), a, addr)
		if err == nil {
			served, leader = addr, lastValue(header, adminpb.LeaderHeader)
		}
		if err != nil && actx.Err() != nil && ctx.Err() == nil {
			// The attempt's own deadline cut it (gRPC may say so as a
			// closed connection): say it timed out. Retried as before:
			// both codes are, while ctx has time.
			return status.Errorf(codes.DeadlineExceeded, "no answer within %v: %s", c.opts.attemptTimeout, status.Convert(err).Message())
		}
		return err
	})
	if err == nil {
		c.leaders.Redirected(served, leader)
	}
	return err
}

// headerKey carries where a call's response header goes, for
// captureHeader.
type headerKey struct{}

// captureHeader is the Client's unary interceptor: it stores a call's
// response header where its context says (doAt's attempts), so that the
// leader a forwarded call names is seen whatever call the attempt made.
func captureHeader(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if dst, ok := ctx.Value(headerKey{}).(*metadata.MD); ok {
		opts = append(opts, grpc.Header(dst))
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// lastValue is md's last value of key, "" if none.
func lastValue(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// retry calls attempt with the address of each try until it succeeds,
// fails for good, or ctx ends.
//
// When every address has failed for a reason waiting will not mend
// (classify), it gives up at once rather than when ctx ends: a mistyped
// or dead address is said within a second, not after the call's timeout.
func (c *Client) retry(ctx context.Context, attempt func(addr string) error) error {
	p := FollowPolicy{MinBackoff: c.opts.minBackoff, MaxBackoff: c.opts.maxBackoff, Permanent: isPermanent}
	if c.opts.onRetry != nil {
		p.OnRetry = func(addr string, err error, _ bool, _ time.Duration) { c.opts.onRetry(addr, err) }
	}
	f := c.leaders.Follow(ctx, p, func(addr string) error {
		// A certificate refusal is told first: it is UNAUTHENTICATED, not
		// a port that waiting will not mend.
		err := c.certificateRefusal(ctx, addr, attempt(addr))
		if err == nil || answeredBy(err) {
			c.markAnswered(addr)
		}
		if err != nil {
			err = c.classify(ctx, addr, err)
		}
		return err
	})
	switch {
	case f == nil:
		return nil
	case f.Err != nil && (ctx.Err() == nil || f.Last == nil):
		return f.Err
	}
	return c.giveUp(ctx, f)
}

// ErrCertificateRequired begins the message of an UNAUTHENTICATED error
// saying a server refused this client's connection for presenting no
// certificate.
const ErrCertificateRequired = "the server requires a client certificate, and this client presented none"

// certificateRefusal turns a server's TLS refusal of a connection without
// a client certificate (a master running --client-auth cert, a client
// with a CA alone) into UNAUTHENTICATED: no retry, on this address or
// another, mends it, and gRPC says it only as an unavailable connection.
// When the refusal's alert was lost to the reset that followed it (the
// connection just broke), WithCertificateCheck's check asks the server.
func (c *Client) certificateRefusal(ctx context.Context, addr string, err error) error {
	if status.Code(err) != codes.Unavailable {
		return err
	}
	if !strings.Contains(status.Convert(err).Message(), "tls: certificate required") {
		msg := status.Convert(err).Message()
		broke := strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset") || strings.Contains(msg, "EOF")
		if c.opts.certRequired == nil || !broke || !c.opts.certRequired(ctx, addr) {
			return err
		}
	}
	return status.Errorf(codes.Unauthenticated, "%s (%s refused the connection: %s)", ErrCertificateRequired, addr, status.Convert(err).Message())
}

// NewNonce returns a random nonce, as Submit uses when given none.
func NewNonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "c-" + hex.EncodeToString(b[:])
}

// Submit starts a procedure of type typ with the given arguments and
// returns its id. The nonce makes the submission idempotent (a retry gets
// the first id); if empty, a random one is used, so that the Client's own
// retries are safe. owner is informational; timeout, if positive, aborts
// the procedure if it has not finished by then.
func (c *Client) Submit(ctx context.Context, typ string, args map[string]string, nonce, owner string, timeout time.Duration) (uint64, error) {
	if nonce == "" {
		nonce = NewNonce()
	}
	req := &adminpb.SubmitProcedureRequest{Type: typ, Arguments: args, Nonce: nonce, Owner: owner, TimeoutMs: timeout.Milliseconds()}
	var id uint64
	err := c.do(ctx, func(ctx context.Context, a adminpb.AdminClient) error {
		r, err := a.SubmitProcedure(ctx, req)
		if err == nil {
			id = r.GetId()
		}
		return err
	})
	return id, err
}

// Get returns the procedure with this id (NOT_FOUND if there is none).
func (c *Client) Get(ctx context.Context, id uint64, opts ...ReadOption) (*adminpb.Procedure, error) {
	o := readOpts(opts)
	return unary(ctx, c, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.Procedure, error) {
		r, err := a.GetProcedure(ctx, &adminpb.GetProcedureRequest{Id: id, Consistency: o.consistency})
		o.served(r.GetRead())
		return r, err
	})
}

// ActOption adjusts an action on a procedure or a lock.
type ActOption func(*actOptions)

type actOptions struct{ force bool }

func actOpts(opts []ActOption) actOptions {
	var o actOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Force acts on a procedure another identity submitted, or a lock another
// acquired: with access control on, those are their submitter's or
// holder's, and others need permission admin and Force (the audit trail
// records it). Moot for one's own.
func Force() ActOption { return func(o *actOptions) { o.force = true } }

// act calls method, one of the admin API's acts on procedure id.
func (c *Client) act(ctx context.Context, method func(adminpb.AdminClient, context.Context, *adminpb.ProcedureRef, ...grpc.CallOption) (*adminpb.Procedure, error), id uint64, opts []ActOption) (*adminpb.Procedure, error) {
	return call(ctx, c, method, &adminpb.ProcedureRef{Id: id, Force: actOpts(opts).force})
}

// Abort asks the procedure to roll back. It returns the procedure's state
// after the request.
func (c *Client) Abort(ctx context.Context, id uint64, opts ...ActOption) (*adminpb.Procedure, error) {
	return c.act(ctx, adminpb.AdminClient.AbortProcedure, id, opts)
}

// Pause stops the procedure between steps until Resume.
func (c *Client) Pause(ctx context.Context, id uint64, opts ...ActOption) (*adminpb.Procedure, error) {
	return c.act(ctx, adminpb.AdminClient.PauseProcedure, id, opts)
}

// Resume lets a paused procedure run again.
func (c *Client) Resume(ctx context.Context, id uint64, opts ...ActOption) (*adminpb.Procedure, error) {
	return c.act(ctx, adminpb.AdminClient.ResumeProcedure, id, opts)
}

// Ack acknowledges a finished procedure's result, so the cluster may
// forget it.
func (c *Client) Ack(ctx context.Context, id uint64, opts ...ActOption) (*adminpb.Procedure, error) {
	return c.act(ctx, adminpb.AdminClient.AckResult, id, opts)
}

// ListOptions filters and pages ListProcedures. Empty fields match all.
type ListOptions struct {
	State     string
	Type      string
	RootsOnly bool
	// PageSize is the server's page size (0: the server's default, 100).
	PageSize int32
	// PageToken continues a listing: the next page token of the previous
	// page.
	PageToken string
	// Owner matches the submitter's owner.
	Owner string
	// SubmittedAfter (inclusive) and SubmittedBefore (exclusive) bound the
	// submission time; zero is no bound.
	SubmittedAfter, SubmittedBefore time.Time
	// NewestFirst lists in descending id order.
	NewestFirst bool
}

// List returns one page of procedures and the token of the next page ("" at
// the end).
func (c *Client) List(ctx context.Context, o ListOptions, opts ...ReadOption) ([]*adminpb.Procedure, string, error) {
	ro := readOpts(opts)
	req := &adminpb.ListProceduresRequest{State: o.State, Type: o.Type, RootsOnly: o.RootsOnly, PageSize: o.PageSize, PageToken: o.PageToken, Consistency: ro.consistency,
		Owner: o.Owner, NewestFirst: o.NewestFirst}
	if !o.SubmittedAfter.IsZero() {
		req.SubmittedAfterUnixMs = o.SubmittedAfter.UnixMilli()
	}
	if !o.SubmittedBefore.IsZero() {
		req.SubmittedBeforeUnixMs = o.SubmittedBefore.UnixMilli()
	}
	var r *adminpb.ListProceduresResponse
	err := c.do(ctx, func(ctx context.Context, a adminpb.AdminClient) error {
		var err error
		r, err = a.ListProcedures(ctx, req)
		ro.served(r.GetRead())
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return r.GetProcedures(), r.GetNextPageToken(), nil
}

// ListAll follows the pages of a listing from o.PageToken to the end. Each
// page is a call of its own (with its own timeout if ctx has no deadline).
func (c *Client) ListAll(ctx context.Context, o ListOptions, opts ...ReadOption) ([]*adminpb.Procedure, error) {
	var all []*adminpb.Procedure
	for {
		page, next, err := c.List(ctx, o, opts...)
		if err != nil {
			return all, err
		}
		all = append(all, page...)
		if next == "" || next == o.PageToken {
			return all, nil
		}
		o.PageToken = next
	}
}

// Watch calls fn with the procedure's current state and then with each
// change until it is terminal, and returns the terminal state. If the
// stream breaks (the node died, lost leadership), Watch reopens it on
// another node and carries on; fn may see the state it saw last once more
// only if something changed in between (identical states are not repeated).
//
// ctx bounds the whole watch; no default timeout applies, since a procedure
// may run for long. Reconnecting gives up after the call timeout without a
// working stream. An error returned by fn ends the watch with that error.
// fn may be nil.
func (c *Client) Watch(ctx context.Context, id uint64, fn func(*adminpb.Procedure) error) (*adminpb.Procedure, error) {
	var last *adminpb.Procedure
	pause := c.opts.minBackoff
	for {
		stream, addr, cancelStream, first, err := c.openWatch(ctx, id)
		if err != nil {
			return last, err
		}
		p := first
		for {
			if last == nil || !proto.Equal(p, last) {
				last = p
				pause = c.opts.minBackoff // progress: reconnect fast next time
				if fn != nil {
					if err := fn(p); err != nil {
						cancelStream()
						return last, err
					}
				}
			}
			if Terminal(p.GetState()) {
				cancelStream()
				return last, nil
			}
			p, err = stream.Recv()
			if err != nil {
				break
			}
		}
		cancelStream()
		if ctx.Err() != nil {
			return last, status.FromContextError(ctx.Err()).Err()
		}
		if err != io.EOF && !Retryable(ctx, err) {
			return last, err
		}
		// The stream ended before the procedure did (the node died or lost
		// leadership): resume it, elsewhere unless hinted otherwise.
		c.leaders.Failed(addr, err)
		if err := c.backoff(ctx, &pause); err != nil {
			return last, status.FromContextError(err).Err()
		}
	}
}

// openWatch opens a watch stream on the leader and receives its first
// message, retrying for at most the call timeout.
func (c *Client) openWatch(ctx context.Context, id uint64) (stream grpc.ServerStreamingClient[adminpb.Procedure], addr string, cancel context.CancelFunc, first *adminpb.Procedure, err error) {
	octx, ocancel := context.WithTimeout(ctx, c.opts.callTimeout)
	defer ocancel()
	err = c.retry(octx, func(a string) error {
		ac, err := c.conn(a)
		if err != nil {
			return err
		}
		sctx, scancel := context.WithCancel(ctx)
		s, err := ac.WatchProcedure(sctx, &adminpb.WatchProcedureRequest{Id: id})
		if err == nil {
			// Errors such as NOT_FOUND or UNAVAILABLE arrive with the first
			// message: the stream counts as open once it has one.
			first, err = recvWithin(octx, s)
		}
		if err != nil {
			scancel()
			return err
		}
		stream, addr, cancel = s, a, scancel
		return nil
	})
	if err != nil && ctx.Err() != nil {
		err = status.FromContextError(ctx.Err()).Err()
	}
	if err == nil {
		// The first message came, so the header did.
		if md, herr := stream.Header(); herr == nil {
			c.leaders.Redirected(addr, lastValue(md, adminpb.LeaderHeader))
		}
	}
	return stream, addr, cancel, first, err
}

// recvWithin receives a stream's first message, giving up when ctx ends.
func recvWithin[T any](ctx context.Context, s grpc.ServerStreamingClient[T]) (*T, error) {
	type res struct {
		p   *T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		p, err := s.Recv()
		ch <- res{p, err}
	}()
	select {
	case r := <-ch:
		if r.err == io.EOF {
			return nil, status.Error(codes.Unavailable, "stream closed before its first message")
		}
		return r.p, r.err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// Wait blocks until the procedure is terminal and returns its final state
// (see Watch).
func (c *Client) Wait(ctx context.Context, id uint64) (*adminpb.Procedure, error) {
	return c.Watch(ctx, id, nil)
}

// Status returns the cluster's state as the master that answers sees it
// (its own role and indexes, the leader it knows, the peers): a standby
// answers for itself, it does not forward.
func (c *Client) Status(ctx context.Context) (*adminpb.ClusterStatusResponse, error) {
	return c.memberStatus(ctx, &adminpb.ClusterStatusRequest{})
}

// memberStatus asks for a status, preferring a member's answer: a master
// removed from the cluster answers with removed set, and its view is only
// its own, so another address is asked instead, while there is one that
// has not answered so; failing that, the removed master's answer is the
// answer (it says it is not a member).
func (c *Client) memberStatus(ctx context.Context, req *adminpb.ClusterStatusRequest) (*adminpb.ClusterStatusResponse, error) {
	var r, removed *adminpb.ClusterStatusResponse
	passed := map[string]bool{}
	err := c.doAt(ctx, func(ctx context.Context, a adminpb.AdminClient, addr string) error {
		got, err := a.ClusterStatus(ctx, req)
		if err != nil {
			return err
		}
		if got.GetRemoved() && !passed[addr] && c.leaders.size() > 1 {
			passed[addr], removed = true, got
			return status.Errorf(codes.Unavailable, "%s (%s) is not a member of the cluster (removed); asking another master", got.GetNodeId(), addr)
		}
		r = got
		return nil
	})
	if err != nil && removed != nil {
		return removed, nil
	}
	return r, err
}

// MembersStatus is Status with every member's own answer: the master that
// answers asks each member's admin API for its status (within a second
// each) and says which voters it reached, and whether they make a quorum.
func (c *Client) MembersStatus(ctx context.Context) (*adminpb.ClusterStatusResponse, error) {
	return c.memberStatus(ctx, &adminpb.ClusterStatusRequest{Members: true})
}

// AddPeer adds a node to the cluster (a non-voter the leader promotes,
// at cluster version 2; else a voter): id is its Raft server id,
// raftAddr its Raft transport address, adminAddr its admin (gRPC) address.
func (c *Client) AddPeer(ctx context.Context, id, raftAddr, adminAddr string) (*adminpb.ClusterStatusResponse, error) {
	return c.AddPeerRequest(ctx, &adminpb.AddPeerRequest{Id: id, RaftAddress: raftAddr, AdminAddress: adminAddr})
}

// AddPeerRequest is AddPeer with every field of the request, such as
// holds_no_state, which a master joining with an empty data directory
// sets.
func (c *Client) AddPeerRequest(ctx context.Context, req *adminpb.AddPeerRequest) (*adminpb.ClusterStatusResponse, error) {
	return c.statusCall(ctx, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.ClusterStatusResponse, error) {
		return a.AddPeer(ctx, req)
	})
}

// TransferLeadership hands leadership from the leader (from, if set: only
// if that member leads; else whoever leads) to voter to (empty: raft's
// choice) and answers once another member leads. When from does not lead
// it answers at once with transferred false: nothing to do.
func (c *Client) TransferLeadership(ctx context.Context, from, to string) (*adminpb.TransferLeadershipResponse, error) {
	var r *adminpb.TransferLeadershipResponse
	err := c.do(ctx, func(ctx context.Context, a adminpb.AdminClient) error {
		var err error
		r, err = a.TransferLeadership(ctx, &adminpb.TransferLeadershipRequest{From: from, To: to})
		return err
	})
	return r, err
}

// RemovePeer removes the node with this id from the cluster; the leader
// too (it hands leadership to another voter, which removes it). An id an
// earlier removal took out answers OK with already_removed set (a retry
// after a lost answer); one that never was a member is NOT_FOUND.
func (c *Client) RemovePeer(ctx context.Context, id string) (*adminpb.ClusterStatusResponse, error) {
	return c.statusCall(ctx, func(ctx context.Context, a adminpb.AdminClient) (*adminpb.ClusterStatusResponse, error) {
		return a.RemovePeer(ctx, &adminpb.RemovePeerRequest{Id: id})
	})
}

func (c *Client) statusCall(ctx context.Context, f func(context.Context, adminpb.AdminClient) (*adminpb.ClusterStatusResponse, error)) (*adminpb.ClusterStatusResponse, error) {
	var r *adminpb.ClusterStatusResponse
	err := c.do(ctx, func(ctx context.Context, a adminpb.AdminClient) error {
		var err error
		r, err = f(ctx, a)
		return err
	})
	return r, err
}
