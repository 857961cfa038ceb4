package main

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/baton-dev/baton/internal/testnet"
)

// nonLoopbackListener listens on every address and returns one of this
// host's addresses that is not loopback, with a count of the connections
// accepted; the test is skipped on a host without one.
func nonLoopbackListener(t *testing.T) (addr string, accepted *atomic.Int32) {
	t.Helper()
	ip := testnet.NonLoopbackIPv4(t)
	l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted = &atomic.Int32{}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	return l.Addr().String(), accepted
}

// TestTokenRefusedOverPlaintext: a bearer token given without TLS goes
// nowhere but a loopback address: for any other --addr the command exits 2
// before it dials, saying why and how to use TLS; to loopback it is sent.
func TestTokenRefusedOverPlaintext(t *testing.T) {
	remote, accepted := nonLoopbackListener(t)
	token := "bt_0123456789abcdef_" + strings.Repeat("A", 43)
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		code   int
		stderr string
	}{
		{name: "flag", args: []string{"acl", "whoami", "--addr", remote, "--token", token, "--timeout", "2s"},
			code: exitUsage, stderr: "--token: refusing to send a bearer token in cleartext to " + remote + ", which is not a loopback address"},
		{name: "env", env: map[string]string{"BATON_TOKEN": token, "BATON_ADDR": remote}, args: []string{"proc", "list", "--timeout", "2s"},
			code: exitUsage, stderr: "BATON_TOKEN: refusing to send a bearer token in cleartext"},
		{name: "one of several", args: []string{"cluster", "status", "--addr", "127.0.0.1:1," + remote, "--token", token, "--timeout", "2s"},
			code: exitUsage, stderr: "--tls-ca"},
		// Loopback in every spelling is sent to (nobody listens: exit 3).
		{name: "127.0.0.1", args: []string{"acl", "whoami", "--addr", "127.0.0.1:1", "--token", token, "--timeout", "300ms"}, code: exitUnavailable},
		{name: "localhost", args: []string{"acl", "whoami", "--addr", "localhost:1", "--token", token, "--timeout", "300ms"}, code: exitUnavailable},
		{name: "::1", args: []string{"acl", "whoami", "--addr", "[::1]:1", "--token", token, "--timeout", "300ms"}, code: exitUnavailable},
		{name: "127.8.0.1", args: []string{"acl", "whoami", "--addr", "127.8.0.1:1", "--token", token, "--timeout", "300ms"}, code: exitUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tc.env, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", code, tc.code, tc.stderr, stdout, stderr)
			}
		})
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the non-loopback address was dialled %d times; the token must be refused before any connection", n)
	}
}
