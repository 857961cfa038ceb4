package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/security"
)

// agentPorts are the three ports a dev agent's banner names.
func agentPorts(t *testing.T, banner string) (grpcAddr, raftAddr, httpAddr string) {
	t.Helper()
	g := regexp.MustCompile(`admin API \(gRPC\): (\S+)`).FindStringSubmatch(banner)
	r := regexp.MustCompile(`raft: +(\S+)`).FindStringSubmatch(banner)
	h := regexp.MustCompile(`console: +http://(\S+)/`).FindStringSubmatch(banner)
	if g == nil || r == nil || h == nil {
		t.Fatalf("the banner lacks an address:\n%s", banner)
	}
	return g[1], r[1], h[1]
}

// closedWithin reports how long the server took to close c (EOF or a
// reset), reading and discarding what it sends, or an error if c is still
// open after limit.
func closedWithin(c net.Conn, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	if err := c.SetReadDeadline(start.Add(limit)); err != nil {
		return 0, err
	}
	if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, fmt.Errorf("%s: still open %v after it was accepted without a handshake", c.RemoteAddr(), limit)
	}
	return time.Since(start), nil
}

// expectClosedAfter dials addr, sends start (nothing, if nil), and
// expects the server to close the connection well under HTTP's 5 s and
// gRPC's 120 s: loose above the tests' 300 ms --handshake-timeout for a
// loaded machine.
func expectClosedAfter(t *testing.T, name, addr string, start []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(start) > 0 {
		if _, err := c.Write(start); err != nil {
			t.Fatal(err)
		}
	}
	took, err := closedWithin(c, 3*time.Second)
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	t.Logf("%s: closed after %v", name, took)
}

// A connection that never handshakes (never sends a byte) is closed on
// every port within --handshake-timeout, the dev region server's too:
// gRPC held one 120 s, plaintext Raft for good, HTTP 5 s.
func TestSilentConnectionsAreClosedWithinTheHandshakeTimeout(t *testing.T) {
	_, banner, stop := startDevAgent(t, "--dev-regionservers", "1", "--handshake-timeout", "300ms")
	grpcAddr, raftAddr, httpAddr := agentPorts(t, banner)
	rs := regexp.MustCompile(`rs1 at (\S+) \(metrics http://(\S+)/metrics\)`).FindStringSubmatch(banner)
	if rs == nil {
		t.Fatalf("the banner names no region server:\n%s", banner)
	}
	for name, addr := range map[string]string{"gRPC": grpcAddr, "Raft": raftAddr, "HTTP": httpAddr, "region server gRPC": rs[1], "region server HTTP": rs[2]} {
		expectClosedAfter(t, name, addr, nil)
	}
	stop()
}

// A plaintext Raft connection that begins a call and then falls silent
// (one byte: AppendEntries' type; or the type and the start of its
// msgpack header) is closed within --handshake-timeout too: the bound
// holds until the node has answered a first call whole, where it used to
// be lifted at the first byte, leaving the connection open for good.
func TestRaftConnectionsThatStopMidCallAreClosed(t *testing.T) {
	_, banner, stop := startDevAgent(t, "--dev-regionservers", "0", "--handshake-timeout", "300ms")
	_, raftAddr, _ := agentPorts(t, banner)
	for name, start := range map[string][]byte{"one byte": {0}, "a header begun": {0, 0x85, 0xa3}, "a vote begun": {1, 0x82}} {
		expectClosedAfter(t, name, raftAddr, start)
	}
	stop()
}

// One address holds at most --max-conns-per-source connections on a port:
// more are closed as they come, and counted; once it closes some, it is
// served again.
func TestConnectionsPerSourceAreCapped(t *testing.T) {
	admin, banner, stop := startDevAgent(t, "--dev-regionservers", "0", "--max-conns-per-source", "4")
	grpcAddr, _, httpAddr := agentPorts(t, banner)
	var held []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", grpcAddr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	extra, err := net.Dial("tcp", grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	_, err = closedWithin(extra, 3*time.Second)
	extra.Close()
	if err != nil {
		t.Fatalf("a fifth connection: %v", err)
	}
	if code, _, stderr := runCLI(t, nil, "cluster", "status", "--addr", admin, "--timeout", "2s"); code == 0 {
		t.Fatalf("cluster status went through while the cap was held:\n%s", stderr)
	}
	testwait.ForNil(t, 10*time.Second, "refusals counted on /metrics", func() error {
		n, err := refusedOn(httpAddr, "grpc")
		if err == nil && n < 2 {
			err = errors.New("baton_listener_connections_refused_total{listener=\"grpc\"} = " + strconv.Itoa(n) + ", want ≥ 2")
		}
		return err
	})
	for _, c := range held {
		c.Close()
	}
	testwait.ForNil(t, 10*time.Second, "cluster status served once the connections closed", func() error {
		if code, stdout, stderr := runCLI(t, nil, "cluster", "status", "--addr", admin, "--timeout", "2s"); code != 0 {
			return errors.New(stdout + stderr)
		}
		return nil
	})
	stop()
}

// refusedOn reads baton_listener_connections_refused_total{listener} from
// the agent's /metrics.
func refusedOn(httpAddr, listener string) (int, error) {
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^baton_listener_connections_refused_total\{listener="` + listener + `"\} (\d+)$`).FindSubmatch(body)
	if m == nil {
		return 0, errors.New("/metrics has no baton_listener_connections_refused_total{listener=\"" + listener + "\"}")
	}
	return strconv.Atoi(string(m[1]))
}

// With TLS too, a connection that never sends its ClientHello is closed
// on every port within --handshake-timeout, and a request naming another
// site is refused before access control looks at it.
func TestTLSAgentBoundsHandshakesAndChecksHosts(t *testing.T) {
	pki, err := security.NewTestPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files, err := pki.Issue(security.Identity{Role: security.RoleMaster, ID: "n1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr, raftAddr, httpAddr := testnet.FreeAddr(t), testnet.FreeAddr(t), testnet.FreeAddr(t)
	out, _, cancel, done := runInBackground(map[string]string{}, "agent", "--id", "n1", "--data-dir", t.TempDir(),
		"--raft-addr", raftAddr, "--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--peers", "n1="+raftAddr,
		"--tls-ca", files.CA, "--tls-cert", files.Cert, "--tls-key", files.Key, "--handshake-timeout", "300ms")
	t.Cleanup(func() { cancel(); exitOf(t, done) })
	testwait.For(t, 30*time.Second, "the agent's banner", func() bool { return regexp.MustCompile(`try:`).MatchString(out.String()) })
	for name, addr := range map[string]string{"gRPC": grpcAddr, "Raft": raftAddr, "HTTP": httpAddr} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		took, err := closedWithin(c, 3*time.Second)
		c.Close()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		t.Logf("%s: a silent connection closed after %v", name, took)
	}
	client := pki.MustCredentials(security.Identity{Role: security.RoleClient, ID: "ops"})
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: client.ClientConfig(security.RoleMaster)}}
	// ops holds no permission: access control refuses it, once the Host
	// check has let the request through.
	for host, want := range map[string]string{"evil.example": "is not a name of this node", "localhost": "needs permission read"} {
		req, _ := http.NewRequest("GET", "https://"+httpAddr+"/status", nil)
		req.Host = host
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), want) {
			t.Errorf("GET /status with Host %s: %d %s, want 403 saying %q", host, resp.StatusCode, body, want)
		}
	}
}

// A gRPC peer that pings more often than the keepalive policy allows is
// sent GOAWAY (too_many_pings) and dropped, on the master's port and the
// region server's alike.
func TestPingFloodIsDropped(t *testing.T) {
	_, banner, stop := startDevAgent(t, "--dev-regionservers", "1")
	grpcAddr, _, _ := agentPorts(t, banner)
	rs := regexp.MustCompile(`rs1 at (\S+) `).FindStringSubmatch(banner)
	if rs == nil {
		t.Fatalf("the banner names no region server:\n%s", banner)
	}
	for name, addr := range map[string]string{"master": grpcAddr, "region server": rs[1]} {
		if err := floodPings(addr); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	stop()
}

// floodPings speaks HTTP/2 to addr and pings it back to back until it
// answers GOAWAY too_many_pings (nil) or 5 s pass (an error).
func floodPings(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		return err
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return err
	}
	go func() {
		for i := uint64(0); ; i++ {
			var data [8]byte
			data[0] = byte(i)
			if fr.WritePing(false, data) != nil {
				return
			}
		}
	}()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return fmt.Errorf("no GOAWAY for a ping flood: %w", err)
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			if ga.ErrCode != http2.ErrCodeEnhanceYourCalm || string(ga.DebugData()) != "too_many_pings" {
				return fmt.Errorf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", ga.ErrCode, ga.DebugData())
			}
			return nil
		}
	}
}
