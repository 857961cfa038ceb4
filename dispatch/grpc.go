package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/locked"
	"github.com/baton-dev/baton/internal/tracectx"
	"github.com/baton-dev/baton/proto/rspb"
)

// GRPCTransportConfig configures a GRPCTransport.
type GRPCTransportConfig struct {
	// CallTimeout bounds each ExecuteBatch call, on top of any deadline the
	// caller's context has (the earlier wins). Default DefaultCallTimeout.
	CallTimeout time.Duration
	// DialOptions are appended to the defaults (plaintext transport
	// credentials, which TLS credentials here replace).
	DialOptions []grpc.DialOption
	// DialOptionsFor, if set, adds options for the connection to one
	// server, after DialOptions: TLS credentials that accept only that
	// server's certificate (security.Credentials.DialOptionFor), so that
	// another server at its address cannot answer for it.
	DialOptionsFor func(serverID string) []grpc.DialOption
	// Logger; default: discard.
	Logger hclog.Logger
}

// GRPCTransport is the production Transport: one gRPC client connection
// per region server address, made lazily on first use (grpc.NewClient
// connects on the first call, and reconnects by itself after failures) and
// cached until the server is removed or the transport closed.
//
// Connections are keyed by server id and address, so a server that
// restarted on another address gets a new connection while calls to the
// old one finish on theirs.
type GRPCTransport struct {
	timeout time.Duration
	opts    []grpc.DialOption
	optsFor func(serverID string) []grpc.DialOption
	log     hclog.Logger

	mu     sync.Mutex
	conns  map[connKey]*grpc.ClientConn
	closed bool
}

type connKey struct{ id, addr string }

var _ Transport = (*GRPCTransport)(nil)

// errTransportClosed answers calls after Close. It is not a status error,
// so a dispatcher still running would retry it; Close comes after Stop.
var errTransportClosed = fmt.Errorf("dispatch: grpc transport closed: %w", net.ErrClosed)

// NewGRPCTransport returns a GRPCTransport with no connections yet.
func NewGRPCTransport(cfg GRPCTransportConfig) *GRPCTransport {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, cfg.DialOptions...)
	return &GRPCTransport{
		timeout: cfg.CallTimeout,
		opts:    opts,
		optsFor: cfg.DialOptionsFor,
		log:     cfg.Logger.Named("dispatch-grpc"),
		conns:   make(map[connKey]*grpc.ClientConn),
	}
}

// ExecuteBatch implements Transport: RegionServer.ExecuteBatch on the
// target's address.
func (t *GRPCTransport) ExecuteBatch(ctx context.Context, target Target, req *rspb.BatchRequest) (*rspb.BatchResponse, error) {
	cc, err := t.conn(target)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	return rspb.NewRegionServerClient(cc).ExecuteBatch(tracectx.Inject(ctx), req)
}

func (t *GRPCTransport) conn(target Target) (*grpc.ClientConn, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errTransportClosed
	}
	k := connKey{id: target.ServerID, addr: target.Address}
	if cc := t.conns[k]; cc != nil {
		return cc, nil
	}
	if target.Address == "" {
		// Permanent: no retry can fix it, so refuse like a server would.
		return nil, status.Errorf(codes.InvalidArgument, "dispatch: server %q has no address", target.ServerID)
	}
	opts := t.opts
	if t.optsFor != nil {
		opts = append(slices.Clip(opts), t.optsFor(target.ServerID)...)
	}
	cc, err := grpc.NewClient(target.Address, opts...)
	if err != nil {
		// NewClient fails only on a malformed target or options: permanent.
		return nil, status.Errorf(codes.InvalidArgument, "dispatch: client for server %q at %q: %v",
			target.ServerID, target.Address, err)
	}
	t.conns[k] = cc
	t.log.Debug("client created", "server", target.ServerID, "address", target.Address)
	return cc, nil
}

// RemoveServer closes serverID's connections; calls still using them end
// with CANCELED. The Dispatcher calls it from its own RemoveServer.
func (t *GRPCTransport) RemoveServer(serverID string) {
	t.mu.Lock()
	var drop []*grpc.ClientConn
	for k, cc := range t.conns {
		if k.id == serverID {
			drop = append(drop, cc)
			delete(t.conns, k)
		}
	}
	t.mu.Unlock()
	for _, cc := range drop {
		if err := cc.Close(); err != nil {
			t.log.Debug("closing client", "server", serverID, "error", err)
		}
	}
}

// Conns is the number of cached connections.
func (t *GRPCTransport) Conns() int {
	return locked.Call(&t.mu, func() int { return len(t.conns) })
}

// Close closes every connection; later calls fail. Close the transport
// after stopping the dispatchers using it.
func (t *GRPCTransport) Close() error {
	t.mu.Lock()
	conns := t.conns
	t.conns = make(map[connKey]*grpc.ClientConn)
	t.closed = true
	t.mu.Unlock()
	var errs []error
	for k, cc := range conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("dispatch: closing client of %s at %s: %w", k.id, k.addr, err))
		}
	}
	return errors.Join(errs...)
}
