package domain

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/dispatch"
	"github.com/baton-dev/baton/internal/locked"
	"github.com/baton-dev/baton/internal/tracectx"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/rspb"
	"github.com/baton-dev/baton/raftfsm"
)

// errInvalid is wrapped by errors about bad input, so the admin API answers
// INVALID_ARGUMENT.
var errInvalid = procedure.ErrInvalid

// Errors of the domain.
var (
	// ErrNoServices: this node runs no leader services (it is not the
	// leader, or its leadership is being established or revoked).
	ErrNoServices = fmt.Errorf("no leader services on this node: %w", cluster.ErrNotReady)
	// ErrNotFound is wrapped when a table, region, server or lock does not
	// exist (it matches procedure.ErrNotFound, so the API answers
	// NOT_FOUND).
	ErrNotFound = procedure.ErrNotFound
)

// Node is what the domain uses of the master node; *cluster.Node
// implements it.
type Node interface {
	ID() string
	Raft() *raft.Raft
	FSM() *raftfsm.FSM
	Leader() (id, raftAddr string)
	IsLeader() bool
	Executor() (*procedure.Executor, error)
	ExecutorChanged() <-chan struct{}
}

var _ Node = (*cluster.Node)(nil)

// Domain is the master's domain layer on one node: the procedures' Env,
// the region servers' Master service and the admin API's namespaces,
// tables, regions, servers and locks. It lives as long as the node; the
// leader-only services of each term (dispatcher, leases, waiting
// procedures' events) are built by LeaderServices and dropped when the term
// ends.
type Domain struct {
	cfg       Config
	log       hclog.Logger
	transport dispatch.Transport
	ownsTrans bool

	attached chan struct{}
	nodeOnce sync.Once
	node     Node

	collector *collector   // registered on cfg.Metrics, nil if not
	tracer    trace.Tracer // the Master service's spans; nil: off
	dtracer   trace.Tracer // the dispatchers'; nil: off

	mu     sync.Mutex
	svc    *services
	conns  map[string]*grpc.ClientConn // region servers, for ServerRegions
	closed bool

	// attempts numbers the dispatchers' calls across every term's
	// dispatcher (dispatch.Config.NextSeq).
	attempts atomic.Uint64
}

// New returns a Domain. Attach the node once it is built (the node needs
// the Domain first, as its Env).
func New(cfg Config) (*Domain, error) {
	cfg = cfg.withDefaults()
	lc := cfg.ServerLease
	lc.Clock = cfg.Clock
	if err := lc.Validate(); err != nil {
		return nil, fmt.Errorf("server lease: %w", err)
	}
	if cfg.LockLease < 0 || cfg.DispatchTimeout < 0 || cfg.MaxOpenAttempts < 0 || cfg.ApplyTimeout < 0 || cfg.CrashWave < 0 ||
		cfg.CrashInFlight < 0 || cfg.CrashBatch < 0 {
		return nil, procedure.Errorf(errInvalid, "negative LockLease, DispatchTimeout, MaxOpenAttempts, ApplyTimeout, CrashWave, CrashInFlight or CrashBatch")
	}
	if cfg.RegionWave < 0 || cfg.RegionBudget < 0 {
		return nil, procedure.Errorf(errInvalid, "negative RegionWave (%d) or RegionBudget (%d)", cfg.RegionWave, cfg.RegionBudget)
	}
	d := &Domain{
		cfg:       cfg,
		log:       cfg.Logger.Named("master"),
		transport: cfg.Transport,
		attached:  make(chan struct{}),
		conns:     map[string]*grpc.ClientConn{},
	}
	if d.transport == nil {
		d.transport = dispatch.NewGRPCTransport(dispatch.GRPCTransportConfig{Logger: cfg.Logger, DialOptionsFor: cfg.RegionServerDialOptions})
		d.ownsTrans = true
	}
	d.tracer = tracectx.Tracer(cfg.TracerProvider, "github.com/baton-dev/baton/cluster/domain")
	d.dtracer = tracectx.Tracer(cfg.TracerProvider, "github.com/baton-dev/baton/dispatch")
	if cfg.Metrics != nil {
		d.collector = newCollector(d)
		if err := cfg.Metrics.Register(d.collector); err != nil {
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	return d, nil
}

// Attach gives the domain its node. Call it once, right after NewNode.
func (d *Domain) Attach(n Node) {
	d.nodeOnce.Do(func() {
		d.node = n
		close(d.attached)
	})
}

// Close releases the domain's connections. The node must be shut down
// first (its leader services are stopped with the executor).
func (d *Domain) Close() error {
	if d.collector != nil {
		d.cfg.Metrics.Unregister(d.collector)
	}
	d.mu.Lock()
	d.closed = true
	conns := d.conns
	d.conns = map[string]*grpc.ClientConn{}
	d.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	if c, ok := d.transport.(interface{ Close() error }); ok && d.ownsTrans {
		return c.Close()
	}
	return nil
}

// nodeOrNil returns the attached node, or nil.
func (d *Domain) nodeOrNil() Node {
	select {
	case <-d.attached:
		return d.node
	default:
		return nil
	}
}

// fsmReader reads the local FSM.
func (d *Domain) fsmReader() (reader, error) {
	n := d.nodeOrNil()
	if n == nil {
		return nil, fmt.Errorf("node not attached yet: %w", cluster.ErrNotReady)
	}
	f := n.FSM()
	return kvReader{Get: f.Get, Scan: f.Scan}, nil
}

// services returns the current term's leader services, or nil.
func (d *Domain) services() *services { return locked.Load(&d.mu, &d.svc) }

// servicesFor returns the leader services of the executor running the
// step, or nil: a step of an executor that was stopped (its term ended)
// and is still finishing must not use the next term's services, which
// would dispatch, wait and decide in a term that is not its own.
func (d *Domain) servicesFor(ctx *procedure.Context) *services {
	s := d.services()
	if s == nil || s.x != ctx.Executor() {
		return nil
	}
	return s
}

// awaitServices is a step's answer when servicesFor found none: leadership
// is changing under this executor, which is about to stop. The step looks
// again in a second, without a write (a new leader's executor runs it).
func awaitServices(ctx *procedure.Context) (procedure.Flow, error) {
	ctx.Suspend(procedure.Timeout(time.Second), procedure.SkipPersistence())
	return procedure.HasMoreState, nil
}

// rsClient returns a RegionServer client for server id at addr
// (ServerRegions).
func (d *Domain) rsClient(id, addr string) (rspb.RegionServerClient, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("domain closed")
	}
	// By id and address: with TLS a connection accepts one server's
	// certificate only.
	key := id + "@" + addr
	cc := d.conns[key]
	if cc == nil {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if d.cfg.RegionServerDialOptions != nil {
			opts = append(opts, d.cfg.RegionServerDialOptions(id)...)
		}
		var err error
		cc, err = grpc.NewClient(addr, opts...)
		if err != nil {
			return nil, fmt.Errorf("region server at %s: %w", addr, err)
		}
		d.conns[key] = cc
	}
	return rspb.NewRegionServerClient(cc), nil
}
