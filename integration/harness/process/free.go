package process

import (
	"fmt"
	"net"

	"github.com/baton-dev/baton/internal/freeport"
)

// FreeAddrs returns k distinct loopback addresses (127.0.0.1:port) nobody
// listens on at the call, for children about to bind them: drawn below the
// kernel's ephemeral range (freeport), where no other process's connection
// is given the port before the child binds it.
func FreeAddrs(k int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []string
	for range k {
		l, err := freeport.Listen()
		if err != nil {
			return nil, fmt.Errorf("free loopback port: %w", err)
		}
		ls = append(ls, l) // held until all k are drawn: no port twice
		out = append(out, l.Addr().String())
	}
	return out, nil
}
