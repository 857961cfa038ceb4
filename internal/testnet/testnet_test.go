package testnet

import (
	"errors"
	"net"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/freeport"
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

// TestSilentAddrAcceptsAndSaysNothing: a connection to a silent address
// is accepted, and a read on it gets nothing until the reader's own
// deadline.
func TestSilentAddrAcceptsAndSaysNothing(t *testing.T) {
	conn, err := net.DialTimeout("tcp", SilentAddr(t), 5*time.Second)
	if err != nil {
		t.Fatalf("dial a silent address: %v", err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var buf [1]byte
	n, err := conn.Read(buf[:])
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read %d bytes, err %v: want a timeout with nothing read", n, err)
	}
}

// FreeAddr's port is below the kernel's ephemeral range, where no `:0`
// listen or outgoing connection takes it before the test binds it, and
// the test can bind it.
func TestFreeAddrIsBelowTheEphemeralRange(t *testing.T) {
	for range 20 {
		addr := FreeAddr(t)
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if low := freeport.EphemeralLow(); freeport.Drawn(low) && (port < freeport.Floor || port >= low) {
			t.Errorf("FreeAddr gave port %d, want one in [%d, %d)", port, freeport.Floor, low)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("binding FreeAddr's %s: %v", addr, err)
		}
		l.Close()
	}
}
