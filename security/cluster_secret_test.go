package security

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// secretSeen serves gRPC health on loopback and reports whether the last
// call carried the cluster secret.
func secretSeen(t *testing.T) (addr string, seen func() []string) {
	t.Helper()
	got := make(chan []string, 16)
	addr = serveHealth(t, "127.0.0.1", grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		got <- md.Get(ClusterSecretKey)
		return h(ctx, req)
	}))
	return addr, func() []string { return <-got }
}

// A client that follows leader hints (the console's actions) may be sent
// anywhere: the secret goes only to the authorities it was given.
func TestClusterSecretGoesOnlyWhereTold(t *testing.T) {
	own, ownSeen := secretSeen(t)
	other, otherSeen := secretSeen(t)
	opt := ClusterSecretDialOptionTo("0123456789abcdef0123", own)
	for _, tc := range []struct {
		addr string
		seen func() []string
		want int
	}{{own, ownSeen, 1}, {other, otherSeen, 0}} {
		cc, err := grpc.NewClient(tc.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), opt)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("%s: %v", tc.addr, err)
		}
		_ = cc.Close()
		if got := tc.seen(); len(got) != tc.want {
			t.Errorf("a call to %s carried %d secrets, want %d", tc.addr, len(got), tc.want)
		}
	}
}
