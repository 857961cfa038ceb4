package testnet

import (
	"net"
	"sync"
	"testing"
)

// SilentAddr returns the address of a loopback listener that accepts
// connections and never answers on them: a hung process, or a host that
// vanished while its address still routes somewhere that completes
// handshakes. No byte is ever written (not even HTTP/2's preface), so a
// client learns nothing until its own deadline. The listener and every
// connection it accepted close when t ends.
func SilentAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testnet: %v", err)
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
		_ = lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return lis.Addr().String()
}
