// Package grpcstop stops a gRPC server the way every Baton process does
// on shutdown: gracefully while the caller's deadline allows, then at once.
package grpcstop

import (
	"context"

	"google.golang.org/grpc"
)

// Stop stops gs gracefully (calls in flight finish, new ones are refused)
// until ctx ends, then at once; it returns when gs has stopped.
func Stop(ctx context.Context, gs *grpc.Server) {
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		gs.Stop()
		<-done
	}
}
