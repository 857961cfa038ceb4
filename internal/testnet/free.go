package testnet

import (
	"net"
	"testing"

	"github.com/baton-dev/baton/internal/freeport"
)

// FreeAddr returns a loopback address nobody listens on at the time of the
// call, for a server the test starts next. Unlike DeadAddr it does not keep
// the port: the test's own server is meant to take it. The port is drawn
// below the kernel's ephemeral range (freeport), where no other process's
// connection is given it before the test's server binds it.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := freeport.Listen()
	if err != nil {
		t.Fatalf("testnet: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// NonLoopbackIPv4 returns one of this host's IPv4 addresses that is not
// loopback, for what must behave differently off the loopback interface;
// the test is skipped on a host without one.
func NonLoopbackIPv4(t testing.TB) net.IP {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP
		}
	}
	t.Skip("no non-loopback IPv4 address on this host")
	return nil
}
