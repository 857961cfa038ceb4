// Package freeport draws loopback ports for a server about to be started
// by someone else (a test's own server, a child process), below the
// kernel's ephemeral range.
//
// The kernel hands out ports of that range itself, to every `:0` listen
// and every outgoing connection of every process: a port taken from there
// and let go may be given to another process's connection (another test
// binary's client) before the server binds it, which then fails to start.
// Below the range only an explicit bind takes a port.
package freeport

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Floor is the lowest port Listen draws: above the well-known and most
// registered services' ports.
const Floor = 10000

// Listen listens on a random loopback port in [Floor, EphemeralLow()), or
// on one the kernel picks where that range is too narrow or full. The
// caller holds it until it has drawn all it needs (so that no port is
// drawn twice), then lets go for the server to bind.
func Listen() (net.Listener, error) {
	if low := EphemeralLow(); Drawn(low) {
		for range 64 {
			port := Floor + rand.IntN(low-Floor)
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				return l, nil
			}
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// Drawn says Listen draws below low, an ephemeral range's first port: the
// range under it is wide enough.
func Drawn(low int) bool { return low > Floor+1000 }

// EphemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range; 32768, its default and a common one, elsewhere),
// read once a process: Listen asks it for every port drawn.
var EphemeralLow = sync.OnceValue(readEphemeralLow)

func readEphemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return low
}
