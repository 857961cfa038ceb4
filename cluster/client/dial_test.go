package client_test

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/baton-dev/baton/cluster/client"
)

// silentAddr is the address of a listener that accepts connections and
// never answers on them (a hung host: not even HTTP/2's preface).
func silentAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return lis.Addr().String()
}

// TestSilentFirstAddress: a node that accepts connections but never
// speaks costs about a connection timeout, not the call's deadline.
func TestSilentFirstAddress(t *testing.T) {
	fc := start(t, 1)
	c := newClient(t, []string{silentAddr(t), fc.AdminAddrs()[0]}, client.WithAttemptTimeout(5*time.Second), client.WithCallTimeout(8*time.Second))
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
