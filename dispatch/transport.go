package dispatch

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/rspb"
)

// TransportFunc adapts a function to Transport.
type TransportFunc func(ctx context.Context, t Target, req *rspb.BatchRequest) (*rspb.BatchResponse, error)

// ExecuteBatch implements Transport.
func (f TransportFunc) ExecuteBatch(ctx context.Context, t Target, req *rspb.BatchRequest) (*rspb.BatchResponse, error) {
	return f(ctx, t, req)
}

// LocalTransport calls region servers living in the same process, by
// server id, without gRPC: the in-memory transport for tests of the layers
// above (as hashicorp/raft's InmemTransport is for raft). An id with no
// registered server answers UNAVAILABLE, as an unreachable address would.
// Requests are cloned, so a server may keep what it receives.
type LocalTransport struct {
	mu      sync.RWMutex
	servers map[string]rspb.RegionServerServer
}

var _ Transport = (*LocalTransport)(nil)

// NewLocalTransport returns a LocalTransport with no servers.
func NewLocalTransport() *LocalTransport {
	return &LocalTransport{servers: make(map[string]rspb.RegionServerServer)}
}

// Register makes srv reachable as serverID, replacing any earlier one.
func (t *LocalTransport) Register(serverID string, srv rspb.RegionServerServer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.servers[serverID] = srv
}

// Unregister makes serverID unreachable (a crashed or partitioned server).
func (t *LocalTransport) Unregister(serverID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.servers, serverID)
}

// ExecuteBatch implements Transport.
func (t *LocalTransport) ExecuteBatch(ctx context.Context, target Target, req *rspb.BatchRequest) (*rspb.BatchResponse, error) {
	t.mu.RLock()
	srv := t.servers[target.ServerID]
	t.mu.RUnlock()
	if srv == nil {
		return nil, status.Errorf(codes.Unavailable, "dispatch: local server %q is not registered", target.ServerID)
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return srv.ExecuteBatch(ctx, proto.Clone(req).(*rspb.BatchRequest))
}
