package testnet

import (
	"errors"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestDeadAddrStaysDead: connections to a dead address are refused, and
// no listener can take its port while the test runs.
func TestDeadAddrStaysDead(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the port is not held on this system")
	}
	addr := DeadAddr(t)
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err == nil {
		c.Close()
		t.Fatalf("dial %s succeeded, want connection refused", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	lis, err := net.Listen("tcp", addr)
	if err == nil {
		lis.Close()
		t.Fatalf("another listener took the port of dead address %s", addr)
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("listen on %s: %v, want address in use", addr, err)
	}
}
