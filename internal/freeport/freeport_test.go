package freeport

import (
	"net"
	"strconv"
	"testing"
)

// Listen's port is below the kernel's ephemeral range, where no `:0`
// listen or outgoing connection takes it before the server binds it, and
// the server can bind it once it is let go.
func TestListenIsBelowTheEphemeralRange(t *testing.T) {
	low := EphemeralLow()
	for range 20 {
		l, err := Listen()
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if Drawn(low) && (port < Floor || port >= low) {
			t.Errorf("Listen gave port %d, want one in [%d, %d)", port, Floor, low)
		}
		l, err = net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("binding Listen's %s: %v", addr, err)
		}
		l.Close()
	}
}
