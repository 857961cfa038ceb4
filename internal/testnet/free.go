package testnet

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreeAddr returns a loopback address nobody listens on at the time of the
// call, for a server the test starts next. Unlike DeadAddr it does not keep
// the port: the test's own server is meant to take it.
//
// The port is drawn below the kernel's ephemeral range, which the kernel
// hands out itself to every `:0` listen and outgoing connection of every
// process: a port taken from there and let go is soon given to someone
// else (another test binary's client), and the test's server then finds
// it in use. Below the range only an explicit bind takes a port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	low := ephemeralLow()
	if low > freeFloor+1000 {
		for range 64 {
			port := freeFloor + rand.IntN(low-freeFloor)
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err == nil {
				addr := l.Addr().String()
				l.Close()
				return addr
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testnet: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// freeFloor is the lowest port FreeAddr draws: above the well-known and
// most registered services' ports.
const freeFloor = 10000

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
