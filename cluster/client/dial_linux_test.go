package client

import (
	"context"
	"net"
	"syscall"
	"testing"
)

// TestDialKeepalive checks the TCP keepalive settings of dialed
// connections.
func TestDialKeepalive(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		if c, err := lis.Accept(); err == nil {
			defer c.Close()
			var b [1]byte
			c.Read(b[:])
		}
	}()
	c, err := dialKeepalive(context.Background(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][3]int{
		"SO_KEEPALIVE":  {syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
		"TCP_KEEPIDLE":  {syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, int(TCPKeepaliveIdle.Seconds())},
		"TCP_KEEPINTVL": {syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, int(TCPKeepaliveIdle.Seconds())},
	}
	for name, w := range want {
		var got int
		var gerr error
		if err := rc.Control(func(fd uintptr) { got, gerr = syscall.GetsockoptInt(int(fd), w[0], w[1]) }); err != nil {
			t.Fatal(err)
		}
		if gerr != nil {
			t.Fatalf("%s: %v", name, gerr)
		}
		if got != w[2] {
			t.Errorf("%s = %d, want %d", name, got, w[2])
		}
	}
}
