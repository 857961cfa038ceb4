package testnet

import (
	"net"
	"testing"
)

// FreeAddr returns a loopback address nobody listens on at the time of the
// call, for a server the test starts next. Unlike DeadAddr it does not keep
// the port: the test's own server is meant to take it.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testnet: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}
