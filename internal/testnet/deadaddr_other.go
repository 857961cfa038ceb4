//go:build !unix

package testnet

import (
	"net"
	"testing"
)

// deadAddr closes a listener and returns its address: the port may be
// taken by another listener later (see DeadAddr).
func deadAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testnet: %v", err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}
