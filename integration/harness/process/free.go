package process

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreeAddrs returns k distinct loopback addresses (127.0.0.1:port) nobody
// listens on at the call, for children about to bind them.
//
// The ports are drawn below the kernel's ephemeral range, which the
// kernel hands out itself to every `:0` listen and outgoing connection of
// every process: a port taken from there and let go may be given to
// another process's connection (another test binary's client) before the
// child binds it, and the child then fails to start. Below the range only
// an explicit bind takes a port. (internal/testnet's FreeAddr draws the
// same way for in-process servers; the two packages share a floor, so
// neither can call the other.)
func FreeAddrs(k int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	low := ephemeralLow()
	var out []string
	for range k {
		l, err := listenBelow(low)
		if err != nil {
			return nil, fmt.Errorf("free loopback port: %w", err)
		}
		ls = append(ls, l) // held until all k are drawn: no port twice
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// freeFloor is the lowest port FreeAddrs draws: above the well-known and
// most registered services' ports.
const freeFloor = 10000

// listenBelow listens on a random loopback port in [freeFloor, low), or
// on one the kernel picks where that range is too narrow or full.
func listenBelow(low int) (net.Listener, error) {
	if low > freeFloor+1000 {
		for range 64 {
			port := freeFloor + rand.IntN(low-freeFloor)
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				return l, nil
			}
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range; 32768, its default and a common one, elsewhere).
func ephemeralLow() int {
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
