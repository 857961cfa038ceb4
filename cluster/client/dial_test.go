package client_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/internal/testnet"
)

// TestSilentFirstAddress: a node that accepts connections but never
// speaks costs about a connection timeout, not the call's deadline.
func TestSilentFirstAddress(t *testing.T) {
	fc := start(t, 1)
	c := newClient(t, []string{testnet.SilentAddr(t), fc.AdminAddrs()[0]}, client.WithAttemptTimeout(5*time.Second), client.WithCallTimeout(8*time.Second))
	start := time.Now()
	if _, err := c.Status(ctx(t)); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("answered after %v", took)
	if took > 3*time.Second {
		t.Fatalf("took %v", took)
	}
}

// TestFailoverDialOptionsUnix: the options' dialer still reaches unix
// socket targets.
func TestFailoverDialOptionsUnix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Skip("no unix sockets:", err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(lis)
	defer gs.Stop()
	for _, target := range []string{"unix://" + path, "unix:" + path} {
		cc, err := grpc.NewClient(target, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, client.FailoverDialOptions()...)...)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		cc.Close()
		if err != nil {
			t.Errorf("%s: %v", target, err)
		}
	}
}
