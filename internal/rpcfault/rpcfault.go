package rpcfault

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/internal/defaults"
	"github.com/baton-dev/baton/internal/enumname"
	"github.com/baton-dev/baton/internal/locked"
)

// Fault is what a rule does to a call.
type Fault int

// The faults; see the package doc.
const (
	DropAnswer Fault = iota + 1
	DropRequest
	DelayAnswer
	DelayRequest
	Duplicate
)

var faultNames = []string{DropAnswer: "drop-answer", DropRequest: "drop-request", DelayAnswer: "delay-answer", DelayRequest: "delay-request", Duplicate: "duplicate"}

func (f Fault) String() string { return enumname.Format(f, faultNames, "fault(%d)") }

// beforeHandler: the fault is decided and acts before the handler runs, so
// it cannot depend on the answer.
func (f Fault) beforeHandler() bool { return f == DropRequest || f == DelayRequest }

// Side is where the injector sits.
type Side int

// The sides.
const (
	Server Side = iota + 1 // a server interceptor
	Client                 // a client interceptor
)

var sideNames = []string{Server: "server", Client: "client"}

func (s Side) String() string { return enumname.Format(s, sideNames, "side(%d)") }

// Call is one RPC as a rule's predicates see it.
type Call struct {
	// Method is the full method name, "/pkg.Service/Method".
	Method string
	Side   Side
	// Peer is the other end: the caller's address on the server side, the
	// connection's target on the client side.
	Peer string
	// Request is the request message (nil for a stream).
	Request any
}

// Rule says which calls get which fault, and how often.
type Rule struct {
	// Name labels the rule in counts, events and logs. Default
	// "<fault>#<position>".
	Name string
	// Methods the rule applies to: full method names, or a service prefix
	// ending in "/" ("/pkg.Service/") for all of its methods. Empty: every
	// method.
	Methods []string
	// Fault is what the rule does. Required.
	Fault Fault
	// When, if set, must accept the call (its request) for the rule to
	// apply.
	When func(Call) bool
	// WhenAnswer, if set, must accept the handler's answer for the rule to
	// apply; the rule is then decided after the handler ran. Only for
	// DropAnswer, DelayAnswer and Duplicate (the first run's answer
	// decides whether a second one follows). resp is nil when err is not.
	WhenAnswer func(c Call, resp any, err error) bool
	// Probability that the rule fires on a call it applies to, in [0, 1].
	// Zero means 1: every such call.
	Probability float64
	// Times bounds how often the rule fires; 0: no bound. Times 1 makes a
	// one-shot rule.
	Times int
	// Delay is how long DelayAnswer and DelayRequest hold the message back,
	// and how long after the loss DropAnswer and DropRequest give the
	// caller its error: a lost message is noticed by a timeout, not at
	// once (zero: at once, as when the connection breaks). With DelayMax >
	// Delay the wait is drawn uniformly in [Delay, DelayMax].
	Delay, DelayMax time.Duration
	// Code of the error a dropped message turns into. Default
	// codes.Unavailable, what a caller sees of a broken connection.
	Code codes.Code
}

func (r *Rule) validate() error {
	problems := defaults.NewProblems("")
	bad := problems.Addf
	if r.Fault < DropAnswer || r.Fault > Duplicate {
		bad("unknown fault %d", int(r.Fault))
	}
	for _, m := range r.Methods {
		if !strings.HasPrefix(m, "/") {
			bad("method %q: want a full method name /pkg.Service/Method or a prefix /pkg.Service/", m)
		}
	}
	if math.IsNaN(r.Probability) || r.Probability < 0 || r.Probability > 1 {
		bad("probability %v: want [0, 1]", r.Probability)
	}
	if r.Times < 0 {
		bad("times %d is negative", r.Times)
	}
	if r.Delay < 0 || r.DelayMax < 0 {
		bad("negative delay %v..%v", r.Delay, r.DelayMax)
	}
	if (r.Fault == DelayAnswer || r.Fault == DelayRequest) && r.Delay == 0 && r.DelayMax == 0 {
		bad("%s needs a Delay", r.Fault)
	}
	if r.WhenAnswer != nil && r.Fault.beforeHandler() {
		bad("%s acts before the handler: it cannot depend on the answer (WhenAnswer)", r.Fault)
	}
	return problems.Err()
}

func (r *Rule) appliesTo(method string) bool {
	if len(r.Methods) == 0 {
		return true
	}
	for _, m := range r.Methods {
		if m == method || strings.HasSuffix(m, "/") && strings.HasPrefix(method, m) {
			return true
		}
	}
	return false
}

// DefaultMaxEvents bounds the history kept by an Injector.
const DefaultMaxEvents = 4096

// Config configures an Injector.
type Config struct {
	// Seed of the rules' random draws. Zero: a random seed (see Seed).
	Seed uint64
	// Clock times the delays. Default clock.Real.
	Clock clock.Clock
	// Logger gets the seed (info) and each injected fault (debug).
	// Default: none.
	Logger hclog.Logger
	// MaxEvents bounds the history Events returns (the latest are kept).
	// Default DefaultMaxEvents.
	MaxEvents int
}

// Event is one fault injected.
type Event struct {
	At     time.Time
	Rule   string
	Fault  Fault
	Method string
	Side   Side
	Peer   string
	// Delay is the hold of a delay fault, or how long after a drop the
	// caller got its error.
	Delay time.Duration
}

func (e Event) String() string {
	s := fmt.Sprintf("%s %s %s %s (%s, peer %s)", e.At.Format("15:04:05.000"), e.Rule, e.Fault, e.Method, e.Side, e.Peer)
	if e.Delay > 0 {
		s += " for " + e.Delay.String()
	}
	return s
}

// Injector applies rules to the calls it intercepts.
type Injector struct {
	seed      uint64
	clk       clock.Clock
	log       hclog.Logger
	maxEvents int

	mu       sync.Mutex
	rules    []*Handle
	added    int
	paused   bool
	byFault  map[Fault]int
	byRule   map[string]int
	events   []Event // ring of the latest maxEvents
	evNext   int
	evsTotal int
}

// New returns an Injector with no rules.
func New(cfg Config) *Injector {
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64() | 1
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.MaxEvents <= 0 {
		cfg.MaxEvents = DefaultMaxEvents
	}
	in := &Injector{
		seed:      cfg.Seed,
		clk:       cfg.Clock,
		log:       cfg.Logger.Named("rpcfault"),
		maxEvents: cfg.MaxEvents,
		byFault:   map[Fault]int{},
		byRule:    map[string]int{},
	}
	in.log.Info("fault injector ready", "seed", in.seed)
	return in
}

// Seed is the seed of the rules' draws; give it as Config.Seed to replay
// the same fault mix.
func (in *Injector) Seed() uint64 { return in.seed }

// Handle is a rule added to an Injector.
type Handle struct {
	in   *Injector
	rule Rule
	done chan struct{} // closed when Times is reached

	// guarded by in.mu
	rng     *rand.Rand
	matched int
	fired   int
	removed bool
}

// Add adds r after the rules already there and returns its handle. The
// rule's draws come from a generator seeded by the injector's seed and the
// number of rules added before it.
func (in *Injector) Add(r Rule) (*Handle, error) {
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("rpcfault: rule %q: %w", r.Name, err)
	}
	if r.Code == codes.OK {
		r.Code = codes.Unavailable
	}
	if r.Probability == 0 {
		r.Probability = 1
	}
	r.Methods = append([]string(nil), r.Methods...)
	in.mu.Lock()
	defer in.mu.Unlock()
	in.added++
	if r.Name == "" {
		r.Name = fmt.Sprintf("%s#%d", r.Fault, in.added)
	}
	h := &Handle{in: in, rule: r, done: make(chan struct{}),
		rng: rand.New(rand.NewPCG(in.seed, uint64(in.added)))}
	in.rules = append(in.rules, h)
	return h, nil
}

// MustAdd is Add for rules known to be valid; it panics on an invalid one.
func (in *Injector) MustAdd(r Rule) *Handle {
	h, err := in.Add(r)
	if err != nil {
		panic(err)
	}
	return h
}

// Name is the rule's name.
func (h *Handle) Name() string { return h.rule.Name }

// Fired is how many times the rule injected its fault.
func (h *Handle) Fired() int {
	h.in.mu.Lock()
	defer h.in.mu.Unlock()
	return h.fired
}

// Matched is how many calls the rule applied to (fired or not). A call
// decided by an earlier rule is not offered to later ones.
func (h *Handle) Matched() int {
	h.in.mu.Lock()
	defer h.in.mu.Unlock()
	return h.matched
}

// Done is closed once the rule has fired Times times (never for a rule
// without Times).
func (h *Handle) Done() <-chan struct{} { return h.done }

// Remove takes the rule out; calls in progress that it decided still get
// their fault.
func (h *Handle) Remove() {
	in := h.in
	in.mu.Lock()
	defer in.mu.Unlock()
	h.removed = true
	for i, r := range in.rules {
		if r == h {
			in.rules = append(in.rules[:i:i], in.rules[i+1:]...)
			break
		}
	}
}

// Pause stops every rule from firing until Resume.
func (in *Injector) Pause() {
	in.mu.Lock()
	in.paused = true
	in.mu.Unlock()
	in.log.Info("fault injection paused")
}

// Resume undoes Pause.
func (in *Injector) Resume() {
	in.mu.Lock()
	in.paused = false
	in.mu.Unlock()
	in.log.Info("fault injection resumed")
}

// Count is how many faults of kind f were injected.
func (in *Injector) Count(f Fault) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.byFault[f]
}

// Total is how many faults were injected.
func (in *Injector) Total() int { return locked.Load(&in.mu, &in.evsTotal) }

// Counts is how many faults each rule injected, by rule name (rules
// removed included).
func (in *Injector) Counts() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[string]int, len(in.byRule))
	for k, v := range in.byRule {
		out[k] = v
	}
	return out
}

// Events returns the latest faults injected (up to Config.MaxEvents), the
// oldest first.
func (in *Injector) Events() []Event {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.events) < in.maxEvents {
		return append([]Event(nil), in.events...)
	}
	return append(append([]Event(nil), in.events[in.evNext:]...), in.events[:in.evNext]...)
}

// candidates returns the rules to consider, nil if paused.
func (in *Injector) candidates() []*Handle {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.paused || len(in.rules) == 0 {
		return nil
	}
	return append([]*Handle(nil), in.rules...)
}

// fire draws whether h fires on c, which it applies to, and records it if
// so. It returns the delay to apply for the delay faults.
func (in *Injector) fire(h *Handle, c Call) (fired bool, delay time.Duration) {
	in.mu.Lock()
	defer in.mu.Unlock()
	r := &h.rule
	if in.paused || h.removed || (r.Times > 0 && h.fired >= r.Times) {
		return false, 0
	}
	h.matched++
	if r.Probability < 1 && h.rng.Float64() >= r.Probability {
		return false, 0
	}
	h.fired++
	if r.Times > 0 && h.fired == r.Times {
		close(h.done)
	}
	if r.Fault != Duplicate {
		delay = r.Delay
		if r.DelayMax > r.Delay {
			delay += time.Duration(h.rng.Int64N(int64(r.DelayMax-r.Delay) + 1))
		}
	}
	ev := Event{At: in.clk.Now(), Rule: r.Name, Fault: r.Fault, Method: c.Method, Side: c.Side, Peer: c.Peer, Delay: delay}
	in.byFault[r.Fault]++
	in.byRule[r.Name]++
	in.evsTotal++
	if len(in.events) < in.maxEvents {
		in.events = append(in.events, ev)
	} else {
		in.events[in.evNext] = ev
		in.evNext = (in.evNext + 1) % in.maxEvents
	}
	in.log.Debug("fault injected", "rule", r.Name, "fault", r.Fault.String(), "method", c.Method,
		"side", c.Side.String(), "peer", c.Peer, "delay", delay)
	return true, delay
}

// invoke runs the call (the handler, or the invoker) with req.
type invoke func(ctx context.Context, req any) (any, error)

// intercept applies the rules to c, whose request is c.Request, around
// call.
func (in *Injector) intercept(ctx context.Context, c Call, call invoke) (any, error) {
	rules := in.candidates()
	if len(rules) == 0 {
		return call(ctx, c.Request)
	}
	for _, h := range rules {
		r := &h.rule
		if r.WhenAnswer != nil || !r.appliesTo(c.Method) || (r.When != nil && !r.When(c)) {
			continue
		}
		if fired, d := in.fire(h, c); fired {
			return in.apply(ctx, c, h, d, call)
		}
	}
	resp, err := call(ctx, c.Request)
	for _, h := range rules {
		r := &h.rule
		if r.WhenAnswer == nil || !r.appliesTo(c.Method) || (r.When != nil && !r.When(c)) || !r.WhenAnswer(c, resp, err) {
			continue
		}
		if fired, d := in.fire(h, c); fired {
			return in.answer(ctx, c, h, d, call, resp, err)
		}
	}
	return resp, err
}

// apply runs the call under the fault h decided before it ran.
func (in *Injector) apply(ctx context.Context, c Call, h *Handle, d time.Duration, call invoke) (any, error) {
	switch h.rule.Fault {
	case DropRequest:
		return nil, in.dropped(ctx, c, h, d)
	case DelayRequest:
		if err := in.sleep(ctx, d); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		return call(ctx, c.Request)
	}
	resp, err := call(ctx, c.Request)
	return in.answer(ctx, c, h, d, call, resp, err)
}

// answer applies h's fault to the handler's answer.
func (in *Injector) answer(ctx context.Context, c Call, h *Handle, d time.Duration, call invoke, resp any, err error) (any, error) {
	switch h.rule.Fault {
	case DropAnswer:
		return nil, in.dropped(ctx, c, h, d)
	case DelayAnswer:
		if serr := in.sleep(ctx, d); serr != nil && c.Side == Client {
			// The caller gave up meanwhile; on the server side the
			// answer goes out anyway and is discarded.
			return nil, status.FromContextError(serr).Err()
		}
		return resp, err
	case Duplicate:
		req := c.Request
		if m, ok := req.(proto.Message); ok && c.Side == Server {
			// A second delivery is a second decoding: the handler may
			// keep what it got the first time.
			req = proto.Clone(m)
		}
		return call(ctx, req)
	}
	return resp, err
}

// dropped is the error of a lost message, given after d (or when the
// caller gives up).
func (in *Injector) dropped(ctx context.Context, c Call, h *Handle, d time.Duration) error {
	if err := in.sleep(ctx, d); err != nil {
		return status.FromContextError(err).Err()
	}
	return status.Errorf(h.rule.Code, "rpcfault: %s of %s (rule %s)", h.rule.Fault, c.Method, h.rule.Name)
}

// sleep waits d on the injector's clock, or until ctx ends.
func (in *Injector) sleep(ctx context.Context, d time.Duration) error {
	return clock.Sleep(ctx, in.clk, d)
}

// UnaryServerInterceptor applies the rules to the unary calls a server
// receives.
func (in *Injector) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		c := Call{Method: info.FullMethod, Side: Server, Request: req}
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			c.Peer = p.Addr.String()
		}
		return in.intercept(ctx, c, func(ctx context.Context, req any) (any, error) { return handler(ctx, req) })
	}
}

// StreamServerInterceptor applies the rules with DropRequest and
// DelayRequest to the streams a server receives (Call.Request is nil).
func (in *Injector) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		c := Call{Method: info.FullMethod, Side: Server}
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			c.Peer = p.Addr.String()
		}
		for _, h := range in.candidates() {
			r := &h.rule
			if !r.Fault.beforeHandler() || !r.appliesTo(c.Method) || (r.When != nil && !r.When(c)) {
				continue
			}
			fired, d := in.fire(h, c)
			if !fired {
				continue
			}
			if r.Fault == DropRequest {
				return in.dropped(ctx, c, h, d)
			}
			if err := in.sleep(ctx, d); err != nil {
				return status.FromContextError(err).Err()
			}
			break
		}
		return handler(srv, ss)
	}
}

// UnaryClientInterceptor applies the rules to the unary calls made on a
// connection. A dropped answer leaves reply filled in; callers ignore the
// reply of a failed call.
func (in *Injector) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		c := Call{Method: method, Side: Client, Peer: cc.Target(), Request: req}
		_, err := in.intercept(ctx, c, func(ctx context.Context, req any) (any, error) {
			if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
				return nil, err
			}
			return reply, nil
		})
		return err
	}
}

// ServerOptions install the injector's unary and stream interceptors on a
// server (after any installed earlier).
func (in *Injector) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(in.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(in.StreamServerInterceptor()),
	}
}

// DialOption installs the injector's unary interceptor on a client
// connection.
func (in *Injector) DialOption() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(in.UnaryClientInterceptor())
}
